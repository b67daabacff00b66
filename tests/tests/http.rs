//! HTTP/1.1 on the broker's gRPC port: `/debug/ready`, `/debug/metrics` and Gazette's `/`
//! gateway (spec §8, scenario 40's HTTP part), plus what a public port must withstand:
//! malformed and oversized requests, slow-loris clients, gRPC and HTTP mixed on one port,
//! graceful shutdown on SIGTERM, `print-config` and `--log.format json`.
//!
//! Requests go over raw TCP sockets (a tiny HTTP/1.1 client below), so every byte on the
//! wire is the test's choice.

use bytes::Bytes;
use courant_tests::protocol::{AppendRequest, ReadRequest, ReadResponse};
use courant_tests::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client.
// ------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Resp {
    status: u16,
    /// Lowercased names; repeated headers keep the last value.
    headers: HashMap<String, String>,
    body: Vec<u8>,
    trailers: HashMap<String, String>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(|s| s.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One connection with a read buffer, so several responses can be read from it.
struct Conn {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(b: &Broker) -> Conn {
        let tcp = TcpStream::connect(("127.0.0.1", b.port())).await.unwrap();
        Conn {
            tcp,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, raw: &[u8]) {
        self.tcp.write_all(raw).await.unwrap();
    }

    /// Reads more bytes; false at EOF.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16384];
        match self.tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    async fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return line;
            }
            assert!(
                self.fill().await,
                "connection closed mid-line: {:?}",
                self.buf
            );
        }
    }

    async fn exact(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "connection closed mid-body");
        }
        self.buf.drain(..n).collect()
    }

    async fn fields(&mut self) -> HashMap<String, String> {
        let mut out = HashMap::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                return out;
            }
            let (k, v) = line.split_once(':').expect("header line");
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }

    /// Reads one response to a request of `method`, skipping interim (1xx) responses.
    async fn response(&mut self, method: &str) -> Resp {
        let mut status_line = self.line().await;
        while status_line.starts_with("HTTP/1.1 1") {
            self.fields().await;
            status_line = self.line().await;
        }
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let headers = self.fields().await;
        let mut resp = Resp {
            status,
            headers,
            body: Vec::new(),
            trailers: HashMap::new(),
        };
        if method == "HEAD" || status == 204 {
            return resp;
        }
        if resp.header("transfer-encoding") == Some("chunked") {
            loop {
                let size = usize::from_str_radix(&self.line().await, 16).expect("chunk size");
                if size == 0 {
                    resp.trailers = self.fields().await;
                    return resp;
                }
                let data = self.exact(size).await;
                resp.body.extend_from_slice(&data);
                assert_eq!(self.exact(2).await, b"\r\n");
            }
        }
        if let Some(len) = resp.header("content-length") {
            let len: usize = len.parse().unwrap();
            resp.body = self.exact(len).await;
            return resp;
        }
        while self.fill().await {}
        resp.body = std::mem::take(&mut self.buf);
        resp
    }

    /// True if the server closes the connection within `d`.
    async fn closed_within(&mut self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.fill()).await {
                Err(_) => return false,
                Ok(false) => return true,
                Ok(true) => continue,
            }
        }
    }
}

async fn request(b: &Broker, method: &str, target: &str, body: &[u8]) -> Resp {
    let mut c = Conn::open(b).await;
    let mut raw = format!(
        "{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    c.send(&raw).await;
    c.response(method).await
}

async fn get(b: &Broker, target: &str) -> Resp {
    request(b, "GET", target, b"").await
}

async fn put(b: &Broker, target: &str, body: &[u8]) -> Resp {
    request(b, "PUT", target, body).await
}

/// Parses Prometheus text exposition: every sample line must be `name{labels} value`.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "unterminated labels in {line:?}");
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        assert!(
            out.insert(series.to_string(), value).is_none(),
            "duplicate series {series}"
        );
    }
    out
}

