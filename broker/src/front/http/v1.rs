//! Gazette's grpc-gateway routes: `POST /v1/journals/list` and `POST /v1/journals/read`
//! (`broker/protocol/protocol.pb.gw.go`, mounted under `/v1/` by `cmd/gazette` with
//! `gogo/gateway.JSONPb{EmitDefaults: true}` and `DefaultHTTPProtoErrorHandler`).
//!
//! Lives on: the accepting core. List runs on this core (as a gRPC List does); Read runs on
//! the journal's owner core through [`crate::front::dispatch::start_journal_call`]. Unlike the `/` gateway,
//! these routes are gated by the caller's `Authorization` header, which grpc-gateway
//! forwards to the broker as gRPC metadata.
//!
//! Responses stream newline-delimited `{"result": <message>}` objects; an RPC that fails
//! ends the stream with `{"error": {...}}` (no newline), and if nothing was written yet its
//! HTTP status is the error's. A body that does not decode is a 400 with a
//! `google.rpc.Status` body. Other `/v1/` paths and methods are 501, as grpc-gateway's mux.

use super::json;
use super::{Exchange, Outcome, Response};
use crate::core::call::ChannelClient;
use crate::core::{Core, msg::FirstRequest};
use futures_lite::future;
use protocol::grpc::{Code, RpcError};
use protocol::{ListResponse, ReadResponse, Status};
use std::rc::Rc;

/// Which RPC a route runs.
#[derive(Clone, Copy)]
enum Rpc {
    List,
    Read,
}

pub async fn serve(ex: &mut Exchange<'_>) -> Outcome {
    let cors = cors_headers(ex);
    if ex.head.method == "OPTIONS" {
        // Gazette's CORSWrapper answers preflights itself, with an empty 200.
        let mut resp = Response::new(200);
        add(&mut resp, &cors);
        return ex.respond(resp, b"").await;
    }
    let rpc = match ex.head.path() {
        "/v1/journals/list" => Some(Rpc::List),
        "/v1/journals/read" => Some(Rpc::Read),
        _ => None,
    };
    let rpc = match rpc {
        Some(rpc) if ex.head.method == "POST" => rpc,
        // grpc-gateway's mux with a proto error handler: Unimplemented, named by HTTP text.
        Some(_) => return status_error(ex, &cors, Code::Unimplemented, "Method Not Allowed").await,
        None => return status_error(ex, &cors, Code::Unimplemented, "Not Found").await,
    };
    let body = match read_body(ex).await {
        Ok(body) => body,
        Err(msg) => return status_error(ex, &cors, Code::InvalidArgument, &msg).await,
    };
    let first = match rpc {
        Rpc::List => json::list_request(&body).map(Err),
        Rpc::Read => json::read_request(&body).map(Ok),
    };
    let first = match first {
        Ok(first) => first,
        Err(msg) => return status_error(ex, &cors, Code::InvalidArgument, &msg).await,
    };
    let core = ex.core.clone();
    let started = start(&core, ex, rpc, first).await;
    stream(ex, &cors, rpc, started).await
}

/// What a started call yields: its client ends, or a response to send as the only result
/// (an out-of-scope Read), or an error that fails it before it runs.
enum Started {
    Call(ChannelClient),
    Only(Box<ReadResponse>),
}

async fn start(
    core: &Rc<Core>,
    ex: &Exchange<'_>,
    rpc: Rpc,
    first: Result<protocol::ReadRequest, protocol::ListRequest>,
) -> Result<Started, RpcError> {
    // grpc-gateway forwards `Authorization` as metadata; verify it as `front::dispatch::dispatch` does.
    let mut metadata = http::HeaderMap::new();
    if let Some(value) = ex.head.header("authorization")
        && let Ok(value) = http::HeaderValue::from_str(value)
    {
        metadata.insert(http::header::AUTHORIZATION, value);
    }
    let require = match rpc {
        Rpc::List => crate::auth::LIST,
        Rpc::Read => crate::auth::READ,
    };
    let claims = core.auth.verify(&metadata, require)?;
    let timeout = claims.bound(None);
    match first {
        Err(list) => Ok(Started::Call(
            crate::front::dispatch::start_list_call(core, list, claims, timeout).await,
        )),
        Ok(read) => {
            let journal = protocol::validate::strip_meta(&read.journal).to_string();
            if !crate::front::authorize::in_scope(core, &claims, &journal) {
                let snapshot = core.keyspace.current();
                return Ok(Started::Only(Box::new(ReadResponse {
                    status: Status::JournalNotFound as i32,
                    header: Some(crate::journal::routing::resolver::unrouted_header(
                        core, &snapshot,
                    )),
                    ..Default::default()
                })));
            }
            crate::front::dispatch::start_journal_call(core, FirstRequest::Read(read), timeout)
                .await
                .map(Started::Call)
                .ok_or_else(|| RpcError::unavailable("the journal's owner core has stopped"))
        }
    }
}

