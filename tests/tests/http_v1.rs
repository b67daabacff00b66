//! Gazette's grpc-gateway JSON routes on the broker's port (spec §8): `POST
//! /v1/journals/list` and `POST /v1/journals/read`, answering newline-delimited
//! `{"result": ...}` objects in gogo jsonpb style (defaults emitted, lowerCamelCase names,
//! int64 as strings, bytes as base64), errors as grpc-gateway writes them, the
//! `Authorization` header forwarded as gRPC metadata, and `--broker.allow-origin` CORS.

use base64::Engine;
use courant_tests::*;
use hmac::{KeyInit, Mac};
use serde_json::Value;
use std::collections::HashMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|s| s.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as newline-delimited JSON objects (the last may lack its newline).
    fn objects(&self) -> Vec<Value> {
        self.text()
            .split('\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect()
    }
}

/// One request on its own connection (`Connection: close`); reads the whole response.
async fn request(
    b: &Broker,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut tcp = TcpStream::connect(("127.0.0.1", b.port())).await.unwrap();
    let mut raw = format!("{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (k, v) in headers {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    raw.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    tcp.write_all(raw.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tcp.read_to_end(&mut all).await.unwrap();
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&all[..split]).into_owned();
    let mut rest = all[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        let mut body = Vec::new();
        loop {
            let nl = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("chunk line");
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap(), 16)
                .expect("chunk size");
            rest.drain(..nl + 2);
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[..size]);
            rest.drain(..size + 2);
        }
        rest = body;
    }
    Resp {
        status,
        headers,
        body: rest,
    }
}

async fn post(b: &Broker, path: &str, body: &str) -> Resp {
    request(b, "POST", path, &[], body).await
}

