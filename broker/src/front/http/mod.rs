//! HTTP/1.1 on the broker's port: `/debug/ready`, `/debug/metrics`, the `/v1/` JSON routes
//! (`v1.rs`) and the `/` gateway.
//!
//! Lives on: the core that accepted the connection (glommio). `server::serve_connection`
//! sniffs each connection's first bytes: the HTTP/2 preface goes to gRPC, anything else
//! comes here with the bytes already read. Journal-scoped work (the gateway's Read and
//! Append) runs on the journal's owner core through the same calls gRPC uses
//! ([`crate::front::dispatch::start_journal_call`]).
//!
//! Every connection is bounded in time and memory, so a slow or malformed client costs
//! only its own connection: a head must arrive whole within [`HEAD_TIMEOUT`] and fit in
//! [`parse::MAX_HEAD_BYTES`]; an idle keep-alive connection is closed after
//! [`IDLE_TIMEOUT`]; each body read and each write must progress within [`IO_TIMEOUT`].

pub mod gateway;
pub mod gateway_auth;
pub mod json;
pub mod parse;
pub mod v1;

use crate::core::Core;
use bytes::{Buf, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt, future};
use parse::{BodyKind, Head, ParseError};
use std::io;
use std::rc::Rc;
use std::time::Duration;

/// Time allowed for a request head to arrive once its connection is ready for one.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a keep-alive connection may sit idle between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed for each body read or response write to make progress.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request body read into one Append chunk.
const BODY_CHUNK: usize = 64 << 10;
/// Largest body of a request we do not use that we drain to keep the connection.
const MAX_DRAIN: u64 = 1 << 20;

/// A connection's byte stream: a glommio socket, or TLS over one.
pub trait Io: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> Io for T {}

/// One HTTP/1.x connection: the socket and the bytes read but not yet consumed.
pub struct Conn {
    stream: Box<dyn Io>,
    buf: BytesMut,
    eof: bool,
}

/// The state of a request's body as the handler consumes it.
pub struct Body {
    kind: BodyKind,
    /// Bytes left of a `Content-Length` body, or of the current chunk of a chunked one.
    remaining: u64,
    done: bool,
    /// The client sent `Expect: 100-continue` and waits for our interim response before
    /// sending the body; it is sent on the first read of the body, as Go's net/http does.
    continue_pending: bool,
}

impl Body {
    fn new(kind: BodyKind, expect_continue: bool) -> Self {
        Body {
            kind,
            remaining: match kind {
                BodyKind::Length(n) => n,
                _ => 0,
            },
            done: kind == BodyKind::None,
            continue_pending: expect_continue && kind != BodyKind::None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }
}

#[derive(Debug)]
pub enum ConnError {
    Io(io::Error),
    Timeout,
    Closed,
    Parse(ParseError),
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Io(e) => write!(f, "{e}"),
            ConnError::Timeout => f.write_str("timed out"),
            ConnError::Closed => f.write_str("connection closed"),
            ConnError::Parse(e) => write!(f, "{e}"),
        }
    }
}

async fn with_timeout<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, ConnError>>,
) -> Result<T, ConnError> {
    crate::time::within(limit, fut, || Err(ConnError::Timeout)).await
}

impl Conn {
    /// Reads more bytes into the buffer; `Closed` at EOF.
    async fn fill(&mut self) -> Result<(), ConnError> {
        if self.eof {
            return Err(ConnError::Closed);
        }
        let mut chunk = [0u8; 16 << 10];
        let n = self.stream.read(&mut chunk).await.map_err(ConnError::Io)?;
        if n == 0 {
            self.eof = true;
            return Err(ConnError::Closed);
        }
        self.buf
            .extend_from_slice(chunk.get(..n).unwrap_or_default());
        Ok(())
    }

