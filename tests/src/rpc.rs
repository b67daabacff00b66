//! RPC helpers: Apply, Append, Read, List and their streams.

#[allow(unused_imports)]
use super::*;

pub async fn apply(ch: &Channel, changes: Vec<Change>) -> Result<ApplyResponse, RpcError> {
    ch.unary(APPLY, &ApplyRequest { changes }).await
}

/// Upserts `specs` (expect −1) and asserts the Apply succeeded; returns its revision.
pub async fn apply_specs(ch: &Channel, specs: &[JournalSpec]) -> i64 {
    let resp = apply(ch, specs.iter().cloned().map(upsert).collect())
        .await
        .unwrap_or_else(|e| panic!("Apply {specs:?}: {e}"));
    assert_status(resp.status, Status::Ok, "Apply of valid specs");
    let h = resp.header.expect("ApplyResponse header");
    check_unrouted_header(&h, "ApplyResponse");
    h.etcd.unwrap().revision
}

/// Creates journals named `names` with default specs.
pub async fn create_journals(ch: &Channel, names: &[&str]) -> i64 {
    let specs: Vec<JournalSpec> = names.iter().map(|n| spec(n, &[])).collect();
    apply_specs(ch, &specs).await
}

/// Result of a client-streaming Append: the outcome plus the response's initial metadata.
pub struct AppendOutcome {
    pub result: Result<AppendResponse, RpcError>,
    pub headers: Option<http::HeaderMap>,
}

/// Sends `first`, then each chunk as a content message, then (if `commit`) the empty
/// commit chunk, then half-closes; returns the response. Send errors are ignored
/// (the broker may answer early and close), the response tells what happened.
pub async fn append_full(
    ch: &Channel,
    first: AppendRequest,
    chunks: &[Bytes],
    commit: bool,
) -> AppendOutcome {
    let mut call = match ch.call(APPEND).await {
        Ok(c) => c,
        Err(e) => {
            return AppendOutcome {
                result: Err(e),
                headers: None,
            };
        }
    };
    let mut ok = call.sender.send(&first).await.is_ok();
    for c in chunks {
        if !ok {
            break;
        }
        ok = call
            .sender
            .send(&AppendRequest {
                content: c.clone(),
                ..Default::default()
            })
            .await
            .is_ok();
    }
    if ok && commit {
        ok = call.sender.send(&AppendRequest::default()).await.is_ok();
    }
    if ok {
        let _ = call.sender.close();
    }
    let result = finish_unary_response::<AppendResponse>(&mut call).await;
    AppendOutcome {
        result,
        headers: call.response_headers().cloned(),
    }
}

/// Reads the single response message and the final status of a call.
pub async fn finish_unary_response<M: prost::Message + Default + std::fmt::Debug>(
    call: &mut ClientCall,
) -> Result<M, RpcError> {
    let msg = call.next::<M>().await?;
    let Some(msg) = msg else {
        return Err(RpcError::internal(
            "test client: call ended with status OK but no response message",
        ));
    };
    match call.next::<M>().await? {
        None => Ok(msg),
        Some(extra) => Err(RpcError::internal(format!(
            "test client: second response message {extra:?}"
        ))),
    }
}

/// Appends `chunks` to `journal` and commits.
pub async fn append(
    ch: &Channel,
    journal: &str,
    chunks: &[&[u8]],
) -> Result<AppendResponse, RpcError> {
    let chunks: Vec<Bytes> = chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect();
    append_full(
        ch,
        AppendRequest {
            journal: journal.into(),
            ..Default::default()
        },
        &chunks,
        true,
    )
    .await
    .result
}