/// Streams the call's responses as grpc-gateway's `ForwardResponseStream` does.
async fn stream(
    ex: &mut Exchange<'_>,
    cors: &[(&'static str, String)],
    rpc: Rpc,
    started: Result<Started, RpcError>,
) -> Outcome {
    let mut client = match started {
        Ok(Started::Call(client)) => Some(client),
        Ok(Started::Only(resp)) => {
            let line = json::result_chunk(|out| json::read_response(out, &resp));
            if ex.start_stream(stream_head(200, cors)).await.is_err() {
                return Outcome::Close;
            }
            if ex
                .stream_chunk(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                return Outcome::Close;
            }
            return ex.end_stream(&[]).await;
        }
        Err(err) => {
            let (status, chunk) = json::error_chunk(err.code, &err.message);
            return one_chunk(ex, stream_head(status, cors), chunk).await;
        }
    };
    let mut wrote_head = false;
    while let Some(c) = client.as_mut() {
        let conn = &mut *ex.conn;
        let next = future::or(async { Some(next_line(c, rpc).await) }, async {
            conn.closed().await;
            None
        })
        .await;
        let Some(next) = next else {
            // The client went away: dropping `client` cancels the RPC.
            return Outcome::Close;
        };
        match next {
            Ok(Some(line)) => {
                if !wrote_head {
                    if ex.start_stream(stream_head(200, cors)).await.is_err() {
                        return Outcome::Close;
                    }
                    wrote_head = true;
                }
                if ex
                    .stream_chunk(format!("{line}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return Outcome::Close;
                }
            }
            Ok(None) => {
                client = None;
            }
            Err(err) => {
                drop(client);
                let (status, chunk) = json::error_chunk(err.code, &err.message);
                if !wrote_head {
                    return one_chunk(ex, stream_head(status, cors), chunk).await;
                }
                if ex.stream_chunk(chunk.as_bytes()).await.is_err() {
                    return Outcome::Close;
                }
                return ex.end_stream(&[]).await;
            }
        }
    }
    if !wrote_head && ex.start_stream(stream_head(200, cors)).await.is_err() {
        return Outcome::Close;
    }
    ex.end_stream(&[]).await
}

/// The next response of the call as a `{"result": ...}` line; `None` once it finished OK.
async fn next_line(client: &mut ChannelClient, rpc: Rpc) -> Result<Option<String>, RpcError> {
    Ok(match rpc {
        Rpc::List => client
            .next::<ListResponse>()
            .await?
            .map(|m| json::result_chunk(|out| json::list_response(out, &m))),
        Rpc::Read => client
            .next::<ReadResponse>()
            .await?
            .map(|m| json::result_chunk(|out| json::read_response(out, &m))),
    })
}

async fn one_chunk(ex: &mut Exchange<'_>, head: Response, chunk: String) -> Outcome {
    if ex.start_stream(head).await.is_err() {
        return Outcome::Close;
    }
    if ex.stream_chunk(chunk.as_bytes()).await.is_err() {
        return Outcome::Close;
    }
    ex.end_stream(&[]).await
}

fn stream_head(status: u16, cors: &[(&'static str, String)]) -> Response {
    let mut resp = Response::new(status);
    add(&mut resp, cors);
    resp.header("Content-Type", "application/json");
    // grpc-gateway forwards the RPC's response headers; every gRPC response has this one.
    resp.header("Grpc-Metadata-Content-Type", "application/grpc");
    resp
}

/// grpc-gateway's `DefaultHTTPProtoErrorHandler`: a `google.rpc.Status` body.
async fn status_error(
    ex: &mut Exchange<'_>,
    cors: &[(&'static str, String)],
    code: Code,
    msg: &str,
) -> Outcome {
    let (status, body) = json::status_body(code, msg);
    let mut resp = Response::new(status);
    add(&mut resp, cors);
    resp.header("Content-Type", "application/json");
    ex.respond(resp, body.as_bytes()).await
}

/// Gazette's `CORSWrapper`: the three headers when `Origin` is one of `--broker.allow-origin`.
fn cors_headers(ex: &Exchange<'_>) -> Vec<(&'static str, String)> {
    let origin = ex.head.header("origin").unwrap_or_default();
    if !ex.core.cfg.allow_origin.iter().any(|o| o == origin) {
        return Vec::new();
    }
    vec![
        ("Access-Control-Allow-Origin", origin.to_string()),
        ("Access-Control-Allow-Methods", "GET, POST, OPTIONS".into()),
        (
            "Access-Control-Allow-Headers",
            "Cache-Control, Content-Language, Content-Length, Content-Type, Expires, Last-Modified, Pragma, Authorization".into(),
        ),
    ]
}

fn add(resp: &mut Response, headers: &[(&'static str, String)]) {
    for (k, v) in headers {
        resp.header(k, v.clone());
    }
}

/// Reads the whole request body, at most `--broker.max-grpc-recv-size` bytes (the largest
/// request message a gRPC client could send).
async fn read_body(ex: &mut Exchange<'_>) -> Result<Vec<u8>, String> {
    let max = ex.core.cfg.max_grpc_recv_size;
    let mut body = Vec::new();
    loop {
        match ex.conn.body_chunk(&mut ex.body, super::BODY_CHUNK).await {
            Ok(Some(data)) => {
                if body.len() + data.len() > max {
                    ex.keep_alive = false;
                    return Err(format!("request body is larger than {max} bytes"));
                }
                body.extend_from_slice(&data);
            }
            Ok(None) => return Ok(body),
            Err(err) => {
                ex.keep_alive = false;
                return Err(format!("reading request body: {err}"));
            }
        }
    }
}