    /// Reads the next request head. `Ok(None)` is a clean close between requests.
    async fn read_head(&mut self, first: bool) -> Result<Option<Head>, ConnError> {
        if self.buf.is_empty() {
            let idle = if first { HEAD_TIMEOUT } else { IDLE_TIMEOUT };
            match with_timeout(idle, self.fill()).await {
                Ok(()) => {}
                Err(ConnError::Closed) => return Ok(None),
                // An idle keep-alive connection that times out is closed silently.
                Err(ConnError::Timeout) if !first => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        with_timeout(HEAD_TIMEOUT, async {
            loop {
                if let Some((head, used)) =
                    parse::parse_head(&self.buf).map_err(ConnError::Parse)?
                {
                    self.buf.advance(used);
                    return Ok(Some(head));
                }
                self.fill().await?;
            }
        })
        .await
    }

    /// The next piece of the request body, at most `max` bytes; `None` at its end.
    pub async fn body_chunk(
        &mut self,
        body: &mut Body,
        max: usize,
    ) -> Result<Option<Bytes>, ConnError> {
        with_timeout(IO_TIMEOUT, self.body_chunk_inner(body, max)).await
    }

    async fn body_chunk_inner(
        &mut self,
        body: &mut Body,
        max: usize,
    ) -> Result<Option<Bytes>, ConnError> {
        if body.continue_pending {
            body.continue_pending = false;
            self.stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(ConnError::Io)?;
        }
        loop {
            if body.done {
                return Ok(None);
            }
            if body.remaining > 0 {
                if self.buf.is_empty() {
                    self.fill().await?;
                }
                let n = (body.remaining.min(max as u64) as usize).min(self.buf.len());
                body.remaining -= n as u64;
                let data = self.buf.split_to(n).freeze();
                if body.remaining == 0 {
                    match body.kind {
                        BodyKind::Chunked => self.expect_crlf().await?,
                        _ => body.done = true,
                    }
                }
                return Ok(Some(data));
            }
            match body.kind {
                BodyKind::Chunked => {
                    let (size, used) = loop {
                        match parse::parse_chunk_line(&self.buf).map_err(ConnError::Parse)? {
                            Some(line) => break line,
                            None => self.fill().await?,
                        }
                    };
                    self.buf.advance(used);
                    if size == 0 {
                        self.skip_trailers().await?;
                        body.done = true;
                        return Ok(None);
                    }
                    body.remaining = size;
                }
                _ => {
                    body.done = true;
                    return Ok(None);
                }
            }
        }
    }

    async fn expect_crlf(&mut self) -> Result<(), ConnError> {
        while self.buf.len() < 2 {
            self.fill().await?;
        }
        if self.buf.starts_with(b"\r\n") {
            self.buf.advance(2);
            Ok(())
        } else {
            Err(ConnError::Parse(ParseError::Malformed(
                "chunk data not followed by CRLF",
            )))
        }
    }

    /// Skips the trailer section of a chunked body (bounded like a head).
    async fn skip_trailers(&mut self) -> Result<(), ConnError> {
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let empty = nl == 0 || (nl == 1 && self.buf.first() == Some(&b'\r'));
                self.buf.advance(nl + 1);
                if empty {
                    return Ok(());
                }
                continue;
            }
            if self.buf.len() > parse::MAX_HEAD_BYTES {
                return Err(ConnError::Parse(ParseError::HeadTooLarge));
            }
            self.fill().await?;
        }
    }

    /// Discards the rest of a body we do not use; `false` if the connection must close.
    async fn drain(&mut self, body: &mut Body) -> bool {
        if body.continue_pending {
            // The client has not sent the body it asked to send: close rather than invite it.
            return false;
        }
        let mut drained: u64 = 0;
        while !body.done {
            match self.body_chunk(body, BODY_CHUNK).await {
                Ok(Some(data)) => {
                    drained += data.len() as u64;
                    if drained > MAX_DRAIN {
                        return false;
                    }
                }
                Ok(None) => break,
                Err(_) => return false,
            }
        }
        true
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> Result<(), ConnError> {
        with_timeout(IO_TIMEOUT, async {
            self.stream.write_all(bytes).await.map_err(ConnError::Io)
        })
        .await
    }

    /// Resolves when the client closes its side (or sends more than a head's worth of
    /// pipelined bytes while a response streams). Bytes read are kept for the next request.
    pub async fn closed(&mut self) {
        while self.buf.len() <= parse::MAX_HEAD_BYTES {
            if self.fill().await.is_err() {
                return;
            }
        }
        future::pending::<()>().await
    }
}

/// A response head under construction, written in Go's `net/http` style.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
        }
    }

    pub fn header(&mut self, name: &str, value: impl Into<String>) -> &mut Self {
        // Header values come from journal names and error texts: never let them break
        // the framing.
        // Go's net/http also trims values on the wire (the route token's trailing space).
        let value: String = value
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        self.headers
            .push((name.to_string(), value.trim().to_string()));
        self
    }

    fn head_bytes(&self, minor_version: u8) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.{minor_version} {} {}\r\n",
            self.status,
            reason(self.status)
        );
        for (k, v) in &self.headers {
            out.push_str(k);
            out.push_str(": ");
            out.push_str(v);
            out.push_str("\r\n");
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        409 => "Conflict",
        429 => "Too Many Requests",
        501 => "Not Implemented",
        504 => "Gateway Timeout",
        204 => "No Content",
        206 => "Partial Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        416 => "Requested Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// What a handler tells the connection loop.
pub enum Outcome {
    /// The response is complete and the connection may serve another request.
    KeepAlive,
    /// Close the connection after this response.
    Close,
}

/// A request in flight: its head, body and connection, with the helpers handlers use to
/// answer it.
pub struct Exchange<'a> {
    pub core: &'a Rc<Core>,
    pub head: Head,
    pub body: Body,
    pub conn: &'a mut Conn,
    /// Whether the connection stays open after this response.
    pub keep_alive: bool,
    pub listener: Listener,
}

