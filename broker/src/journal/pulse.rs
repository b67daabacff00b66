//! Pulses (spec §2.2 "Pulses"): every journal whose primary is this broker gets a zero-byte
//! Append once a minute and at once whenever its assignments change. The pulse syncs the
//! pipeline (bringing new replicas in), writes the Route into the assignment values (which
//! lets the allocator proceed) and rolls fragments due a time-based roll, even when no
//! client appends.
//!
//! With `--broker.auto-suspend`, as Gazette's `pulseDaemon`: once a journal's Route has
//! been stable for [`AUTO_SUSPEND_STABLE_TICKS`] periodic pulses (15 minutes), its pulses
//! ask SUSPEND_IF_FLUSHED instead of SUSPEND_NO_RESUME, so a journal whose fragments are
//! all persisted is suspended (and resumed by its next client append).
//!
//! Lives on: every core (cluster mode only), for the journals that core owns.

use crate::control::keyspace::Snapshot;
use crate::core::Core;
use crate::core::call::{self, CallIn};
use crate::core::owners::hash_core;
use crate::journal::journals::Journals;
use protocol::append_request::Suspend;
use protocol::{AppendRequest, AppendResponse, Route, Status};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How often idle journals are checked for a pulse when the keyspace is quiet.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Gazette's health-check interval: how often an idle journal is pulsed.
const PULSE_INTERVAL: Duration = Duration::from_secs(60);
/// How long one pulse may take before it is abandoned (and retried).
const PULSE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a journal no call has placed waits for its first pulse: long enough for the
/// client that created it to send its first append, which places the journal on the core of
/// that client's connection. A pulse first would place it on its hash core, and every append
/// of a writer whose connection landed on the other core would then cross cores (about five
/// cross-core messages per append; replication 3 with one append in flight, p50
/// 0.30 ms against 0.24 ms without the hop).
const PLACE_GRACE: Duration = Duration::from_millis(1000);
/// Periodic pulses with an unchanged Route before auto-suspend asks SUSPEND_IF_FLUSHED
/// (Gazette's `stableTicks >= 15`).
pub const AUTO_SUSPEND_STABLE_TICKS: u32 = 15;

#[derive(Default)]
struct State {
    /// Journals with a pulse in flight.
    running: HashSet<String>,
    /// When each journal was last pulsed, and under which Route.
    last: HashMap<String, (Instant, Route)>,
    /// Periodic pulses since each journal's Route last changed.
    stable: HashMap<String, u32>,
    /// Journals due a pulse that no call has placed yet, since when ([`PLACE_GRACE`]).
    unplaced: HashMap<String, Instant>,
}

/// Stable ticks of a journal about to be pulsed under `route`: one more after a periodic
/// pulse under the same Route, zero after a Route change (or the first pulse).
fn next_ticks(prev: u32, last: Option<&(Instant, Route)>, route: &Route) -> u32 {
    match last {
        Some((at, last)) if protocol::route::equivalent(last, route) => {
            if at.elapsed() >= PULSE_INTERVAL {
                prev.saturating_add(1)
            } else {
                prev
            }
        }
        _ => 0,
    }
}

/// The suspend mode of a pulse (Gazette's `pulseDaemon`).
fn pulse_suspend(auto_suspend: bool, ticks: u32) -> Suspend {
    if auto_suspend && ticks >= AUTO_SUSPEND_STABLE_TICKS {
        Suspend::IfFlushed
    } else {
        Suspend::NoResume
    }
}

pub async fn run(journals: Rc<Journals>) {
    let core = &journals.core;
    if !core.keyspace.current().cluster {
        return;
    }
    let state = Rc::new(RefCell::new(State::default()));
    let mut rx = core.keyspace.subscribe();
    loop {
        let snap = rx.borrow_and_update().clone();
        let due_now = due(core, &snap, &mut state.borrow_mut(), Instant::now());
        for journal in due_now {
            state.borrow_mut().running.insert(journal.clone());
            glommio::spawn_local(pulse(
                journals.clone(),
                state.clone(),
                journal,
                snap.clone(),
            ))
            .detach();
        }
        // Wake on the next keyspace change, to pulse idle journals, or when an unplaced
        // journal's grace ends.
        let wait = next_wake(&state.borrow(), Instant::now());
        let changed =
            crate::time::within(wait, async { rx.changed().await.is_ok() }, || true).await;
        if !changed {
            return;
        }
    }
}

/// How long the pulse loop may sleep when the keyspace stays quiet.
fn next_wake(state: &State, now: Instant) -> Duration {
    state
        .unplaced
        .values()
        .map(|since| (*since + PLACE_GRACE).saturating_duration_since(now))
        .min()
        .map_or(IDLE_CHECK, |grace| grace.min(IDLE_CHECK))
}

