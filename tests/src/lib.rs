//! Helpers shared by the integration tests: a harness that runs a real `courant serve`
//! process on a free loopback port, a small gRPC client toolbox built on
//! `protocol::grpc`, validators that mirror the checks Gazette's Go clients apply to
//! responses (`*.Validate()` in `broker/protocol`), and raw HTTP/2 helpers for sending
//! frames no well-behaved client would send.

use bytes::{BufMut, Bytes, BytesMut};
use protocol::grpc::{Channel, ClientCall, Code, FrameDecoder, RpcError};
use protocol::{
    AppendRequest, AppendResponse, ApplyRequest, ApplyResponse, Fragment, Header, JournalSpec,
    Label, LabelSelector, LabelSet, ListRequest, ListResponse, ReadRequest, ReadResponse, Sha1Sum,
    Status, apply_request::Change, journal_spec, list_response,
};
use std::future::Future;
use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use protocol;

pub mod faults;

pub const LIST: &str = "/protocol.Journal/List";
pub const APPLY: &str = "/protocol.Journal/Apply";
pub const READ: &str = "/protocol.Journal/Read";
pub const APPEND: &str = "/protocol.Journal/Append";
pub const REPLICATE: &str = "/protocol.Journal/Replicate";
pub const LIST_FRAGMENTS: &str = "/protocol.Journal/ListFragments";

/// Largest content chunk Gazette's Read sends: `(1<<15)-32`.
pub const READ_CHUNK_SIZE: usize = 32_736;

/// How long a started broker has to accept TCP connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs a test body with a hard time bound, so a hung broker fails the test instead of
/// hanging the suite.
pub async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(out) => out,
        Err(_) => panic!("test did not finish within {secs} s"),
    }
}

// ------------------------------------------------------------------------------------------
// Broker process harness.
// ------------------------------------------------------------------------------------------

/// Path of the `courant` binary: `$COURANT_BIN`, else `courant` in the cargo target
/// directory holding this test executable (`target/<profile>/deps/<test>` ⇒
/// `target/<profile>/courant`).
pub fn courant_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("COURANT_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    for dir in exe.ancestors().skip(1) {
        let candidate = dir.join("courant");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "no `courant` binary found above {} (build it first: `cargo build -p courant-broker`, \
         or set COURANT_BIN)",
        exe.display()
    );
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local_addr").port()
}

static STARTS: AtomicUsize = AtomicUsize::new(0);

/// A running `courant serve` process. Killed (SIGKILL) on drop; if the test is
/// panicking, the tail of the broker's stderr is printed to help diagnose it.
pub struct Broker {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    extra_args: Vec<String>,
    /// Holds logs and (unless a data dir was given) the data dir.
    tmp: tempfile::TempDir,
    log_path: PathBuf,
}

impl Broker {
    /// Starts a broker on a free port with a fresh data dir.
    pub async fn start(extra_args: &[&str]) -> Broker {
        Self::start_in(None, extra_args).await
    }

