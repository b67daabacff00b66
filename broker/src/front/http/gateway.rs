//! Gazette's HTTP gateway (`broker/http_gateway`): `GET`/`HEAD /<journal>?offset=&block=`
//! as a Read, `PUT /<journal>` with a body as one Append.
//!
//! Lives on: the accepting core; the Read or Append itself runs on the journal's owner
//! core, fed and drained over channels. As in Gazette, the gateway calls the broker as the
//! broker itself (its loopback client re-signs); unlike Gazette, with `--broker.auth-keys`
//! each request first needs a token allowing it (`gateway_auth.rs`).

use super::parse::{self, ParseError};
use super::{ConnError, Exchange, Outcome, Response};
use crate::core::call::ChannelClient;
use crate::core::msg::FirstRequest;
use bytes::Bytes;
use futures_lite::future;
use prost::Message;
use protocol::grpc::RpcError;
use protocol::validate::Validate;
use protocol::{AppendRequest, AppendResponse, Header, ReadRequest, ReadResponse, Status};

pub async fn serve(ex: &mut Exchange<'_>) -> Outcome {
    if let Err(refused) = authorize(ex) {
        return ex
            .error(Response::new(refused.status), &refused.message)
            .await;
    }
    match ex.head.method.as_str() {
        "GET" | "HEAD" => serve_read(ex).await,
        "PUT" => serve_write(ex).await,
        other => {
            let msg = format!("unknown method: {other}");
            ex.error(Response::new(400), &msg).await
        }
    }
}

/// With `--broker.auth-keys`, the request's token must allow its method on its journal
/// (see `gateway_auth`; a deliberate difference from Gazette).
fn authorize(ex: &Exchange<'_>) -> Result<(), super::gateway_auth::Refused> {
    let require = match ex.head.method.as_str() {
        "PUT" => crate::auth::APPEND,
        _ => crate::auth::READ,
    };
    let journal = journal_of(ex).unwrap_or_default();
    let journal = protocol::validate::strip_meta(&journal);
    super::gateway_auth::authorize(
        ex.core,
        ex.head.header("authorization"),
        ex.head.query(),
        require,
        journal,
    )
    .map(|_| ())
}

