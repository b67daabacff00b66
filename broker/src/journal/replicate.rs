//! The Replicate RPC, replica side (spec §2.5): a primary's pipeline stream applied to this
//! broker's spool of the journal.
//!
//! Lives on: the journal's owner core. The stream holds the spool's async mutex from its
//! first proposal until it ends, so a replica follows exactly one primary at a time. While
//! waiting for the spool, and while streaming, a keyspace change that makes the journal's
//! Route differ from the primary's (new members or a new primary) ends the wait with
//! WRONG_ROUTE or the stream with an error: a deposed primary can never keep writing here.

use crate::core::Core;
use crate::core::call::{CallIn, CallOut};
use crate::journal::journals::Journals;
use crate::journal::replica::Replica;
use crate::journal::routing::resolver::{self, Args};
use futures_lite::future;
use protocol::grpc::RpcError;
use protocol::route::equivalent;
use protocol::validate::Validate;
use protocol::{Header, ReplicateRequest, ReplicateResponse, Route, Status};
use std::rc::Rc;
use storage::spool::{ContentError, Spool};

pub async fn replicate(
    journals: &Rc<Journals>,
    first: ReplicateRequest,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let core = &journals.core;
    first
        .validate()
        .map_err(|e| RpcError::unknown(e.to_string()))?;
    let Some(header) = first.header.clone() else {
        return Err(RpcError::unknown("expected Header"));
    };
    let Some(proposal) = first.proposal.clone() else {
        return Err(RpcError::unknown("expected Proposal"));
    };
    let theirs = header.route.clone().unwrap_or_default();

    // Resolve, and take the spool once no other stream holds it.
    let mut slot: Option<Rc<Replica>>;
    let (res, mut spool) = loop {
        let res = resolver::resolve(
            core,
            Args {
                journal: &proposal.journal,
                require_primary: false,
                may_proxy: false,
                min_etcd_revision: 0,
                proxy_header: Some(&header),
            },
        )
        .await?;
        if res.status != Status::Ok {
            return respond(out, res.status, Some(res.header)).await;
        }
        if !equivalent(
            res.header.route.as_ref().unwrap_or(&Route::default()),
            &theirs,
        ) {
            return respond(out, Status::WrongRoute, Some(res.header)).await;
        }
        slot = Some(journals.replica(&res.journal).await?);
        let replica = slot.as_ref().expect("just set");
        let mut changes = core.keyspace.subscribe();
        changes.borrow_and_update();
        let acquired = future::or(async { Some(replica.spool.lock().await) }, async {
            if changes.changed().await.is_err() {
                // No more keyspace changes (the control thread is gone): only the spool
                // can end the wait. Resolving again at once would spin (found by the
                // simulator, whose crashed brokers' keyspaces close under their handlers).
                future::pending::<()>().await;
            }
            None
        })
        .await;
        if let Some(guard) = acquired {
            break (res, guard);
        }
        // The keyspace moved while we waited: resolve again.
    };
    let replica = slot.clone().expect("set before the spool was taken");
    let journal = res.journal.clone();

    // The first proposal, answered with our header.
    let (status, resp) = apply_proposal(core, &replica, &mut spool, &first).await?;
    let mut first_resp = resp;
    first_resp.header = Some(res.header.clone());
    if first.acknowledge {
        out.send(&first_resp).await?;
    } else if status != Status::Ok {
        return Err(no_ack_error(&first_resp));
    }

    follow(core, &replica, &mut spool, &journal, &theirs, input, out).await
}