impl Exchange<'_> {
    /// Writes a complete response with `body` (Content-Length framing). HEAD requests get
    /// the headers only.
    pub async fn respond(&mut self, mut resp: Response, body: &[u8]) -> Outcome {
        resp.header("Content-Length", body.len().to_string());
        self.finish_head(&mut resp);
        let mut bytes = resp.head_bytes(self.head.minor_version);
        if self.head.method != "HEAD" {
            bytes.extend_from_slice(body);
        }
        if self.conn.write_all(&bytes).await.is_err() {
            return Outcome::Close;
        }
        self.outcome()
    }

    /// Writes a response that has no body at all (204).
    pub async fn respond_no_body(&mut self, mut resp: Response) -> Outcome {
        self.finish_head(&mut resp);
        let bytes = resp.head_bytes(self.head.minor_version);
        if self.conn.write_all(&bytes).await.is_err() {
            return Outcome::Close;
        }
        self.outcome()
    }

    /// Go's `http.Error`: a plain-text body of `msg` and a newline.
    pub async fn error(&mut self, mut resp: Response, msg: &str) -> Outcome {
        resp.header("Content-Type", "text/plain; charset=utf-8");
        resp.header("X-Content-Type-Options", "nosniff");
        self.respond(resp, format!("{msg}\n").as_bytes()).await
    }

    fn finish_head(&mut self, resp: &mut Response) {
        resp.header("Date", http_date(std::time::SystemTime::now()));
        if !self.keep_alive {
            resp.header("Connection", "close");
        }
    }

    fn outcome(&self) -> Outcome {
        if self.keep_alive {
            Outcome::KeepAlive
        } else {
            Outcome::Close
        }
    }

    /// Starts a streamed response: chunked on HTTP/1.1, close-delimited on HTTP/1.0.
    pub async fn start_stream(&mut self, mut resp: Response) -> Result<(), ConnError> {
        if self.head.minor_version == 0 {
            self.keep_alive = false;
        } else {
            resp.header("Transfer-Encoding", "chunked");
        }
        self.finish_head(&mut resp);
        let bytes = resp.head_bytes(self.head.minor_version);
        self.conn.write_all(&bytes).await
    }

    pub async fn stream_chunk(&mut self, data: &[u8]) -> Result<(), ConnError> {
        if data.is_empty() {
            return Ok(());
        }
        if self.head.minor_version == 0 {
            return self.conn.write_all(data).await;
        }
        let mut bytes = format!("{:x}\r\n", data.len()).into_bytes();
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(b"\r\n");
        self.conn.write_all(&bytes).await
    }

    /// Ends a streamed response with trailers (HTTP/1.1 only).
    pub async fn end_stream(&mut self, trailers: &[(&str, String)]) -> Outcome {
        if self.head.minor_version == 0 {
            return Outcome::Close;
        }
        let mut bytes = b"0\r\n".to_vec();
        for (k, v) in trailers {
            let v: String = v
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            bytes.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        bytes.extend_from_slice(b"\r\n");
        if self.conn.write_all(&bytes).await.is_err() {
            return Outcome::Close;
        }
        self.outcome()
    }
}

