//! The List and Apply RPCs: journal specs in the keyspace.
//!
//! Lives on: the accepting core (these RPCs are not scoped to one journal). They read the
//! core's keyspace snapshot and send transactions to the control thread.

use crate::auth::Claims;
use crate::control::keyspace::{Compare, Op, Snapshot, item_key};
use crate::core::Core;
use crate::core::call::{CallIn, CallOut};
use crate::journal::routing::resolver;
use prost::Message;
use protocol::grpc::RpcError;
use protocol::labels;
use protocol::validate::Validate;
use protocol::{ApplyRequest, ApplyResponse, ListRequest, ListResponse, Status, list_response};
use std::rc::Rc;

/// Journals per ListResponse message.
const LIST_CHUNK: usize = 25;

pub async fn list(
    core: &Rc<Core>,
    claims: &Claims,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let req: ListRequest = input
        .next()
        .await?
        .ok_or_else(|| RpcError::unknown("List: missing request"))?;
    req.validate()
        .map_err(|e| RpcError::unknown(e.to_string()))?;
    let selector = labels::rewrite_prefix_selector(&req.selector.clone().unwrap_or_default());
    // The token's selector filters too (its `prefix` labels rewritten the same way).
    let scope = labels::rewrite_prefix_selector(&claims.selector);

    let mut watch = core.keyspace.subscribe();
    let mut min_revision = req
        .watch_resume
        .as_ref()
        .and_then(|h| h.etcd.as_ref())
        .map_or(0, |e| e.revision + 1);
    let mut last: Option<(usize, i64)> = None;
    loop {
        let snapshot = watch.borrow_and_update().clone();
        if snapshot.revision < min_revision {
            if !wait_change(&mut watch, out).await {
                return Ok(());
            }
            continue;
        }
        let matched = matching(core, &snapshot, &selector, &scope);
        let fingerprint = (
            matched.len(),
            matched.iter().map(|j| j.mod_revision).max().unwrap_or(0),
        );
        if last != Some(fingerprint) {
            send_snapshot(core, &snapshot, matched, out).await?;
            if !req.watch {
                return Ok(());
            }
            // An empty message marks the end of the snapshot.
            out.send(&ListResponse::default()).await?;
            last = Some(fingerprint);
        }
        min_revision = snapshot.revision + 1;
        if !wait_change(&mut watch, out).await {
            return Ok(());
        }
    }
}

/// Waits for a keyspace change; `false` if the client went away (or the keyspace stopped).
async fn wait_change(
    watch: &mut tokio::sync::watch::Receiver<std::sync::Arc<Snapshot>>,
    out: &mut CallOut,
) -> bool {
    futures_lite::future::or(async { watch.changed().await.is_ok() }, async {
        out.cancelled().await;
        false
    })
    .await
}

fn matching(
    core: &Core,
    snapshot: &Snapshot,
    selector: &protocol::LabelSelector,
    scope: &protocol::LabelSelector,
) -> Vec<list_response::Journal> {
    snapshot
        .journals
        .values()
        .filter(|item| {
            let set = labels::with_meta_name(
                &item.spec.labels.clone().unwrap_or_default(),
                &item.spec.name,
            );
            labels::matches(selector, &set) && labels::matches(scope, &set)
        })
        .map(|item| list_response::Journal {
            spec: Some(item.spec.clone()),
            mod_revision: item.mod_revision,
            route: Some(resolver::list_route(core, snapshot, &item.spec)),
            create_revision: item.create_revision,
        })
        .collect()
}

async fn send_snapshot(
    core: &Core,
    snapshot: &Snapshot,
    journals: Vec<list_response::Journal>,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let mut first = Some(ListResponse {
        status: Status::Ok as i32,
        header: Some(resolver::unrouted_header(core, snapshot)),
        journals: Vec::new(),
    });
    let mut chunks = journals.chunks(LIST_CHUNK).peekable();
    if chunks.peek().is_none() {
        return out.send(&first.take().expect("set above")).await;
    }
    for chunk in chunks {
        let mut msg = first.take().unwrap_or_default();
        msg.journals = chunk.to_vec();
        out.send(&msg).await?;
    }
    Ok(())
}

pub async fn apply(
    core: &Rc<Core>,
    claims: &Claims,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let req: ApplyRequest = input
        .next()
        .await?
        .ok_or_else(|| RpcError::unknown("Apply: missing request"))?;
    req.validate()
        .map_err(|e| RpcError::unknown(e.to_string()))?;

    let root = &core.cfg.etcd_prefix;
    let mut compares = Vec::new();
    let mut ops = Vec::new();
    for change in &req.changes {
        let (key, op) = match (&change.upsert, change.delete.is_empty()) {
            (Some(spec), _) => {
                // Upserts are authorized against the journal's labels and name.
                if !claims.admits(&spec.name, spec.labels.as_ref()) {
                    return Err(not_authorized(&spec.name));
                }
                // Names must map inside every store's root (see stores::confine).
                crate::control::stores::confine::check_spec_stores(spec, &core.cfg.default_store)
                    .map_err(RpcError::unknown)?;
                let key = item_key(root, &spec.name);
                let op = Op::put(key.clone(), spec.encode_to_vec());
                (key, op)
            }
            (None, _) => {
                // Deletes are authorized by name alone.
                if !claims.admits(&change.delete, None) {
                    return Err(not_authorized(&change.delete));
                }
                let key = item_key(root, &change.delete);
                (key.clone(), Op::Delete { key })
            }
        };
        if change.expect_mod_revision != -1 {
            compares.push(Compare {
                key,
                mod_revision: change.expect_mod_revision,
            });
        }
        ops.push(op);
    }
    let outcome = core.keyspace.txn(compares, ops).await?;
    let snapshot = if outcome.succeeded {
        core.keyspace.wait_for(outcome.revision).await
    } else {
        core.keyspace.current()
    };
    let mut header = resolver::unrouted_header(core, &snapshot);
    if let Some(etcd) = header.etcd.as_mut() {
        etcd.revision = outcome.revision;
    }
    let status = if outcome.succeeded {
        Status::Ok
    } else {
        Status::EtcdTransactionFailed
    };
    out.send(&ApplyResponse {
        status: status as i32,
        header: Some(header),
    })
    .await
}

fn not_authorized(journal: &str) -> RpcError {
    RpcError::new(
        protocol::grpc::Code::Unauthenticated,
        format!("not authorized to {journal}"),
    )
}
