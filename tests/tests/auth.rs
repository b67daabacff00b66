//! Authorization (spec §7, scenario 13): HS256/HS384 tokens from `--broker.auth-keys`,
//! capability bits per RPC, selector scoping (out-of-scope journals look absent), Gazette's
//! `Unauthenticated` texts, the `AA==` key, and a deadline at the token's expiry.
//!
//! Tokens are signed here by hand (HMAC over base64url JSON), with claims shaped exactly as
//! Go's `pb.Claims` marshals them.

use base64::Engine;
use bytes::Bytes;
use courant_tests::protocol::grpc::{Channel, Code};
use courant_tests::protocol::{
    AppendRequest, AppendResponse, FragmentsRequest, FragmentsResponse, Header, ListRequest,
    ListResponse, ReadRequest, ReadResponse, Status,
};
use courant_tests::*;
use hmac::{KeyInit, Mac};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const KEY: &[u8] = b"a pre-shared secret";
const OTHER_KEY: &[u8] = b"the previous secret";

const LIST_CAP: u32 = 1 << 1;
const APPLY_CAP: u32 = 1 << 2;
const READ_CAP: u32 = 1 << 3;
const APPEND_CAP: u32 = 1 << 4;
const REPLICATE_CAP: u32 = 1 << 5;

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `sel` as Go marshals a LabelSelector including `name=<journal>` (or nothing).
fn name_selector(journal: Option<&str>) -> String {
    match journal {
        Some(j) => format!(
            r#"{{"include":{{"labels":[{{"name":"name","value":"{j}"}}]}},"exclude":{{"labels":null}}}}"#
        ),
        None => r#"{"include":{"labels":null},"exclude":{"labels":null}}"#.into(),
    }
}

