//! gRPC framing over `h2`, shared by the broker's server and Courant's own client.
//!
//! gRPC on HTTP/2 is simple: each message is a 5-byte prefix (a compressed flag and a
//! big-endian u32 length) followed by the protobuf body; the outcome travels in trailers
//! (`grpc-status`, percent-encoded `grpc-message`), or in a single HEADERS frame with
//! END_STREAM when a call fails before any message ("Trailers-Only").
//!
//! Nothing here spawns tasks or touches a socket: the caller owns the transport and drives
//! the h2 connection future on whatever executor it runs (glommio in the broker, tokio in
//! the load generator and the tests).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::{RecvStream, SendStream};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use std::fmt;
use std::future::poll_fn;
use std::time::Duration;

/// Default of `--broker.max-grpc-recv-size`: the largest message a peer may send us.
pub const DEFAULT_MAX_RECV_SIZE: usize = 4 << 20;
/// The largest message Courant's client accepts (Gazette's Go clients use 16 MiB).
pub const CLIENT_MAX_RECV_SIZE: usize = 16 << 20;

/// gRPC status codes (the subset plus the rest, numbered as the gRPC spec does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    /// Maps a wire value to a code; values outside the spec become `Unknown`.
    pub fn from_u32(v: u32) -> Code {
        use Code::*;
        [
            Ok,
            Cancelled,
            Unknown,
            InvalidArgument,
            DeadlineExceeded,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            ResourceExhausted,
            FailedPrecondition,
            Aborted,
            OutOfRange,
            Unimplemented,
            Internal,
            Unavailable,
            DataLoss,
            Unauthenticated,
        ]
        .get(v as usize)
        .copied()
        .unwrap_or(Unknown)
    }
}

/// A failed RPC: a gRPC status code and a message a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: Code,
    pub message: String,
}

impl RpcError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
    /// Gazette returns plain Go errors, which gRPC reports as `Unknown` with the error text.
    pub fn unknown(message: impl Into<String>) -> Self {
        Self::new(Code::Unknown, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }
    pub fn cancelled() -> Self {
        Self::new(Code::Cancelled, "context canceled")
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Code::Unavailable, message)
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rpc error: code = {:?} desc = {}",
            self.code, self.message
        )
    }
}

impl std::error::Error for RpcError {}

impl From<h2::Error> for RpcError {
    fn from(err: h2::Error) -> Self {
        if err.is_reset() && err.reason() == Some(h2::Reason::CANCEL) {
            return RpcError::cancelled();
        }
        RpcError::unavailable(format!("transport: {err}"))
    }
}

/// Encodes `msg` as one length-prefixed gRPC frame.
pub fn encode_frame<M: prost::Message>(msg: &M) -> Bytes {
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    msg.encode(&mut buf)
        .expect("BytesMut grows as needed, so encoding cannot run out of room");
    buf.freeze()
}

/// Decodes a protobuf message from a frame body, as a clear `INVALID_ARGUMENT` on failure.
pub fn decode_message<M: prost::Message + Default>(body: Bytes) -> Result<M, RpcError> {
    M::decode(body).map_err(|err| {
        RpcError::new(
            Code::Internal,
            format!("grpc: failed to unmarshal the received message: {err}"),
        )
    })
}

/// How many received chunks a frame spread over several may keep queued before they are
/// copied into the decoder's buffer. A chunk is a slice of the connection's read buffer,
/// so queuing them unbounded would let a peer sending one-byte DATA frames hold many
/// times a message's size (each chunk's handle, and the buffers it keeps alive); 32 keeps
/// a 300 KB message in Gazette's 16 KiB frames to one copy.
const MAX_QUEUED_CHUNKS: usize = 32;

/// Reassembles gRPC frames from arbitrary chunks of an HTTP/2 DATA stream.
///
/// It never panics on input: a compressed flag, a bad flag byte or an oversized length
/// becomes an error, and a frame that arrived whole within one chunk is returned as a
/// slice of that chunk (no copy).
#[derive(Debug)]
pub struct FrameDecoder {
    max_len: usize,
    buf: BytesMut,
    chunks: std::collections::VecDeque<Bytes>,
    /// Bytes held in `chunks`.
    queued: usize,
}