    /// Starts a broker on a free port; with `data_dir`, reuses that directory.
    pub async fn start_in(data_dir: Option<&Path>, extra_args: &[&str]) -> Broker {
        let tmp = tempfile::Builder::new()
            .prefix("courant-test-")
            .tempdir()
            .expect("create tempdir");
        let data_dir = match data_dir {
            Some(d) => d.to_path_buf(),
            None => {
                let d = tmp.path().join("data");
                std::fs::create_dir_all(&d).expect("create data dir");
                d
            }
        };
        let mut broker = Broker {
            child: None,
            port: 0,
            data_dir,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tmp,
            log_path: PathBuf::new(),
        };
        broker.spawn(None).await;
        broker
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The endpoint the broker advertises in Routes.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything the current (or last) broker process wrote to stderr.
    pub fn stderr(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn stderr_tail(&self, lines: usize) -> String {
        let s = self.stderr();
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Spawns the process, on `port` if given (falling back to a fresh port if that one
    /// cannot be bound), and waits until it accepts TCP connections.
    async fn spawn(&mut self, port: Option<u16>) {
        let bin = courant_bin();
        let mut want_port = port;
        for attempt in 0..4 {
            let port = want_port.take().unwrap_or_else(free_port);
            let n = STARTS.fetch_add(1, Ordering::Relaxed);
            self.log_path = self.tmp.path().join(format!("broker-{n}.stderr"));
            let log = std::fs::File::create(&self.log_path).expect("create stderr log");
            let out = log.try_clone().expect("clone log handle");
            let mut cmd = Command::new(&bin);
            cmd.arg("serve")
                .args(["--broker.port", &port.to_string()])
                .args(["--broker.host", "127.0.0.1"])
                // Test servers listen on loopback only.
                .args(["--broker.bind", "127.0.0.1"])
                .arg("--data-dir")
                .arg(&self.data_dir)
                .args(&self.extra_args)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(log);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
            self.child = Some(child);
            self.port = port;
            match self.wait_ready().await {
                Ok(()) => return,
                Err(exited) => {
                    let stderr = self.stderr();
                    let in_use = stderr.contains("in use") || stderr.contains("AddrInUse");
                    if exited && in_use && attempt < 3 {
                        eprintln!("broker could not bind port {port}; retrying on another port");
                        continue;
                    }
                    self.kill9();
                    panic!(
                        "broker (`{} serve --broker.port {port} ...`) {}\n--- broker stderr ---\n{}",
                        bin.display(),
                        if exited {
                            "exited during startup"
                        } else {
                            "did not accept TCP connections within 20 s"
                        },
                        stderr
                    );
                }
            }
        }
        unreachable!()
    }

    /// Ok once the port accepts connections and the child is still alive;
    /// Err(true) if the child exited, Err(false) on timeout.
    async fn wait_ready(&mut self) -> Result<(), bool> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.exited() {
                return Err(true);
            }
            if faults::answers(self.port).await {
                // Guard against having reached someone else's listener on a reused port.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if self.exited() {
                    return Err(true);
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(false);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// True while the broker process runs.
    pub fn is_running(&mut self) -> bool {
        !self.exited()
    }

    /// SIGKILLs the broker and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERMs the broker (a graceful shutdown) and waits up to `secs` for it to exit;
    /// returns whether it did.
    pub async fn terminate(&mut self, secs: u64) -> bool {
        let Some(c) = self.child.as_mut() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                self.child = None;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Kills the broker (if running) and starts it again on the same port and data dir.
    pub async fn restart(&mut self) {
        self.kill9();
        let port = self.port;
        self.spawn(Some(port)).await;
    }

    /// Opens a new HTTP/2 connection and returns a gRPC channel on it.
    pub async fn connect(&self) -> Channel {
        self.connect_with_handle().await.0
    }

    /// Like [`Broker::connect`], also returning the task driving the connection:
    /// aborting it drops the TCP connection abruptly.
    pub async fn connect_with_handle(&self) -> (Channel, tokio::task::JoinHandle<()>) {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap_or_else(|e| panic!("connecting to broker on port {}: {e}", self.port));
        let _ = tcp.set_nodelay(true);
        let (ch, conn) = Channel::handshake(tcp, &format!("127.0.0.1:{}", self.port))
            .await
            .unwrap_or_else(|e| panic!("HTTP/2 handshake with broker: {e}"));
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        (ch, task)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!(
                "--- courant broker stderr (last 60 lines, port {}) ---\n{}\n--- end ---",
                self.port,
                self.stderr_tail(60)
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// Message builders.
// ------------------------------------------------------------------------------------------

pub fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.into(),
        value: value.into(),
        prefix: false,
    }
}

/// A LabelSet from (name, value) pairs, sorted as Gazette requires. A name ending in
/// `:prefix` becomes a prefix-match label (selectors only).
pub fn label_set(pairs: &[(&str, &str)]) -> LabelSet {
    let mut labels: Vec<Label> = pairs
        .iter()
        .map(|(n, v)| match n.strip_suffix(":prefix") {
            Some(n) => Label {
                name: n.into(),
                value: (*v).into(),
                prefix: true,
            },
            None => label(n, v),
        })
        .collect();
    labels.sort_by(|a, b| (&a.name, &a.value).cmp(&(&b.name, &b.value)));
    LabelSet { labels }
}

pub fn selector(include: &[(&str, &str)], exclude: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        include: Some(label_set(include)),
        exclude: Some(label_set(exclude)),
    }
}

pub fn duration(secs: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: secs,
        nanos: 0,
    }
}

/// A Gazette-valid JournalSpec: replication 1, fragment length 1 MiB, codec NONE, no
/// stores, refresh interval 1 s, retention/flush interval unset.
pub fn spec(name: &str, labels: &[(&str, &str)]) -> JournalSpec {
    JournalSpec {
        name: name.into(),
        replication: 1,
        labels: Some(label_set(labels)),
        fragment: Some(journal_spec::Fragment {
            length: 1 << 20,
            compression_codec: protocol::CompressionCodec::None as i32,
            stores: vec![],
            refresh_interval: Some(duration(1)),
            retention: None,
            flush_interval: None,
            path_postfix_template: String::new(),
        }),
        flags: 0,
        max_append_rate: 0,
        suspend: None,
    }
}

/// Normalizes presence-only differences (absent vs. empty non-nullable submessages), so
/// specs can be compared for meaning: Go always emits `labels`, `fragment` and its
/// durations, and a Rust broker may or may not.
pub fn normalize_spec(mut s: JournalSpec) -> JournalSpec {
    s.labels.get_or_insert_with(Default::default);
    let f = s.fragment.get_or_insert_with(Default::default);
    f.refresh_interval.get_or_insert_with(Default::default);
    f.retention.get_or_insert_with(Default::default);
    f.flush_interval.get_or_insert_with(Default::default);
    if s.suspend == Some(Default::default()) {
        s.suspend = None;
    }
    s
}

/// Upsert regardless of the current revision (expect_mod_revision −1).
pub fn upsert(spec: JournalSpec) -> Change {
    Change {
        expect_mod_revision: -1,
        upsert: Some(spec),
        delete: String::new(),
    }
}

/// Upsert that requires the journal not to exist yet (expect_mod_revision 0).
pub fn create(spec: JournalSpec) -> Change {
    Change {
        expect_mod_revision: 0,
        upsert: Some(spec),
        delete: String::new(),
    }
}

pub fn delete(name: &str, expect_mod_revision: i64) -> Change {
    Change {
        expect_mod_revision,
        upsert: None,
        delete: name.into(),
    }
}

pub fn sha1_sum(data: &[u8]) -> Sha1Sum {
    use sha1::Digest;
    let d = sha1::Sha1::digest(data);
    let d = d.as_slice();
    Sha1Sum {
        part1: u64::from_be_bytes(d[0..8].try_into().unwrap()),
        part2: u64::from_be_bytes(d[8..16].try_into().unwrap()),
        part3: u32::from_be_bytes(d[16..20].try_into().unwrap()),
    }
}

pub fn status_name(s: i32) -> String {
    match Status::try_from(s) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("Status({s})"),
    }
}

/// Asserts `actual` is the Status `expect`, with a readable message.
#[track_caller]
pub fn assert_status(actual: i32, expect: Status, ctx: &str) {
    assert_eq!(
        status_name(actual),
        status_name(expect as i32),
        "unexpected status: {ctx}"
    );
}

/// Asserts an RPC failed with `code` and exactly `message`.
#[track_caller]
pub fn assert_rpc_error<T: std::fmt::Debug>(
    res: Result<T, RpcError>,
    code: Code,
    message: &str,
    ctx: &str,
) {
    match res {
        Ok(v) => panic!("{ctx}: expected gRPC error {code:?} {message:?}, got OK response {v:?}"),
        Err(e) => {
            assert_eq!(
                (e.code, e.message.as_str()),
                (code, message),
                "{ctx}: unexpected gRPC error"
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// Validators mirroring Gazette's Go-side response checks.
// ------------------------------------------------------------------------------------------

/// `Header.Validate()` as Go clients apply it, plus non-zero etcd fields.
#[track_caller]
pub fn check_header(h: &Header, ctx: &str) {
    let etcd = h.etcd.unwrap_or_default();
    assert!(
        etcd.cluster_id != 0 && etcd.member_id != 0 && etcd.revision > 0 && etcd.raft_term != 0,
        "{ctx}: header etcd fields must be non-zero (Go clients reject it): {h:?}"
    );
    if let Some(id) = &h.process_id
        && !(id.zone.is_empty() && id.suffix.is_empty())
    {
        assert!(
            !id.zone.is_empty() && id.suffix.len() >= 4,
            "{ctx}: invalid process_id {id:?}"
        );
    }
    let route = h.route.clone().unwrap_or_default();
    let mut sorted = route.members.clone();
    sorted.sort_by(|a, b| (&a.zone, &a.suffix).cmp(&(&b.zone, &b.suffix)));
    sorted.dedup();
    assert_eq!(
        sorted, route.members,
        "{ctx}: route members not sorted & unique"
    );
    assert!(
        route.primary >= -1 && route.primary < route.members.len() as i32,
        "{ctx}: route primary out of range: {route:?}"
    );
    assert!(
        route.endpoints.is_empty() || route.endpoints.len() == route.members.len(),
        "{ctx}: route endpoints don't align with members: {route:?}"
    );
}

/// The header of a journal served by this single-node broker: process_id = self, route
/// members [self], primary 0, endpoints [broker endpoint].
#[track_caller]
pub fn check_routed_header(h: &Header, broker: &Broker, ctx: &str) {
    check_header(h, ctx);
    let route = h.route.clone().unwrap_or_default();
    assert_eq!(
        route.members.len(),
        1,
        "{ctx}: expected route [self]: {h:?}"
    );
    assert_eq!(route.primary, 0, "{ctx}: expected primary 0: {h:?}");
    assert_eq!(
        route.endpoints,
        vec![broker.endpoint()],
        "{ctx}: expected endpoints [{}]: {h:?}",
        broker.endpoint()
    );
    assert_eq!(
        h.process_id.as_ref(),
        Some(&route.members[0]),
        "{ctx}: process_id must be the broker itself (the route's only member)"
    );
}

/// The header of a response that is not about a routed journal (List, Apply, or an
/// unknown journal): process_id = self, route {primary −1} with no members/endpoints.
#[track_caller]
pub fn check_unrouted_header(h: &Header, ctx: &str) {
    check_header(h, ctx);
    let route = h.route.clone().unwrap_or_default();
    assert!(
        route.members.is_empty() && route.endpoints.is_empty() && route.primary == -1,
        "{ctx}: expected an unrouted header (no members, primary -1): {h:?}"
    );
    let id = h.process_id.clone().unwrap_or_default();
    assert!(
        !id.zone.is_empty() && !id.suffix.is_empty(),
        "{ctx}: unrouted header must name the broker as process_id: {h:?}"
    );
}

/// `Fragment.Validate()`.
#[track_caller]
pub fn check_fragment(f: &Fragment, ctx: &str) {
    assert!(
        f.journal.len() >= 4 && !f.journal.starts_with('/') && !f.journal.contains(';'),
        "{ctx}: invalid fragment journal {:?}",
        f.journal
    );
    assert!(f.begin <= f.end, "{ctx}: fragment begin > end: {f:?}");
    assert!(
        f.compression_codec != 0,
        "{ctx}: fragment codec INVALID (Go clients reject it): {f:?}"
    );
}

/// `AppendResponse.Validate()`.
#[track_caller]
pub fn check_append_response(r: &AppendResponse, ctx: &str) {
    assert!(
        Status::try_from(r.status).is_ok(),
        "{ctx}: unknown status {}",
        r.status
    );
    check_header(
        r.header
            .as_ref()
            .unwrap_or_else(|| panic!("{ctx}: AppendResponse without header: {r:?}")),
        ctx,
    );
    if r.status == Status::Ok as i32 {
        assert!(
            r.commit.is_some(),
            "{ctx}: OK AppendResponse without commit"
        );
    }
    if r.status == Status::Ok as i32 || r.status == Status::RegisterMismatch as i32 {
        assert!(
            r.registers.is_some(),
            "{ctx}: AppendResponse must carry (possibly empty) registers: {r:?}"
        );
    }
    if let Some(c) = &r.commit {
        check_fragment(c, ctx);
    }
}

/// `ReadResponse.Validate()`; content chunks must carry only offset + content.
#[track_caller]
pub fn check_read_response(r: &ReadResponse, ctx: &str) {
    assert!(
        Status::try_from(r.status).is_ok(),
        "{ctx}: unknown status {}",
        r.status
    );
    if !r.content.is_empty() {
        let only = ReadResponse {
            offset: r.offset,
            content: r.content.clone(),
            ..Default::default()
        };
        assert_eq!(
            r, &only,
            "{ctx}: a content chunk must carry only offset and content"
        );
        assert!(
            r.content.len() <= READ_CHUNK_SIZE,
            "{ctx}: content chunk of {} bytes exceeds {READ_CHUNK_SIZE}",
            r.content.len()
        );
        return;
    }
    if let Some(h) = &r.header {
        check_header(h, ctx);
    }
    assert!(r.write_head >= 0, "{ctx}: negative write_head: {r:?}");
    match &r.fragment {
        Some(f) => {
            check_fragment(f, ctx);
            assert!(
                f.begin <= r.offset && r.offset < f.end,
                "{ctx}: offset {} outside fragment [{}, {}): {r:?}",
                r.offset,
                f.begin,
                f.end
            );
            assert!(
                r.write_head >= f.end,
                "{ctx}: write_head {} < fragment end {}",
                r.write_head,
                f.end
            );
        }
        None => {
            assert!(
                !(r.status == Status::Ok as i32 && r.offset != 0),
                "{ctx}: OK metadata without fragment must have offset 0: {r:?}"
            );
            assert!(
                r.fragment_url.is_empty(),
                "{ctx}: fragment_url without fragment: {r:?}"
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// RPC helpers.
// ------------------------------------------------------------------------------------------

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
fn check_routed_header_loose(first: &ReadResponse, ctx: &str) {
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

fn normalize_header(mut h: Header) -> Header {
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

// ------------------------------------------------------------------------------------------
// Raw HTTP/2 (for malformed input).
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Checksummed records (restart test).
// ------------------------------------------------------------------------------------------

/// A self-describing record: `REC!` writer:u32 seq:u32 len:u32 payload sha1(prefix)[..8].
pub fn make_record(writer: u32, seq: u32, payload_len: usize) -> Vec<u8> {
    use sha1::Digest;
    let mut r = Vec::with_capacity(16 + payload_len + 8);
    r.extend_from_slice(b"REC!");
    r.extend_from_slice(&writer.to_be_bytes());
    r.extend_from_slice(&seq.to_be_bytes());
    r.extend_from_slice(&(payload_len as u32).to_be_bytes());
    let mut x = (writer as u64) << 32 | seq as u64;
    for _ in 0..payload_len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        r.push((x >> 56) as u8);
    }
    let d = sha1::Sha1::digest(&r);
    r.extend_from_slice(&d.as_slice()[..8]);
    r
}

/// A parsed record's (offset, writer, seq, total length).
pub type RecordAt = (u64, u32, u32, usize);

/// Parses consecutive records; Err(offset, why) at the first byte that isn't a valid record.
pub fn parse_records(data: &[u8]) -> Result<Vec<RecordAt>, (usize, String)> {
    let mut out = vec![];
    let mut at = 0usize;
    while at < data.len() {
        let rest = &data[at..];
        if rest.len() < 16 || &rest[..4] != b"REC!" {
            return Err((at, "no record header".into()));
        }
        let writer = u32::from_be_bytes(rest[4..8].try_into().unwrap());
        let seq = u32::from_be_bytes(rest[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(rest[12..16].try_into().unwrap()) as usize;
        let total = 16 + len + 8;
        if rest.len() < total {
            return Err((at, format!("truncated record (w{writer} s{seq})")));
        }
        if rest[..total] != make_record(writer, seq, len)[..] {
            return Err((at, format!("corrupt record (w{writer} s{seq})")));
        }
        out.push((at as u64, writer, seq, total));
        at += total;
    }
    Ok(out)
}

/// Pseudo-random, somewhat compressible data (a quarter random bytes, the rest from a small
/// alphabet), so that every codec has work to do.
pub fn compressible_data(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if i % 4 == 0 {
                x as u8
            } else {
                b'a' + (x % 7) as u8
            }
        })
        .collect()
}

/// Every message of a Read, and how the call ended.
pub async fn read_msgs(
    ch: &Channel,
    req: ReadRequest,
) -> (Vec<ReadResponse>, Result<(), RpcError>) {
    let mut call = read_stream(ch, &req).await.expect("Read call");
    collect::<ReadResponse>(&mut call).await
}

/// The content of Read responses, concatenated.
pub fn content_of(msgs: &[ReadResponse]) -> Vec<u8> {
    msgs.iter()
        .flat_map(|m| m.content.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_sum_splits_big_endian() {
        // SHA1("foobar") = 8843d7f92416211de9ebb963ff4ce28125932878
        let s = sha1_sum(b"foobar");
        assert_eq!(s.part1, 0x8843d7f92416211d);
        assert_eq!(s.part2, 0xe9ebb963ff4ce281);
        assert_eq!(s.part3, 0x25932878);
    }

    #[test]
    fn records_round_trip_and_corruption_is_detected() {
        let mut data = make_record(1, 2, 100);
        data.extend_from_slice(&make_record(3, 4, 0));
        let recs = parse_records(&data).unwrap();
        assert_eq!(recs, vec![(0, 1, 2, 124), (124, 3, 4, 24)]);
        let mut bad = data.clone();
        bad[50] ^= 1;
        assert_eq!(parse_records(&bad).unwrap_err().0, 0);
        assert_eq!(parse_records(&data[..130]).unwrap_err().0, 124);
        let mut junk = data.clone();
        junk.push(0);
        assert!(parse_records(&junk).is_err());
    }

    #[test]
    #[should_panic(expected = "must carry only offset and content")]
    fn content_chunk_with_write_head_is_rejected() {
        check_read_response(
            &ReadResponse {
                offset: 3,
                write_head: 9,
                content: Bytes::from_static(b"x"),
                ..Default::default()
            },
            "test",
        );
    }

    #[test]
    #[should_panic(expected = "outside fragment")]
    fn metadata_offset_outside_fragment_is_rejected() {
        check_read_response(
            &ReadResponse {
                offset: 9,
                write_head: 9,
                fragment: Some(Fragment {
                    journal: "a/journal".into(),
                    begin: 0,
                    end: 9,
                    compression_codec: 1,
                    ..Default::default()
                }),
                ..Default::default()
            },
            "test",
        );
    }

    #[test]
    #[should_panic(expected = "must carry (possibly empty) registers")]
    fn ok_append_response_without_registers_is_rejected() {
        let header = Header {
            etcd: Some(protocol::header::Etcd {
                cluster_id: 1,
                member_id: 1,
                revision: 1,
                raft_term: 1,
            }),
            route: Some(protocol::Route {
                primary: -1,
                ..Default::default()
            }),
            ..Default::default()
        };
        check_append_response(
            &AppendResponse {
                header: Some(header),
                commit: Some(Fragment {
                    journal: "a/journal".into(),
                    compression_codec: 1,
                    ..Default::default()
                }),
                ..Default::default()
            },
            "test",
        );
    }

    #[test]
    #[should_panic(expected = "etcd fields must be non-zero")]
    fn zeroed_header_is_rejected() {
        check_header(&Header::default(), "test");
    }

    #[test]
    fn label_sets_are_sorted_and_prefix_labels_parsed() {
        let s = label_set(&[("b", "1"), ("a", "2"), ("name:prefix", "x/")]);
        let names: Vec<(&str, &str, bool)> = s
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str(), l.prefix))
            .collect();
        assert_eq!(
            names,
            vec![("a", "2", false), ("b", "1", false), ("name", "x/", true)]
        );
    }
}