async fn metrics(b: &Broker) -> HashMap<String, f64> {
    let r = get(b, "/debug/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    parse_metrics(&r.text())
}

fn metric(m: &HashMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

async fn grpc_append(ch: &courant_tests::protocol::grpc::Channel, journal: &str, data: &[u8]) {
    let out = append_full(
        ch,
        AppendRequest {
            journal: journal.into(),
            ..Default::default()
        },
        &[Bytes::copy_from_slice(data)],
        true,
    )
    .await;
    let resp = out.result.expect("gRPC append");
    assert_status(resp.status, courant_tests::protocol::Status::Ok, "append");
}

// ------------------------------------------------------------------------------------------
// Routes.
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_ready_and_metrics_share_the_grpc_port() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let r = get(&b, "/debug/ready").await;
        assert_eq!(r.status, 200);
        // gRPC on the same port, before and after.
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let m = metrics(&b).await;
        assert!(
            metric(
                &m,
                "gazette_journal_server_completed_totals{operation=\"Apply\",status=\"ok\"}"
            ) >= 1.0,
            "{m:?}"
        );
        assert!(
            m.keys()
                .any(|k| k.starts_with("courant_core_rpcs_total{core=\"0\""))
        );
        // Utilisation is sampled each second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let m = metrics(&b).await;
        assert!(
            metric(&m, "courant_core_busy_seconds_total{core=\"0\"}") > 0.0,
            "{m:?}"
        );
        assert!(metric(&m, "courant_core_tasks_total{core=\"0\"}") > 0.0);
    })
    .await;
}

/// `--debug.port` serves `/debug/*` apart; `--debug.private` takes them off the main port
/// (where `/debug/ready` is then just a journal name for the gateway, as in Gazette).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_port_and_private() {
    within(30, async {
        let debug_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let b = Broker::start(&["--debug.port", &debug_port.to_string(), "--debug.private"]).await;
        let r = get(&b, "/debug/ready").await;
        assert_eq!((r.status, r.text().as_str()), (404, "JOURNAL_NOT_FOUND\n"));
        let on_debug = |target: &'static str| async move {
            let mut tcp = TcpStream::connect(("127.0.0.1", debug_port)).await.unwrap();
            let req = format!("GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n");
            tcp.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            tcp.read_to_end(&mut out).await.unwrap();
            String::from_utf8_lossy(&out).into_owned()
        };
        assert!(on_debug("/debug/ready").await.starts_with("HTTP/1.1 200"));
        let metrics = on_debug("/debug/metrics").await;
        assert!(
            metrics.starts_with("HTTP/1.1 200")
                && metrics.contains("gazette_journal_server_started_totals")
        );
        assert!(on_debug("/a/journal").await.starts_with("HTTP/1.1 404"));
    })
    .await;
}