impl FrameDecoder {
    pub fn new(max_len: usize) -> Self {
        FrameDecoder {
            max_len,
            buf: BytesMut::new(),
            chunks: Default::default(),
            queued: 0,
        }
    }

    /// Adds a received DATA chunk.
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.queued += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// Bytes buffered but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.queued
    }

    /// Returns the next complete frame body, `Ok(None)` if more input is needed.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, RpcError> {
        // Fast path: nothing carried over and the first chunk holds a whole frame.
        if self.buf.is_empty()
            && let Some(front) = self.chunks.front_mut()
            && front.len() >= 5
        {
            let len = Self::check_prefix(self.max_len, &front[..5])?;
            if front.len() >= 5 + len {
                let mut frame = front.split_to(5 + len);
                self.queued -= frame.len();
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                frame.advance(5);
                return Ok(Some(frame));
            }
        }
        // Slow path: a frame spread over several chunks. Its prefix is gathered first; its
        // body is copied only once every byte of it has arrived, into a buffer of exactly its
        // size (one allocation and one copy, where copying each chunk as it came would
        // reallocate and copy again as the buffer grew). Until then the chunks stay queued
        // (the same bytes, already in memory), at most `MAX_QUEUED_CHUNKS` of them.
        loop {
            if self.buf.len() >= 5 {
                let len = Self::check_prefix(self.max_len, &self.buf[..5])?;
                if self.buf.len() >= 5 + len {
                    let mut frame = self.buf.split_to(5 + len);
                    frame.advance(5);
                    return Ok(Some(frame.freeze()));
                }
                // Take only what this frame needs, leaving the rest of the chunk queued.
                let need = 5 + len - self.buf.len();
                if self.queued < need {
                    if self.chunks.len() > MAX_QUEUED_CHUNKS {
                        self.buf.reserve(self.queued);
                        self.take_into_buf(self.queued);
                    }
                    return Ok(None);
                }
                self.buf.reserve(need);
                self.take_into_buf(need);
            } else if !self.take_into_buf(5 - self.buf.len()) {
                return Ok(None);
            }
        }
    }

    fn take_into_buf(&mut self, mut need: usize) -> bool {
        let mut took = false;
        while need > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let n = need.min(front.len());
            self.buf.extend_from_slice(&front[..n]);
            front.advance(n);
            self.queued -= n;
            if front.is_empty() {
                self.chunks.pop_front();
            }
            need -= n;
            took = true;
        }
        took
    }

    fn check_prefix(max_len: usize, prefix: &[u8]) -> Result<usize, RpcError> {
        match prefix[0] {
            0 => {}
            1 => {
                return Err(RpcError::new(
                    Code::Unimplemented,
                    "grpc: compressed messages are not supported; send with identity encoding",
                ));
            }
            flag => {
                return Err(RpcError::new(
                    Code::Internal,
                    format!("grpc: invalid message flag {flag:#x} in frame prefix"),
                ));
            }
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > max_len {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!("grpc: received message larger than max ({len} vs. {max_len})"),
            ));
        }
        Ok(len)
    }
}

