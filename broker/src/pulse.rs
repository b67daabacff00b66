//! Pulses (spec §2.2 "Pulses"): every journal whose primary is this broker gets a zero-byte
//! Append once a minute and at once whenever its assignments change. The pulse syncs the
//! pipeline (bringing new replicas in), writes the Route into the assignment values (which
//! lets the allocator proceed) and rolls fragments due a time-based roll, even when no
//! client appends.
//!
//! Lives on: every core (cluster mode only), for the journals that core owns.

use crate::call::{self, CallIn};
use crate::core::{Core, owner_core};
use crate::keyspace::Snapshot;
use protocol::append_request::Suspend;
use protocol::{AppendRequest, AppendResponse, Route, Status};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Gazette's health-check interval: how often an idle journal is pulsed.
const PULSE_INTERVAL: Duration = Duration::from_secs(60);
/// How long one pulse may take before it is abandoned (and retried).
const PULSE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct State {
    /// Journals with a pulse in flight.
    running: HashSet<String>,
    /// When each journal was last pulsed, and under which Route.
    last: HashMap<String, (Instant, Route)>,
}

pub async fn run(core: Rc<Core>) {
    if !core.keyspace.current().cluster {
        return;
    }
    let state = Rc::new(RefCell::new(State::default()));
    let mut rx = core.keyspace.subscribe();
    loop {
        let snap = rx.borrow_and_update().clone();
        let due_now = due(&core, &snap, &state.borrow());
        for journal in due_now {
            state.borrow_mut().running.insert(journal.clone());
            glommio::spawn_local(pulse(core.clone(), state.clone(), journal, snap.clone()))
                .detach();
        }
        // Wake on the next keyspace change, or to pulse idle journals.
        let changed = futures_lite::future::or(async { rx.changed().await.is_ok() }, async {
            glommio::timer::sleep(Duration::from_secs(5)).await;
            true
        })
        .await;
        if !changed {
            return;
        }
    }
}

/// The journals this core should pulse now: those it is primary of, owned by this core,
/// with no pulse in flight, whose Route changed, whose assignments don't advertise it yet,
/// or that were not pulsed for a minute.
fn due(core: &Core, snap: &Snapshot, state: &State) -> Vec<String> {
    let mut out = Vec::new();
    for (journal, assignments) in &snap.assignments {
        if owner_core(journal, core.cores) != core.index || state.running.contains(journal) {
            continue;
        }
        if !snap.journals.contains_key(journal) {
            continue;
        }
        let route = snap.assigned_route(journal);
        let primary = usize::try_from(route.primary)
            .ok()
            .and_then(|i| route.members.get(i));
        if primary != Some(&core.process_id) {
            continue;
        }
        let consistent = assignments
            .iter()
            .all(|a| crate::replicate::equivalent(&a.value, &route));
        let fresh = state.last.get(journal).is_some_and(|(at, last)| {
            at.elapsed() < PULSE_INTERVAL && crate::replicate::equivalent(last, &route)
        });
        if !consistent || !fresh {
            out.push(journal.clone());
        }
    }
    out
}

async fn pulse(
    core: Rc<Core>,
    state: Rc<RefCell<State>>,
    journal: String,
    snap: std::sync::Arc<Snapshot>,
) {
    let route = snap.assigned_route(&journal);
    let outcome = futures_lite::future::or(pulse_once(&core, &journal), async {
        glommio::timer::sleep(PULSE_TIMEOUT).await;
        Err("timed out".to_string())
    })
    .await;
    match outcome {
        Ok(
            Status::Ok
            | Status::NotJournalPrimaryBroker
            | Status::NoJournalPrimaryBroker
            | Status::JournalNotFound
            | Status::Suspended,
        ) => {}
        Ok(status) => tracing::debug!(%journal, ?status, "journal pulse (will retry)"),
        Err(err) => tracing::warn!(%journal, %err, "journal pulse failed (will retry)"),
    }
    let mut st = state.borrow_mut();
    st.running.remove(&journal);
    st.last.insert(journal, (Instant::now(), route));
}

/// One zero-byte Append (do_not_proxy, SUSPEND_NO_RESUME) through the append FSM.
async fn pulse_once(core: &Rc<Core>, journal: &str) -> Result<Status, String> {
    let (input, mut output, mut client) = call::channel_call();
    // The commit intent (an empty chunk), then EOF.
    let empty = bytes::Bytes::from(prost::Message::encode_to_vec(&AppendRequest::default()));
    client
        .requests
        .send_async(Ok(empty))
        .await
        .map_err(|_| "pulse input closed".to_string())?;
    // Replacing the sender drops the original: the append sees EOF after the chunk.
    client.requests = flume::bounded(1).0;
    let req = AppendRequest {
        journal: journal.to_string(),
        do_not_proxy: true,
        suspend: Suspend::NoResume as i32,
        ..Default::default()
    };
    let mut input: CallIn = input;
    let result = crate::append::append(core, req, &mut input, &mut output).await;
    result.map_err(|e| e.message)?;
    drop(output);
    match client.next::<AppendResponse>().await {
        Ok(Some(resp)) => Ok(Status::try_from(resp.status).unwrap_or(Status::Ok)),
        Ok(None) => Err("pulse got no response".to_string()),
        Err(e) => Err(e.message),
    }
}
