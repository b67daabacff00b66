//! A null broker for measuring the load generator itself: it answers every Append with
//! status OK and a plausible commit, and stores nothing. Run against it, `courant-loadgen`
//! shows its own ceiling (records/s, CPU per record) on this machine, which bounds what any
//! broker can be measured at with the same flags.
//!
//! Only Append is served (so no `--readers`, `--create` or `--selector`); offsets are kept
//! per journal so commits look real. Binds 127.0.0.1 only.
//!
//! ```sh
//! cargo run --release -p courant-loadgen --example null_sink -- 18500 1
//! courant-loadgen --broker.address 127.0.0.1:18500 --journals 4 --duration 5s
//! ```
//!
//! Arguments: port (default 18500) and worker threads (default 1).

use bytes::Bytes;
use protocol::grpc::{Code, DEFAULT_MAX_RECV_SIZE, RpcError, ServerCall};
use protocol::{AppendRequest, AppendResponse, CompressionCodec, Fragment, LabelSet, Status};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

type Offsets = Arc<Mutex<HashMap<String, i64>>>;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(18500);
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?
        .block_on(serve(port))
}

async fn serve(port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("null_sink: serving Append on 127.0.0.1:{port}");
    let offsets = Offsets::default();
    loop {
        let (sock, _) = listener.accept().await?;
        sock.set_nodelay(true)?;
        tokio::spawn(serve_connection(sock, offsets.clone()));
    }
}

async fn serve_connection(sock: TcpStream, offsets: Offsets) {
    let handshake = h2::server::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(8 << 20)
        .max_frame_size(256 << 10)
        .max_concurrent_streams(1024)
        .handshake::<_, Bytes>(sock)
        .await;
    let Ok(mut conn) = handshake else { return };
    // Polling accept() is what drives the connection, so keep doing it.
    while let Some(Ok((req, respond))) = conn.accept().await {
        let call = ServerCall::new(req, respond, DEFAULT_MAX_RECV_SIZE);
        tokio::spawn(append(call, offsets.clone()));
    }
}

async fn append(mut call: ServerCall, offsets: Offsets) {
    if call.path != "/protocol.Journal/Append" {
        let err = RpcError::new(Code::Unimplemented, "null_sink serves only Append");
        call.outbound.finish(Err(err));
        return;
    }
    let mut journal = None;
    let mut bytes = 0i64;
    loop {
        match call.inbound.next::<AppendRequest>().await {
            Ok(Some(req)) if journal.is_none() => journal = Some(req.journal),
            Ok(Some(req)) => bytes += req.content.len() as i64,
            Ok(None) => break,
            Err(err) => return call.outbound.finish(Err(err)),
        }
    }
    let journal = journal.unwrap_or_default();
    let begin = {
        let mut offsets = offsets.lock().unwrap_or_else(|e| e.into_inner());
        let head = offsets.entry(journal.clone()).or_insert(0);
        let begin = *head;
        *head += bytes;
        begin
    };
    let resp = AppendResponse {
        status: Status::Ok as i32,
        commit: Some(Fragment {
            journal,
            begin,
            end: begin + bytes,
            compression_codec: CompressionCodec::None as i32,
            ..Default::default()
        }),
        registers: Some(LabelSet::default()),
        ..Default::default()
    };
    let mut out = call.outbound;
    if out.send(&resp).await.is_ok() {
        out.finish(Ok(()));
    }
}