/// Percent-encodes a `grpc-message` value as the gRPC spec requires.
pub fn encode_grpc_message(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for b in msg.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reverses [`encode_grpc_message`], leniently (bad escapes are kept verbatim).
pub fn decode_grpc_message(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(hi), Some(lo)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a `grpc-timeout` header value ("<1-8 digits><H|M|S|m|u|n>").
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit[0] {
        b'H' => Duration::from_secs(n.checked_mul(3600)?),
        b'M' => Duration::from_secs(n.checked_mul(60)?),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Reads the outcome of a call from trailers (or Trailers-Only headers).
pub fn status_from_headers(headers: &HeaderMap) -> Option<Result<(), RpcError>> {
    let status = headers.get("grpc-status")?;
    let code = std::str::from_utf8(status.as_bytes())
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .map(Code::from_u32)
        .unwrap_or(Code::Unknown);
    if code == Code::Ok {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|v| decode_grpc_message(v.as_bytes()))
        .unwrap_or_default();
    Some(Err(RpcError::new(code, message)))
}

/// Response header names and values, built once rather than parsed per call.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");
const APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
const IDENTITY: HeaderValue = HeaderValue::from_static("identity");

fn status_headers(map: &mut HeaderMap, outcome: &Result<(), RpcError>) {
    let (code, message) = match outcome {
        Ok(()) => (0u32, None),
        Err(err) => (err.code as u32, Some(encode_grpc_message(&err.message))),
    };
    map.insert(GRPC_STATUS, HeaderValue::from(code));
    if let Some(message) = message
        && let Ok(v) = HeaderValue::from_str(&message)
    {
        map.insert(GRPC_MESSAGE, v);
    }
}

/// Receives the DATA stream of one call and yields decoded messages.
pub struct Inbound {
    recv: RecvStream,
    decoder: FrameDecoder,
    eof: bool,
}

impl Inbound {
    pub fn new(recv: RecvStream, max_len: usize) -> Self {
        Inbound {
            recv,
            decoder: FrameDecoder::new(max_len),
            eof: false,
        }
    }

    /// The next frame body, or `None` at a clean end of stream.
    pub async fn next_frame(&mut self) -> Result<Option<Bytes>, RpcError> {
        loop {
            if let Some(frame) = self.decoder.next_frame()? {
                return Ok(Some(frame));
            }
            if self.eof {
                if self.decoder.buffered() != 0 {
                    return Err(RpcError::new(
                        Code::Internal,
                        "grpc: stream ended inside a message (truncated frame)",
                    ));
                }
                return Ok(None);
            }
            match self.recv.data().await {
                Some(Ok(chunk)) => {
                    // Return flow-control credit at once; our bound is max_len per message.
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    self.decoder.push(chunk);
                }
                Some(Err(err)) => return Err(err.into()),
                None => self.eof = true,
            }
        }
    }

    /// The next decoded message, or `None` at a clean end of stream.
    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, RpcError> {
        match self.next_frame().await? {
            Some(body) => decode_message(body).map(Some),
            None => Ok(None),
        }
    }

    /// Trailers sent by the peer after its last DATA frame (client side).
    pub async fn trailers(&mut self) -> Result<Option<HeaderMap>, RpcError> {
        Ok(self.recv.trailers().await?)
    }
}

/// Sends frames on one HTTP/2 stream, honouring the peer's flow-control window so that a
/// slow reader exerts backpressure instead of growing an unbounded send buffer.
pub struct FrameSender {
    send: SendStream<Bytes>,
}

impl FrameSender {
    pub fn new(send: SendStream<Bytes>) -> Self {
        FrameSender { send }
    }

    pub async fn send_frame(&mut self, mut frame: Bytes, end_stream: bool) -> Result<(), RpcError> {
        while !frame.is_empty() {
            self.send.reserve_capacity(frame.len());
            let mut cap = self.send.capacity();
            while cap == 0 {
                match poll_fn(|cx| self.send.poll_capacity(cx)).await {
                    Some(Ok(n)) => cap = n,
                    Some(Err(err)) => return Err(err.into()),
                    None => return Err(RpcError::cancelled()),
                }
            }
            let n = cap.min(frame.len());
            let chunk = frame.split_to(n);
            let last = frame.is_empty() && end_stream;
            self.send.send_data(chunk, last)?;
        }
        if end_stream && frame.is_empty() {
            // `frame` was empty from the start: close with an empty DATA frame.
            // (send_data with an empty chunk and end_stream is legal in HTTP/2.)
        }
        Ok(())
    }

    pub async fn send<M: prost::Message>(&mut self, msg: &M) -> Result<(), RpcError> {
        self.send_frame(encode_frame(msg), false).await
    }

    /// Abandons the stream (RST_STREAM CANCEL): the peer sees the call cancelled.
    pub fn cancel(&mut self) {
        self.send.send_reset(h2::Reason::CANCEL);
    }

    /// Half-closes the stream (client side: "no more requests").
    pub fn close(&mut self) -> Result<(), RpcError> {
        self.send.send_data(Bytes::new(), true)?;
        Ok(())
    }

    pub fn send_trailers(&mut self, outcome: &Result<(), RpcError>) -> Result<(), RpcError> {
        let mut map = HeaderMap::new();
        status_headers(&mut map, outcome);
        self.send.send_trailers(map)?;
        Ok(())
    }

    /// Resolves when the peer resets the stream (e.g. the client cancelled).
    pub async fn reset(&mut self) -> h2::Reason {
        poll_fn(|cx| self.send.poll_reset(cx))
            .await
            .unwrap_or(h2::Reason::CANCEL)
    }
}

/// The parts of an incoming call that a server handler needs.
pub struct ServerCall {
    pub path: String,
    pub metadata: HeaderMap,
    /// From `grpc-timeout`, if the client set one.
    pub timeout: Option<Duration>,
    pub inbound: Inbound,
    pub outbound: Outbound,
}

impl ServerCall {
    pub fn new(
        req: Request<RecvStream>,
        respond: h2::server::SendResponse<Bytes>,
        max_recv: usize,
    ) -> Self {
        let (parts, body) = req.into_parts();
        let timeout = parts
            .headers
            .get("grpc-timeout")
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        ServerCall {
            path: parts.uri.path().to_string(),
            metadata: parts.headers,
            timeout,
            inbound: Inbound::new(body, max_recv),
            outbound: Outbound {
                respond,
                sender: None,
                headers: HeaderMap::new(),
            },
        }
    }

    /// Checks the request is gRPC we can serve (content-type and encoding).
    pub fn check_headers(&self) -> Result<(), RpcError> {
        let ct = self
            .metadata
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !ct.starts_with(b"application/grpc") {
            return Err(RpcError::new(
                Code::Unimplemented,
                "only gRPC (content-type application/grpc) is served on HTTP/2",
            ));
        }
        Ok(())
    }
}

/// The response half of a server call.
pub struct Outbound {
    respond: h2::server::SendResponse<Bytes>,
    sender: Option<FrameSender>,
    headers: HeaderMap,
}

impl Outbound {
    /// Adds a response header (initial metadata), sent with the first message or the
    /// Trailers-Only response. Has no effect once headers were sent.
    pub fn insert_header(&mut self, name: &'static str, value: HeaderValue) {
        self.headers.insert(name, value);
    }

    fn start(&mut self) -> Result<&mut FrameSender, RpcError> {
        if self.sender.is_none() {
            let mut resp = Response::new(());
            let headers = resp.headers_mut();
            headers.insert(CONTENT_TYPE, APPLICATION_GRPC);
            headers.insert(GRPC_ACCEPT_ENCODING, IDENTITY);
            headers.extend(std::mem::take(&mut self.headers));
            let send = self.respond.send_response(resp, false)?;
            self.sender = Some(FrameSender::new(send));
        }
        Ok(self.sender.as_mut().expect("set above"))
    }

    pub async fn send<M: prost::Message>(&mut self, msg: &M) -> Result<(), RpcError> {
        self.start()?.send(msg).await
    }

    pub async fn send_frame(&mut self, frame: Bytes) -> Result<(), RpcError> {
        self.start()?.send_frame(frame, false).await
    }

    /// Ends the call with `outcome`: trailers after messages, or Trailers-Only if none.
    pub fn finish(mut self, outcome: Result<(), RpcError>) {
        match self.sender.as_mut() {
            Some(sender) => {
                let _ = sender.send_trailers(&outcome);
            }
            None => {
                let mut resp = Response::new(());
                let h = resp.headers_mut();
                h.insert(CONTENT_TYPE, APPLICATION_GRPC);
                h.extend(std::mem::take(&mut self.headers));
                status_headers(h, &outcome);
                let _ = self.respond.send_response(resp, true);
            }
        }
    }

    /// Resolves when the client resets the stream.
    pub async fn cancelled(&mut self) {
        match self.sender.as_mut() {
            Some(s) => {
                s.reset().await;
            }
            None => {
                let _ = poll_fn(|cx| self.respond.poll_reset(cx)).await;
            }
        }
    }
}

/// A client connection: issues calls on one HTTP/2 connection.
#[derive(Clone)]
pub struct Channel {
    send_request: h2::client::SendRequest<Bytes>,
    authority: String,
    metadata: HeaderMap,
}

/// The client's side of one call in flight.
pub struct ClientCall {
    pub sender: FrameSender,
    pub responses: ClientResponses,
}

/// The response side of a client call: split from its [`FrameSender`] (see
/// [`ClientCall::split`]), one task may send while another reads.
pub struct ClientResponses {
    response: Option<h2::client::ResponseFuture>,
    inbound: Option<Inbound>,
    headers: Option<HeaderMap>,
    done: bool,
}

impl Channel {
    /// Performs the HTTP/2 handshake on `io`. The returned connection future must be
    /// polled (spawned) by the caller for the channel to make progress.
    pub async fn handshake<T>(
        io: T,
        authority: &str,
    ) -> Result<(Channel, h2::client::Connection<T, Bytes>), RpcError>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let (send_request, conn) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(8 << 20)
            .max_frame_size(256 << 10)
            .handshake(io)
            .await?;
        Ok((
            Channel {
                send_request,
                authority: authority.to_string(),
                metadata: HeaderMap::new(),
            },
            conn,
        ))
    }

    /// Adds a header sent with every call (e.g. `authorization`).
    pub fn with_metadata(mut self, name: &'static str, value: HeaderValue) -> Self {
        self.metadata.insert(name, value);
        self
    }

    /// Starts a call to `path` (e.g. "/protocol.Journal/Append").
    pub async fn call(&self, path: &str) -> Result<ClientCall, RpcError> {
        let mut sr = self.send_request.clone().ready().await?;
        let mut req = Request::builder()
            .method("POST")
            .uri(format!("http://{}{}", self.authority, path))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| RpcError::internal(format!("building request: {e}")))?;
        for (k, v) in self.metadata.iter() {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let (response, send) = sr.send_request(req, false)?;
        Ok(ClientCall {
            sender: FrameSender::new(send),
            responses: ClientResponses {
                response: Some(response),
                inbound: None,
                headers: None,
                done: false,
            },
        })
    }

    /// A unary call.
    pub async fn unary<Req: prost::Message, Resp: prost::Message + Default>(
        &self,
        path: &str,
        req: &Req,
    ) -> Result<Resp, RpcError> {
        let mut call = self.call(path).await?;
        // A server may answer (e.g. UNIMPLEMENTED) and reset before taking the request:
        // its status is the error to report, not the failed send.
        let sent = call.sender.send_frame(encode_frame(req), true).await;
        let resp = match call.next::<Resp>().await {
            Err(err) => return Err(err),
            Ok(resp) => {
                sent?;
                resp
            }
        };
        let resp =
            resp.ok_or_else(|| RpcError::internal("grpc: unary call returned no message"))?;
        // Drain to the trailers so a trailing error is not missed.
        if call.next::<Resp>().await?.is_some() {
            return Err(RpcError::internal("grpc: unary call returned two messages"));
        }
        Ok(resp)
    }

    /// A server-streaming call: sends `req` and half-closes.
    pub async fn server_streaming<Req: prost::Message>(
        &self,
        path: &str,
        req: &Req,
    ) -> Result<ClientCall, RpcError> {
        let mut call = self.call(path).await?;
        // A send that fails because the server already answered is reported by `next`.
        let _ = call.sender.send_frame(encode_frame(req), true).await;
        Ok(call)
    }
}

impl ClientCall {
    /// Response headers (initial metadata), once the first response has been awaited.
    pub fn response_headers(&self) -> Option<&HeaderMap> {
        self.responses.headers.as_ref()
    }

    /// The next response message; `Ok(None)` when the call ended with status OK.
    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, RpcError> {
        self.responses.next().await
    }

    /// The call's request side and response side, to be used apart.
    pub fn split(self) -> (FrameSender, ClientResponses) {
        (self.sender, self.responses)
    }
}

impl ClientResponses {
    /// The next response message; `Ok(None)` when the call ended with status OK.
    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, RpcError> {
        if self.done {
            return Ok(None);
        }
        if let Some(response) = self.response.as_mut() {
            // Awaited in place: if this future is dropped, the next call resumes waiting.
            let resp = response.await?;
            self.response = None;
            self.headers = Some(resp.headers().clone());
            if let Some(outcome) = status_from_headers(resp.headers()) {
                // Trailers-Only: the call ended without messages.
                self.done = true;
                return outcome.map(|()| None);
            }
            self.inbound = Some(Inbound::new(resp.into_body(), CLIENT_MAX_RECV_SIZE));
        }
        let inbound = self.inbound.as_mut().expect("set once headers arrive");
        match inbound.next::<M>().await? {
            Some(msg) => Ok(Some(msg)),
            None => {
                self.done = true;
                let trailers = inbound.trailers().await?.unwrap_or_default();
                match status_from_headers(&trailers) {
                    Some(outcome) => outcome.map(|()| None),
                    None => Err(RpcError::internal(
                        "grpc: stream ended without a grpc-status trailer",
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(flag: u8, body: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(flag);
        b.put_u32(body.len() as u32);
        b.extend_from_slice(body);
        b.freeze()
    }

    #[test]
    fn frames_split_across_chunks_are_reassembled() {
        let mut all = BytesMut::new();
        all.extend_from_slice(&frame(0, b"hello"));
        all.extend_from_slice(&frame(0, b""));
        all.extend_from_slice(&frame(0, b"world!"));
        let all = all.freeze();
        for split in 0..all.len() {
            let mut d = FrameDecoder::new(100);
            d.push(all.slice(..split));
            d.push(all.slice(split..));
            let mut got = vec![];
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
            assert_eq!(got, vec![&b"hello"[..], b"", b"world!"], "split {split}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn frames_over_many_chunks_wait_for_their_last_byte() {
        let bodies: Vec<Vec<u8>> = [7usize, 0, 40_000, 3, 70_001]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 31 % 251) as u8).collect())
            .collect();
        let mut all = BytesMut::new();
        for body in &bodies {
            all.extend_from_slice(&frame(0, body));
        }
        let all = all.freeze();
        // Chunk sizes from 1 byte up, as an HTTP/2 peer may split DATA anywhere.
        for step in [1usize, 2, 4, 5, 6, 1000, 16_384, 65_536] {
            let mut d = FrameDecoder::new(100_000);
            let (mut got, mut at) = (Vec::new(), 0);
            while at < all.len() {
                let end = (at + step).min(all.len());
                d.push(all.slice(at..end));
                at = end;
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
                // Everything received is accounted for: the frames returned, and what waits.
                let returned: usize = got.iter().map(|f| f.len() + 5).sum();
                assert_eq!(returned + d.buffered(), at, "step {step}");
                // Tiny chunks are not queued without bound.
                assert!(d.chunks.len() <= MAX_QUEUED_CHUNKS + 1, "step {step}");
            }
            assert_eq!(got, bodies, "step {step}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn bad_prefixes_are_errors_not_panics() {
        let mut d = FrameDecoder::new(4);
        d.push(frame(0, b"12345"));
        assert_eq!(d.next_frame().unwrap_err().code, Code::ResourceExhausted);
        let mut d = FrameDecoder::new(100);
        d.push(frame(1, b"x"));
        assert_eq!(d.next_frame().unwrap_err().code, Code::Unimplemented);
        let mut d = FrameDecoder::new(100);
        d.push(frame(7, b"x"));
        assert_eq!(d.next_frame().unwrap_err().code, Code::Internal);
        let mut d = FrameDecoder::new(100);
        d.push(Bytes::from_static(&[0, 0, 0]));
        assert_eq!(d.next_frame().unwrap(), None);
        assert_eq!(d.buffered(), 3);
    }

    #[test]
    fn grpc_message_round_trips() {
        for m in ["plain", "100% done", "✗ bad\nline", ""] {
            assert_eq!(decode_grpc_message(encode_grpc_message(m).as_bytes()), m);
        }
        assert_eq!(decode_grpc_message(b"50%"), "50%");
        assert_eq!(decode_grpc_message(b"%zz"), "%zz");
    }

    #[test]
    fn grpc_timeout_parses() {
        assert_eq!(parse_grpc_timeout(b"10S"), Some(Duration::from_secs(10)));
        assert_eq!(
            parse_grpc_timeout(b"250m"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout(b"S"), None);
        assert_eq!(parse_grpc_timeout(b"123456789S"), None);
        assert_eq!(parse_grpc_timeout(b"12x"), None);
    }
}