/// Appends `data` as one chunk and asserts an OK, valid response; returns it.
pub async fn append_ok(ch: &Channel, journal: &str, data: &[u8]) -> AppendResponse {
    let resp = append(ch, journal, &[data])
        .await
        .unwrap_or_else(|e| panic!("Append to {journal}: {e}"));
    check_append_response(&resp, "AppendResponse");
    assert_status(resp.status, Status::Ok, &format!("Append to {journal}"));
    let commit = resp.commit.clone().unwrap();
    assert_eq!(
        commit.end - commit.begin,
        data.len() as i64,
        "commit spans the appended bytes"
    );
    assert_eq!(
        commit.sum,
        Some(sha1_sum(data)),
        "commit sum = SHA1 of appended bytes"
    );
    resp
}

pub async fn read_stream(ch: &Channel, req: &ReadRequest) -> Result<ClientCall, RpcError> {
    ch.server_streaming(READ, req).await
}

/// A response stream read by a background task, so waiting on it with a timeout is
/// cancel-safe (`ClientCall::next` is not while response headers are pending). Dropping
/// it cancels the call.
pub struct Streamed<M> {
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<Option<M>, RpcError>>,
    headers: std::sync::Arc<std::sync::Mutex<Option<http::HeaderMap>>>,
    task: tokio::task::JoinHandle<()>,
    done: bool,
}

impl<M: prost::Message + Default + Send + 'static> Streamed<M> {
    pub fn new(mut call: ClientCall) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let headers = std::sync::Arc::new(std::sync::Mutex::new(None));
        let h = headers.clone();
        let task = tokio::spawn(async move {
            loop {
                let r = call.next::<M>().await;
                if h.lock().unwrap().is_none() {
                    *h.lock().unwrap() = call.response_headers().cloned();
                }
                let end = !matches!(r, Ok(Some(_)));
                if tx.send(r).is_err() || end {
                    return;
                }
            }
        });
        Streamed {
            rx,
            headers,
            task,
            done: false,
        }
    }

    /// The next message; `Ok(None)` at a clean end of the stream.
    pub async fn next(&mut self) -> Result<Option<M>, RpcError> {
        if self.done {
            return Ok(None);
        }
        match self.rx.recv().await {
            Some(r) => {
                self.done = !matches!(r, Ok(Some(_)));
                r
            }
            None => {
                self.done = true;
                Ok(None)
            }
        }
    }

    /// The next message, or None if nothing arrives within `d` (the stream stays usable).
    pub async fn next_within(&mut self, d: Duration) -> Option<Result<Option<M>, RpcError>> {
        tokio::time::timeout(d, self.next()).await.ok()
    }

    /// Response headers, once the first response has arrived.
    pub fn response_headers(&self) -> Option<http::HeaderMap> {
        self.headers.lock().unwrap().clone()
    }
}

impl<M> Drop for Streamed<M> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads every message of a stream until it ends; returns messages and the outcome.
pub async fn collect<M: prost::Message + Default>(
    call: &mut ClientCall,
) -> (Vec<M>, Result<(), RpcError>) {
    let mut out = vec![];
    loop {
        match call.next::<M>().await {
            Ok(Some(m)) => out.push(m),
            Ok(None) => return (out, Ok(())),
            Err(e) => return (out, Err(e)),
        }
    }
}