/// Scenario 40 (HTTP part): PUT then GET with Gazette's headers; metrics move by exactly
/// the bytes appended and read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_with_gazettes_headers() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let before = metrics(&b).await;

        let r = put(&b, "/a/journal", b"some content").await;
        assert_eq!(r.status, 204, "{r:?}");
        assert_eq!(r.header("x-commit-begin"), Some("0"));
        assert_eq!(r.header("x-commit-end"), Some("12"));
        assert_eq!(r.header("x-write-head"), Some("12"));
        let sum = sha1_sum(b"some content");
        let hex = format!("{:016x}{:016x}{:08x}", sum.part1, sum.part2, sum.part3);
        assert_eq!(r.header("x-commit-sha1-sum"), Some(hex.as_str()));
        let token = r.header("x-route-token").unwrap();
        assert!(
            token.starts_with("members:<zone:\"local\" suffix:"),
            "{token}"
        );
        // Gazette's token ends with a space, which Go's net/http trims on the wire.
        assert!(
            token.ends_with(&format!("endpoints:\"{}\"", b.endpoint())),
            "{token}"
        );
        assert_eq!(
            r.header("location"),
            Some(format!("{}/a/journal", b.endpoint()).as_str())
        );

        let r = get(&b, "/a/journal?offset=0").await;
        assert_eq!(r.status, 206, "{r:?}");
        assert_eq!(r.text(), "some content");
        assert_eq!(r.header("trailer"), Some("X-Close-Error"));
        assert_eq!(
            r.header("content-range"),
            Some("bytes 0-9223372036854775807/9223372036854775807")
        );
        assert_eq!(r.header("x-write-head"), Some("12"));
        let name = r.header("x-fragment-name").unwrap();
        assert!(
            name.starts_with("0000000000000000-000000000000000c-") && name.ends_with(".raw"),
            "{name}"
        );
        assert_eq!(
            r.trailers.get("x-close-error").map(|s| s.as_str()),
            Some("OFFSET_NOT_YET_AVAILABLE")
        );
        assert!(r.header("location").is_some() && r.header("x-route-token").is_some());

        // A later offset; HEAD carries metadata only.
        let r = get(&b, "/a/journal?offset=5").await;
        assert_eq!((r.status, r.text().as_str()), (206, "content"));
        assert_eq!(
            r.header("content-range"),
            Some("bytes 5-9223372036854775807/9223372036854775807")
        );
        let r = request(&b, "HEAD", "/a/journal?offset=5", b"").await;
        assert_eq!(r.status, 206);
        assert!(r.body.is_empty() && r.header("trailer").is_none());
        assert!(r.header("content-length").is_none());
        assert_eq!(r.header("x-write-head"), Some("12"));

        let after = metrics(&b).await;
        let series = |n: &str| format!("{n}{{journal=\"a/journal\"}}");
        let delta = |n: &str| metric(&after, &series(n)) - metric(&before, &series(n));
        assert_eq!(delta("gazette_append_bytes_total"), 12.0);
        assert_eq!(delta("courant_append_requests_total"), 1.0);
        assert_eq!(delta("gazette_read_bytes_total"), 12.0 + 7.0);
        assert_eq!(delta("courant_read_requests_total"), 3.0);
        assert_eq!(metric(&after, &series("gazette_write_head")), 12.0);
        assert_eq!(
            metric(
                &after,
                "courant_append_commit_seconds_count{journal=\"a/journal\"}"
            ),
            1.0
        );

        // gRPC appends count the same way.
        grpc_append(&ch, "a/journal", &[7u8; 1000]).await;
        let last = metrics(&b).await;
        assert_eq!(
            metric(&last, &series("gazette_append_bytes_total"))
                - metric(&after, &series("gazette_append_bytes_total")),
            1000.0
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_error_statuses() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        grpc_append(&ch, "a/journal", b"abc").await;

        // Scenario 40: an unknown query parameter.
        let r = get(&b, "/journal/name?extra=1").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (400, "schema: invalid path \"extra\"\n")
        );
        // Parameter names are case-insensitive.
        let r = get(&b, "/a/journal?OFFSET=1&Block=false").await;
        assert_eq!((r.status, r.text().as_str()), (206, "bc"));
        let r = get(&b, "/a/journal?offset=x").await;
        assert_eq!(r.status, 400);
        assert_eq!(r.text(), "schema: error converting value for \"offset\"\n");
        let r = get(&b, "/a/journal?block=maybe").await;
        assert_eq!(r.status, 400);
        let r = get(&b, "/a/journal?offset=%zz").await;
        assert_eq!(r.status, 400);
        // An invalid journal name fails ReadRequest validation.
        let r = get(&b, "/bad%20journal").await;
        assert_eq!(r.status, 400, "{r:?}");
        // Status mapping.
        let r = get(&b, "/not/a/journal").await;
        assert_eq!((r.status, r.text().as_str()), (404, "JOURNAL_NOT_FOUND\n"));
        let r = get(&b, "/a/journal?offset=100").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (416, "OFFSET_NOT_YET_AVAILABLE\n")
        );
        assert_eq!(r.header("x-write-head"), Some("3"));
        // Other methods.
        for method in ["POST", "DELETE", "PATCH"] {
            let r = request(&b, method, "/a/journal", b"").await;
            assert_eq!(r.status, 400);
            assert_eq!(r.text(), format!("unknown method: {method}\n"));
        }
        // PUT: as Gazette's Appender, a non-OK status is a 500 with its name.
        let r = put(&b, "/not/a/journal", b"x").await;
        assert_eq!((r.status, r.text().as_str()), (500, "JOURNAL_NOT_FOUND\n"));
        let r = put(&b, "/a/journal?offset=1", b"x").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (400, "schema: invalid path \"offset\"\n")
        );
        let r = put(&b, "/bad%20journal", b"x").await;
        assert_eq!(r.status, 400);
        // Journals whose flags forbid the operation: NOT_ALLOWED is a 500 either way.
        let mut read_only = spec("ro/journal", &[]);
        read_only.flags = courant_tests::protocol::journal_spec::Flag::ORdonly as u32;
        let mut write_only = spec("wo/journal", &[]);
        write_only.flags = courant_tests::protocol::journal_spec::Flag::OWronly as u32;
        apply_specs(&ch, &[read_only, write_only]).await;
        let r = put(&b, "/ro/journal", b"x").await;
        assert_eq!((r.status, r.text().as_str()), (500, "NOT_ALLOWED\n"));
        assert_eq!(put(&b, "/wo/journal", b"x").await.status, 204);
        let r = get(&b, "/wo/journal").await;
        assert_eq!((r.status, r.text().as_str()), (500, "NOT_ALLOWED\n"));
        // None of that wrote anything.
        let r = get(&b, "/a/journal").await;
        assert_eq!(r.text(), "abc");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_and_chunked_uploads() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let mut c = Conn::open(&b).await;
        // A chunked PUT (curl -T - sends these), then a GET, then a pipelined pair.
        c.send(b"PUT /a/journal HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n")
            .await;
        let r = c.response("PUT").await;
        assert_eq!(r.status, 204, "{r:?}");
        assert_eq!(r.header("x-commit-end"), Some("12"));
        c.send(b"GET /a/journal HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let r = c.response("GET").await;
        assert_eq!((r.status, r.text().as_str()), (206, "hello, world"));
        c.send(b"GET /debug/ready HTTP/1.1\r\n\r\nGET /a/journal?offset=7 HTTP/1.1\r\n\r\n")
            .await;
        assert_eq!(c.response("GET").await.status, 200);
        assert_eq!(c.response("GET").await.text(), "world");
        // `Expect: 100-continue` (curl's default for larger bodies): the interim response
        // comes before the body is read, and not at all if the request fails first.
        c.send(b"PUT /a/journal HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
            .await;
        assert_eq!(c.line().await, "HTTP/1.1 100 Continue");
        assert_eq!(c.line().await, "");
        c.send(b"!!!").await;
        let r = c.response("PUT").await;
        assert_eq!((r.status, r.header("x-commit-end")), (204, Some("15")));
        c.send(b"PUT /not/a/journal HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
            .await;
        let r = c.response("PUT").await;
        assert_eq!((r.status, r.text().as_str()), (500, "JOURNAL_NOT_FOUND\n"));
        assert!(c.closed_within(Duration::from_secs(5)).await);
        // HTTP/1.0: close-delimited, connection closed after.
        let mut c = Conn::open(&b).await;
        c.send(b"GET /a/journal HTTP/1.0\r\n\r\n").await;
        let r = c.response("GET").await;
        assert_eq!((r.status, r.text().as_str()), (206, "hello, world!!!"));
    })
    .await;
}

