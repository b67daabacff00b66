//! Raw HTTP/2, for sending frames no well-behaved client would send.

#[allow(unused_imports)]
use super::*;

/// A gRPC frame with an arbitrary compressed flag and declared length.
pub fn raw_frame(flag: u8, declared_len: u32, body: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + body.len());
    b.put_u8(flag);
    b.put_u32(declared_len);
    b.extend_from_slice(body);
    b.freeze()
}

/// A well-formed frame of an encoded message.
pub fn frame_of<M: prost::Message>(m: &M) -> Bytes {
    protocol::grpc::encode_frame(m)
}

/// What came back from a raw call.
#[derive(Debug)]
pub struct RawOutcome {
    pub headers: Option<http::HeaderMap>,
    pub messages: Vec<Bytes>,
    pub status: Result<(), RpcError>,
    /// When the outcome was complete (trailers or error received).
    pub at: Instant,
}

impl RawOutcome {
    /// Decodes the response messages as `M`.
    pub fn decode<M: prost::Message + Default>(&self) -> Vec<M> {
        self.messages
            .iter()
            .map(|b| M::decode(b.clone()).expect("decode response message"))
            .collect()
    }
}

/// One HTTP/2 stream on its own connection, driven by hand: send arbitrary DATA, reset
/// it, or drop the whole connection.
pub struct RawStream {
    pub send: h2::SendStream<Bytes>,
    response: Option<h2::client::ResponseFuture>,
    conn_task: tokio::task::JoinHandle<()>,
}

impl RawStream {
    /// Opens a connection and starts a call to `path` with gRPC request headers plus
    /// `extra` headers.
    pub async fn open(port: u16, path: &str, extra: &[(&str, &str)]) -> RawStream {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let _ = tcp.set_nodelay(true);
        let (send_request, conn) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(8 << 20)
            .handshake::<_, Bytes>(tcp)
            .await
            .expect("h2 handshake");
        let conn_task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut send_request = send_request.ready().await.expect("h2 ready");
        let mut builder = http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{port}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in extra {
            builder = builder.header(*k, *v);
        }
        let req = builder.body(()).expect("request");
        let (response, send) = send_request.send_request(req, false).expect("send_request");
        RawStream {
            send,
            response: Some(response),
            conn_task,
        }
    }

    /// Sends `data` as DATA frames (waiting for flow-control capacity), with END_STREAM
    /// on the last one if `end_stream`.
    pub async fn send_data(&mut self, data: Bytes, end_stream: bool) -> Result<(), h2::Error> {
        let mut rest = data;
        while !rest.is_empty() {
            self.send.reserve_capacity(rest.len());
            let cap = match std::future::poll_fn(|cx| self.send.poll_capacity(cx)).await {
                Some(r) => r?,
                None => return Err(h2::Error::from(h2::Reason::CANCEL)),
            };
            if cap == 0 {
                continue;
            }
            let chunk = rest.split_to(cap.min(rest.len()));
            self.send.send_data(chunk, rest.is_empty() && end_stream)?;
        }
        if end_stream {
            // Covers an empty `data`; after END_STREAM was sent this errors harmlessly.
            let _ = self.send.send_data(Bytes::new(), true);
        }
        Ok(())
    }

    /// Sends one encoded message.
    pub async fn send_msg<M: prost::Message>(&mut self, m: &M) -> Result<(), h2::Error> {
        self.send_data(frame_of(m), false).await
    }

    /// Resets the stream (RST_STREAM with `reason`).
    pub fn reset(&mut self, reason: h2::Reason) {
        self.send.send_reset(reason);
    }

    /// Drops the TCP connection abruptly.
    pub fn drop_connection(&self) {
        self.conn_task.abort();
    }

    /// Reads the response in a background task (so sending can continue meanwhile).
    pub fn spawn_response(&mut self) -> tokio::task::JoinHandle<RawOutcome> {
        let response = self.response.take().expect("response already taken");
        tokio::spawn(read_raw_response(response))
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        self.conn_task.abort();
    }
}

async fn read_raw_response(response: h2::client::ResponseFuture) -> RawOutcome {
    let done = |headers, messages, status| RawOutcome {
        headers,
        messages,
        status,
        at: Instant::now(),
    };
    let resp = match response.await {
        Ok(r) => r,
        Err(e) => return done(None, vec![], Err(RpcError::from(e))),
    };
    let headers = resp.headers().clone();
    if let Some(st) = protocol::grpc::status_from_headers(&headers) {
        return done(Some(headers), vec![], st);
    }
    let mut body = resp.into_body();
    let mut dec = FrameDecoder::new(protocol::grpc::CLIENT_MAX_RECV_SIZE);
    let mut messages = vec![];
    loop {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                dec.push(chunk);
                loop {
                    match dec.next_frame() {
                        Ok(Some(f)) => messages.push(f),
                        Ok(None) => break,
                        Err(e) => {
                            let e = RpcError::internal(format!(
                                "test client: bad response framing: {e}"
                            ));
                            return done(Some(headers), messages, Err(e));
                        }
                    }
                }
            }
            Some(Err(e)) => return done(Some(headers), messages, Err(RpcError::from(e))),
            None => break,
        }
    }
    let status = match body.trailers().await {
        Ok(Some(t)) => protocol::grpc::status_from_headers(&t).unwrap_or_else(|| {
            Err(RpcError::internal(
                "test client: trailers without grpc-status",
            ))
        }),
        Ok(None) => Err(RpcError::internal("test client: response without trailers")),
        Err(e) => Err(RpcError::from(e)),
    };
    done(Some(headers), messages, status)
}

/// Opens a fresh connection, starts a call to `path` with gRPC headers plus `extra`
/// headers, sends `body` as DATA (ending the stream if `end_stream`) while reading the
/// response concurrently, and returns the response. Response framing errors are
/// reported as `status` errors with code Internal and a "test client:" message.
pub async fn raw_call(
    port: u16,
    path: &str,
    extra: &[(&str, &str)],
    body: Bytes,
    end_stream: bool,
) -> RawOutcome {
    let mut stream = RawStream::open(port, path, extra).await;
    let mut resp = stream.spawn_response();
    let early = tokio::select! {
        out = &mut resp => Some(out),
        _ = stream.send_data(body, end_stream) => None,
    };
    let out = match early {
        Some(out) => out,
        None => resp.await,
    }
    .expect("response task");
    drop(stream);
    out
}
