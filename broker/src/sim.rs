//! A seeded, deterministic simulation of the replication pipeline (spec §2.2, §2.5, §11
//! items 1-2): several brokers, each with real [`Spool`]s on disk, replicate appends through a
//! simulated network and a simulated keyspace while the seed injects faults, and invariants
//! are checked after every step. One glommio executor runs everything, one await at a time,
//! so a run is a pure function of its seed.
//!
//! What is real and what is mirrored:
//! - **Real**: every spool operation ([`Spool::open`] recovery after a crash,
//!   `apply_proposal`, `apply_content`, `write`, `commit`, `rollback`, `next`) runs the
//!   storage crate's code against files in a temporary directory, through glommio;
//!   Gazette's gatherSync decision is [`decide_sync`] itself; committed content is read back
//!   from the fragment files.
//! - **Mirrored** (kept step for step with the code they copy, which needs a `Core`, sockets
//!   and etcd): the primary's side of `append.rs` (resolve, proxy to the primary this broker
//!   knows of, acquire and roll back the spool, reuse the pipeline if it serves the Route or
//!   build one, `sync` with roll-forwards and read-throughs, update assignments, await the
//!   desired replication, the offset preconditions against the fragment index
//!   (INDEX_HAS_GREATER_OFFSET, the `wrote_before` resume, explicit offsets at the write head,
//!   the first fragment's roll), `maybe_roll`/`roll`, stream content with `content_delta`,
//!   the commit proposal, gather every ack, then the local commit; on a failure after the
//!   content was streamed, the primary still commits what it proposed (`keep_proposed`),
//!   otherwise the spool rolls back; the pipeline is dropped), `Replica::persist` (every completed fragment
//!   reaches a shared store at once, and the index lists it at once: the index's best
//!   case, unless [`Model::StaleListing`]), the replica's side of `replicate.rs` (wait for the
//!   header's revision, answer WRONG_ROUTE to a Route it does not share (NOT_JOURNAL_BROKER
//!   once it is no member), take the spool, apply each proposal and answer OK or
//!   PROPOSAL_MISMATCH with the spool's fragment and registers, require the exact content
//!   delta, end the stream when its own Route changes, roll back at the stream's end),
//!   `pipeline::guard` (a primary whose Route changed fails every later pipeline operation)
//!   and the allocator (additions first; removals only of surplus members of a consistent
//!   journal; promotions).
//!
//! The keyspace keeps every revision of each journal's Route; each broker sees a prefix of
//! them and catches up at its own pace (or at once, for some seeds), so deposed primaries
//! and lagging replicas act on old Routes. The network is a queue of messages per
//! replication stream: a replica applies what it was sent at once or later (a slow
//! replica), in order, and before its primary reads the answer. Faults, all chosen by the
//! seed: a lost request or response (the stream breaks: the replica rolls back), a broker
//! crash (its spools are dropped without a rollback and reopened with [`Spool::open`], as
//! after `kill -9`; it may stay down for some steps), a crash of the primary at any point
//! of an append (also after its peers committed and before it committed or acknowledged),
//! a Route change in the middle of an append (a replica that notices applies part of what
//! was in flight, then rolls back), a client that sends to a broker that is not (or no
//! longer) primary, spec changes (codec, fragment length) and requested rolls. No clock is
//! simulated: nothing here depends on time (flush intervals are left out; the executor's
//! ticker, see [`on_executor`], only wakes the reactor).
//!
//! Invariants, checked after every step and once more after healing every fault:
//! 1. Every acknowledged append's bytes are, at its offsets, in the committed content read
//!    back from the fragment files of every member of the Route it was replicated through
//!    that has not left the Route since.
//! 2. No offset of a journal is ever committed with different bytes by two brokers, or by
//!    one broker at two times: a byte committed anywhere is never rewritten.
//! 3. Committed bytes never vanish from a broker's files (a committed fragment only grows,
//!    across crashes too), and every committed fragment's SHA-1 is that of its bytes.
//! 4. After each successful append or pulse, every member of its Route that did not crash
//!    meanwhile holds the same spool fragment (all eight fields) and registers, with nothing
//!    pending.
//! 5. Liveness: once faults stop and the keyspace has propagated, every journal accepts an
//!    append within a few attempts.
//!
//! `COURANT_SIM_SEEDS=N` runs N seeds instead of the default (from `COURANT_SIM_FIRST`, 0);
//! `COURANT_SIM_SEED=S` runs seed S alone; `COURANT_SIM_STEPS=K` changes the steps per seed,
//! `COURANT_SIM_TRACE=1` prints every event, `COURANT_SIM_MODEL=lease-expiry` or
//! `stale-listing` picks another [`Model`]. A violation panics with `seed S: ...` and the tail
//! of the event trace.

use crate::append::empty_at;
use crate::pipeline::{MAX_SYNC_ROUNDS, Synced, decide_sync};
use bytes::Bytes;
use protocol::process_spec::Id;
use protocol::{
    CompressionCodec, Fragment, Header, Label, LabelSet, ReplicateResponse, Route, Status,
};
use sha1::{Digest, Sha1};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::rc::Rc;
use storage::spool::{ContentError, Spool};
use storage::{FragmentFile, LocalFragment};

/// Seeds run by `simulate_seeds` unless `COURANT_SIM_SEEDS` says otherwise.
const DEFAULT_SEEDS: u64 = 100;
/// Steps per seed unless `COURANT_SIM_STEPS` says otherwise.
const DEFAULT_STEPS: usize = 150;
/// Lines of the event trace printed with a violation.
const TRACE_TAIL: usize = 80;
/// Attempts of an append after healing before the journal is declared stuck.
const HEAL_ATTEMPTS: usize = 6;
/// How often the executor is woken regardless of I/O (see [`on_executor`]).
const TICK: std::time::Duration = std::time::Duration::from_millis(50);
/// Ticks without a step before the run is declared stalled (two minutes of ticks: counting
/// ticks rather than wall time keeps a frozen or starved machine from looking like a stall).
const STALL_TICKS: u32 = 2400;

thread_local! {
    /// The seed running on this thread and the steps it took, for the stall detector.
    static PROGRESS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// splitmix64: tiny, and good enough to drive a simulation.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        assert!(n > 0);
        (self.next() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo <= hi);
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, per_mille: u32) -> bool {
        self.next() % 1000 < u64::from(per_mille)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Which primary runs the appends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// append.rs: the primary commits and acknowledges only after every peer acknowledged.
    Correct,
    /// A deliberately broken primary that commits and acknowledges as soon as it sent the
    /// commit proposal, and gathers the peers' acks afterwards: the checker must catch it.
    AckBeforeGather,
    /// A deliberately broken primary that takes a peer's PROPOSAL_MISMATCH from a larger
    /// offset as agreement instead of rolling everyone forward.
    NoRollForward,
}

/// How the simulated keyspace may take members out of a Route.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Model {
    /// The allocator's rules only: surplus members of consistent journals are removed.
    Allocator,
    /// Also, a crashed broker's lease may expire while it is down: etcd deletes its
    /// assignments whatever the journal's state, and the allocator replaces it.
    LeaseExpiry,
    /// The allocator's rules, but the primary's fragment index never sees the store (its
    /// listing is older than every upload: `refresh_interval` is 5 minutes by default),
    /// only what the broker itself holds.
    StaleListing,
}

/// What one seed simulates, drawn from the seed.
struct Config {
    brokers: usize,
    journals: usize,
    steps: usize,
    variant: Variant,
    model: Model,
    /// Per-mille chance that a message (request or response) on a replication stream is
    /// lost, which breaks the stream.
    loss: u32,
    /// Per-mille chance of a fault at each fault point of an append.
    mid_fault: u32,
    /// Per-mille chance that a step crashes a broker.
    crash: u32,
    /// Per-mille chance that a step changes a Route.
    route_change: u32,
    /// Per-mille chance that a broker behind the keyspace catches up, at a Route change
    /// and at each step (1000: the keyspace reaches everyone at once).
    propagation: u32,
    /// Per-mille chance that a client sends its append to some broker other than the
    /// current primary (a stale route cache).
    stray_client: u32,
}

impl Config {
    fn draw(rng: &mut Rng, steps: usize, variant: Variant, model: Model) -> Config {
        Config {
            brokers: rng.range(3, 5),
            journals: rng.range(1, 3),
            steps,
            variant,
            model,
            loss: rng.pick(&[0, 3, 10, 30]),
            mid_fault: rng.pick(&[0, 15, 40, 100]),
            crash: rng.pick(&[0, 20, 50]),
            route_change: rng.pick(&[20, 60, 120]),
            propagation: rng.pick(&[1000, 1000, 600, 250]),
            stray_client: rng.pick(&[0, 100, 300]),
        }
    }
}

/// Why an operation stopped: an expected failure (the client sees an error or a status and
/// retries), or a bug (a violated invariant, or an error the simulation never injects).
#[derive(Debug)]
enum Stop {
    Failed(String),
    /// A status answered to the client (append.rs's `respond_status`): the append ends
    /// without a rollback, and the primary keeps its pipeline.
    Status(String),
    Bug(String),
}

type Res<T> = Result<T, Stop>;

impl From<storage::StorageError> for Stop {
    fn from(e: storage::StorageError) -> Stop {
        // No disk faults are injected, so any storage error is unexpected.
        Stop::Bug(format!("spool: {e}"))
    }
}

fn failed<T>(msg: impl Into<String>) -> Res<T> {
    Err(Stop::Failed(msg.into()))
}

fn bug<T>(msg: impl Into<String>) -> Res<T> {
    Err(Stop::Bug(msg.into()))
}

/// A violated invariant: the seed, the step, what failed and the tail of the trace.
#[derive(Debug)]
struct Violation {
    seed: u64,
    step: usize,
    what: String,
    trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}: step {}: {}", self.seed, self.step, self.what)?;
        writeln!(f, "last events:")?;
        let from = self.trace.len().saturating_sub(TRACE_TAIL);
        for line in &self.trace[from..] {
            writeln!(f, "  {line}")?;
        }
        write!(
            f,
            "rerun with COURANT_SIM_SEED={} cargo test -p courant-broker --bin courant sim",
            self.seed
        )
    }
}