/// A blocking GET streams content as it is committed, chunk by chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_get_streams_appends() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let mut c = Conn::open(&b).await;
        c.send(b"GET /a/journal?block=true HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        // Nothing is committed yet: the read blocks and sends no head.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), c.fill())
                .await
                .is_err()
        );
        grpc_append(&ch, "a/journal", b"first").await;
        assert!(c.line().await.starts_with("HTTP/1.1 206"));
        let headers = c.fields().await;
        assert_eq!(
            headers.get("transfer-encoding").map(|s| s.as_str()),
            Some("chunked")
        );
        assert_eq!(c.line().await, "5");
        assert_eq!(c.exact(7).await, b"first\r\n");
        let r = put(&b, "/a/journal", b"second").await;
        assert_eq!(r.status, 204);
        assert_eq!(c.line().await, "6");
        assert_eq!(c.exact(8).await, b"second\r\n");
        // A client that hangs up ends its read (the broker keeps serving).
        drop(c);
        // Also before any content arrived: the owner's blocked Read is cancelled.
        let before = metrics(&b).await;
        let read_err =
            "gazette_journal_server_completed_totals{operation=\"Read\",status=\"<error>\"}";
        let mut c = Conn::open(&b).await;
        c.send(b"GET /a/journal?block=true&offset=11 HTTP/1.1\r\n\r\n")
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(c);
        let deadline = Instant::now() + Duration::from_secs(5);
        while metric(&metrics(&b).await, read_err) == metric(&before, read_err) {
            assert!(Instant::now() < deadline, "the abandoned Read did not end");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = get(&b, "/a/journal").await;
        assert_eq!(r.text(), "firstsecond");
    })
    .await;
}

