//! The simulated network: every `Replicate` stream between the simulator's brokers is a
//! [`Link`] whose frames wait in queues until the driver delivers them, one at a time, in
//! an order the seed picks (each direction of a stream stays in order, as on h2), or
//! breaks it (both ends see an error, as after a connection reset).
//!
//! The primary's end is a [`SimCall`] inside the real `Pipeline` (through
//! `crate::core::peer::PeerCall::Sim`); the replica's end runs the real
//! `crate::journal::replicate::replicate` handler over `CallIn::Remote` / `CallOut::Remote`, started
//! when the stream's first frame is delivered.
//!
//! Lives on: the simulation's one executor thread (`Rc`, `RefCell`).

use crate::core::call::{CallIn, CallOut, OutMsg};
use crate::core::peer::{TestCall, TestLink, TestNet};
use crate::journal::journals::Journals;
use bytes::{Buf, Bytes, BytesMut};
use protocol::ReplicateRequest;
use protocol::grpc::{RpcError, decode_message};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::{Rc, Weak};

/// The endpoint of simulated broker `b`.
pub fn endpoint(b: usize) -> String {
    format!("http://broker-{b}:8080")
}

fn broker_of(endpoint: &str) -> Option<usize> {
    endpoint
        .strip_prefix("http://broker-")?
        .strip_suffix(":8080")?
        .parse()
        .ok()
}

/// One stream from broker `from` (the primary) to broker `to`.
pub struct Link {
    pub from: usize,
    pub to: usize,
    /// Request message bodies not yet delivered to the replica.
    requests: VecDeque<Bytes>,
    /// The primary half-closed (delivered as EOF after `requests`).
    closed: bool,
    /// The primary dropped its end without closing: a reset.
    reset: bool,
    /// Requests delivered so far (0: the handler has not started).
    delivered: u64,
    /// The replica's input, once its handler started.
    server_in: Option<flume::Sender<Result<Bytes, RpcError>>>,
    /// The replica's output: responses waiting to be delivered to the primary.
    server_out: Option<flume::Receiver<OutMsg>>,
    /// Dropped to tell the handler its client went away.
    cancel: Option<flume::Sender<()>>,
    /// Whether the replica's handler started.
    started: bool,
    /// Responses delivered to the primary's end.
    to_client: flume::Sender<Result<Option<Bytes>, RpcError>>,
    /// A response frame taken from `server_out` but not yet delivered.
    staged: VecDeque<OutMsg>,
    /// Whether the stream is over (both ends told).
    done: bool,
}

/// What the driver may deliver next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Deliverable {
    /// The next request (or EOF, or reset) of a link to its replica.
    Request(u64),
    /// The next response (or end) of a link to its primary.
    Response(u64),
}

#[derive(Default)]
pub struct NetState {
    pub links: BTreeMap<u64, Link>,
    next_id: u64,
    /// Live brokers by index (`None` while crashed).
    pub brokers: Vec<Option<Weak<Journals>>>,
    /// The replica handlers each broker runs (dropped, so cancelled, when it crashes).
    handlers: BTreeMap<usize, Vec<glommio::Task<()>>>,
    /// Pairs of brokers that cannot reach each other.
    pub partitions: BTreeSet<(usize, usize)>,
    /// Count of frames sent by either end: the driver's measure of progress.
    pub activity: u64,
}

/// The network shared by every simulated broker.
#[derive(Default)]
pub struct Net {
    pub state: RefCell<NetState>,
}

/// A broker's access to the network (held in its `PeerChannels`).
pub struct Port {
    pub net: Rc<Net>,
    pub me: usize,
}

impl Net {
    pub fn partitioned(&self, a: usize, b: usize) -> bool {
        self.state
            .borrow()
            .partitions
            .contains(&(a.min(b), a.max(b)))
    }

