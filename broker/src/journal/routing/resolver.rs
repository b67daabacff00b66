//! Resolution of a journal against the keyspace: its spec, Route, Header and Status.
//!
//! Lives on: any core (pure functions over a [`Snapshot`]).
//!
//! In the embedded single-node mode every journal is assigned to this broker: the Route is
//! `[self]` with primary 0 (none when the journal is fully suspended). In the etcd mode the
//! Route comes from the journal's assignment keys (`Snapshot::assigned_route`); the status
//! rules (spec §2.1) are the same for both.
//!
//! When another broker must serve and the request may be proxied, the status is OK and
//! `Resolution::local` is false: the caller proxies (`crate::journal::routing::proxy`) to the header's
//! `process_id` (the primary), or to any member when that is empty. Without proxying
//! (`do_not_proxy`), the status is NOT_JOURNAL_PRIMARY_BROKER or NOT_JOURNAL_BROKER with the
//! Route, which Gazette's Go clients retry against directly.

use crate::control::keyspace::Snapshot;
use crate::core::Core;
use protocol::grpc::RpcError;
use protocol::journal_spec::suspend::Level;
use protocol::{Header, JournalSpec, Route, Status};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// A core's resolutions of the journals it serves, for one keyspace snapshot: a
/// resolution is a pure function of the snapshot, the core and the request's journal and
/// flags (a proxied request's header only adds checks), so while the snapshot stays the
/// same an Append of a journal served here takes the last one rather than cloning the
/// spec and building the Route and Header again (about 15 allocations per Append).
/// Holds only resolutions with status OK served by this core, of journals named exactly,
/// and forgets them all at the next snapshot, so it is bounded by the journals the
/// keyspace assigns here.
///
/// Lives on: its core (`Journals::resolved`).
#[derive(Default)]
pub struct Resolved {
    cached: RefCell<Option<Kept>>,
}

/// The resolutions kept from one snapshot.
struct Kept {
    snapshot: Arc<Snapshot>,
    /// By journal name as requested: the resolutions without and with `may_proxy`.
    by_name: HashMap<String, [Option<Rc<Resolution>>; 2]>,
}

impl Resolved {
    /// The cached resolution of `journal` (as the request names it) with `may_proxy`, if
    /// one was made from `snapshot`.
    pub fn get(
        &self,
        snapshot: &Arc<Snapshot>,
        journal: &str,
        may_proxy: bool,
    ) -> Option<Rc<Resolution>> {
        let cached = self.cached.borrow();
        let kept = cached
            .as_ref()
            .filter(|k| Arc::ptr_eq(&k.snapshot, snapshot))?;
        kept.by_name.get(journal)?[usize::from(may_proxy)].clone()
    }

    /// Keeps `res` (of `journal` as the request names it, with `may_proxy`) if it is OK,
    /// served here, and named without a metadata segment (`name;meta`, where any segment
    /// resolves to the same journal: a client must not grow the cache by naming one
    /// journal many ways); a resolution of a newer snapshot first forgets the others.
    pub fn put(&self, journal: &str, may_proxy: bool, res: &Rc<Resolution>) {
        if res.status != Status::Ok || !res.local || journal != res.journal {
            return;
        }
        let mut cached = self.cached.borrow_mut();
        let kept = match cached.take() {
            Some(kept) if Arc::ptr_eq(&kept.snapshot, &res.snapshot) => kept,
            _ => Kept {
                snapshot: Arc::clone(&res.snapshot),
                by_name: HashMap::new(),
            },
        };
        let kept = cached.insert(kept);
        kept.by_name.entry(journal.to_string()).or_default()[usize::from(may_proxy)] =
            Some(Rc::clone(res));
    }
}

pub struct Resolution {
    pub status: Status,
    pub header: Header,
    /// The journal name without any `;meta` suffix.
    pub journal: String,
    pub spec: Option<JournalSpec>,
    pub snapshot: Arc<Snapshot>,
    /// Whether this broker serves the call itself (else, with status OK, it proxies).
    pub local: bool,
}

/// How an RPC wants its journal resolved (Gazette's resolveArgs).
pub struct Args<'a> {
    pub journal: &'a str,
    pub require_primary: bool,
    pub may_proxy: bool,
    pub min_etcd_revision: i64,
    pub proxy_header: Option<&'a Header>,
}

/// Resolves `args.journal`, first waiting for the keyspace to reach any revision that the
/// request (or a proxying broker's header) requires.
pub async fn resolve(core: &Core, args: Args<'_>) -> Result<Resolution, RpcError> {
    let mut wait = args.min_etcd_revision;
    if let Some(hdr) = args.proxy_header {
        let ours = core.keyspace.current();
        let etcd = hdr.etcd.unwrap_or_default();
        if etcd.cluster_id != ours.cluster_id {
            return Err(RpcError::unknown(format!(
                "proxied request Etcd ClusterId doesn't match our own ({} vs {})",
                etcd.cluster_id, ours.cluster_id
            )));
        }
        if let Some(pid) = &hdr.process_id
            && !(pid.zone.is_empty() && pid.suffix.is_empty())
            && *pid != core.process_id
        {
            return Err(RpcError::unknown(format!(
                "proxied request ProcessId doesn't match our own ({pid:?} vs {:?})",
                core.process_id
            )));
        }
        wait = wait.max(etcd.revision);
    }
    let snapshot = if wait > core.keyspace.current().revision {
        core.keyspace.wait_for(wait).await
    } else {
        core.keyspace.current()
    };
    Ok(resolve_in(core, snapshot, &args))
}