// ------------------------------------------------------------------------------------------
// Hostile clients.
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_requests_get_errors() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let cases: &[(&[u8], u16)] = &[
            (b"GARBAGE\r\n\r\n", 400),
            (b"GET /x HTTP/1.1\r\nNo colon here\r\n\r\n", 400),
            (b"GET /x HTTP/3.0\r\n\r\n", 505),
            (b"GET x HTTP/1.1\r\n\r\n", 400),
            (
                b"PUT /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            (b"PUT /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
            (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        ];
        for (raw, status) in cases {
            let mut c = Conn::open(&b).await;
            c.send(raw).await;
            let r = c.response("GET").await;
            assert_eq!(r.status, *status, "{:?}", String::from_utf8_lossy(raw));
            assert!(c.closed_within(Duration::from_secs(5)).await);
        }
        // Oversized heads: one huge header, and a flood of small ones.
        let mut raw = b"GET /debug/ready HTTP/1.1\r\nX-Big: ".to_vec();
        raw.extend(std::iter::repeat_n(b'a', 64 << 10));
        let mut c = Conn::open(&b).await;
        let _ = c.tcp.write_all(&raw).await;
        assert_eq!(c.response("GET").await.status, 431);
        let mut raw = b"GET /debug/ready HTTP/1.1\r\n".to_vec();
        for i in 0..200 {
            raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        let mut c = Conn::open(&b).await;
        c.send(&raw).await;
        assert_eq!(c.response("GET").await.status, 431);
        // A bad chunked body fails the PUT, and the connection.
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let mut c = Conn::open(&b).await;
        c.send(b"PUT /a/journal HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX")
            .await;
        let r = c.response("PUT").await;
        assert_eq!(r.status, 500, "{r:?}");
        assert!(r.text().contains("CRLF"), "{r:?}");
        assert!(c.closed_within(Duration::from_secs(5)).await);
        assert_eq!(get(&b, "/a/journal?offset=0").await.status, 416);
        assert_eq!(get(&b, "/debug/ready").await.status, 200);
    })
    .await;
}