fn names(objects: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = objects
        .iter()
        .flat_map(|o| {
            o["result"]["journals"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|j| j["spec"]["name"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_a_selector() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        apply_specs(
            &ch,
            &[
                spec("a/one", &[("app", "x")]),
                spec("a/two", &[("app", "y")]),
                spec("b/three", &[("app", "x")]),
            ],
        )
        .await;

        let r = post(
            &b,
            "/v1/journals/list",
            r#"{"selector":{"include":{"labels":[{"name":"app","value":"x"}]}}}"#,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let objects = r.objects();
        assert!(r.text().ends_with('\n'), "{}", r.text());
        assert_eq!(names(&objects), ["a/one", "b/three"]);
        let first = &objects[0]["result"];
        assert_eq!(first["status"], "OK");
        // int64 and uint64 as strings, defaults emitted, lowerCamelCase names.
        let etcd = &first["header"]["etcd"];
        assert!(etcd["clusterId"].as_str().unwrap() != "0", "{etcd}");
        assert!(etcd["revision"].as_str().unwrap().parse::<i64>().unwrap() > 0);
        let journal = &first["journals"][0];
        assert!(journal["modRevision"].is_string(), "{journal}");
        assert!(journal["createRevision"].is_string(), "{journal}");
        let spec = &journal["spec"];
        assert_eq!(spec["replication"], 1);
        assert_eq!(spec["maxAppendRate"], "0");
        assert_eq!(spec["suspend"], Value::Null);
        assert_eq!(spec["fragment"]["length"], "1048576");
        assert_eq!(spec["fragment"]["compressionCodec"], "NONE");
        assert_eq!(spec["fragment"]["refreshInterval"], "1s");
        assert_eq!(spec["fragment"]["retention"], "0s");
        assert_eq!(spec["fragment"]["stores"], serde_json::json!([]));
        assert_eq!(
            spec["labels"]["labels"][0],
            serde_json::json!({"name": "app", "value": "x", "prefix": false})
        );
        assert!(journal["route"]["members"].is_array(), "{journal}");

        // Original field names work too, and an exclusion; an empty body lists everything.
        let r = post(
            &b,
            "/v1/journals/list",
            r#"{"selector":{"exclude":{"labels":[{"name":"app","value":"x"}]}},"watch":false}"#,
        )
        .await;
        assert_eq!(names(&r.objects()), ["a/two"]);
        let r = post(&b, "/v1/journals/list", "").await;
        assert_eq!(names(&r.objects()), ["a/one", "a/two", "b/three"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_of_appended_bytes() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        append_ok(&ch, "a/journal", b"hello, ").await;
        append_ok(&ch, "a/journal", b"json world <&>").await;

        let r = post(
            &b,
            "/v1/journals/read",
            r#"{"journal":"a/journal","offset":"0","block":false}"#,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let objects = r.objects();
        let first = &objects[0]["result"];
        assert_eq!(first["status"], "OK", "{first}");
        assert_eq!(first["offset"], "0");
        assert_eq!(first["writeHead"], "21");
        assert_eq!(first["content"], Value::Null, "metadata has no content");
        let fragment = &first["fragment"];
        assert_eq!(fragment["journal"], "a/journal");
        assert_eq!(fragment["begin"], "0");
        assert_eq!(fragment["compressionCodec"], "NONE");
        assert!(fragment["sum"]["part1"].is_string(), "{fragment}");
        assert!(first["header"]["processId"]["suffix"].is_string());

        let mut content = Vec::new();
        for o in &objects[1..] {
            let res = &o["result"];
            if let Some(text) = res["content"].as_str() {
                content.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .unwrap(),
                );
            }
        }
        assert_eq!(content, b"hello, json world <&>");
        // A non-blocking read ends at the write head with OFFSET_NOT_YET_AVAILABLE.
        let last = &objects.last().unwrap()["result"];
        assert_eq!(last["status"], "OFFSET_NOT_YET_AVAILABLE", "{last}");

        // Original field names, an end offset and a missing journal.
        let r = post(
            &b,
            "/v1/journals/read",
            r#"{"journal":"a/journal","offset":7,"end_offset":"11","do_not_proxy":true}"#,
        )
        .await;
        let text: Vec<u8> = r
            .objects()
            .iter()
            .filter_map(|o| o["result"]["content"].as_str().map(str::to_string))
            .flat_map(|t| base64::engine::general_purpose::STANDARD.decode(t).unwrap())
            .collect();
        assert_eq!(text, b"json");
        let r = post(&b, "/v1/journals/read", r#"{"journal":"a/missing"}"#).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.objects()[0]["result"]["status"], "JOURNAL_NOT_FOUND");

        // An invalid request fails the RPC: grpc-gateway's error chunk and HTTP status.
        let r = post(
            &b,
            "/v1/journals/read",
            r#"{"journal":"a/journal","offset":-5}"#,
        )
        .await;
        assert_eq!(r.status, 500, "{}", r.text());
        let err = &r.objects()[0]["error"];
        assert_eq!(err["grpcCode"], 2, "{err}");
        assert_eq!(err["httpCode"], 500);
        assert_eq!(err["httpStatus"], "Internal Server Error");
        assert_eq!(err["details"], serde_json::json!([]));
        assert!(err["message"].as_str().unwrap().contains("Offset"), "{err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests() {
    within(30, async {
        let b = Broker::start(&[]).await;

        let r = post(&b, "/v1/journals/read", r#"{"journal": "a/j""#).await;
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["code"], 3);
        assert!(
            v["message"].as_str().unwrap().starts_with("invalid JSON: "),
            "{v}"
        );
        assert_eq!(v["details"], serde_json::json!([]));

        let r = post(&b, "/v1/journals/list", r#"{"selector":{},"bogus":1}"#).await;
        assert_eq!(r.status, 400);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v["message"],
            "unknown field \"bogus\" in protocol.ListRequest"
        );

        let r = post(&b, "/v1/journals/read", r#"{"offset":"ten"}"#).await;
        assert_eq!(r.status, 400);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v["message"],
            "json: cannot unmarshal string into Go value of type protocol.Offset"
        );

        // grpc-gateway's mux: other methods and paths under /v1/ are Unimplemented (501).
        let r = request(&b, "GET", "/v1/journals/list", &[], "").await;
        assert_eq!(r.status, 501);
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body).unwrap()["message"],
            "Method Not Allowed"
        );
        let r = post(&b, "/v1/journals/apply", "{}").await;
        assert_eq!(r.status, 501);
        assert_eq!(
            serde_json::from_slice::<Value>(&r.body).unwrap()["message"],
            "Not Found"
        );
        assert_serving(&b).await;
    })
    .await;
}

fn sign(key: &[u8], claims_json: &str) -> String {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let head = url.encode(r#"{"alg":"HS256","typ":"JWT"}"#);
    let msg = format!("{head}.{}", url.encode(claims_json));
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(msg.as_bytes());
    format!("{msg}.{}", url.encode(mac.finalize().into_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_and_cors() {
    within(30, async {
        let key = b"v1-secret";
        let keys = base64::engine::general_purpose::STANDARD.encode(key);
        let b = Broker::start(&[
            "--broker.auth-keys",
            &keys,
            "--broker.allow-origin",
            "https://ui.example",
        ])
        .await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let token = |cap: u32, sel: &str| {
            sign(
                key,
                &format!(
                    r#"{{"cap":{cap},"sel":{sel},"exp":{},"iat":{now}}}"#,
                    now + 60
                ),
            )
        };
        let all = r#"{"include":{"labels":null},"exclude":{"labels":null}}"#;
        let only_a =
            r#"{"include":{"labels":[{"name":"name","value":"a/one"}]},"exclude":{"labels":null}}"#;
        let admin = format!("Bearer {}", token(u32::MAX, all));
        let ch = b
            .connect()
            .await
            .with_metadata("authorization", admin.parse().unwrap());
        apply_specs(&ch, &[spec("a/one", &[]), spec("a/two", &[])]).await;

        // No token: the RPC fails Unauthenticated, as a stream error with HTTP 401.
        let r = post(&b, "/v1/journals/list", "{}").await;
        assert_eq!(r.status, 401, "{}", r.text());
        let err = &r.objects()[0]["error"];
        assert_eq!(err["grpcCode"], 16);
        assert_eq!(err["message"], "missing or empty Authorization token");

        // A LIST token scoped to one journal sees only it; it may not Read.
        let scoped = format!("Bearer {}", token(2, only_a));
        let r = request(
            &b,
            "POST",
            "/v1/journals/list",
            &[("Authorization", &scoped)],
            "{}",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(names(&r.objects()), ["a/one"]);
        let r = request(
            &b,
            "POST",
            "/v1/journals/read",
            &[("Authorization", &scoped)],
            r#"{"journal":"a/one"}"#,
        )
        .await;
        assert_eq!(r.status, 401);
        assert_eq!(
            r.objects()[0]["error"]["message"],
            "authorization is missing required READ capability"
        );
        // A READ token scoped to a/one: a/two looks absent.
        let read_a = format!("Bearer {}", token(8, only_a));
        let r = request(
            &b,
            "POST",
            "/v1/journals/read",
            &[("Authorization", &read_a)],
            r#"{"journal":"a/two"}"#,
        )
        .await;
        assert_eq!(r.objects()[0]["result"]["status"], "JOURNAL_NOT_FOUND");

        // CORS: the allowed origin gets the headers; a preflight is an empty 200.
        let r = request(
            &b,
            "OPTIONS",
            "/v1/journals/list",
            &[("Origin", "https://ui.example")],
            "",
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some("https://ui.example")
        );
        assert_eq!(
            r.header("access-control-allow-methods"),
            Some("GET, POST, OPTIONS")
        );
        let r = request(
            &b,
            "POST",
            "/v1/journals/list",
            &[
                ("Origin", "https://other.example"),
                ("Authorization", &admin),
            ],
            "{}",
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("access-control-allow-origin"), None);
    })
    .await;
}