/// Applies the primary's further requests to `spool` until the primary closes its pipeline
/// or the journal's route moves away from `theirs` (the pipeline is then stale).
async fn follow(
    core: &Rc<Core>,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    journal: &str,
    theirs: &Route,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let mut changes = core.keyspace.subscribe();
    changes.borrow_and_update();
    loop {
        enum Step {
            Msg(Box<Result<Option<ReplicateRequest>, RpcError>>),
            RouteChanged,
        }
        let step = future::or(async { Step::Msg(Box::new(input.next().await)) }, async {
            loop {
                if changes.changed().await.is_err() {
                    return future::pending().await;
                }
                let snap = changes.borrow_and_update().clone();
                if !still_routed(core, &snap, journal, theirs) {
                    return Step::RouteChanged;
                }
            }
        })
        .await;
        let msg = match step {
            Step::Msg(msg) => *msg,
            Step::RouteChanged => {
                spool.rollback();
                return Err(RpcError::unknown(format!(
                    "replication of {journal}: the journal's route changed; this pipeline is stale"
                )));
            }
        };
        let req = match msg {
            Err(err) => {
                spool.rollback();
                return Err(err);
            }
            Ok(None) => {
                // The primary closed its pipeline: forget anything uncommitted.
                spool.rollback();
                return Ok(());
            }
            Ok(Some(req)) => req,
        };
        apply(core, replica, spool, &req, out).await?;
    }
}

/// Applies one further request of the primary: a proposal (acknowledged when asked) or
/// content. An invalid request or a bad content delta rolls back what is uncommitted.
async fn apply(
    core: &Rc<Core>,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    req: &ReplicateRequest,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    if let Err(e) = req.validate() {
        spool.rollback();
        return Err(RpcError::unknown(e.to_string()));
    }
    if req.proposal.is_some() {
        let (status, resp) = apply_proposal(core, replica, spool, req).await?;
        if req.acknowledge {
            out.send(&resp).await?;
        } else if status != Status::Ok {
            return Err(no_ack_error(&resp));
        }
        return Ok(());
    }
    match spool.apply_content(&req.content, req.content_delta).await {
        Ok(()) => Ok(()),
        Err(ContentError::Delta(msg)) => {
            spool.rollback();
            Err(RpcError::unknown(msg))
        }
        Err(ContentError::Storage(e)) => Err(crate::errors::storage_err(e)),
    }
}

/// Whether `journal` is still routed as the primary's pipeline believes.
fn still_routed(
    core: &Core,
    snap: &crate::control::keyspace::Snapshot,
    journal: &str,
    theirs: &Route,
) -> bool {
    if !snap.journals.contains_key(journal) {
        return false;
    }
    let ours = crate::journal::routing::resolver::route_of_journal(core, snap, journal);
    equivalent(&ours, theirs)
}

/// Applies one proposal to the spool, indexing what it commits or completes.
async fn apply_proposal(
    core: &Rc<Core>,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    req: &ReplicateRequest,
) -> Result<(Status, ReplicateResponse), RpcError> {
    let proposal = req.proposal.clone().unwrap_or_default();
    let registers = req.registers.clone().unwrap_or_default();
    let first_append = spool.first_append_time();
    let before = spool.fragment().end;
    let (ok, completed) = spool
        .apply_proposal(&proposal, &registers)
        .await
        .map_err(crate::errors::storage_err)?;
    if ok {
        // Durable mode: what this proposal committed is on the device before the primary
        // hears of it (and before readers see it).
        crate::journal::replica::durable(spool).await?;
    }
    if let Some(done) = completed {
        replica.index.borrow_mut().add_local(done.clone());
        replica.persist(core, done, first_append);
    }
    if spool.fragment().end != before {
        replica.on_commit(spool);
    }
    if ok {
        return Ok((
            Status::Ok,
            ReplicateResponse {
                status: Status::Ok as i32,
                ..Default::default()
            },
        ));
    }
    Ok((
        Status::ProposalMismatch,
        ReplicateResponse {
            status: Status::ProposalMismatch as i32,
            header: None,
            fragment: Some(spool.fragment().clone()),
            registers: Some(spool.registers().clone()),
        },
    ))
}

fn no_ack_error(resp: &ReplicateResponse) -> RpcError {
    RpcError::unknown(format!(
        "no ack requested but status != OK: {:?}",
        Status::try_from(resp.status).unwrap_or(Status::Ok)
    ))
}

async fn respond(
    out: &mut CallOut,
    status: Status,
    header: Option<Header>,
) -> Result<(), RpcError> {
    out.send(&ReplicateResponse {
        status: status as i32,
        header,
        ..Default::default()
    })
    .await
}