fn resolve_in(core: &Core, snapshot: Arc<Snapshot>, args: &Args<'_>) -> Resolution {
    let journal = protocol::validate::strip_meta(args.journal).to_string();
    let spec = snapshot
        .journals
        .get(&journal)
        .map(|item| item.spec.clone());
    let route = match &spec {
        Some(spec) => route_of(core, &snapshot, &journal, spec),
        None => Route {
            primary: -1,
            ..Default::default()
        },
    };
    let is_member = route.members.contains(&core.process_id);
    let suspended = spec
        .as_ref()
        .and_then(|s| s.suspend.as_ref())
        .is_some_and(|s| s.level == Level::Full as i32);
    // Who should serve (Gazette's rule 6): the primary when one is required and exists,
    // else ourselves if we are a member, else nobody in particular.
    let serving = if args.require_primary && route.primary >= 0 {
        route.members.get(route.primary as usize).cloned()
    } else if is_member {
        Some(core.process_id.clone())
    } else {
        None
    };
    let status = if spec.is_none() {
        Status::JournalNotFound
    } else if suspended {
        Status::Suspended
    } else if args.require_primary && route.primary == -1 {
        Status::NoJournalPrimaryBroker
    } else if route.members.is_empty() {
        Status::InsufficientJournalBrokers
    } else if serving.as_ref() != Some(&core.process_id) {
        if args.may_proxy {
            Status::Ok
        } else if args.require_primary {
            Status::NotJournalPrimaryBroker
        } else {
            Status::NotJournalBroker
        }
    } else {
        Status::Ok
    };
    let process_id = if status != Status::Ok {
        Some(core.process_id.clone())
    } else {
        serving
    };
    let local = status == Status::Ok && process_id.as_ref() == Some(&core.process_id);
    let header = Header {
        process_id,
        route: Some(route),
        etcd: Some(snapshot.etcd_header()),
    };
    Resolution {
        status,
        header,
        journal,
        spec,
        snapshot,
        local,
    }
}

/// The Route of a journal: from its assignments with etcd, else [`local_route`].
fn route_of(core: &Core, snapshot: &Snapshot, journal: &str, spec: &JournalSpec) -> Route {
    if snapshot.cluster {
        snapshot.assigned_route(journal)
    } else {
        local_route(core, spec)
    }
}

/// The Route of `journal` in `snapshot` (empty if it has no spec).
pub fn route_of_journal(core: &Core, snapshot: &Snapshot, journal: &str) -> Route {
    match snapshot.journals.get(journal) {
        Some(item) => route_of(core, snapshot, journal, &item.spec),
        None => Route {
            primary: -1,
            ..Default::default()
        },
    }
}

/// The Route of a journal in the embedded mode: this broker alone, unless suspended fully.
fn local_route(core: &Core, spec: &JournalSpec) -> Route {
    let level = spec.suspend.as_ref().map_or(0, |s| s.level);
    if level == Level::Full as i32 {
        return Route {
            primary: -1,
            ..Default::default()
        };
    }
    Route {
        members: vec![core.process_id.clone()],
        primary: 0,
        endpoints: vec![core.endpoint.clone()],
    }
}

/// The header of RPCs not scoped to a journal (List, Apply, FragmentStoreHealth).
pub fn unrouted_header(core: &Core, snapshot: &Snapshot) -> Header {
    Header {
        process_id: Some(core.process_id.clone()),
        route: Some(Route {
            primary: -1,
            ..Default::default()
        }),
        etcd: Some(snapshot.etcd_header()),
    }
}

/// The Route shown for a journal in List responses.
pub fn list_route(core: &Core, snapshot: &Snapshot, spec: &JournalSpec) -> Route {
    route_of(core, snapshot, &spec.name, spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(snapshot: &Arc<Snapshot>, journal: &str, status: Status, local: bool) -> Rc<Resolution> {
        Rc::new(Resolution {
            status,
            header: Header::default(),
            journal: journal.into(),
            spec: Some(JournalSpec::default()),
            snapshot: Arc::clone(snapshot),
            local,
        })
    }

    #[test]
    fn resolutions_are_kept_for_one_snapshot_and_only_when_served_here() {
        let cache = Resolved::default();
        let first = Arc::new(Snapshot {
            revision: 7,
            ..Default::default()
        });
        assert!(cache.get(&first, "a/j", true).is_none());

        let ok = res(&first, "a/j", Status::Ok, true);
        cache.put("a/j", true, &ok);
        let hit = cache.get(&first, "a/j", true).expect("kept");
        assert!(Rc::ptr_eq(&hit, &ok));
        assert!(cache.get(&first, "a/j", false).is_none(), "other flags");
        assert!(cache.get(&first, "a/j;meta", true).is_none(), "other name");

        // Not kept: a status other than OK, or a call proxied elsewhere.
        cache.put(
            "a/k",
            true,
            &res(&first, "a/k", Status::JournalNotFound, false),
        );
        cache.put("a/p", true, &res(&first, "a/p", Status::Ok, false));
        assert!(cache.get(&first, "a/k", true).is_none());
        assert!(cache.get(&first, "a/p", true).is_none());
        // Nor one named with a metadata segment: any resolves to the journal `a/j`.
        cache.put("a/j;m1", false, &res(&first, "a/j", Status::Ok, true));
        assert!(cache.get(&first, "a/j;m1", false).is_none());
        assert!(cache.get(&first, "a/j", false).is_none());

        // A new snapshot (even at the same revision) misses, and its first resolution
        // forgets the old ones.
        let second = Arc::new(Snapshot {
            revision: 7,
            ..Default::default()
        });
        assert!(cache.get(&second, "a/j", true).is_none());
        cache.put("a/q", true, &res(&second, "a/q", Status::Ok, true));
        assert!(cache.get(&second, "a/q", true).is_some());
        assert!(cache.get(&first, "a/j", true).is_none());
        assert!(cache.get(&second, "a/j", true).is_none());
    }
}