/// Reads `journal` from `offset` with a non-blocking Read and checks its framing: the
/// first message carries a valid header; metadata precedes content; content offsets are
/// contiguous; the stream ends with `{OFFSET_NOT_YET_AVAILABLE, offset = write_head}` and
/// EOF. Returns the content and the write head.
pub async fn read_all(ch: &Channel, journal: &str, offset: i64) -> (Vec<u8>, i64) {
    assert!(offset >= 0, "read_all needs an explicit offset");
    let req = ReadRequest {
        journal: journal.into(),
        offset,
        ..Default::default()
    };
    let mut call = read_stream(ch, &req)
        .await
        .unwrap_or_else(|e| panic!("Read {journal}: {e}"));
    let (msgs, end) = collect::<ReadResponse>(&mut call).await;
    if let Err(e) = end {
        panic!(
            "Read {journal} from {offset} failed: {e} (after {} messages)",
            msgs.len()
        );
    }
    let ctx = format!("Read {journal} from {offset}");
    assert!(!msgs.is_empty(), "{ctx}: no messages");
    let first = &msgs[0];
    check_routed_header_loose(first, &ctx);
    let mut content = Vec::new();
    let mut next = offset;
    let mut in_fragment: Option<(i64, i64)> = None; // [offset, fragment end) being streamed
    for (i, m) in msgs.iter().enumerate() {
        check_read_response(m, &format!("{ctx}, message {i}"));
        if i > 0 {
            assert!(m.header.is_none(), "{ctx}: header on message {i}: {m:?}");
        }
        if !m.content.is_empty() {
            let (_, end) = in_fragment
                .unwrap_or_else(|| panic!("{ctx}: content before metadata at message {i}"));
            assert_eq!(m.offset, next, "{ctx}: content offset gap at message {i}");
            next += m.content.len() as i64;
            assert!(next <= end, "{ctx}: content past its fragment's end");
            content.extend_from_slice(&m.content);
            continue;
        }
        if i + 1 == msgs.len() {
            assert_status(
                m.status,
                Status::OffsetNotYetAvailable,
                &format!("{ctx}: last message {m:?}"),
            );
            assert_eq!(
                (m.offset, m.write_head),
                (next, next),
                "{ctx}: final (offset, write_head) after reading {} bytes; last message {m:?}, \
                 {} messages in all",
                content.len(),
                msgs.len()
            );
            return (content, m.write_head);
        }
        assert_status(
            m.status,
            Status::Ok,
            &format!("{ctx}: metadata message {i}"),
        );
        if let Some((_, end)) = in_fragment {
            assert_eq!(
                next, end,
                "{ctx}: new metadata before the previous fragment was fully sent"
            );
        }
        let f = m
            .fragment
            .as_ref()
            .unwrap_or_else(|| panic!("{ctx}: metadata without fragment: {m:?}"));
        assert_eq!(m.offset, next, "{ctx}: metadata offset at message {i}");
        assert_eq!(
            f.journal,
            journal.split(';').next().unwrap(),
            "{ctx}: fragment journal"
        );
        in_fragment = Some((m.offset, f.end));
    }
    panic!("{ctx}: stream ended without OFFSET_NOT_YET_AVAILABLE: {msgs:?}");
}

/// The first message of a Read stream must carry a valid header (routed if OK).
#[track_caller]
pub(crate) fn check_routed_header_loose(first: &ReadResponse, ctx: &str) {
    let h = first
        .header
        .as_ref()
        .unwrap_or_else(|| panic!("{ctx}: first Read message has no header: {first:?}"));
    check_header(h, ctx);
}

/// Reads the journal's whole content (from offset 0).
pub async fn read_content(ch: &Channel, journal: &str) -> Vec<u8> {
    read_all(ch, journal, 0).await.0
}

/// Lists with `selector` (no watch); returns every message of the stream.
pub async fn list(ch: &Channel, sel: LabelSelector) -> Result<Vec<ListResponse>, RpcError> {
    let mut call = ch
        .server_streaming(
            LIST,
            &ListRequest {
                selector: Some(sel),
                watch: false,
                watch_resume: None,
            },
        )
        .await?;
    let (msgs, end) = collect::<ListResponse>(&mut call).await;
    end.map(|()| msgs)
}

/// Lists with `selector`, checks the snapshot framing, and returns the journals.
pub async fn list_journals(ch: &Channel, sel: LabelSelector) -> Vec<list_response::Journal> {
    let msgs = list(ch, sel.clone())
        .await
        .unwrap_or_else(|e| panic!("List {sel:?}: {e}"));
    check_snapshot(&msgs, "List").1
}