/// Counters of one or more runs.
#[derive(Default, Debug, Clone)]
struct Stats {
    seeds: u64,
    steps: u64,
    appends: u64,
    acked: u64,
    acked_bytes: u64,
    failed: u64,
    pulses: u64,
    crashes: u64,
    route_changes: u64,
    roll_forwards: u64,
    read_throughs: u64,
    /// First proposals a replica refused (WRONG_ROUTE, NOT_JOURNAL_BROKER, ...).
    wrong_routes: u64,
    proxied: u64,
    /// Fragments completed and persisted to the store.
    persisted: u64,
    /// Appends answered INDEX_HAS_GREATER_OFFSET.
    index_fenced: u64,
    /// decide_sync errors (expected: a replica that is no member answers
    /// NOT_JOURNAL_BROKER)...
    sync_errors: u64,
    /// ...of which PROPOSAL_MISMATCH from a replica neither ahead nor empty at our end.
    mismatch_errors: u64,
    self_rejections: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.steps += o.steps;
        self.appends += o.appends;
        self.acked += o.acked;
        self.acked_bytes += o.acked_bytes;
        self.failed += o.failed;
        self.pulses += o.pulses;
        self.crashes += o.crashes;
        self.route_changes += o.route_changes;
        self.roll_forwards += o.roll_forwards;
        self.read_throughs += o.read_throughs;
        self.wrong_routes += o.wrong_routes;
        self.proxied += o.proxied;
        self.persisted += o.persisted;
        self.index_fenced += o.index_fenced;
        self.sync_errors += o.sync_errors;
        self.mismatch_errors += o.mismatch_errors;
        self.self_rejections += o.self_rejections;
    }
}

/// One message of a primary to a replica (append.rs sends every proposal with
/// `acknowledge`).
#[derive(Clone)]
enum Msg {
    Proposal {
        fragment: Fragment,
        registers: LabelSet,
    },
    Content {
        content: Bytes,
        delta: i64,
    },
}

/// A client's append.
#[derive(Clone, Default)]
struct Request {
    chunks: Vec<Bytes>,
    union: Option<LabelSet>,
    /// A suspension offset this far past the spool's end (the primary rolls there first).
    suspend_ahead: Option<i64>,
    /// An explicit offset at the journal's write head, as `gazctl journals reset-head`
    /// sends after INDEX_HAS_GREATER_OFFSET.
    at_head: bool,
}

/// One Replicate stream: what the primary sent and the replica has not applied yet, and
/// the replica's answers the primary has not read yet.
struct Stream {
    peer: usize,
    queue: VecDeque<Msg>,
    responses: VecDeque<ReplicateResponse>,
    /// The replica checked the first message's Route and holds its spool for the stream.
    opened: bool,
    /// Why the stream ended, once it has.
    broken: Option<String>,
}

/// One revision of a journal's Route.
#[derive(Clone, Debug)]
struct RouteRev {
    revision: i64,
    /// Broker indices, ascending.
    members: Vec<usize>,
    primary: Option<usize>,
}

impl RouteRev {
    /// Gazette's Route equivalence: same members and primary.
    fn equivalent(&self, other: &RouteRev) -> bool {
        self.members == other.members && self.primary == other.primary
    }

    fn proto(&self) -> Route {
        Route {
            members: self.members.iter().map(|&m| broker_id(m)).collect(),
            primary: self
                .primary
                .and_then(|p| self.members.iter().position(|&m| m == p))
                .map_or(-1, |i| i as i32),
            endpoints: Vec::new(),
        }
    }
}

/// A primary's pipeline for one Route (it lives in the primary's `Broker::pipelines`).
struct Pipe {
    /// The Route it was built for, and that Route's index in the journal's history.
    route: RouteRev,
    index: usize,
    streams: Vec<Stream>,
}

struct Journal {
    name: String,
    replication: usize,
    codec: CompressionCodec,
    fragment_length: i64,
    /// Every revision of the Route, oldest first.
    routes: Vec<RouteRev>,
    /// Route revisions a primary advertised as synced in the assignments (Gazette's
    /// "consistent").
    advertised: BTreeSet<i64>,
}

impl Journal {
    fn route(&self) -> &RouteRev {
        self.routes.last().expect("a journal has a Route")
    }

    fn consistent(&self) -> bool {
        self.advertised.contains(&self.route().revision)
    }
}

/// The committed content of one fragment as last read back from its file.
struct FragView {
    end: i64,
    bytes: Vec<u8>,
    sha: Sha1,
}

/// Everything a broker has committed to a journal, by fragment begin.
#[derive(Default)]
struct View {
    frags: BTreeMap<i64, FragView>,
    /// Re-read every fragment in full (after a restart).
    stale: bool,
}

struct Broker {
    root: PathBuf,
    up: bool,
    down_until: usize,
    /// Crashes so far: a member that crashed during an append is not held to invariant 4
    /// (its spool recovered what it had committed, possibly an older fragment).
    incarnation: u64,
    /// Per journal: the index of the Route revision this broker's keyspace has reached.
    seen: Vec<usize>,
    /// Per journal, while up.
    spools: Vec<Option<Spool>>,
    /// Per journal: fragments completed by rolls or recovered by `Spool::open`.
    completed: Vec<Vec<LocalFragment>>,
    /// Per journal: the pipeline of this broker's last append as primary.
    pipelines: Vec<Option<Pipe>>,
    /// Per journal: whether the spool's directory existed when it was last opened
    /// (`Replica::wrote_before`).
    wrote_before: Vec<bool>,
    /// Whether this broker ever opened its spools (so their directories exist).
    spools_opened: bool,
    views: Vec<View>,
}

/// How the keyspace changes a Route.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Change {
    Promote,
    Add,
    Remove,
}

/// An acknowledged append, and the brokers that must keep it.
struct Ack {
    journal: usize,
    begin: i64,
    bytes: Vec<u8>,
    holders: BTreeSet<usize>,
    step: usize,
}

fn broker_id(b: usize) -> Id {
    Id {
        zone: "sim".into(),
        suffix: format!("broker-{b}"),
    }
}

fn short(f: &Fragment) -> String {
    let sum = f.sum.unwrap_or_default();
    format!(
        "[{}, {}) {:08x} c{}",
        f.begin,
        f.end,
        sum.part1 >> 32,
        f.compression_codec
    )
}