/// The journals this core should pulse now: those it is primary of, owned by this core,
/// with no pulse in flight, whose Route changed, whose assignments don't advertise it yet,
/// or that were not pulsed for a minute. A journal no call has placed is pulsed (and so
/// placed on its hash core) only after [`PLACE_GRACE`].
fn due(core: &Core, snap: &Snapshot, state: &mut State, now: Instant) -> Vec<String> {
    let mut out = Vec::new();
    let waited = std::mem::take(&mut state.unplaced);
    for (journal, assignments) in &snap.assignments {
        if state.running.contains(journal) || !snap.journals.contains_key(journal) {
            continue;
        }
        let route = snap.assigned_route(journal);
        let primary = usize::try_from(route.primary)
            .ok()
            .and_then(|i| route.members.get(i));
        if primary != Some(&core.process_id) {
            continue;
        }
        // A journal no call has placed yet is pulsed by its hash core, whose pulse then
        // places it there (`Journals::replica` claims the journal for the core opening it).
        // Only where this broker is primary: a replica's journal is placed by the first
        // Replicate stream, on the core of the primary's connection.
        let placed = core.owners.get(journal);
        let owner = placed.unwrap_or_else(|| hash_core(journal, core.cores));
        if owner != core.index {
            continue;
        }
        let consistent = assignments
            .iter()
            .all(|a| protocol::route::equivalent(&a.value, &route));
        let fresh = state.last.get(journal).is_some_and(|(at, last)| {
            at.elapsed() < PULSE_INTERVAL && protocol::route::equivalent(last, &route)
        });
        if consistent && fresh {
            continue;
        }
        if placed.is_none() {
            let since = waited.get(journal).copied().unwrap_or(now);
            if now.saturating_duration_since(since) < PLACE_GRACE {
                state.unplaced.insert(journal.clone(), since);
                continue;
            }
        }
        out.push(journal.clone());
    }
    // Only journals still waiting are kept: one placed meanwhile, no longer due or gone
    // from the keyspace is forgotten, so the loop never wakes early for it.
    out
}

async fn pulse(
    journals: Rc<Journals>,
    state: Rc<RefCell<State>>,
    journal: String,
    snap: std::sync::Arc<Snapshot>,
) {
    let route = snap.assigned_route(&journal);
    let ticks = {
        let st = state.borrow();
        let prev = st.stable.get(&journal).copied().unwrap_or(0);
        next_ticks(prev, st.last.get(&journal), &route)
    };
    let suspend = pulse_suspend(journals.core.cfg.auto_suspend, ticks);
    let outcome = crate::time::within(
        PULSE_TIMEOUT,
        pulse_once(&journals, &journal, suspend),
        || Err("timed out".to_string()),
    )
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
    st.stable.insert(journal.clone(), ticks);
    st.last.insert(journal, (Instant::now(), route));
}

/// One zero-byte Append (do_not_proxy, SUSPEND_NO_RESUME or, auto-suspending,
/// SUSPEND_IF_FLUSHED) through the append FSM.
async fn pulse_once(
    journals: &Rc<Journals>,
    journal: &str,
    suspend: Suspend,
) -> Result<Status, String> {
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
        suspend: suspend as i32,
        ..Default::default()
    };
    let mut input: CallIn = input;
    let result = crate::journal::append::append(journals, req, &mut input, &mut output).await;
    result.map_err(|e| e.message)?;
    drop(output);
    match client.next::<AppendResponse>().await {
        Ok(Some(resp)) => Ok(Status::try_from(resp.status).unwrap_or(Status::Ok)),
        Ok(None) => Err("pulse got no response".to_string()),
        Err(e) => Err(e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_wakes_when_an_unplaced_journals_grace_ends() {
        let now = Instant::now();
        let mut state = State::default();
        assert_eq!(next_wake(&state, now), IDLE_CHECK, "nothing waits");
        state.unplaced.insert("a".into(), now);
        assert_eq!(next_wake(&state, now), PLACE_GRACE);
        state.unplaced.insert("b".into(), now - PLACE_GRACE / 4);
        assert_eq!(
            next_wake(&state, now),
            PLACE_GRACE * 3 / 4,
            "the earliest end"
        );
        // A grace already over wakes at once (the next `due` pulses it and drops it).
        state.unplaced.insert("c".into(), now - PLACE_GRACE * 2);
        assert_eq!(next_wake(&state, now), Duration::ZERO);
    }

    #[test]
    fn auto_suspend_waits_for_a_stable_route() {
        let route = Route {
            primary: 0,
            ..Default::default()
        };
        let other = Route {
            primary: 1,
            ..Default::default()
        };
        let long_ago = Instant::now() - PULSE_INTERVAL - Duration::from_secs(1);
        // The first pulse, and any after a Route change, start over.
        assert_eq!(next_ticks(7, None, &route), 0);
        assert_eq!(next_ticks(7, Some(&(long_ago, other)), &route), 0);
        // A periodic pulse under the same Route counts; an early re-pulse does not.
        assert_eq!(next_ticks(7, Some(&(long_ago, route.clone())), &route), 8);
        assert_eq!(
            next_ticks(7, Some(&(Instant::now(), route.clone())), &route),
            7
        );

        assert_eq!(pulse_suspend(false, 100), Suspend::NoResume);
        assert_eq!(
            pulse_suspend(true, AUTO_SUSPEND_STABLE_TICKS - 1),
            Suspend::NoResume
        );
        assert_eq!(
            pulse_suspend(true, AUTO_SUSPEND_STABLE_TICKS),
            Suspend::IfFlushed
        );
    }
}
