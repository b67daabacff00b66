//! The append's dealings with the keyspace: resolving the journal, comparing its Route
//! with the desired replication, advertising a synchronized Route in the assignments
//! (Gazette's updateAssignments), and writing the journal's suspension.
//!
//! Lives on: the journal's owner core; reads the core's keyspace snapshot and writes
//! through its keyspace transactions.

use crate::core::Core;
use crate::journal::routing::resolver::{self, Args, Resolution, Resolved};
use protocol::AppendRequest;
use protocol::grpc::RpcError;
use protocol::journal_spec::suspend::Level;
use std::cmp::Ordering;
use std::rc::Rc;

pub(super) async fn resolve(
    core: &Rc<Core>,
    resolved: &Resolved,
    req: &AppendRequest,
) -> Result<Rc<Resolution>, RpcError> {
    let may_proxy = !req.do_not_proxy;
    // A proxied request's header is checked each time; a request waiting for a newer
    // revision resolves against that one.
    let cacheable = req.header.is_none();
    if cacheable {
        let current = core.keyspace.current();
        if req.min_etcd_revision <= current.revision
            && let Some(hit) = resolved.get(&current, &req.journal, may_proxy)
        {
            return Ok(hit);
        }
    }
    let res = Rc::new(
        resolver::resolve(
            core,
            Args {
                journal: &req.journal,
                require_primary: true,
                may_proxy,
                min_etcd_revision: req.min_etcd_revision,
                proxy_header: req.header.as_ref(),
            },
        )
        .await?,
    );
    if cacheable {
        resolved.put(&req.journal, may_proxy, &res);
    }
    Ok(res)
}

/// How the journal's Route compares to its desired replication (cluster mode only; the
/// embedded single node serves every journal alone).
pub(super) fn replication_gap(core: &Core, res: &Resolution) -> Ordering {
    if !res.snapshot.cluster {
        return Ordering::Equal;
    }
    let members = res.header.route.as_ref().map_or(0, |r| r.members.len());
    let desired = res.spec.as_ref().map_or(0, |s| {
        crate::cluster::allocator::desired_replication(s, core.cfg.max_replication.max(0) as u32)
    });
    members.cmp(&desired)
}

/// Gazette's "update assignments": when an assignment's value is not the journal's
/// current Route, writes the Route (members and primary) into every such value, keeping
/// each key's lease, in one transaction guarded by all of their revisions. Returns the
/// revision to resolve again at, or `None` when the assignments were already consistent.
pub(super) async fn update_assignments(
    core: &Rc<Core>,
    res: &Resolution,
) -> Result<Option<i64>, RpcError> {
    use crate::control::keyspace::{Compare, Op, PutLease, assign_key};
    use prost::Message;
    if !res.snapshot.cluster {
        return Ok(None);
    }
    let unrouted = protocol::Route::default();
    let route = res.header.route.as_ref().unwrap_or(&unrouted);
    let Some(assignments) = res.snapshot.assignments.get(&res.journal) else {
        return Ok(None);
    };
    if assignments
        .iter()
        .all(|a| protocol::route::equivalent(&a.value, route))
    {
        // Consistent, as on every append after the first of a Route: nothing to build.
        return Ok(None);
    }
    let value = protocol::Route {
        members: route.members.clone(),
        primary: route.primary,
        endpoints: Vec::new(),
    }
    .encode_to_vec();
    let root = &core.cfg.etcd_prefix;
    let mut compares = Vec::new();
    let mut ops = Vec::new();
    for a in assignments {
        let key = assign_key(root, &res.journal, &a.zone, &a.suffix, a.slot);
        if !protocol::route::equivalent(&a.value, route) {
            ops.push(Op::Put {
                key: key.clone(),
                value: value.clone().into(),
                lease: PutLease::Keep,
            });
        }
        compares.push(Compare {
            key,
            mod_revision: a.mod_revision,
        });
    }
    let outcome = core
        .keyspace
        .txn(compares, ops)
        .await
        .map_err(|e| RpcError::unknown(format!("updateAssignments: {e}")))?;
    Ok(Some(if outcome.succeeded {
        outcome.revision
    } else {
        // The assignments changed meanwhile (the allocator won the race): resolve again
        // once the change is here.
        res.snapshot.revision + 1
    }))
}

/// Writes a new suspension into the journal's spec, guarded by its mod revision.
pub(super) async fn update_suspend(
    core: &Rc<Core>,
    res: &Resolution,
    level: Level,
    offset: i64,
) -> Result<(), RpcError> {
    use crate::control::keyspace::{Compare, Op, item_key};
    use prost::Message;
    let item =
        res.snapshot.journals.get(&res.journal).ok_or_else(|| {
            RpcError::unknown("journal spec vanished while updating its suspension")
        })?;
    let mut spec = item.spec.clone();
    spec.suspend = Some(protocol::journal_spec::Suspend {
        level: level as i32,
        offset,
    });
    let key = item_key(&core.cfg.etcd_prefix, &res.journal);
    let out = core
        .keyspace
        .txn(
            vec![Compare {
                key: key.clone(),
                mod_revision: item.mod_revision,
            }],
            vec![Op::put(key, spec.encode_to_vec())],
        )
        .await
        .map_err(|e| RpcError::unknown(format!("updating journal suspension: {e}")))?;
    if !out.succeeded {
        return Err(RpcError::unknown(
            "updating journal suspension: the journal spec changed concurrently; retry",
        ));
    }
    core.keyspace.wait_for(out.revision).await;
    Ok(())
}