    /// Everything deliverable now, in a stable order.
    pub fn deliverable(&self) -> Vec<Deliverable> {
        let mut st = self.state.borrow_mut();
        let mut out = Vec::new();
        for (id, link) in st.links.iter_mut() {
            if link.done {
                continue;
            }
            if !link.requests.is_empty() || link.reset || (link.closed && link.server_in.is_some())
            {
                out.push(Deliverable::Request(*id));
            }
            if let Some(rx) = &link.server_out {
                while let Ok(msg) = rx.try_recv() {
                    link.staged.push_back(msg);
                }
                if link.staged.is_empty() && rx.is_disconnected() && link.started {
                    // The handler ended without finishing (it was cancelled).
                    link.staged
                        .push_back(OutMsg::Finish(Err(RpcError::cancelled())));
                    link.server_out = None;
                }
            }
            if !link.staged.is_empty() {
                out.push(Deliverable::Response(*id));
            }
        }
        st.links.retain(|_, l| !l.done);
        out
    }

    /// Delivers one item.
    pub fn deliver(self: &Rc<Self>, what: Deliverable) {
        match what {
            Deliverable::Request(id) => self.deliver_request(id),
            Deliverable::Response(id) => self.deliver_response(id),
        }
    }

    fn deliver_request(self: &Rc<Self>, id: u64) {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let Some(link) = st.links.get_mut(&id) else {
            return;
        };
        let Some(body) = link.requests.pop_front() else {
            if link.reset {
                drop(guard);
                self.break_link(id);
                return;
            }
            // EOF: the handler sees the primary's half-close.
            link.server_in = None;
            link.closed = false;
            return;
        };
        link.delivered += 1;
        if let Some(tx) = &link.server_in {
            let _ = tx.try_send(Ok(body));
            return;
        }
        // The first request starts the replica's handler.
        let to = link.to;
        let core = st
            .brokers
            .get(to)
            .and_then(|c| c.as_ref())
            .and_then(Weak::upgrade);
        let first = decode_message::<ReplicateRequest>(body);
        let (Some(core), Ok(first)) = (core, first) else {
            drop(guard);
            self.break_link(id);
            return;
        };
        let (in_tx, in_rx) = flume::unbounded();
        let (out_tx, out_rx) = flume::unbounded();
        let (cancel_tx, cancel_rx) = flume::bounded::<()>(1);
        // Queued as the server queues a connection's call (`core::call::spawn_call`).
        let task = crate::core::call::queue_call(async move {
            let mut input = CallIn::Remote(in_rx);
            let mut output = CallOut::Remote {
                tx: out_tx,
                cancel: cancel_rx,
            };
            let outcome =
                crate::journal::replicate::replicate(&core, first, &mut input, &mut output).await;
            output.finish(outcome);
        });
        link.server_in = Some(in_tx);
        link.server_out = Some(out_rx);
        link.cancel = Some(cancel_tx);
        link.started = true;
        st.handlers.entry(to).or_default().extend(task);
        st.activity += 1;
    }

    fn deliver_response(&self, id: u64) {
        let mut st = self.state.borrow_mut();
        let Some(link) = st.links.get_mut(&id) else {
            return;
        };
        let Some(msg) = link.staged.pop_front() else {
            return;
        };
        match msg {
            OutMsg::Frame(frame) => {
                let body = frame.slice(5.min(frame.len())..);
                let _ = link.to_client.try_send(Ok(Some(body)));
            }
            OutMsg::Finish(outcome) => {
                let _ = link.to_client.try_send(outcome.map(|()| None));
                link.done = true;
                link.server_in = None;
                link.cancel = None;
            }
        }
        st.activity += 1;
    }

    /// Breaks a stream: its replica's handler sees an error on its input and its client
    /// going away; its primary sees an error on its next read.
    pub fn break_link(&self, id: u64) {
        let mut st = self.state.borrow_mut();
        let Some(link) = st.links.get_mut(&id) else {
            return;
        };
        if let Some(tx) = link.server_in.take() {
            let _ = tx.try_send(Err(RpcError::unavailable("simulated stream reset")));
        }
        link.cancel = None;
        link.requests.clear();
        link.staged.clear();
        link.server_out = None;
        let _ = link
            .to_client
            .try_send(Err(RpcError::unavailable("simulated stream reset")));
        // The handler notices the reset by itself (and rolls back).
        link.done = true;
        st.activity += 1;
    }