fn regs(r: &LabelSet) -> String {
    let parts: Vec<String> = r
        .labels
        .iter()
        .map(|l| format!("{}={}", l.name, l.value))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// append.rs `maybe_roll`, without flush intervals: the offset to roll to, if any.
fn maybe_roll(
    spool: &Spool,
    roll_to: Option<i64>,
    length: i64,
    codec: CompressionCodec,
) -> Option<i64> {
    let cur = spool.fragment();
    let content_len = cur.end - cur.begin;
    let flush = content_len == 0
        || content_len > length
        || roll_to.is_some_and(|r| r != 0 && r != cur.begin);
    if !flush {
        return None;
    }
    let at = roll_to.filter(|&r| r != 0).unwrap_or(cur.end);
    if content_len == 0 && at == cur.end && cur.compression_codec == codec as i32 {
        return None;
    }
    Some(at)
}

/// replicate.rs `apply_proposal` and the content branch: applies one message of an opened
/// stream to the replica's spool, returning the answer to a proposal.
async fn apply_at_replica(
    broker: &mut Broker,
    j: usize,
    msg: Msg,
    store: &mut Vec<Fragment>,
) -> Res<Option<ReplicateResponse>> {
    let spool = broker.spools[j]
        .as_mut()
        .expect("messages reach only live replicas");
    match msg {
        Msg::Proposal {
            fragment,
            registers,
        } => {
            let (ok, completed) = spool.apply_proposal(&fragment, &registers).await?;
            if let Some(done) = completed {
                persist(store, &done.fragment);
                broker.completed[j].push(done);
            }
            if ok {
                return Ok(Some(ReplicateResponse {
                    status: Status::Ok as i32,
                    ..Default::default()
                }));
            }
            Ok(Some(ReplicateResponse {
                status: Status::ProposalMismatch as i32,
                header: None,
                fragment: Some(spool.fragment().clone()),
                registers: Some(spool.registers().clone()),
            }))
        }
        Msg::Content { content, delta } => match spool.apply_content(&content, delta).await {
            Ok(()) => Ok(None),
            Err(ContentError::Delta(m)) => {
                spool.rollback();
                bug(format!("replica rejected content: {m}"))
            }
            Err(ContentError::Storage(e)) => Err(e.into()),
        },
    }
}

/// `Replica::persist`: a completed fragment reaches the store (once).
fn persist(store: &mut Vec<Fragment>, fragment: &Fragment) {
    if !store
        .iter()
        .any(|f| storage::spool::same_fragment(f, fragment))
    {
        store.push(fragment.clone());
    }
}

/// Reads `[from, to)` of a fragment file; a short file is a violation.
async fn read_range(file: &FragmentFile, from: i64, to: i64) -> Res<Vec<u8>> {
    let mut out = Vec::with_capacity((to - from) as usize);
    let mut at = from;
    while at < to {
        let got = file.read_at(at, (to - at) as usize).await?;
        if got.is_empty() {
            return bug(format!(
                "invariant 3: {} ends at {at}, before its committed end {to}",
                file.path().display()
            ));
        }
        out.extend_from_slice(&got);
        at += got.len() as i64;
    }
    Ok(out)
}

/// The bytes `[offset, offset + len)` of a broker's committed content, if it has them all.
fn read_view(view: &View, offset: i64, len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut at = offset;
    let end = offset + len as i64;
    while at < end {
        let (begin, frag) = view.frags.range(..=at).next_back()?;
        if frag.end <= at {
            return None;
        }
        let to = frag.end.min(end);
        out.extend_from_slice(&frag.bytes[(at - begin) as usize..(to - begin) as usize]);
        at = to;
    }
    Some(out)
}

struct Sim {
    seed: u64,
    rng: Rng,
    cfg: Config,
    step: usize,
    /// Faults have stopped: clients reach the current primary, and the keyspace reaches
    /// everyone at once.
    healing: bool,
    _dir: tempfile::TempDir,
    brokers: Vec<Broker>,
    journals: Vec<Journal>,
    /// Keyspace revision.
    revision: i64,
    /// Per journal, per offset: the byte first committed there, and by which broker.
    history: Vec<Vec<Option<(u8, usize)>>>,
    /// Per journal: the fragment store, every completed fragment persisted at once (the
    /// uploader is fast and listings are fresh: the index's best case).
    store: Vec<Vec<Fragment>>,
    acks: Vec<Ack>,
    trace: Vec<String>,
    stats: Stats,
    next_writer: u64,
}

impl Sim {
    async fn new(seed: u64, steps: usize, variant: Variant, model: Model) -> Res<Sim> {
        let mut rng = Rng(seed);
        let cfg = Config::draw(&mut rng, steps, variant, model);
        let dir = sim_dir().map_err(|e| Stop::Bug(format!("tempdir: {e}")))?;
        let mut journals = Vec::new();
        let mut revision = 1;
        for j in 0..cfg.journals {
            let replication = rng.range(2, cfg.brokers);
            let mut members = BTreeSet::new();
            while members.len() < replication {
                members.insert(rng.below(cfg.brokers));
            }
            let members: Vec<usize> = members.into_iter().collect();
            let primary = Some(rng.pick(&members));
            revision += 1;
            journals.push(Journal {
                name: format!("sim/journal-{j}"),
                replication,
                codec: rng.pick(&[
                    CompressionCodec::None,
                    CompressionCodec::Snappy,
                    CompressionCodec::Gzip,
                ]),
                fragment_length: rng.range(48, 400) as i64,
                routes: vec![RouteRev {
                    revision,
                    members,
                    primary,
                }],
                advertised: BTreeSet::new(),
            });
        }
        let brokers = (0..cfg.brokers)
            .map(|b| Broker {
                root: dir.path().join(format!("broker-{b}")),
                up: false,
                down_until: 0,
                incarnation: 0,
                seen: vec![0; cfg.journals],
                spools: (0..cfg.journals).map(|_| None).collect(),
                completed: (0..cfg.journals).map(|_| Vec::new()).collect(),
                pipelines: (0..cfg.journals).map(|_| None).collect(),
                wrote_before: vec![false; cfg.journals],
                spools_opened: false,
                views: (0..cfg.journals).map(|_| View::default()).collect(),
            })
            .collect();
        let mut sim = Sim {
            seed,
            rng,
            step: 0,
            healing: false,
            _dir: dir,
            brokers,
            history: (0..cfg.journals).map(|_| Vec::new()).collect(),
            store: (0..cfg.journals).map(|_| Vec::new()).collect(),
            journals,
            revision,
            acks: Vec::new(),
            trace: Vec::new(),
            stats: Stats {
                seeds: 1,
                ..Default::default()
            },
            next_writer: 0,
            cfg,
        };
        sim.log(format!(
            "seed {seed}: {} brokers, loss {}‰, mid-append faults {}‰, crashes {}‰, \
             route changes {}‰, propagation {}‰, stray clients {}‰, {:?}, {:?}",
            sim.cfg.brokers,
            sim.cfg.loss,
            sim.cfg.mid_fault,
            sim.cfg.crash,
            sim.cfg.route_change,
            sim.cfg.propagation,
            sim.cfg.stray_client,
            sim.cfg.variant,
            sim.cfg.model
        ));
        for j in 0..sim.journals.len() {
            let jr = &sim.journals[j];
            let line = format!(
                "{}: R={} members {:?} primary {:?} codec {:?} length {}",
                jr.name,
                jr.replication,
                jr.route().members,
                jr.route().primary,
                jr.codec,
                jr.fragment_length
            );
            sim.log(line);
        }
        for b in 0..sim.brokers.len() {
            sim.restart(b).await?;
        }
        Ok(sim)
    }

    fn log(&mut self, line: String) {
        self.trace.push(format!("{:>4} {line}", self.step));
    }

    fn spool(&mut self, b: usize, j: usize) -> &mut Spool {
        self.brokers[b].spools[j]
            .as_mut()
            .expect("only live brokers' spools are used")
    }

    /// The Route of journal `j` as broker `b`'s keyspace has it.
    fn view(&self, b: usize, j: usize) -> &RouteRev {
        &self.journals[j].routes[self.brokers[b].seen[j]]
    }

    fn latest(&self, j: usize) -> usize {
        self.journals[j].routes.len() - 1
    }

    /// Runs every step, heals, and checks liveness.
    async fn run(&mut self) -> Res<()> {
        for step in 0..self.cfg.steps {
            self.step = step;
            self.stats.steps += 1;
            PROGRESS.with(|p| p.set((self.seed, step as u64 + 1)));
            for b in 0..self.brokers.len() {
                if !self.brokers[b].up && self.brokers[b].down_until <= step {
                    self.restart(b).await?;
                }
            }
            self.propagate().await?;
            self.act().await?;
            self.check().await?;
        }
        self.step = self.cfg.steps;
        self.heal().await?;
        self.stats.persisted = self.store.iter().map(|s| s.len() as u64).sum();
        Ok(())
    }

    /// Brokers behind the keyspace catch up, each at its own pace.
    async fn propagate(&mut self) -> Res<()> {
        for b in 0..self.brokers.len() {
            for j in 0..self.journals.len() {
                if self.brokers[b].seen[j] < self.latest(j)
                    && (self.healing || self.rng.chance(self.cfg.propagation))
                {
                    self.catch_up(b, j, self.latest(j)).await?;
                }
            }
        }
        Ok(())
    }

    /// One step: a client append, a pulse, a keyspace change, a crash or a spec change.
    async fn act(&mut self) -> Res<()> {
        let j = self.rng.below(self.journals.len());
        if self.rng.chance(self.cfg.crash) {
            let b = self.rng.below(self.brokers.len());
            if self.brokers[b].up {
                let down_for = if self.rng.chance(400) {
                    0
                } else {
                    self.rng.range(1, 8)
                };
                return self.crash(b, down_for).await;
            }
        }
        // The allocator repairs a Route without a primary or with too few members.
        let route = self.journals[j].route();
        if (route.primary.is_none() || route.members.len() < self.journals[j].replication)
            && self.rng.chance(500)
        {
            self.change_route(j, &[Change::Promote, Change::Add])
                .await?;
            return Ok(());
        }
        if self.rng.chance(self.cfg.route_change) {
            self.change_route(j, &[]).await?;
            return Ok(());
        }
        match self.rng.below(100) {
            0..=74 => {
                let req = Request {
                    chunks: self.content(),
                    union: self.rng.chance(300).then(|| self.writer_label()),
                    suspend_ahead: self.rng.chance(30).then(|| self.rng.range(1, 40) as i64),
                    at_head: self.rng.chance(30),
                };
                self.client_append(j, req).await
            }
            75..=89 => {
                self.stats.pulses += 1;
                let outcome = self.append(j, Request::default()).await;
                self.outcome(j, "pulse", outcome)
            }
            90..=93 => {
                let codec = self.rng.pick(&[
                    CompressionCodec::None,
                    CompressionCodec::Snappy,
                    CompressionCodec::Gzip,
                ]);
                self.journals[j].codec = codec;
                let line = format!("spec: {} codec {codec:?}", self.journals[j].name);
                self.log(line);
                Ok(())
            }
            94..=96 => {
                let length = self.rng.range(16, 400) as i64;
                self.journals[j].fragment_length = length;
                let line = format!("spec: {} fragment length {length}", self.journals[j].name);
                self.log(line);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// 1-3 chunks of 1-24 letters.
    fn content(&mut self) -> Vec<Bytes> {
        let n = self.rng.range(1, 3);
        (0..n)
            .map(|_| {
                let len = self.rng.range(1, 24);
                let bytes: Vec<u8> = (0..len).map(|_| b'a' + self.rng.below(26) as u8).collect();
                Bytes::from(bytes)
            })
            .collect()
    }

    fn writer_label(&mut self) -> LabelSet {
        self.next_writer += 1;
        LabelSet {
            labels: vec![Label {
                name: "writer".into(),
                value: format!("w{}", self.next_writer),
                prefix: false,
            }],
        }
    }

    async fn client_append(&mut self, j: usize, req: Request) -> Res<()> {
        self.stats.appends += 1;
        let len: usize = req.chunks.iter().map(|c| c.len()).sum();
        let line = format!(
            "append {} {len} bytes in {} chunks{}{}{}",
            self.journals[j].name,
            req.chunks.len(),
            req.union
                .as_ref()
                .map_or(String::new(), |u| format!(", union {}", regs(u))),
            req.suspend_ahead
                .map_or(String::new(), |k| format!(", suspension offset at end+{k}")),
            if req.at_head {
                ", at the write head"
            } else {
                ""
            }
        );
        self.log(line);
        let outcome = self.append(j, req).await;
        self.outcome(j, "append", outcome)
    }

    fn outcome(&mut self, j: usize, what: &str, outcome: Res<()>) -> Res<()> {
        match outcome {
            Ok(()) => Ok(()),
            Err(Stop::Failed(why) | Stop::Status(why)) => {
                self.stats.failed += 1;
                let line = format!("{what} {} failed: {why}", self.journals[j].name);
                self.log(line);
                Ok(())
            }
            Err(bug) => Err(bug),
        }
    }

    // ----- The primary: append.rs -----

    /// append.rs `append`: the broker the client reached resolves with its own keyspace
    /// and proxies to the primary it knows of; the primary acquires the spool, reuses or
    /// builds the pipeline, syncs, advertises the Route, awaits the desired replication,
    /// then streams and commits.
    async fn append(&mut self, j: usize, req: Request) -> Res<()> {
        let current = self.journals[j].route().primary;
        let target = match current {
            Some(p) if self.healing || !self.rng.chance(self.cfg.stray_client) => p,
            _ => self.rng.below(self.brokers.len()),
        };
        if !self.brokers[target].up {
            return failed(format!("broker-{target}: connection refused"));
        }
        let p = match self.view(target, j).primary {
            None => return failed("NO_JOURNAL_PRIMARY_BROKER"),
            Some(p) if p == target => p,
            Some(p) => {
                // Proxy, with our header: the primary first waits for our revision.
                self.stats.proxied += 1;
                if !self.brokers[p].up {
                    return failed(format!("proxy to broker-{p}: connection refused"));
                }
                let at = self.brokers[target].seen[j];
                self.catch_up(p, j, at).await?;
                p
            }
        };
        for _ in 0..4 {
            if !self.brokers[p].up {
                return failed(format!("broker-{p} is down"));
            }
            let index = self.brokers[p].seen[j];
            let route = self.view(p, j).clone();
            if route.primary != Some(p) {
                return failed(format!("broker-{p} is no longer primary"));
            }
            // Acquire the spool: discard anything an abandoned append left.
            self.spool(p, j).rollback();
            let reuse = matches!(&self.brokers[p].pipelines[j],
                Some(pipe) if pipe.route.equivalent(&route));
            if !reuse {
                self.teardown(p, j, "closed: it no longer serves the Route")
                    .await?;
                self.open_pipeline(p, j, index)?;
            }
            match self.sync(p, j).await {
                Ok(None) => {}
                Ok(Some(revision)) => {
                    // A peer is ahead of us in the keyspace: wait for its revision, resolve
                    // again.
                    self.stats.read_throughs += 1;
                    self.teardown(p, j, "dropped: read-through").await?;
                    let to = self.journals[j]
                        .routes
                        .iter()
                        .position(|r| r.revision >= revision)
                        .unwrap_or(self.latest(j));
                    self.catch_up(p, j, to).await?;
                    continue;
                }
                Err(e) => return self.abort(p, j, e).await,
            }
            // update_assignments: write the Route into the assignments, guarded by their
            // revisions, which only holds if no later change exists.
            if !self.journals[j].advertised.contains(&route.revision) {
                if index != self.latest(j) {
                    self.catch_up(p, j, self.latest(j)).await?;
                    continue;
                }
                self.journals[j].advertised.insert(route.revision);
                let line = format!(
                    "broker-{p} advertises {} consistent at revision {}",
                    self.journals[j].name, route.revision
                );
                self.log(line);
            }
            let replication = self.journals[j].replication;
            if route.members.len() > replication {
                // The allocator is about to remove a member: it does so now, or later.
                if self.rng.chance(700) && self.change_route(j, &[Change::Remove]).await? {
                    self.catch_up(p, j, self.latest(j)).await?;
                    continue;
                }
                return failed("awaiting the desired replication");
            }
            if route.members.len() < replication {
                return failed("INSUFFICIENT_JOURNAL_BROKERS");
            }
            return match self.validate_and_stream(p, j, req).await {
                Ok(()) => Ok(()),
                Err(Stop::Status(status)) => Err(Stop::Status(status)),
                Err(e) => self.abort(p, j, e).await,
            };
        }
        failed("the Route kept changing")
    }

    /// A failed append: the primary rolls back and drops its pipeline, whose replicas roll
    /// back when their streams end.
    async fn abort(&mut self, p: usize, j: usize, e: Stop) -> Res<()> {
        if let Stop::Bug(_) = e {
            return Err(e);
        }
        if self.brokers[p].up {
            self.spool(p, j).rollback();
        }
        self.teardown(p, j, "dropped by a failed append").await?;
        Err(e)
    }

    /// `Pipeline::open`: a stream to every other member of the Route at `index`.
    fn open_pipeline(&mut self, p: usize, j: usize, index: usize) -> Res<()> {
        let route = self.journals[j].routes[index].clone();
        let mut streams = Vec::new();
        for &m in &route.members {
            if m == p {
                continue;
            }
            if !self.brokers[m].up {
                return failed(format!("replication to broker-{m}: connection refused"));
            }
            streams.push(Stream {
                peer: m,
                queue: VecDeque::new(),
                responses: VecDeque::new(),
                opened: false,
                broken: None,
            });
        }
        let line = format!(
            "broker-{p} opens a pipeline for {} to {:?} at revision {}",
            self.journals[j].name,
            streams.iter().map(|s| s.peer).collect::<Vec<_>>(),
            route.revision
        );
        self.brokers[p].pipelines[j] = Some(Pipe {
            route,
            index,
            streams,
        });
        self.log(line);
        Ok(())
    }

    /// append.rs `sync`: propose the spool's fragment (or a roll) to this spool and every
    /// peer, rolling everyone forward to the largest end a peer holds, until all agree.
    /// Returns the revision to read through to, if a peer has a later Route.
    async fn sync(&mut self, p: usize, j: usize) -> Res<Option<i64>> {
        let mut roll_to: Option<i64> = None;
        let mut registers = self.spool(p, j).registers().clone();
        for _ in 0..MAX_SYNC_ROUNDS {
            let (length, codec) = (self.journals[j].fragment_length, self.journals[j].codec);
            let spool = self.spool(p, j);
            let proposal = match maybe_roll(spool, roll_to, length, codec) {
                Some(at) => empty_at(spool, at, codec),
                None => spool.fragment().clone(),
            };
            self.apply_local(p, j, &proposal, &registers).await?;
            if self.pipe(p, j)?.streams.is_empty() {
                return Ok(None);
            }
            let line = format!(
                "broker-{p} syncs {} with {} {}",
                self.journals[j].name,
                short(&proposal),
                regs(&registers)
            );
            self.log(line);
            self.send(
                p,
                j,
                Msg::Proposal {
                    fragment: proposal.clone(),
                    registers: registers.clone(),
                },
            )
            .await?;
            let responses = self.gather(p, j).await?;
            match self.decide(p, j, &proposal, &responses) {
                Ok(Synced::Ok) => return Ok(None),
                Ok(Synced::RollTo { .. }) if self.cfg.variant == Variant::NoRollForward => {
                    return Ok(None);
                }
                Ok(Synced::RollTo {
                    end,
                    registers: theirs,
                }) => {
                    self.stats.roll_forwards += 1;
                    let line = format!(
                        "broker-{p} rolls {} forward to {end}{}",
                        self.journals[j].name,
                        theirs
                            .as_ref()
                            .map_or(String::new(), |r| format!(" adopting {}", regs(r)))
                    );
                    self.log(line);
                    roll_to = Some(end);
                    if let Some(theirs) = theirs {
                        registers = theirs;
                    }
                }
                Ok(Synced::ReadThrough(revision)) => {
                    let line = format!(
                        "broker-{p} reads {} through to revision {revision}",
                        self.journals[j].name
                    );
                    self.log(line);
                    return Ok(Some(revision));
                }
                Err(e) => {
                    self.stats.sync_errors += 1;
                    if e.contains("PROPOSAL_MISMATCH") {
                        self.stats.mismatch_errors += 1;
                    }
                    return failed(format!("gatherSync: {e}"));
                }
            }
        }
        failed(format!(
            "replicas did not agree on a fragment after {MAX_SYNC_ROUNDS} proposals"
        ))
    }

    /// [`decide_sync`] over the pipeline's Route, header revision and peers.
    fn decide(
        &self,
        p: usize,
        j: usize,
        proposal: &Fragment,
        responses: &[ReplicateResponse],
    ) -> Result<Synced, String> {
        let pipe = self.brokers[p].pipelines[j].as_ref().expect("a pipeline");
        let peers: Vec<Id> = pipe.streams.iter().map(|s| broker_id(s.peer)).collect();
        decide_sync(
            proposal,
            &pipe.route.proto(),
            pipe.route.revision,
            &peers,
            responses,
        )
    }

    /// The fragment index of broker `p` (`Index::summary`): the begin of its first and the
    /// end of its last fragment among what it committed locally and what the store holds;
    /// (0, 0) when empty.
    fn index_summary(&self, p: usize, j: usize) -> (i64, i64) {
        let broker = &self.brokers[p];
        let spool = broker.spools[j].as_ref().map(|s| s.fragment());
        let listed: &[Fragment] = match self.cfg.model {
            Model::StaleListing => &[],
            _ => &self.store[j],
        };
        let fragments = broker.completed[j]
            .iter()
            .map(|f| &f.fragment)
            .chain(spool.filter(|f| f.end > f.begin))
            .chain(listed.iter());
        fragments
            .fold(None, |acc: Option<(i64, i64)>, f| match acc {
                None => Some((f.begin, f.end)),
                Some((b, e)) => Some((b.min(f.begin), e.max(f.end))),
            })
            .unwrap_or((0, 0))
    }

    /// append.rs `apply_local`: a proposal applied to the primary's own spool.
    async fn apply_local(
        &mut self,
        p: usize,
        j: usize,
        proposal: &Fragment,
        registers: &LabelSet,
    ) -> Res<()> {
        let broker = &mut self.brokers[p];
        let spool = broker.spools[j].as_mut().expect("the primary is up");
        let (ok, completed) = spool.apply_proposal(proposal, registers).await?;
        if let Some(done) = completed {
            persist(&mut self.store[j], &done.fragment);
            broker.completed[j].push(done);
        }
        if !ok {
            self.stats.self_rejections += 1;
            return failed(format!(
                "the primary's spool rejected its own proposal {}",
                short(proposal)
            ));
        }
        Ok(())
    }

    /// append.rs `roll`: every spool rolls to an empty fragment at `at`.
    async fn roll(&mut self, p: usize, j: usize, at: i64) -> Res<()> {
        let codec = self.journals[j].codec;
        let spool = self.spool(p, j);
        let proposal = empty_at(spool, at, codec);
        let registers = spool.registers().clone();
        let line = format!("broker-{p} rolls {} to {at}", self.journals[j].name);
        self.log(line);
        self.apply_local(p, j, &proposal, &registers).await?;
        if self.pipe(p, j)?.streams.is_empty() {
            return Ok(());
        }
        self.send(
            p,
            j,
            Msg::Proposal {
                fragment: proposal.clone(),
                registers,
            },
        )
        .await?;
        let responses = self.gather(p, j).await?;
        match self.decide(p, j, &proposal, &responses) {
            Ok(Synced::Ok) => Ok(()),
            _ => failed(format!("replicas did not accept the roll to {at}")),
        }
    }

    /// append.rs `validate_and_stream`: the offset preconditions against the fragment
    /// index (this broker's local fragments and the store's; registers, store health and
    /// suspension levels are left out), the roll they call for, then streaming and the
    /// commit.
    async fn validate_and_stream(&mut self, p: usize, j: usize, req: Request) -> Res<()> {
        let Request {
            chunks,
            union,
            suspend_ahead,
            at_head,
        } = req;
        let (members, index) = {
            let pipe = self.pipe(p, j)?;
            (pipe.route.members.clone(), pipe.index)
        };
        let members: Vec<(usize, u64)> = members
            .into_iter()
            .map(|m| (m, self.brokers[m].incarnation))
            .collect();
        self.fault_point(p, j, "after sync").await?;

        let (index_min, index_max) = self.index_summary(p, j);
        let wrote_before = self.brokers[p].wrote_before[j];
        let (length, codec) = (self.journals[j].fragment_length, self.journals[j].codec);
        let spool = self.spool(p, j);
        let cur = spool.fragment().clone();
        let mut roll_to = suspend_ahead.map(|k| cur.end + k);
        if roll_to.is_none() && wrote_before && cur.begin == cur.end && cur.end < index_max {
            roll_to = Some(index_max);
        }
        let spool_end = roll_to.unwrap_or(cur.end);
        let max_offset = spool_end.max(index_max);
        if spool_end != max_offset && !at_head {
            self.stats.index_fenced += 1;
            return Err(Stop::Status(format!(
                "INDEX_HAS_GREATER_OFFSET (spool at {spool_end}, index at {index_max})"
            )));
        }
        if at_head && spool_end != max_offset {
            roll_to = Some(max_offset);
        }
        // The spool holding the journal's first write is rolled after it.
        if cur.begin == index_min && roll_to.is_none() {
            roll_to = Some(cur.end);
        }
        if let Some(at) = maybe_roll(spool, roll_to, length, codec) {
            self.roll(p, j, at).await?;
            self.fault_point(p, j, "after a roll").await?;
        }
        let begin = self.spool(p, j).fragment().end;
        let mut appended: i64 = 0;
        let mut bytes = Vec::new();
        for chunk in &chunks {
            self.send(
                p,
                j,
                Msg::Content {
                    content: chunk.clone(),
                    delta: appended,
                },
            )
            .await?;
            self.spool(p, j).write(chunk).await?;
            appended += chunk.len() as i64;
            bytes.extend_from_slice(chunk);
            self.fault_point(p, j, "after a chunk").await?;
        }
        let registers = self.spool(p, j).registers().clone();
        let next_registers = match &union {
            Some(u) => protocol::labels::union(u, &registers),
            None => registers,
        };
        if appended == 0 {
            let line = format!("pulse {} synced", self.journals[j].name);
            self.log(line);
            return self.check_synced(j, &members);
        }
        let next = self.spool(p, j).next();
        let proposal = Msg::Proposal {
            fragment: next,
            registers: next_registers.clone(),
        };
        match self.cfg.variant {
            Variant::Correct | Variant::NoRollForward => {
                let gathered: Res<()> = async {
                    self.send(p, j, proposal).await?;
                    self.fault_point(p, j, "after the commit proposal").await?;
                    self.gather_ok(p, j).await?;
                    self.fault_point(p, j, "after the peers committed").await
                }
                .await;
                if let Err(e) = gathered {
                    // append.rs `keep_proposed`: a primary that is still up keeps what it
                    // proposed, since a peer may have committed it.
                    if !matches!(e, Stop::Bug(_))
                        && self.brokers[p].up
                        && self.spool(p, j).delta() > 0
                    {
                        self.spool(p, j).commit(next_registers).await?;
                    }
                    return Err(e);
                }
                self.spool(p, j).commit(next_registers).await?;
                self.fault_point(p, j, "after the primary committed")
                    .await?;
                self.acknowledge(j, index, begin, bytes, &members);
                self.check_synced(j, &members)
            }
            Variant::AckBeforeGather => {
                self.send(p, j, proposal).await?;
                self.spool(p, j).commit(next_registers).await?;
                self.acknowledge(j, index, begin, bytes, &members);
                self.fault_point(p, j, "after acknowledging").await?;
                self.gather_ok(p, j).await
            }
        }
    }

    /// The client's AppendResponse: from now on every member of the Route (at `index`)
    /// that stays in the Route keeps these bytes.
    fn acknowledge(
        &mut self,
        j: usize,
        index: usize,
        begin: i64,
        bytes: Vec<u8>,
        members: &[(usize, u64)],
    ) {
        let later = &self.journals[j].routes[index..];
        let holders: BTreeSet<usize> = members
            .iter()
            .map(|&(m, _)| m)
            .filter(|m| later.iter().all(|r| r.members.contains(m)))
            .collect();
        let line = format!(
            "ack {} [{begin}, {}) {:?} holders {holders:?}",
            self.journals[j].name,
            begin + bytes.len() as i64,
            String::from_utf8_lossy(&bytes)
        );
        self.log(line);
        self.stats.acked += 1;
        self.stats.acked_bytes += bytes.len() as u64;
        self.acks.push(Ack {
            journal: j,
            begin,
            bytes,
            holders,
            step: self.step,
        });
    }

    /// Invariant 4: after a successful append, every member of the Route it ran on that
    /// did not crash meanwhile holds the same fragment and registers, with nothing pending.
    fn check_synced(&mut self, j: usize, members: &[(usize, u64)]) -> Res<()> {
        let mut first: Option<(usize, Fragment, LabelSet)> = None;
        for &(m, incarnation) in members {
            if self.brokers[m].incarnation != incarnation {
                continue;
            }
            let Some(spool) = self.brokers[m].spools[j].as_ref() else {
                continue;
            };
            if spool.delta() != 0 {
                return bug(format!(
                    "invariant 4: broker-{m} has {} bytes pending after a successful append",
                    spool.delta()
                ));
            }
            let (frag, reg) = (spool.fragment().clone(), spool.registers().clone());
            match &first {
                None => first = Some((m, frag, reg)),
                Some((n, f, r)) => {
                    if !storage::spool::same_fragment(f, &frag) || *r != reg {
                        return bug(format!(
                            "invariant 4: after a successful append broker-{n} holds {} {} \
                             but broker-{m} holds {} {}",
                            short(f),
                            regs(r),
                            short(&frag),
                            regs(&reg)
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    // ----- The network -----

    /// Broker `p`'s pipeline, if `p`'s own Route still is the pipeline's
    /// (`pipeline::guard`, checked as each operation starts: no keyspace change reaches the
    /// primary during one).
    fn pipe(&mut self, p: usize, j: usize) -> Res<&mut Pipe> {
        let seen = self.journals[j].routes[self.brokers[p].seen[j]].clone();
        match self.brokers[p].pipelines[j].as_mut() {
            Some(pipe) if pipe.route.equivalent(&seen) => Ok(pipe),
            Some(_) => failed("replication pipeline: the journal's route changed"),
            None => bug("a pipeline operation without a pipeline"),
        }
    }

    /// Sends one message on every stream (`Pipeline::propose`/`content`); a replica
    /// applies it now or later.
    async fn send(&mut self, p: usize, j: usize, msg: Msg) -> Res<()> {
        let n = self.pipe(p, j)?.streams.len();
        for s in 0..n {
            let st = &mut self.pipe(p, j)?.streams[s];
            if let Some(why) = &st.broken {
                return failed(format!(
                    "replication to broker-{} (sending): {why}",
                    st.peer
                ));
            }
            st.queue.push_back(msg.clone());
        }
        for s in 0..n {
            if self.rng.chance(500) {
                self.drain(p, j, s).await?;
            }
        }
        Ok(())
    }

    /// The replica of stream `s` applies everything queued on it.
    async fn drain(&mut self, p: usize, j: usize, s: usize) -> Res<()> {
        loop {
            let st = &self.pipe(p, j)?.streams[s];
            if st.broken.is_some() || st.queue.is_empty() {
                return Ok(());
            }
            self.deliver(p, j, s).await?;
        }
    }

    /// Delivers the oldest message queued on stream `s`; the request or its answer may be
    /// lost, which breaks the stream. The first message is checked as replicate.rs checks
    /// it: the replica waits for the header's revision, then answers WRONG_ROUTE and
    /// closes the stream unless it shares the primary's Route.
    async fn deliver(&mut self, p: usize, j: usize, s: usize) -> Res<()> {
        let (peer, opened, route, index) = {
            let pipe = self.pipe(p, j)?;
            let st = &pipe.streams[s];
            if st.broken.is_some() || st.queue.is_empty() {
                return Ok(());
            }
            (st.peer, st.opened, pipe.route.clone(), pipe.index)
        };
        if self.rng.chance(self.cfg.loss) {
            self.close_stream(p, j, s, "connection reset: request lost", false)
                .await?;
            return Ok(());
        }
        if !opened {
            let to = if self.rng.chance(500) {
                self.latest(j)
            } else {
                index
            };
            self.catch_up(peer, j, to).await?;
            let theirs = self.view(peer, j).clone();
            let status = if theirs.members.is_empty() {
                Status::InsufficientJournalBrokers
            } else if !theirs.members.contains(&peer) {
                Status::NotJournalBroker
            } else if !theirs.equivalent(&route) {
                Status::WrongRoute
            } else {
                Status::Ok
            };
            if status != Status::Ok {
                self.stats.wrong_routes += 1;
                let resp = ReplicateResponse {
                    status: status as i32,
                    header: Some(Header {
                        process_id: Some(broker_id(peer)),
                        route: Some(theirs.proto()),
                        etcd: Some(protocol::header::Etcd {
                            cluster_id: 1,
                            member_id: 1,
                            revision: theirs.revision,
                            raft_term: 1,
                        }),
                    }),
                    ..Default::default()
                };
                let line = format!(
                    "broker-{peer} answers {status:?} to broker-{p} for {} (it has {:?} \
                     primary {:?} at revision {})",
                    self.journals[j].name, theirs.members, theirs.primary, theirs.revision
                );
                self.log(line);
                let st = &mut self.pipe(p, j)?.streams[s];
                st.queue.clear();
                st.responses.push_back(resp);
                st.broken = Some(format!("closed after {status:?}"));
                return Ok(());
            }
            // The replica takes the spool: no other stream may hold it.
            if let Some(q) = self.holder_of(peer, j) {
                return bug(format!(
                    "broker-{peer}'s spool of {} is held by broker-{q}'s stream too",
                    self.journals[j].name
                ));
            }
            self.pipe(p, j)?.streams[s].opened = true;
        }
        let msg = self.pipe(p, j)?.streams[s]
            .queue
            .pop_front()
            .expect("checked above");
        let resp = apply_at_replica(&mut self.brokers[peer], j, msg, &mut self.store[j]).await?;
        if let Some(resp) = resp {
            if self.rng.chance(self.cfg.loss) {
                self.close_stream(p, j, s, "connection reset: response lost", false)
                    .await?;
                return Ok(());
            }
            self.pipe(p, j)?.streams[s].responses.push_back(resp);
        }
        Ok(())
    }

    /// The primary whose opened, live stream holds `peer`'s spool of journal `j`, if any.
    fn holder_of(&self, peer: usize, j: usize) -> Option<usize> {
        self.brokers.iter().enumerate().find_map(|(q, broker)| {
            let pipe = broker.pipelines[j].as_ref()?;
            pipe.streams
                .iter()
                .any(|st| st.peer == peer && st.opened && st.broken.is_none())
                .then_some(q)
        })
    }

    /// Ends stream `s` of broker `p`'s pipeline: with `in_flight`, the replica first
    /// applies part of what was still queued (maybe nothing, maybe all); then it rolls back
    /// what it did not commit, if it held the spool.
    async fn close_stream(
        &mut self,
        p: usize,
        j: usize,
        s: usize,
        why: &str,
        in_flight: bool,
    ) -> Res<()> {
        let Some(pipe) = self.brokers[p].pipelines[j].as_mut() else {
            return Ok(());
        };
        let st = &mut pipe.streams[s];
        if st.broken.is_some() {
            return Ok(());
        }
        st.broken = Some(why.to_string());
        let (peer, opened) = (st.peer, st.opened);
        let mut queue = std::mem::take(&mut st.queue);
        st.responses.clear();
        if opened && in_flight {
            let applied = self.rng.below(queue.len() + 1);
            for msg in queue.drain(..applied) {
                // Answers go nowhere now.
                apply_at_replica(&mut self.brokers[peer], j, msg, &mut self.store[j]).await?;
            }
        }
        if opened && let Some(spool) = self.brokers[peer].spools[j].as_mut() {
            spool.rollback();
        }
        let line = format!(
            "stream of {} from broker-{p} to broker-{peer} ends: {why}",
            self.journals[j].name
        );
        self.log(line);
        Ok(())
    }

    /// `Pipeline::gather`: one answer from every peer, in Route order.
    async fn gather(&mut self, p: usize, j: usize) -> Res<Vec<ReplicateResponse>> {
        let n = self.pipe(p, j)?.streams.len();
        let mut out = Vec::with_capacity(n);
        for s in 0..n {
            loop {
                let st = &mut self.pipe(p, j)?.streams[s];
                if let Some(resp) = st.responses.pop_front() {
                    out.push(resp);
                    break;
                }
                if let Some(why) = &st.broken {
                    return failed(format!(
                        "replication to broker-{} (receiving): {why}",
                        st.peer
                    ));
                }
                if st.queue.is_empty() {
                    return bug("gathering an answer to nothing");
                }
                self.deliver(p, j, s).await?;
            }
        }
        Ok(out)
    }

    /// `Pipeline::gather_ok`: every peer acknowledged the commit.
    async fn gather_ok(&mut self, p: usize, j: usize) -> Res<()> {
        for resp in self.gather(p, j).await? {
            if resp.status != Status::Ok as i32 {
                return failed(format!(
                    "commit not acknowledged: {:?}",
                    Status::try_from(resp.status)
                ));
            }
        }
        Ok(())
    }

    /// Drops broker `p`'s pipeline (it closed it, or failed): each replica applies part of
    /// what was in flight, then rolls back.
    async fn teardown(&mut self, p: usize, j: usize, why: &str) -> Res<()> {
        let n = match &self.brokers[p].pipelines[j] {
            Some(pipe) => pipe.streams.len(),
            None => return Ok(()),
        };
        for s in 0..n {
            self.close_stream(p, j, s, why, true).await?;
        }
        self.brokers[p].pipelines[j] = None;
        Ok(())
    }

    // ----- The keyspace -----

    /// Broker `b`'s keyspace reaches the Route at `to`. If its Route changed, the pipeline
    /// it leads fails its next operation ([`Sim::pipe`]), and as a replica it ends the
    /// streams of pipelines that no longer share its Route (replicate.rs `still_routed`).
    async fn catch_up(&mut self, b: usize, j: usize, to: usize) -> Res<()> {
        if !self.brokers[b].up || to <= self.brokers[b].seen[j] {
            return Ok(());
        }
        let before = self.view(b, j).clone();
        self.brokers[b].seen[j] = to;
        let after = self.view(b, j).clone();
        if before.equivalent(&after) {
            return Ok(());
        }
        for q in 0..self.brokers.len() {
            let Some(pipe) = self.brokers[q].pipelines[j].as_ref() else {
                continue;
            };
            if pipe.route.equivalent(&after) {
                continue;
            }
            let ending: Vec<usize> = (0..pipe.streams.len())
                .filter(|&s| {
                    let st = &pipe.streams[s];
                    st.peer == b && st.opened && st.broken.is_none()
                })
                .collect();
            for s in ending {
                self.close_stream(q, j, s, "the replica's route changed", true)
                    .await?;
            }
        }
        Ok(())
    }

    /// The allocator (or an operator) changes the journal's Route, in one of the ways
    /// `only` allows (any when empty). Returns whether it did.
    async fn change_route(&mut self, j: usize, only: &[Change]) -> Res<bool> {
        let jr = &self.journals[j];
        let route = jr.route();
        let outsiders: Vec<usize> = (0..self.brokers.len())
            .filter(|b| !route.members.contains(b) && self.brokers[*b].up)
            .collect();
        let mut options = Vec::new();
        if route.primary.is_none() && !route.members.is_empty() {
            options.push(Change::Promote);
        }
        if route.members.len() <= jr.replication && !outsiders.is_empty() {
            options.push(Change::Add);
        }
        if route.members.len() > jr.replication && jr.consistent() {
            options.push(Change::Remove);
        }
        if route.members.len() >= 2 && route.primary.is_some() {
            options.push(Change::Promote);
        }
        options.retain(|c| only.is_empty() || only.contains(c));
        if options.is_empty() {
            return Ok(false);
        }
        let mut next = route.clone();
        let change = self.rng.pick(&options);
        match change {
            Change::Promote => {
                let candidates: Vec<usize> = next
                    .members
                    .iter()
                    .copied()
                    .filter(|&m| Some(m) != next.primary)
                    .collect();
                next.primary = Some(self.rng.pick(&candidates));
            }
            Change::Add => {
                next.members.push(self.rng.pick(&outsiders));
                next.members.sort_unstable();
            }
            Change::Remove => {
                let b = self.rng.pick(&next.members);
                next.members.retain(|&m| m != b);
                if next.primary == Some(b) {
                    next.primary = Some(self.rng.pick(&next.members));
                }
            }
        }
        self.push_route(j, next).await?;
        Ok(true)
    }

    /// A new revision of the journal's Route. Each broker notices now, or later.
    async fn push_route(&mut self, j: usize, mut next: RouteRev) -> Res<()> {
        self.stats.route_changes += 1;
        self.revision += 1;
        next.revision = self.revision;
        let line = format!(
            "route: {} is now {:?} primary {:?} at revision {}",
            self.journals[j].name, next.members, next.primary, next.revision
        );
        self.log(line);
        for ack in self.acks.iter_mut().filter(|a| a.journal == j) {
            ack.holders.retain(|h| next.members.contains(h));
        }
        self.journals[j].routes.push(next);
        for b in 0..self.brokers.len() {
            if self.healing || self.rng.chance(self.cfg.propagation) {
                self.catch_up(b, j, self.latest(j)).await?;
            }
        }
        Ok(())
    }

    // ----- Faults -----

    /// A point in an append where the seed may inject a fault.
    async fn fault_point(&mut self, p: usize, j: usize, at: &str) -> Res<()> {
        if !self.rng.chance(self.cfg.mid_fault) {
            return Ok(());
        }
        let n = self.pipe(p, j).map_or(0, |pipe| pipe.streams.len());
        match self.rng.below(6) {
            0 => {
                let down_for = self.rng.range(0, 4);
                self.log(format!("fault {at}: the primary broker-{p} crashes"));
                self.crash(p, down_for).await?;
                return failed(format!("the primary crashed {at}"));
            }
            1 if n > 0 => {
                let s = self.rng.below(n);
                let b = self.pipe(p, j)?.streams[s].peer;
                let down_for = self.rng.range(0, 4);
                self.log(format!("fault {at}: peer broker-{b} crashes"));
                self.crash(b, down_for).await?;
            }
            2 if n > 0 => {
                let s = self.rng.below(n);
                self.log(format!("fault {at}: a connection breaks"));
                self.close_stream(p, j, s, "connection broken", true)
                    .await?;
            }
            3 => {
                self.log(format!("fault {at}: the Route changes"));
                self.change_route(j, &[]).await?;
            }
            _ => {
                // A fast replica set: everything in flight arrives now.
                for s in 0..n {
                    self.drain(p, j, s).await?;
                }
            }
        }
        Ok(())
    }

    /// `kill -9` of broker `b`: its streams end, its spools are dropped without a rollback,
    /// and it restarts after `down_for` steps by recovering them from its files.
    async fn crash(&mut self, b: usize, down_for: usize) -> Res<()> {
        self.stats.crashes += 1;
        // What it committed before it died, for the invariants.
        for j in 0..self.journals.len() {
            self.refresh_view(b, j).await?;
        }
        for j in 0..self.journals.len() {
            self.teardown(b, j, "lost: its primary crashed").await?;
            for q in 0..self.brokers.len() {
                if let Some(pipe) = self.brokers[q].pipelines[j].as_mut() {
                    for st in &mut pipe.streams {
                        if st.peer == b && st.broken.is_none() {
                            st.broken = Some("connection reset: the replica crashed".into());
                            st.queue.clear();
                            st.responses.clear();
                        }
                    }
                }
            }
        }
        let broker = &mut self.brokers[b];
        broker.spools.iter_mut().for_each(|s| *s = None);
        broker.completed.iter_mut().for_each(Vec::clear);
        broker.up = false;
        broker.incarnation += 1;
        broker.down_until = self.step + down_for;
        self.log(format!("broker-{b} crashes (down for {down_for} steps)"));
        if self.cfg.model == Model::LeaseExpiry && down_for > 0 && self.rng.chance(500) {
            self.expire_lease(b).await?;
        }
        if down_for == 0 {
            self.restart(b).await?;
        }
        Ok(())
    }

    /// The crashed broker's lease expires: etcd deletes its assignments.
    async fn expire_lease(&mut self, b: usize) -> Res<()> {
        self.log(format!("broker-{b}'s lease expires: its assignments go"));
        for j in 0..self.journals.len() {
            let mut next = self.journals[j].route().clone();
            if !next.members.contains(&b) {
                continue;
            }
            next.members.retain(|&m| m != b);
            if next.primary == Some(b) {
                next.primary = None;
            }
            self.push_route(j, next).await?;
        }
        Ok(())
    }

    /// Restarts broker `b`: it loads the keyspace afresh, and `Spool::open` recovers every
    /// journal's spool from its files.
    async fn restart(&mut self, b: usize) -> Res<()> {
        for j in 0..self.journals.len() {
            let (name, codec) = (self.journals[j].name.clone(), self.journals[j].codec);
            let (spool, completed) = Spool::open(&self.brokers[b].root, &name, codec).await?;
            let line = format!(
                "broker-{b} recovers {name}: spool {} {}, {} completed",
                short(spool.fragment()),
                regs(spool.registers()),
                completed.len()
            );
            self.log(line);
            for done in &completed {
                persist(&mut self.store[j], &done.fragment);
            }
            let latest = self.latest(j);
            let broker = &mut self.brokers[b];
            broker.wrote_before[j] = broker.spools_opened;
            broker.spools[j] = Some(spool);
            broker.completed[j] = completed;
            broker.views[j].stale = true;
            broker.seen[j] = latest;
        }
        self.brokers[b].up = true;
        self.brokers[b].spools_opened = true;
        Ok(())
    }

    /// No more faults: every broker restarts and its keyspace catches up, every Route gets
    /// a primary and its members, and every journal must then accept an append.
    async fn heal(&mut self) -> Res<()> {
        self.healing = true;
        self.cfg.loss = 0;
        self.cfg.mid_fault = 0;
        self.log("heal: no more faults".into());
        for b in 0..self.brokers.len() {
            if !self.brokers[b].up {
                self.restart(b).await?;
            }
        }
        self.propagate().await?;
        for j in 0..self.journals.len() {
            while self.journals[j].route().primary.is_none()
                || self.journals[j].route().members.len() < self.journals[j].replication
            {
                if !self
                    .change_route(j, &[Change::Promote, Change::Add])
                    .await?
                {
                    return bug("heal: cannot complete the Route");
                }
            }
            let mut last = String::new();
            let mut ok = false;
            let mut at_head = false;
            for _ in 0..HEAL_ATTEMPTS {
                let req = Request {
                    chunks: self.content(),
                    at_head,
                    ..Default::default()
                };
                self.stats.appends += 1;
                match self.append(j, req).await {
                    Ok(()) => {
                        ok = true;
                        break;
                    }
                    Err(Stop::Failed(why) | Stop::Status(why)) => {
                        self.stats.failed += 1;
                        self.log(format!("heal: append failed: {why}"));
                        // An operator resets the head of a fenced journal.
                        at_head |= why.starts_with("INDEX_HAS_GREATER_OFFSET");
                        last = why;
                    }
                    Err(bug) => return Err(bug),
                }
            }
            if !ok {
                return bug(format!(
                    "invariant 5: {} accepts no append once faults stopped: {last}",
                    self.journals[j].name
                ));
            }
            self.check().await?;
        }
        Ok(())
    }

    // ----- The checker -----

    /// Reads back what every live broker committed and checks invariants 1-3.
    async fn check(&mut self) -> Res<()> {
        for b in 0..self.brokers.len() {
            for j in 0..self.journals.len() {
                self.refresh_view(b, j).await?;
            }
        }
        for ack in &self.acks {
            let len = ack.bytes.len();
            for &h in &ack.holders {
                let found = read_view(&self.brokers[h].views[ack.journal], ack.begin, len);
                if found.as_deref() != Some(&ack.bytes[..]) {
                    return bug(format!(
                        "invariant 1: {} [{}, {}) acknowledged at step {} is {} on broker-{h}",
                        self.journals[ack.journal].name,
                        ack.begin,
                        ack.begin + len as i64,
                        ack.step,
                        match found {
                            None => "missing".to_string(),
                            Some(f) => format!("{:?}", String::from_utf8_lossy(&f)),
                        }
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads what broker `b` newly committed to journal `j` from its fragment files, and
    /// checks it against its earlier reads and everything other brokers committed.
    async fn refresh_view(&mut self, b: usize, j: usize) -> Res<()> {
        let broker = &self.brokers[b];
        let Some(spool) = broker.spools[j].as_ref() else {
            return Ok(());
        };
        let mut current: Vec<(Fragment, Rc<FragmentFile>)> = broker.completed[j]
            .iter()
            .map(|f| (f.fragment.clone(), f.file.clone()))
            .collect();
        current.push((spool.fragment().clone(), spool.file()));
        current.retain(|(f, _)| f.end > f.begin);
        current.sort_by_key(|(f, _)| f.begin);
        for pair in current.windows(2) {
            if pair[0].0.end > pair[1].0.begin {
                return bug(format!(
                    "broker-{b} holds overlapping fragments {} and {}",
                    short(&pair[0].0),
                    short(&pair[1].0)
                ));
            }
        }
        let stale = broker.views[j].stale;
        let begins: BTreeSet<i64> = current.iter().map(|(f, _)| f.begin).collect();
        if let Some(gone) = broker.views[j]
            .frags
            .iter()
            .find(|(begin, _)| !begins.contains(begin))
        {
            return bug(format!(
                "invariant 3: broker-{b}'s committed fragment [{}, {}) of {} vanished",
                gone.0, gone.1.end, self.journals[j].name
            ));
        }
        for (frag, file) in current {
            let cached = self.brokers[b].views[j].frags.get(&frag.begin);
            if let Some(c) = cached {
                if c.end > frag.end {
                    return bug(format!(
                        "invariant 3: broker-{b}'s fragment of {} at {} shrank from {} to {}",
                        self.journals[j].name, frag.begin, c.end, frag.end
                    ));
                }
                if c.end == frag.end && !stale {
                    continue;
                }
            }
            let from = match cached {
                Some(c) if !stale => c.end,
                _ => frag.begin,
            };
            let read = read_range(&file, from, frag.end).await?;
            let mut view = match self.brokers[b].views[j].frags.remove(&frag.begin) {
                Some(old) if !stale => old,
                Some(old) => {
                    if read.get(..old.bytes.len()) != Some(&old.bytes[..]) {
                        return bug(format!(
                            "invariant 3: broker-{b}'s fragment of {} at {} changed across a \
                             restart",
                            self.journals[j].name, frag.begin
                        ));
                    }
                    FragView {
                        end: frag.begin,
                        bytes: Vec::new(),
                        sha: Sha1::new(),
                    }
                }
                None => FragView {
                    end: frag.begin,
                    bytes: Vec::new(),
                    sha: Sha1::new(),
                },
            };
            self.record_history(b, j, from, &read)?;
            view.sha.update(&read);
            view.bytes.extend_from_slice(&read);
            view.end = frag.end;
            let sum = protocol::sum::sum_from_bytes(&view.sha.clone().finalize().into());
            if frag.sum != Some(sum) {
                return bug(format!(
                    "invariant 3: broker-{b}'s fragment {} of {} has the wrong SHA-1 for its bytes",
                    short(&frag),
                    self.journals[j].name
                ));
            }
            self.brokers[b].views[j].frags.insert(frag.begin, view);
        }
        self.brokers[b].views[j].stale = false;
        Ok(())
    }

    /// Invariant 2: a byte committed anywhere is never committed differently elsewhere.
    fn record_history(&mut self, b: usize, j: usize, offset: i64, bytes: &[u8]) -> Res<()> {
        let history = &mut self.history[j];
        let end = offset as usize + bytes.len();
        if history.len() < end {
            history.resize(end, None);
        }
        for (i, &byte) in bytes.iter().enumerate() {
            let at = offset as usize + i;
            match history[at] {
                None => history[at] = Some((byte, b)),
                Some((seen, _)) if seen == byte => {}
                Some((seen, by)) => {
                    return bug(format!(
                        "invariant 2: offset {at} of {} was committed as {:?} by broker-{by} \
                         but as {:?} by broker-{b}",
                        self.journals[j].name, seen as char, byte as char
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A fresh directory for one seed's brokers: under `COURANT_SIM_DIR` if set, else on
/// tmpfs (`/dev/shm`) when there is one, since creating thousands of small fragment files on
/// a disk file system dominates the run time; page-cache semantics (what survives `kill -9`)
/// are the same there.
fn sim_dir() -> std::io::Result<tempfile::TempDir> {
    if let Ok(dir) = std::env::var("COURANT_SIM_DIR") {
        return tempfile::tempdir_in(dir);
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("courant-sim")
            .tempdir_in(shm)
    {
        return Ok(dir);
    }
    tempfile::tempdir()
}

/// Runs one seed to its end, or to its first violation.
async fn run_seed(
    seed: u64,
    steps: usize,
    variant: Variant,
    model: Model,
) -> Result<Stats, Violation> {
    simulate(seed, steps, variant, model).await.0
}

/// Runs one seed, returning its outcome and its whole event trace.
async fn simulate(
    seed: u64,
    steps: usize,
    variant: Variant,
    model: Model,
) -> (Result<Stats, Violation>, Vec<String>) {
    let mut sim = match Sim::new(seed, steps, variant, model).await {
        Ok(sim) => sim,
        Err(e) => {
            let v = Violation {
                seed,
                step: 0,
                what: format!("{e:?}"),
                trace: Vec::new(),
            };
            return (Err(v), Vec::new());
        }
    };
    let outcome = sim.run().await;
    if std::env::var_os("COURANT_SIM_TRACE").is_some() {
        for line in &sim.trace {
            eprintln!("{line}");
        }
    }
    let outcome = match outcome {
        Ok(()) => Ok(sim.stats.clone()),
        Err(e) => Err(Violation {
            seed,
            step: sim.step,
            what: match e {
                Stop::Bug(what) => what,
                Stop::Failed(what) | Stop::Status(what) => format!("unhandled failure: {what}"),
            },
            trace: sim.trace.clone(),
        }),
    };
    (outcome, std::mem::take(&mut sim.trace))
}

/// Runs `f` on a fresh glommio executor (small io_memory, as the storage tests do, so that
/// parallel tests fit in RLIMIT_MEMLOCK).
///
/// A ticker wakes the executor every [`TICK`]: in long runs on a loaded machine, glommio
/// 0.9's reactor was seen (a few times in some twenty thousand seeds, never again when the
/// same seeds were rerun) asleep for good with the simulation's I/O done and no completion
/// or eventfd write pending, which looks like a lost wakeup. The ticker also turns a
/// stall into a failure: [`STALL_TICKS`] ticks without a step panic, naming the seed.
fn on_executor<T>(f: impl std::future::Future<Output = T>) -> T {
    let ticker = async {
        let (mut last, mut idle) = ((u64::MAX, 0), 0u32);
        loop {
            glommio::timer::sleep(TICK).await;
            let now = PROGRESS.with(Cell::get);
            if now != last {
                (last, idle) = (now, 0);
                continue;
            }
            idle += 1;
            if idle >= STALL_TICKS {
                panic!(
                    "seed {}: no simulation step in {STALL_TICKS} ticks of {TICK:?}: the \
                     executor or an I/O stalled (not an invariant violation)",
                    now.0
                );
            }
        }
    };
    glommio::LocalExecutorBuilder::default()
        .io_memory(512 << 10)
        .make()
        .expect("glommio executor")
        .run(futures_lite::future::or(f, ticker))
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn steps_per_seed() -> usize {
    env_u64("COURANT_SIM_STEPS").map_or(DEFAULT_STEPS, |s| s as usize)
}

/// Runs `seeds` until one violates an invariant.
fn run_seeds(seeds: Vec<u64>, variant: Variant, model: Model) -> Result<Stats, Violation> {
    let steps = steps_per_seed();
    let many = seeds.len() as u64 > DEFAULT_SEEDS;
    on_executor(async move {
        let mut total = Stats::default();
        for seed in seeds {
            total.add(&run_seed(seed, steps, variant, model).await?);
            if many && total.seeds % 100 == 0 {
                eprintln!("simulation: {} seeds passed (last {seed})", total.seeds);
            }
        }
        Ok(total)
    })
}

#[test]
fn simulate_seeds() {
    let seeds: Vec<u64> = match env_u64("COURANT_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("COURANT_SIM_FIRST").unwrap_or(0);
            let n = env_u64("COURANT_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
            (first..first + n).collect()
        }
    };
    let model = match std::env::var("COURANT_SIM_MODEL").as_deref() {
        Ok("lease-expiry") => Model::LeaseExpiry,
        Ok("stale-listing") => Model::StaleListing,
        _ => Model::Allocator,
    };
    let started = std::time::Instant::now();
    match run_seeds(seeds, Variant::Correct, model) {
        Ok(stats) => eprintln!(
            "simulation: {stats:?} in {:.1}s",
            started.elapsed().as_secs_f64()
        ),
        Err(v) => panic!("{v}"),
    }
}

/// A run is a pure function of its seed: the same seed gives the same events.
#[test]
fn runs_are_deterministic() {
    let steps = steps_per_seed();
    let (first, second) = on_executor(async move {
        let first = simulate(7, steps, Variant::Correct, Model::Allocator).await;
        let second = simulate(7, steps, Variant::Correct, Model::Allocator).await;
        (first, second)
    });
    assert!(first.0.is_ok() && second.0.is_ok());
    assert!(first.1.len() > steps, "{} events", first.1.len());
    assert_eq!(first.1, second.1);
}

/// Runs the default seeds with a broken primary until the checker reports a violation.
fn first_violation(variant: Variant) -> Violation {
    let steps = steps_per_seed();
    let caught = on_executor(async move {
        for seed in 0..DEFAULT_SEEDS {
            if let Err(v) = run_seed(seed, steps, variant, Model::Allocator).await {
                return Some(v);
            }
        }
        None
    });
    caught.unwrap_or_else(|| panic!("the broken primary ({variant:?}) went unnoticed"))
}

/// The checker bites: a primary that acknowledges before its peers did is caught within
/// the default budget of seeds.
#[test]
fn checker_catches_ack_before_gather() {
    let v = first_violation(Variant::AckBeforeGather);
    assert!(v.what.starts_with("invariant 1"), "{v}");
    eprintln!("caught as expected: seed {}: {}", v.seed, v.what);
}

/// The checker bites: a primary that does not roll its peers forward overwrites what a
/// peer committed, or leaves the peers disagreeing (or stuck).
#[test]
fn checker_catches_missing_roll_forward() {
    let v = first_violation(Variant::NoRollForward);
    assert!(
        ["invariant 2", "invariant 4", "invariant 5"]
            .iter()
            .any(|i| v.what.starts_with(i)),
        "{v}"
    );
    eprintln!("caught as expected: seed {}: {}", v.seed, v.what);
}

/// (Since found, `Replica::open` discards a recovered spool's current fragment in cluster
/// mode, so the real broker no longer persists it; this model of recovery still keeps it.)
/// Reproduces a divergence the simulation found once leases may expire (see
/// [`Model::LeaseExpiry`]); ignored until it is fixed. Seed 34: journal-0's Route is
/// {0, 4}. At step 41 the Route changes (broker-0 becomes primary) while broker-4's append
/// is in flight: broker-0 applies the commit proposal of [542, 553) before its stream
/// ends, broker-4 rolls back, and the append fails. At step 43 broker-0 crashes and its
/// lease expires, so etcd drops its assignment; the allocator rebuilds the Route as
/// {3, 4} with primary 4, which commits other bytes at [542, 556) at step 49. Offset 542 now
/// holds different bytes on broker-0's disk (`Spool::open` recovers [459, 553), committed
/// but never acknowledged) and on the Route. A Gazette broker loses its spool with its
/// process; a Courant broker keeps it, and `Replica::open` indexes the recovered spool
/// (readable) and persists its completed fragments to the store, where they conflict with
/// the journal's history.
#[test]
#[ignore = "reproduces a known divergence after a lease expiry; see the comment"]
fn lease_expiry_divergence() {
    if let Err(v) = run_seeds(vec![34], Variant::Correct, Model::LeaseExpiry) {
        panic!("{v}");
    }
}

/// Reproduces a gap the simulation found in its first runs (before it modelled the
/// fragment index; see the report): a roll-forward is not durable. A replica whose spool
/// holds [0, 5) is rolled forward to 9, where a peer's unacknowledged commit ended; the new
/// fragment [9, 9) is empty, and an empty spool leaves nothing on disk, so after `kill -9`
/// `Spool::open` recovers [0, 5): the journal's write head went back from 9 to 5. If every
/// member of the Route does that while the one broker holding [5, 9) has left the Route,
/// only the fragment index (that broker's persisted fragment, once listed) stops the
/// members from writing other bytes at [5, 9); with a listing older than the upload, they
/// do. Ignored until the spool logs roll-forwards.
#[test]
#[ignore = "reproduces a known gap: a roll-forward to an empty fragment does not survive kill -9"]
fn roll_forward_survives_a_crash() {
    let dir = sim_dir().expect("tempdir");
    let root = dir.path().join("broker-0");
    let journal = "sim/journal-0";
    let recovered_end = on_executor(async move {
        let codec = CompressionCodec::None;
        let (mut spool, _) = Spool::open(&root, journal, codec).await.expect("open");
        spool
            .write(&Bytes::from_static(b"abcde"))
            .await
            .expect("write");
        spool.commit(LabelSet::default()).await.expect("commit");
        let proposal = Fragment {
            journal: journal.into(),
            begin: 9,
            end: 9,
            sum: Some(Default::default()),
            compression_codec: codec as i32,
            ..Default::default()
        };
        let (ok, completed) = spool
            .apply_proposal(&proposal, &LabelSet::default())
            .await
            .expect("roll forward");
        assert!(ok && completed.is_some());
        assert_eq!(spool.fragment().end, 9);
        drop((spool, completed)); // kill -9
        let (spool, _) = Spool::open(&root, journal, codec).await.expect("reopen");
        spool.fragment().end
    });
    assert_eq!(
        recovered_end, 9,
        "the recovered spool forgot the roll-forward to 9"
    );
}