/// Slow-loris clients (heads trickled a byte at a time, idle connections, a stalled body)
/// hold only their own connections, which are closed within bounded time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_disturb_others() {
    within(60, async {
        let b = Broker::start(&["--tpc.cores", "1"]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let mut idle = Vec::new();
        for _ in 0..50 {
            idle.push(Conn::open(&b).await);
        }
        let mut loris = Vec::new();
        for _ in 0..20 {
            let mut c = Conn::open(&b).await;
            c.send(b"GET /debug/ready HTTP/1.1\r\nX-A: ").await;
            loris.push(c);
        }
        let mut stalled = Conn::open(&b).await;
        stalled
            .send(b"PUT /a/journal HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly a part")
            .await;
        let start = Instant::now();
        // Meanwhile, others are served promptly over both protocols.
        for i in 0..20 {
            let t = Instant::now();
            assert_eq!(get(&b, "/debug/ready").await.status, 200);
            grpc_append(&ch, "a/journal", format!("{i},").as_bytes()).await;
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "slow: {:?}",
                t.elapsed()
            );
            for c in loris.iter_mut() {
                let _ = c.tcp.write_all(b"a").await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Heads that do not complete within 10 s are answered 408 and closed, however
        // steadily they trickle.
        for c in loris.iter_mut() {
            let left = Duration::from_secs(13).saturating_sub(start.elapsed());
            let r = tokio::time::timeout(left, c.response("GET")).await;
            assert_eq!(
                r.expect("loris answered within the head timeout").status,
                408
            );
        }
        for c in idle.iter_mut() {
            assert!(c.closed_within(Duration::from_secs(3)).await);
        }
        // The stalled PUT's append is abandoned; none of its bytes are committed.
        drop(stalled);
        let r = get(&b, "/a/journal").await;
        assert!(r.text().starts_with("0,1,") && !r.text().contains("part"));
    })
    .await;
}

/// gRPC and HTTP clients at once on the same port, on every core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_http_mixed_under_load() {
    within(60, async {
        let b = Broker::start(&["--tpc.cores", "2"]).await;
        let ch = b.connect().await;
        let names: Vec<String> = (0..4).map(|i| format!("mixed/j{i}")).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        create_journals(&ch, &refs).await;
        let port = b.port();
        let mut tasks = Vec::new();
        for (w, name) in names.iter().enumerate() {
            let name = name.clone();
            let ch = b.connect().await;
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    grpc_append(&ch, &name, &[b'g'; 100]).await;
                    let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                    let body = [b'h'; 50];
                    let head = format!(
                        "PUT /{name} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    c.write_all(head.as_bytes()).await.unwrap();
                    c.write_all(&body).await.unwrap();
                    let mut out = Vec::new();
                    c.read_to_end(&mut out).await.unwrap();
                    assert!(
                        out.starts_with(b"HTTP/1.1 204"),
                        "worker {w} round {i}: {}",
                        String::from_utf8_lossy(&out)
                    );
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let m = metrics(&b).await;
        for name in &names {
            let r = get(&b, &format!("/{name}")).await;
            assert_eq!(r.body.len(), 25 * 150);
            assert_eq!(
                metric(
                    &m,
                    &format!("gazette_append_bytes_total{{journal=\"{name}\"}}")
                ),
                (25 * 150) as f64
            );
        }
        // Both cores served RPCs.
        for core in 0..2 {
            let n: f64 = m
                .iter()
                .filter(|(k, _)| {
                    k.starts_with(&format!("courant_core_rpcs_total{{core=\"{core}\""))
                })
                .map(|(_, v)| v)
                .sum();
            assert!(n > 0.0, "core {core} served nothing: {m:?}");
        }
    })
    .await;
}

// ------------------------------------------------------------------------------------------
// Operations: shutdown, print-config, log format.
// ------------------------------------------------------------------------------------------

/// A broker started as a direct child (not through the harness), so a test can signal it
/// and read its exit status; returns it with its port, data dir and a connected channel.
async fn spawn_signalable_broker() -> (
    tokio::process::Child,
    u16,
    tempfile::TempDir,
    courant_tests::protocol::grpc::Channel,
) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(courant_bin())
        .args([
            "serve",
            "--broker.bind",
            "127.0.0.1",
            "--broker.host",
            "127.0.0.1",
        ])
        .args(["--broker.port", &port.to_string()])
        .arg("--data-dir")
        .arg(dir.path())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let tcp = loop {
        if let Ok(t) = TcpStream::connect(("127.0.0.1", port)).await {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (ch, conn) = courant_tests::protocol::grpc::Channel::handshake(tcp, "x")
        .await
        .unwrap();
    tokio::spawn(conn);
    (child, port, dir, ch)
}

/// SIGTERM: blocked reads (gRPC and HTTP) end cleanly, the listener closes, exit code 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_reads_and_exits_zero() {
    within(40, async {
        let (mut child, port, _dir, ch) = spawn_signalable_broker().await;
        create_journals(&ch, &["a/journal"]).await;
        grpc_append(&ch, "a/journal", b"data").await;
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
        let mut reader: Streamed<ReadResponse> = Streamed::new(call);
        reader.next().await.unwrap().unwrap(); // metadata
        assert_eq!(reader.next().await.unwrap().unwrap().content, b"data"[..]);
        let mut http = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        http.write_all(b"GET /a/journal?block=true&offset=4 HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;

        let pid = child.id().unwrap() as i32;
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc_kill(pid, 15) }, 0);
        // The blocked gRPC read ends with a clean EOF.
        let end = tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .expect("read ended after SIGTERM");
        assert!(matches!(end, Ok(None)), "{end:?}");
        let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
            .await
            .expect("exited after SIGTERM")
            .unwrap();
        assert_eq!(status.code(), Some(0));
        let mut rest = Vec::new();
        let _ = http.read_to_end(&mut rest).await;
        assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
    })
    .await;
}

/// SIGTERM during an append: the append still commits (within the grace bound), new
/// connections are refused meanwhile, then the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_inflight_appends_finish() {
    within(40, async {
        let (mut child, port, _dir, ch) = spawn_signalable_broker().await;
        create_journals(&ch, &["a/journal"]).await;
        let mut call = ch.call(APPEND).await.unwrap();
        call.sender
            .send(&AppendRequest {
                journal: "a/journal".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        call.sender
            .send(&AppendRequest {
                content: Bytes::from_static(b"in flight"),
                ..Default::default()
            })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;

        let pid = child.id().unwrap() as i32;
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc_kill(pid, 15) }, 0);
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Draining: the listener is closed, the process still runs.
        assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
        assert!(child.try_wait().unwrap().is_none());
        call.sender.send(&AppendRequest::default()).await.unwrap();
        call.sender.close().unwrap();
        let resp = finish_unary_response::<courant_tests::protocol::AppendResponse>(&mut call)
            .await
            .expect("the in-flight append commits during shutdown");
        assert_status(resp.status, courant_tests::protocol::Status::Ok, "append");
        assert_eq!(resp.commit.unwrap().end, 9);
        let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
            .await
            .expect("exited after SIGTERM")
            .unwrap();
        assert_eq!(status.code(), Some(0));
    })
    .await;
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn print_config_merges_flags_env_and_defaults() {
    let out = std::process::Command::new(courant_bin())
        .args(["print-config", "--broker.port", "9999"])
        .env("BROKER_ZONE", "zone-from-env")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[broker]\n"), "{text}");
    assert!(text.contains("\nport = 9999\n"), "{text}");
    assert!(text.contains("\nzone = zone-from-env\n"), "{text}");
    assert!(
        text.contains("[log]\nlevel = info\nformat = text\n"),
        "{text}"
    );
    let etcd = text.split("[etcd]\n").nth(1).expect("an [etcd] section");
    let etcd = etcd.split("\n\n").next().unwrap_or_default();
    assert!(
        etcd.lines().any(|l| l == "prefix = /gazette/cluster"),
        "{text}"
    );
}

/// Gazette's precedence: the INI file, then env vars, then flags.
#[test]
fn ini_file_env_and_flags_in_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gazette.ini"),
        "; as print-config writes it\n[broker]\nport = 7777\nzone = ini-zone\nid = ini-id\n\n[Log]\nlevel = info\n[courant]\ndata-dir = /from/ini\nunknown = ignored\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(courant_bin())
            .arg("print-config")
            .args(args)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env("BROKER_ZONE", "env-zone")
            .env_remove("BROKER_PORT")
            .env_remove("BROKER_ID")
            .env_remove("LOG_LEVEL")
            .env_remove("COURANT_DATA_DIR")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&[]);
    for want in [
        "\nport = 7777\n",
        "\nzone = env-zone\n",
        "\nid = ini-id\n",
        "[log]\nlevel = info\n",
        "\ndata-dir = /from/ini\n",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    let text = run(&["--broker.port", "9999", "--broker.zone", "flag-zone"]);
    assert!(text.contains("\nport = 9999\n") && text.contains("\nzone = flag-zone\n"));
    // A malformed file is an error, not silently skipped.
    std::fs::write(dir.path().join("gazette.ini"), "[broker\n").unwrap();
    let out = std::process::Command::new(courant_bin())
        .arg("print-config")
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unterminated section"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs() {
    within(30, async {
        let b = Broker::start(&["--log.format", "json", "--log.level", "info"]).await;
        let _ = get(&b, "/debug/ready").await;
        let logs = b.stderr();
        let lines: Vec<&str> = logs.lines().filter(|l| !l.is_empty()).collect();
        assert!(!lines.is_empty());
        for l in lines {
            assert!(l.starts_with('{') && l.ends_with('}'), "not JSON: {l}");
            assert!(l.contains("\"level\":\"INFO\""), "{l}");
        }
    })
    .await;
}