/// Signs `claims_json` with `key` (HS256, or HS384 with `hs384`).
fn sign(key: &[u8], claims_json: &str, hs384: bool) -> String {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let alg = if hs384 { "HS384" } else { "HS256" };
    let head = url.encode(format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#));
    let body = url.encode(claims_json);
    let msg = format!("{head}.{body}");
    let sig = if hs384 {
        let mut mac = hmac::Hmac::<sha2::Sha384>::new_from_slice(key).unwrap();
        mac.update(msg.as_bytes());
        mac.finalize().into_bytes().to_vec()
    } else {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        mac.update(msg.as_bytes());
        mac.finalize().into_bytes().to_vec()
    };
    format!("{msg}.{}", url.encode(sig))
}

fn token(cap: u32, journal: Option<&str>, exp_in_s: i64) -> String {
    let claims = format!(
        r#"{{"cap":{cap},"sel":{},"exp":{},"iat":{}}}"#,
        name_selector(journal),
        now() + exp_in_s,
        now()
    );
    sign(KEY, &claims, false)
}

async fn start() -> Broker {
    // A second (older) key verifies too; the first signs.
    let keys = format!("{}, {}", b64(KEY), b64(OTHER_KEY));
    Broker::start(&["--broker.auth-keys", &keys]).await
}

async fn with_token(b: &Broker, token: &str) -> Channel {
    b.connect()
        .await
        .with_metadata("authorization", format!("Bearer {token}").parse().unwrap())
}

/// An all-powerful channel that sets the fixture up.
async fn admin(b: &Broker) -> Channel {
    with_token(b, &token(u32::MAX, None, 3600)).await
}

fn append_req(journal: &str) -> AppendRequest {
    AppendRequest {
        journal: journal.into(),
        ..Default::default()
    }
}

async fn append(ch: &Channel, journal: &str, data: &str) -> Result<AppendResponse, String> {
    append_full(
        ch,
        append_req(journal),
        &[Bytes::copy_from_slice(data.as_bytes())],
        true,
    )
    .await
    .result
    .map_err(|e| format!("{:?}: {}", e.code, e.message))
}

fn assert_unauthenticated<T: std::fmt::Debug>(r: Result<T, String>, text: &str, ctx: &str) {
    match r {
        Err(e) => {
            assert!(e.starts_with("Unauthenticated: "), "{ctx}: {e}");
            assert!(e.contains(text), "{ctx}: {e} lacks {text:?}");
        }
        Ok(v) => panic!("{ctx}: expected Unauthenticated, got {v:?}"),
    }
}

fn assert_absent(status: i32, header: Option<&Header>, ctx: &str) {
    assert_status(status, Status::JournalNotFound, ctx);
    let route = header.and_then(|h| h.route.clone()).unwrap_or_default();
    assert!(
        route.endpoints.is_empty() && route.members.is_empty(),
        "{ctx}: route {route:?}"
    );
}

async fn read_first(ch: &Channel, req: ReadRequest) -> Result<ReadResponse, String> {
    let call = ch
        .server_streaming(READ, &req)
        .await
        .map_err(|e| format!("{e}"))?;
    let mut s: Streamed<ReadResponse> = Streamed::new(call);
    match s.next().await {
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err("EOF".into()),
        Err(e) => Err(format!("{:?}: {}", e.code, e.message)),
    }
}

async fn list_names(ch: &Channel) -> Result<Vec<String>, String> {
    let call = ch
        .server_streaming(LIST, &ListRequest::default())
        .await
        .map_err(|e| format!("{e}"))?;
    let mut s: Streamed<ListResponse> = Streamed::new(call);
    let mut names = Vec::new();
    loop {
        match s.next().await {
            Ok(Some(m)) => names.extend(m.journals.into_iter().map(|j| j.spec.unwrap().name)),
            Ok(None) => return Ok(names),
            Err(e) => return Err(format!("{:?}: {}", e.code, e.message)),
        }
    }
}

/// Scenario 13, for every RPC: the capability bit, then the selector scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario13_capabilities_and_scopes() {
    within(60, async {
        let b = start().await;
        let admin = admin(&b).await;
        create_journals(&admin, &["a/journal", "other/journal"]).await;
        append(&admin, "a/journal", "hello").await.unwrap();

        // Append.
        let no_append = with_token(&b, &token(READ_CAP | LIST_CAP, None, 60)).await;
        assert_unauthenticated(
            append(&no_append, "a/journal", "x").await,
            "authorization is missing required APPEND capability",
            "Append without APPEND",
        );
        let elsewhere = with_token(&b, &token(u32::MAX, Some("something/else"), 60)).await;
        let r = append(&elsewhere, "a/journal", "x").await.unwrap();
        assert_absent(r.status, r.header.as_ref(), "Append out of scope");
        let scoped = with_token(&b, &token(APPEND_CAP | READ_CAP, Some("a/journal"), 60)).await;
        let r = append(&scoped, "a/journal", " world").await.unwrap();
        assert_status(r.status, Status::Ok, "Append in scope");
        // The `;meta` suffix does not change the journal's scope.
        let r = append_full(&scoped, append_req("a/journal;meta"), &[], true)
            .await
            .result
            .unwrap();
        assert_status(r.status, Status::Ok, "Append in scope with meta");

        // Read and ListFragments need READ.
        let no_read = with_token(&b, &token(APPEND_CAP, None, 60)).await;
        let read = |j: &str| ReadRequest {
            journal: j.into(),
            ..Default::default()
        };
        assert_unauthenticated(
            read_first(&no_read, read("a/journal")).await,
            "authorization is missing required READ capability",
            "Read without READ",
        );
        let m = read_first(&elsewhere, read("a/journal")).await.unwrap();
        assert_absent(m.status, m.header.as_ref(), "Read out of scope");
        let m = read_first(&scoped, read("a/journal")).await.unwrap();
        assert_status(m.status, Status::Ok, "Read in scope");
        let m = read_first(&scoped, read("other/journal")).await.unwrap();
        assert_absent(m.status, m.header.as_ref(), "Read of a journal outside the scope");
        let frag = |j: &str| FragmentsRequest {
            journal: j.into(),
            ..Default::default()
        };
        let r: Result<FragmentsResponse, _> =
            no_read.unary(LIST_FRAGMENTS, &frag("a/journal")).await;
        assert_unauthenticated(
            r.map_err(|e| format!("{:?}: {}", e.code, e.message)),
            "authorization is missing required READ capability",
            "ListFragments without READ",
        );
        let r: FragmentsResponse = elsewhere
            .unary(LIST_FRAGMENTS, &frag("a/journal"))
            .await
            .unwrap();
        assert_absent(r.status, r.header.as_ref(), "ListFragments out of scope");
        let r: FragmentsResponse = scoped.unary(LIST_FRAGMENTS, &frag("a/journal")).await.unwrap();
        assert_status(r.status, Status::Ok, "ListFragments in scope");

        // List needs LIST and filters to the scope.
        assert_unauthenticated(
            list_names(&no_read).await,
            "authorization is missing required LIST capability",
            "List without LIST",
        );
        let list_scoped = with_token(&b, &token(LIST_CAP, Some("a/journal"), 60)).await;
        assert_eq!(list_names(&list_scoped).await.unwrap(), vec!["a/journal"]);
        assert!(list_names(&elsewhere).await.unwrap().is_empty());
        let prefixed = sign(
            KEY,
            &format!(
                r#"{{"cap":2,"sel":{{"include":{{"labels":[{{"name":"prefix","value":"other/"}}]}}}},"exp":{}}}"#,
                now() + 60
            ),
            false,
        );
        let list_prefix = with_token(&b, &prefixed).await;
        assert_eq!(list_names(&list_prefix).await.unwrap(), vec!["other/journal"]);
        assert_eq!(list_names(&admin).await.unwrap().len(), 2);

        // Apply needs APPLY, and every change must be in scope.
        let r = apply(&no_read, vec![create(spec("new/journal", &[]))]).await;
        assert_unauthenticated(
            r.map_err(|e| format!("{:?}: {}", e.code, e.message)),
            "authorization is missing required APPLY capability",
            "Apply without APPLY",
        );
        let apply_scoped = with_token(&b, &token(APPLY_CAP, Some("new/journal"), 60)).await;
        let r = apply(&apply_scoped, vec![create(spec("other/new", &[]))]).await;
        assert_unauthenticated(
            r.map_err(|e| format!("{:?}: {}", e.code, e.message)),
            "not authorized to other/new",
            "Apply out of scope",
        );
        let r = apply(&apply_scoped, vec![delete("a/journal", -1)]).await;
        assert_unauthenticated(
            r.map_err(|e| format!("{:?}: {}", e.code, e.message)),
            "not authorized to a/journal",
            "Apply delete out of scope",
        );
        let r = apply(&apply_scoped, vec![create(spec("new/journal", &[]))])
            .await
            .unwrap();
        assert_status(r.status, Status::Ok, "Apply in scope");

        // Replicate needs REPLICATE; with it, an empty request reaches the handler and fails
        // its validation there.
        let r: Result<ReadResponse, _> = no_read.unary(REPLICATE, &AppendRequest::default()).await;
        let e = r.unwrap_err();
        assert_eq!(e.code, Code::Unauthenticated, "{e}");
        assert_eq!(e.message, "authorization is missing required REPLICATE capability");
        let repl = with_token(&b, &token(REPLICATE_CAP, None, 60)).await;
        let r: Result<ReadResponse, _> = repl.unary(REPLICATE, &AppendRequest::default()).await;
        let e = r.unwrap_err();
        assert_eq!(e.code, Code::Unknown, "{e}");
        assert!(e.message.contains("expected"), "{e}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_with_gazettes_texts() {
    within(30, async {
        let b = start().await;
        create_journals(&admin(&b).await, &["a/journal"]).await;
        let cases = [
            (
                b.connect().await,
                "missing or empty Authorization token",
                "no token",
            ),
            (
                b.connect()
                    .await
                    .with_metadata("authorization", "Basic abc".parse().unwrap()),
                "invalid or unsupported Authorization header (expected 'Bearer')",
                "not a bearer token",
            ),
            (
                with_token(&b, &token(u32::MAX, None, -60)).await,
                "verifying Authorization: token has invalid claims: token is expired",
                "expired",
            ),
            (
                with_token(
                    &b,
                    &sign(
                        b"wrong key",
                        &format!(r#"{{"cap":16,"exp":{}}}"#, now() + 60),
                        false,
                    ),
                )
                .await,
                "verifying Authorization: token signature is invalid",
                "unknown key",
            ),
            (
                with_token(&b, &sign(KEY, r#"{"cap":16}"#, false)).await,
                "exp",
                "no exp",
            ),
            (
                with_token(&b, "not-a-jwt").await,
                "verifying Authorization: token is malformed",
                "garbage",
            ),
        ];
        for (ch, text, ctx) in cases {
            assert_unauthenticated(append(&ch, "a/journal", "x").await, text, ctx);
        }
        // Within the 5 s leeway an expired token still verifies (its deadline has passed,
        // so the call may then fail on it, as in Gazette); HS384 and the second key are
        // accepted.
        let r = append(
            &with_token(&b, &token(u32::MAX, None, -2)).await,
            "a/journal",
            "x",
        )
        .await;
        assert!(!format!("{r:?}").contains("Unauthenticated"), "{r:?}");
        let hs384 = sign(KEY, &format!(r#"{{"cap":16,"exp":{}}}"#, now() + 60), true);
        let r = append(&with_token(&b, &hs384).await, "a/journal", "x")
            .await
            .unwrap();
        assert_status(r.status, Status::Ok, "HS384");
        let old = sign(
            OTHER_KEY,
            &format!(r#"{{"cap":16,"exp":{}}}"#, now() + 60),
            false,
        );
        let r = append(&with_token(&b, &old).await, "a/journal", "x")
            .await
            .unwrap();
        assert_status(r.status, Status::Ok, "second key");
    })
    .await;
}

/// `AA==` admits calls without a token; tokens are still verified when present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aa_key_allows_missing_tokens() {
    within(30, async {
        let keys = format!("AA== {}", b64(KEY));
        let b = Broker::start(&["--broker.auth-keys", &keys]).await;
        let anon = b.connect().await;
        create_journals(&anon, &["a/journal"]).await;
        let r = append(&anon, "a/journal", "x").await.unwrap();
        assert_status(r.status, Status::Ok, "anonymous append");
        let weak = with_token(&b, &token(READ_CAP, None, 60)).await;
        assert_unauthenticated(
            append(&weak, "a/journal", "x").await,
            "missing required APPEND capability",
            "token present but lacking",
        );
    })
    .await;
}

/// A long blocking Read is cut at the token's expiry (Gazette sets the RPC deadline there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_at_token_expiry() {
    within(30, async {
        let b = start().await;
        create_journals(&admin(&b).await, &["a/journal"]).await;
        let ch = with_token(&b, &token(READ_CAP, None, 2)).await;
        let call = ch
            .server_streaming(
                READ,
                &ReadRequest {
                    journal: "a/journal".into(),
                    block: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let started = Instant::now();
        let mut s: Streamed<ReadResponse> = Streamed::new(call);
        let end = s
            .next_within(Duration::from_secs(10))
            .await
            .expect("read was cut");
        let e = end.unwrap_err();
        assert_eq!(e.code, Code::DeadlineExceeded, "{e}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(800) && took < Duration::from_secs(4),
            "{took:?}"
        );
    })
    .await;
}

/// Without `--broker.auth-keys` nothing is verified. With keys, unlike Gazette (whose
/// gateway calls the broker as the broker), the HTTP gateway needs a token too
/// (SECURITY.md; tests/tests/security_gateway.rs covers it in full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_keys_no_checks_and_gateway_gated_with_keys() {
    within(30, async {
        let open = Broker::start(&[]).await;
        let ch = with_token(&open, "garbage").await;
        create_journals(&ch, &["a/journal"]).await;
        assert_status(
            append(&ch, "a/journal", "x").await.unwrap().status,
            Status::Ok,
            "no auth configured",
        );

        let b = start().await;
        create_journals(&admin(&b).await, &["a/journal"]).await;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
            .await
            .unwrap();
        tcp.write_all(
            b"PUT /a/journal HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        tcp.read_to_end(&mut out).await.unwrap();
        assert!(
            out.starts_with(b"HTTP/1.1 401"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    })
    .await;
}