/// Checks a (non-watch) List snapshot: first message {OK, unrouted header, ≤25
/// journals}, later ones only journals. Returns the header and all journals.
#[track_caller]
pub fn check_snapshot(msgs: &[ListResponse], ctx: &str) -> (Header, Vec<list_response::Journal>) {
    assert!(!msgs.is_empty(), "{ctx}: no messages");
    let first = &msgs[0];
    assert_status(first.status, Status::Ok, ctx);
    let h = first
        .header
        .clone()
        .unwrap_or_else(|| panic!("{ctx}: first List message without header"));
    check_unrouted_header(&h, ctx);
    let mut journals = vec![];
    for (i, m) in msgs.iter().enumerate() {
        assert!(
            m.journals.len() <= 25,
            "{ctx}: more than 25 journals in message {i}"
        );
        if i > 0 {
            assert!(
                m.status == 0 && is_zero_header(&m.header),
                "{ctx}: message {i} must carry only journals: {m:?}"
            );
            assert!(
                !m.journals.is_empty(),
                "{ctx}: empty continuation message {i}"
            );
        }
        journals.extend(m.journals.iter().cloned());
    }
    (h, journals)
}

pub fn is_zero_header(h: &Option<Header>) -> bool {
    match h {
        None => true,
        Some(h) => normalize_header(h.clone()) == normalize_header(Header::default()),
    }
}

pub(crate) fn normalize_header(mut h: Header) -> Header {
    h.process_id.get_or_insert_with(Default::default);
    h.route.get_or_insert_with(Default::default);
    h.etcd.get_or_insert_with(Default::default);
    h
}

/// Reads one snapshot of a watching List stream: messages up to and including the empty
/// end-of-snapshot marker. Returns the header and journals.
pub async fn next_watch_snapshot(
    call: &mut Streamed<ListResponse>,
    ctx: &str,
) -> (Header, Vec<list_response::Journal>) {
    let mut msgs = vec![];
    loop {
        let m = call
            .next_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{ctx}: no watch message within 10 s (after {msgs:?})"))
            .unwrap_or_else(|e| panic!("{ctx}: watch stream failed: {e}"))
            .unwrap_or_else(|| panic!("{ctx}: watch stream ended (after {msgs:?})"));
        let is_marker = m.status == 0 && m.journals.is_empty() && is_zero_header(&m.header);
        if is_marker {
            assert!(
                !msgs.is_empty(),
                "{ctx}: end-of-snapshot marker before any snapshot"
            );
            return check_snapshot(&msgs, ctx);
        }
        msgs.push(m);
    }
}

/// Starts a watching List.
pub async fn watch_list(ch: &Channel, req: ListRequest) -> Streamed<ListResponse> {
    Streamed::new(ch.server_streaming(LIST, &req).await.expect("List watch"))
}

/// Starts a Read whose responses are read by a background task.
pub async fn read_streamed(ch: &Channel, req: &ReadRequest) -> Streamed<ReadResponse> {
    Streamed::new(read_stream(ch, req).await.expect("Read"))
}

/// The broker's process id, from a List header.
pub async fn broker_id(ch: &Channel) -> protocol::process_spec::Id {
    let msgs = list(ch, selector(&[("name", "no/such/journal/for/id")], &[]))
        .await
        .expect("List");
    msgs[0].header.clone().unwrap().process_id.unwrap()
}

/// Verifies the broker still serves: creates a fresh journal, appends, reads it back.
pub async fn assert_serving(broker: &Broker) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "health/check-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let ch = broker.connect().await;
    create_journals(&ch, &[&name]).await;
    append_ok(&ch, &name, b"still serving").await;
    let (content, head) = read_all(&ch, &name, 0).await;
    assert_eq!(
        content, b"still serving",
        "broker must keep serving other clients"
    );
    assert_eq!(head, 13);
}

/// Value of a response metadata header as a string.
pub fn header_value(h: Option<&http::HeaderMap>, name: &str) -> Option<String> {
    h?.get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.to_string())
}