/// Serves HTTP/1.x requests on `stream` until the client closes, errs or times out.
/// `initial` holds the bytes already read while sniffing the protocol.
pub async fn serve(core: Rc<Core>, stream: Box<dyn Io>, initial: BytesMut) {
    serve_on(core, stream, initial, Listener::Main).await
}

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The broker's port: `/debug/*` (unless `--debug.private`) and the gateway.
    Main,
    /// `--debug.port`: `/debug/*` only.
    Debug,
}

pub async fn serve_on(core: Rc<Core>, stream: Box<dyn Io>, initial: BytesMut, listener: Listener) {
    let mut conn = Conn {
        stream,
        buf: initial,
        eof: false,
    };
    let mut first = true;
    loop {
        let head = match conn.read_head(first).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(err) => {
                reject(&mut conn, &err).await;
                return;
            }
        };
        first = false;
        let kind = match head.body_kind() {
            Ok(kind) => kind,
            Err(err) => {
                reject(&mut conn, &ConnError::Parse(err)).await;
                return;
            }
        };
        let keep_alive = head.keep_alive() && !crate::shutdown::is_stopping();
        let expect_continue = head.minor_version == 1
            && head
                .header("expect")
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        let mut exchange = Exchange {
            core: &core,
            head,
            body: Body::new(kind, expect_continue),
            conn: &mut conn,
            keep_alive,
            listener,
        };
        crate::metrics::rpc_started("HTTP");
        let outcome = route(&mut exchange).await;
        crate::metrics::rpc_completed("HTTP", matches!(outcome, Outcome::KeepAlive));
        let mut body = exchange.body;
        if matches!(outcome, Outcome::Close) || !conn.drain(&mut body).await {
            return;
        }
    }
}

/// Answers a request we could not parse, then the connection closes.
async fn reject(conn: &mut Conn, err: &ConnError) {
    let (status, msg) = match err {
        ConnError::Parse(e) => (e.status(), e.to_string()),
        ConnError::Timeout => (408, "request timed out".to_string()),
        ConnError::Io(_) | ConnError::Closed => return,
    };
    tracing::debug!(%err, "rejecting HTTP request");
    let body = format!("{msg}\n");
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        reason(status),
        body.len()
    );
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.write_all(body.as_bytes()).await;
}

async fn route(ex: &mut Exchange<'_>) -> Outcome {
    let debug = match ex.listener {
        Listener::Debug => true,
        // As Gazette with `--debug.private`: `/debug/*` on the main port is the gateway's.
        Listener::Main => !ex.core.cfg.debug_private,
    };
    if ex.listener == Listener::Debug && !ex.head.path().starts_with("/debug/") {
        return ex.error(Response::new(404), "404 page not found").await;
    }
    if ex.listener == Listener::Main && ex.head.path().starts_with("/v1/") {
        // As Gazette's mux: all of `/v1/` belongs to the grpc-gateway routes.
        return v1::serve(ex).await;
    }
    if !debug {
        return gateway::serve(ex).await;
    }
    match ex.head.path() {
        "/debug/ready" => {
            let mut resp = Response::new(200);
            resp.header("Content-Type", "text/plain; charset=utf-8");
            ex.respond(resp, b"").await
        }
        "/debug/metrics" => {
            let text = crate::metrics::render();
            let mut resp = Response::new(200);
            resp.header("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            ex.respond(resp, text.as_bytes()).await
        }
        _ => gateway::serve(ex).await,
    }
}

/// Formats `t` as an HTTP date (RFC 9110 IMF-fixdate), as Go's `http.TimeFormat`.
pub fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    http_date_unix(secs)
}

/// Formats `secs` since the Unix epoch as an HTTP date (a time chrono cannot represent
/// prints as the epoch).
pub fn http_date_unix(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap_or_default()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_dates_match_go() {
        // From Gazette's http_gateway_test: ModTime 12345678.
        assert_eq!(
            super::http_date_unix(12_345_678),
            "Sat, 23 May 1970 21:21:18 GMT"
        );
        assert_eq!(super::http_date_unix(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            super::http_date_unix(1_709_251_200),
            "Fri, 01 Mar 2024 00:00:00 GMT"
        );
    }
}