    /// Crashes broker `b`: its handlers stop where they are, its streams break.
    pub fn crash(&self, b: usize) {
        let (ids, handlers) = {
            let mut st = self.state.borrow_mut();
            st.brokers[b] = None;
            let ids: Vec<u64> = st
                .links
                .iter()
                .filter(|(_, l)| l.from == b || l.to == b)
                .map(|(id, _)| *id)
                .collect();
            (ids, st.handlers.remove(&b).unwrap_or_default())
        };
        drop(handlers);
        for id in ids {
            self.break_link(id);
        }
    }

    /// Breaks every stream between `a` and `b` and keeps new ones from opening.
    pub fn partition(&self, a: usize, b: usize) {
        let ids: Vec<u64> = {
            let mut st = self.state.borrow_mut();
            st.partitions.insert((a.min(b), a.max(b)));
            st.links
                .iter()
                .filter(|(_, l)| (l.from == a && l.to == b) || (l.from == b && l.to == a))
                .map(|(id, _)| *id)
                .collect()
        };
        for id in ids {
            self.break_link(id);
        }
    }

    pub fn links(&self) -> Vec<u64> {
        self.state.borrow().links.keys().copied().collect()
    }
}

impl TestNet for Port {
    /// Opens a stream of `journal` from this broker to the one at `endpoint`.
    fn open(&self, endpoint: &str, _journal: &str) -> Result<TestCall, RpcError> {
        let Some(to) = broker_of(endpoint) else {
            return Err(RpcError::unavailable(format!(
                "dialing peer {endpoint}: no such simulated broker"
            )));
        };
        let up = self
            .net
            .state
            .borrow()
            .brokers
            .get(to)
            .is_some_and(|c| c.is_some());
        if !up || self.net.partitioned(self.me, to) {
            return Err(RpcError::unavailable(format!(
                "dialing peer {endpoint}: unreachable"
            )));
        }
        let (tx, rx) = flume::unbounded();
        let mut st = self.net.state.borrow_mut();
        st.next_id += 1;
        let id = st.next_id;
        st.links.insert(
            id,
            Link {
                from: self.me,
                to,
                requests: VecDeque::new(),
                closed: false,
                reset: false,
                delivered: 0,
                server_in: None,
                server_out: None,
                cancel: None,
                started: false,
                to_client: tx,
                staged: VecDeque::new(),
                done: false,
            },
        );
        let link = SimCall {
            net: self.net.clone(),
            id,
            buf: BytesMut::new(),
            closed: false,
        };
        Ok(TestCall {
            link: Box::new(link),
            responses: rx,
        })
    }
}

/// The primary's end of a simulated stream.
pub struct SimCall {
    net: Rc<Net>,
    id: u64,
    /// Bytes of a frame sent in parts (the pipeline sends content as a head and a body).
    buf: BytesMut,
    closed: bool,
}

impl TestLink for SimCall {
    /// Queues `part` of the request stream; whole gRPC frames go to the link.
    fn send_frame(&mut self, part: Bytes) -> Result<(), RpcError> {
        self.buf.extend_from_slice(&part);
        let mut st = self.net.state.borrow_mut();
        st.activity += 1;
        let Some(link) = st.links.get_mut(&self.id).filter(|l| !l.done) else {
            return Err(RpcError::unavailable("simulated stream reset"));
        };
        while self.buf.len() >= 5 {
            let len = u32::from_be_bytes(self.buf[1..5].try_into().expect("4 bytes")) as usize;
            if self.buf.len() < 5 + len {
                break;
            }
            self.buf.advance(5);
            link.requests.push_back(self.buf.split_to(len).freeze());
        }
        Ok(())
    }

    fn close(&mut self) {
        self.closed = true;
        if let Some(link) = self.net.state.borrow_mut().links.get_mut(&self.id) {
            link.closed = true;
            if link.delivered == 0 && link.requests.is_empty() {
                link.done = true; // Never started: nothing to tell.
            }
        }
    }
}

impl Drop for SimCall {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // Dropped without closing: the stream resets (after what was already sent, which
        // h2 delivers first).
        if let Ok(mut st) = self.net.state.try_borrow_mut()
            && let Some(link) = st.links.get_mut(&self.id)
        {
            link.reset = true;
        }
    }
}