/// Query parameters a request may carry besides its own: `token` when auth is on.
fn extra_fields(ex: &Exchange<'_>) -> &'static [&'static str] {
    if ex.core.auth.enabled() {
        &[super::gateway_auth::TOKEN_PARAM]
    } else {
        &[]
    }
}

/// The journal named by the request path (percent-decoded, leading `/` removed).
fn journal_of(ex: &Exchange<'_>) -> Result<String, String> {
    let path = parse::percent_decode(ex.head.path(), false).map_err(|e| e.to_string())?;
    Ok(path.strip_prefix('/').unwrap_or(&path).to_string())
}

/// Decodes query parameters into the named fields as gorilla/schema does: names match
/// case-insensitively, an unknown name is an error, the last value of a name wins.
fn decode_query(query: &str, fields: &[&str]) -> Result<Vec<(String, String)>, String> {
    let pairs = parse::parse_query(query).map_err(|e| match e {
        ParseError::Malformed(why) => why.to_string(),
        other => other.to_string(),
    })?;
    let mut errors = Vec::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in pairs {
        match fields.iter().find(|f| f.eq_ignore_ascii_case(&k)) {
            Some(f) => {
                out.retain(|(n, _)| n != f);
                out.push((f.to_string(), v));
            }
            None => {
                let e = format!("schema: invalid path \"{k}\"");
                if !errors.contains(&e) {
                    errors.push(e);
                }
            }
        }
    }
    match errors.len() {
        0 => Ok(out),
        1 => Err(errors.remove(0)),
        n => Err(format!(
            "{} (and {} other error{})",
            errors.remove(0),
            n - 1,
            if n > 2 { "s" } else { "" }
        )),
    }
}

fn parse_read_request(ex: &Exchange<'_>) -> Result<ReadRequest, String> {
    let journal = journal_of(ex)?;
    let mut fields = vec!["offset", "block"];
    fields.extend_from_slice(extra_fields(ex));
    let params = decode_query(ex.head.query(), &fields)?;
    let mut req = ReadRequest {
        journal,
        metadata_only: ex.head.method == "HEAD",
        ..Default::default()
    };
    for (name, value) in params {
        if value.is_empty() {
            continue;
        }
        let conversion = || format!("schema: error converting value for \"{name}\"");
        match name.as_str() {
            "offset" => req.offset = value.parse().map_err(|_| conversion())?,
            super::gateway_auth::TOKEN_PARAM => {}
            _ => req.block = parse_go_bool(&value).ok_or_else(conversion)?,
        }
    }
    req.validate().map_err(|e| e.to_string())?;
    Ok(req)
}

/// Go's `strconv.ParseBool`, plus gorilla/schema's "on".
fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" | "on" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

async fn serve_read(ex: &mut Exchange<'_>) -> Outcome {
    let req = match parse_read_request(ex) {
        Ok(req) => req,
        Err(msg) => return ex.error(Response::new(400), &msg).await,
    };
    let Some(mut client) = start(ex, FirstRequest::Read(req)).await else {
        return ex
            .error(Response::new(500), "the journal's owner core has stopped")
            .await;
    };
    // The first response carries the metadata (or a non-OK status). A blocking read at the
    // write head sends nothing until content commits: meanwhile, watch for a hang-up.
    let conn = &mut *ex.conn;
    let first = future::or(async { Some(client.next::<ReadResponse>().await) }, async {
        conn.closed().await;
        None
    })
    .await;
    let Some(first) = first else {
        // The client went away; dropping `client` cancels the owner's Read.
        return Outcome::Close;
    };
    let first = match first {
        Ok(Some(first)) => first,
        Ok(None) => {
            return ex.error(Response::new(500), "broker terminated RPC").await;
        }
        Err(err) => {
            tracing::warn!(%err, "http_gateway: failed to proxy Read request");
            return ex.error(Response::new(500), &err.to_string()).await;
        }
    };
    let mut resp = Response::new(206);
    if let Some(header) = &first.header {
        route_headers(&mut resp, header, ex.head.path());
    }
    if let Some(fragment) = &first.fragment {
        resp.header("X-Fragment-Name", storage::naming::content_name(fragment));
        if fragment.mod_time != 0 {
            resp.header(
                "X-Fragment-Last-Modified",
                super::http_date_unix(fragment.mod_time),
            );
        }
        if !first.fragment_url.is_empty() {
            resp.header("X-Fragment-Location", first.fragment_url.clone());
        }
        resp.header(
            "Content-Range",
            format!("bytes {}-{}/{}", first.offset, i64::MAX, i64::MAX),
        );
    }
    if first.write_head != 0 {
        resp.header("X-Write-Head", first.write_head.to_string());
    }
    let status = Status::try_from(first.status).unwrap_or(Status::Ok);
    if status != Status::Ok {
        resp.status = match status {
            Status::JournalNotFound => 404,
            Status::InsufficientJournalBrokers => 503,
            Status::OffsetNotYetAvailable => 416,
            _ => 500,
        };
        return ex.error(resp, status.as_str_name()).await;
    }
    if ex.head.method == "HEAD" {
        // No Content-Length: the length of the GET body is unknown (it streams).
        return ex.respond_no_body(resp).await;
    }
    resp.header("Trailer", "X-Close-Error");
    if ex.start_stream(resp).await.is_err() {
        return Outcome::Close;
    }
    let close_error = match stream_content(ex, &mut client).await {
        Ok(close_error) => close_error,
        Err(_) => return Outcome::Close,
    };
    ex.end_stream(&[("X-Close-Error", close_error)]).await
}

/// Streams content until the Read ends; returns the `X-Close-Error` text. An `Err` means
/// the HTTP client went away (the owner sees the call cancelled when `client` drops).
async fn stream_content(
    ex: &mut Exchange<'_>,
    client: &mut ChannelClient,
) -> Result<String, ConnError> {
    enum Step {
        Msg(Result<Option<Box<ReadResponse>>, RpcError>),
        Gone,
    }
    loop {
        let conn = &mut *ex.conn;
        let step = future::or(
            async { Step::Msg(client.next::<ReadResponse>().await.map(|m| m.map(Box::new))) },
            async {
                conn.closed().await;
                Step::Gone
            },
        )
        .await;
        match step {
            Step::Gone => return Err(ConnError::Closed),
            Step::Msg(Ok(None)) => return Ok("broker terminated RPC".to_string()),
            Step::Msg(Err(err)) => return Ok(err.to_string()),
            Step::Msg(Ok(Some(msg))) => {
                let status = Status::try_from(msg.status).unwrap_or(Status::Ok);
                if status != Status::Ok {
                    return Ok(status.as_str_name().to_string());
                }
                ex.stream_chunk(&msg.content).await?;
            }
        }
    }
}

async fn serve_write(ex: &mut Exchange<'_>) -> Outcome {
    let req = match journal_of(ex).and_then(|journal| {
        decode_query(ex.head.query(), extra_fields(ex))?;
        let req = AppendRequest {
            journal,
            ..Default::default()
        };
        req.validate().map_err(|e| e.to_string())?;
        Ok(req)
    }) {
        Ok(req) => req,
        Err(msg) => return ex.error(Response::new(400), &msg).await,
    };
    let Some(mut client) = start(ex, FirstRequest::Append(req)).await else {
        return ex
            .error(Response::new(500), "the journal's owner core has stopped")
            .await;
    };
    // Stream the body as content chunks, then the empty chunk and EOF that commit it. The
    // owner may answer early (e.g. JOURNAL_NOT_FOUND) without reading the content: its
    // answer then ends the upload, and the unread body closes the connection.
    enum Step {
        Body(Result<Option<Bytes>, ConnError>),
        Answered(Result<Option<Box<AppendResponse>>, RpcError>),
    }
    let mut answer = None;
    let mut read_error = None;
    while answer.is_none() {
        let (conn, body) = (&mut *ex.conn, &mut ex.body);
        let step = future::or(
            async { Step::Body(conn.body_chunk(body, super::BODY_CHUNK).await) },
            async {
                let next = client.next::<AppendResponse>().await;
                Step::Answered(next.map(|m| m.map(Box::new)))
            },
        )
        .await;
        match step {
            Step::Body(Ok(Some(content))) => {
                let chunk = AppendRequest {
                    content,
                    ..Default::default()
                };
                // A failed send means the owner finished: its answer is on the way.
                let _ = send(&client, chunk).await;
            }
            Step::Body(Ok(None)) => {
                let _ = send(&client, AppendRequest::default()).await;
                // EOF for the owner: close the request channel, keep the responses.
                let (closed, _) = flume::bounded(0);
                drop(std::mem::replace(&mut client.requests, closed));
                let next = client.next::<AppendResponse>().await;
                answer = Some(next.map(|m| m.map(Box::new)));
            }
            Step::Body(Err(err)) => {
                // Abort: the append rolls back when its request stream fails.
                let _ = client.requests.try_send(Err(RpcError::cancelled()));
                read_error = Some(format!("reading request body: {err}"));
                break;
            }
            Step::Answered(early) => answer = Some(early),
        }
    }
    if !ex.body.is_done() {
        ex.keep_alive = false;
    }
    if let Some(msg) = read_error {
        drop(client);
        return ex.error(Response::new(500), &msg).await;
    }
    let resp = match answer {
        Some(Ok(Some(resp))) => resp,
        Some(Err(err)) => return ex.error(Response::new(500), &err.to_string()).await,
        _ => {
            return ex
                .error(Response::new(500), "append: broker returned no response")
                .await;
        }
    };
    let status = Status::try_from(resp.status).unwrap_or(Status::Ok);
    // As Gazette's Appender, any non-OK status is an error (500 with the status name).
    if status != Status::Ok {
        return ex.error(Response::new(500), status.as_str_name()).await;
    }
    let mut out = Response::new(204);
    if let Some(header) = &resp.header {
        route_headers(&mut out, header, ex.head.path());
    }
    if let Some(commit) = &resp.commit {
        out.header("X-Commit-Begin", commit.begin.to_string());
        out.header("X-Commit-End", commit.end.to_string());
        out.header("X-Write-Head", commit.end.to_string());
        let sum = commit.sum.unwrap_or_default();
        out.header("X-Commit-SHA1-Sum", protocol::sum::sum_to_hex(&sum));
    }
    ex.respond_no_body(out).await
}

async fn send(client: &ChannelClient, req: AppendRequest) -> bool {
    client
        .requests
        .send_async(Ok(Bytes::from(req.encode_to_vec())))
        .await
        .is_ok()
}

async fn start(ex: &Exchange<'_>, first: FirstRequest) -> Option<ChannelClient> {
    crate::front::dispatch::start_journal_call(ex.core, first, None).await
}

/// `X-Route-Token` and `Location`, as Gazette's `writeHeader`.
fn route_headers(resp: &mut Response, header: &Header, path: &str) {
    let Some(route) = &header.route else { return };
    if route.members.is_empty() {
        return;
    }
    resp.header("X-Route-Token", protocol::validate::text::route(route));
    if route.primary >= 0
        && let Some(endpoint) = route.endpoints.get(route.primary as usize)
    {
        resp.header(
            "Location",
            format!("{}{path}", endpoint.trim_end_matches('/')),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_token_matches_gazette() {
        let route = protocol::Route {
            members: vec![protocol::process_spec::Id {
                zone: "a".into(),
                suffix: "broker".into(),
            }],
            primary: 0,
            endpoints: vec!["http://broker/path".into()],
        };
        assert_eq!(
            protocol::validate::text::route(&route),
            "members:<zone:\"a\" suffix:\"broker\" > endpoints:\"http://broker/path\" "
        );
        // Bytes outside printable ASCII in octal, as the text format quotes them.
        let route = protocol::Route {
            endpoints: vec!["a\"\u{e9}".into()],
            ..route
        };
        assert_eq!(
            protocol::validate::text::route(&route),
            "members:<zone:\"a\" suffix:\"broker\" > endpoints:\"a\\\"\\303\\251\" "
        );
    }

    #[test]
    fn query_decoding_follows_gorilla_schema() {
        assert_eq!(
            decode_query("OFFSET=3&Block=true&offset=4", &["offset", "block"]).unwrap(),
            vec![
                ("block".into(), "true".into()),
                ("offset".into(), "4".into())
            ]
        );
        assert_eq!(
            decode_query("extra=1", &["offset", "block"]).unwrap_err(),
            "schema: invalid path \"extra\""
        );
        assert_eq!(
            decode_query("x=1&y=2", &[]).unwrap_err(),
            "schema: invalid path \"x\" (and 1 other error)"
        );
    }

    #[test]
    fn content_names() {
        let f = protocol::Fragment {
            begin: 1000,
            end: 1500,
            compression_codec: protocol::CompressionCodec::Snappy as i32,
            sum: Some(protocol::Sha1Sum {
                part1: 0x2694,
                part2: 0,
                part3: 0,
            }),
            ..Default::default()
        };
        assert_eq!(
            storage::naming::content_name(&f),
            "00000000000003e8-00000000000005dc-0000000000002694000000000000000000000000.sz"
        );
    }
}
