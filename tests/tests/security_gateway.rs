//! The `/` HTTP gateway with `--broker.auth-keys`: unlike Gazette, whose gateway
//! is open, GET/HEAD reads need a token with READ and PUT appends one with APPEND, from the
//! `Authorization` header or `?token=`; none or a bad one is 401, a token without the
//! capability or the journal in its selector is 403. Without keys the gateway stays open.

use base64::Engine;
use courant_tests::*;
use hmac::{KeyInit, Mac};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &[u8] = b"a pre-shared secret";
const READ_CAP: u32 = 1 << 3;
const APPEND_CAP: u32 = 1 << 4;

/// An HS256 token with `cap`, scoped to `journal` when given.
fn token(key: &[u8], cap: u32, journal: Option<&str>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sel = match journal {
        Some(j) => format!(
            r#"{{"include":{{"labels":[{{"name":"name","value":"{j}"}}]}},"exclude":{{"labels":null}}}}"#
        ),
        None => r#"{"include":{"labels":null},"exclude":{"labels":null}}"#.into(),
    };
    let claims = format!(
        r#"{{"cap":{cap},"sel":{sel},"exp":{},"iat":{now}}}"#,
        now + 3600
    );
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let msg = format!(
        "{}.{}",
        url.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
        url.encode(claims)
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(msg.as_bytes());
    format!("{msg}.{}", url.encode(mac.finalize().into_bytes()))
}

/// One HTTP/1.1 request on a fresh connection; returns the status and body.
async fn request(
    b: &Broker,
    method: &str,
    target: &str,
    auth: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
        .await
        .unwrap();
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = auth {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_requires_tokens_with_the_capability() {
    within(60, async {
        let keys = base64::engine::general_purpose::STANDARD.encode(KEY);
        let b = Broker::start(&["--broker.auth-keys", &keys]).await;
        let admin = b.connect().await.with_metadata(
            "authorization",
            format!("Bearer {}", token(KEY, u32::MAX, None))
                .parse()
                .unwrap(),
        );
        apply_specs(&admin, &[spec("sec/j", &[]), spec("sec/other", &[])]).await;

        let all = token(KEY, READ_CAP | APPEND_CAP, None);
        let read_only = token(KEY, READ_CAP, None);
        let append_only = token(KEY, APPEND_CAP, None);
        let forged = token(b"not the key", READ_CAP | APPEND_CAP, None);
        let scoped = token(KEY, READ_CAP | APPEND_CAP, Some("sec/other"));

        // No token, or a bad one: 401 for reads and writes, and nothing written.
        for auth in [None, Some(forged.as_str()), Some("garbage")] {
            let (status, body) = request(&b, "PUT", "/sec/j", auth, b"nope\n").await;
            assert_eq!(status, 401, "PUT with {auth:?}: {body}");
            let (status, body) = request(&b, "GET", "/sec/j?offset=0", auth, b"").await;
            assert_eq!(status, 401, "GET with {auth:?}: {body}");
            let (status, _) = request(&b, "HEAD", "/sec/j?offset=0", auth, b"").await;
            assert_eq!(status, 401, "HEAD with {auth:?}");
        }
        let (status, body) = request(&b, "PUT", "/sec/j", None, b"x").await;
        assert!(body.contains("Authorization"), "{status}: {body}");

        // A token without the capability, or whose selector excludes the journal: 403.
        let (status, body) = request(&b, "PUT", "/sec/j", Some(&read_only), b"nope\n").await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("APPEND"), "{body}");
        let (status, body) = request(&b, "GET", "/sec/j?offset=0", Some(&append_only), b"").await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("READ"), "{body}");
        let (status, body) = request(&b, "PUT", "/sec/j", Some(&scoped), b"nope\n").await;
        assert_eq!(status, 403, "{body}");

        // Nothing was appended by the refused requests.
        let (content, _) = read_all(&admin, "sec/j", 0).await;
        assert!(content.is_empty(), "refused writes appended {content:?}");

        // With the capability, by header or by `?token=`: writes and reads work.
        let (status, body) = request(&b, "PUT", "/sec/j", Some(&all), b"one\n").await;
        assert_eq!(status, 204, "{body}");
        let target = format!("/sec/j?token={append_only}");
        let (status, body) = request(&b, "PUT", &target, None, b"two\n").await;
        assert_eq!(status, 204, "{body}");
        let (status, body) = request(&b, "GET", "/sec/j?offset=0", Some(&read_only), b"").await;
        assert_eq!(status, 206, "{body}");
        assert!(body.contains("one\n"), "{body}");
        let (content, _) = read_all(&admin, "sec/j", 0).await;
        assert_eq!(content, b"one\ntwo\n");
        let target = format!("/sec/j?offset=0&token={read_only}");
        let (status, body) = request(&b, "GET", &target, None, b"").await;
        assert_eq!(status, 206, "{body}");
        let (status, _) = request(&b, "PUT", "/sec/other", Some(&scoped), b"ok\n").await;
        assert_eq!(status, 204);

        // Health and metrics stay open.
        let (status, _) = request(&b, "GET", "/debug/ready", None, b"").await;
        assert_eq!(status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_stays_open_without_auth_keys() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        apply_specs(&ch, &[spec("open/j", &[])]).await;
        let (status, body) = request(&b, "PUT", "/open/j", None, b"hi\n").await;
        assert_eq!(status, 204, "{body}");
        let (status, body) = request(&b, "GET", "/open/j?offset=0", None, b"").await;
        assert_eq!(status, 206, "{body}");
        // As Gazette: `token` is not a parameter of the open gateway.
        let (status, _) = request(&b, "GET", "/open/j?offset=0&token=x", None, b"").await;
        assert_eq!(status, 400);
    })
    .await;
}
