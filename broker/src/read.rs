//! The Read and ListFragments RPCs, served from the journal's fragment index.
//!
//! Lives on: the journal's owner core. Index borrows are taken and released between awaits;
//! content is read from fragment files through io_uring.

use crate::call::CallOut;
use crate::core::Core;
use crate::resolver::{self, Args};
use protocol::grpc::RpcError;
use protocol::validate::Validate;
use protocol::{
    FragmentsRequest, FragmentsResponse, Header, JournalSpec, ReadRequest, ReadResponse, Status,
    fragments_response,
};
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};
use storage::index::Query;

/// Largest content chunk of a ReadResponse: `(1 << 15) - 32`, so a marshalled message stays
/// under 32 KiB.
pub const READ_CHUNK: usize = (1 << 15) - 32;

fn may_read(spec: &JournalSpec) -> bool {
    matches!(spec.flags, 0 | 1 | 4)
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub async fn read(core: &Rc<Core>, req: ReadRequest, out: &mut CallOut) -> Result<(), RpcError> {
    req.validate()
        .map_err(|e| RpcError::unknown(e.to_string()))?;
    let res = resolver::resolve(
        core,
        Args {
            journal: &req.journal,
            require_primary: false,
            may_proxy: !req.do_not_proxy,
            min_etcd_revision: req.min_etcd_revision,
            proxy_header: req.header.as_ref(),
        },
    )
    .await?;
    let mut header = Some(res.header);
    if res.status != Status::Ok {
        return out
            .send(&ReadResponse {
                status: res.status as i32,
                header,
                ..Default::default()
            })
            .await;
    }
    let spec = res.spec.expect("an OK resolution has a spec");
    if !may_read(&spec) {
        return out
            .send(&ReadResponse {
                status: Status::NotAllowed as i32,
                header,
                ..Default::default()
            })
            .await;
    }
    let replica = core.replica(&res.journal).await?;
    let mut offset = req.offset;

    loop {
        let changed = replica.index.borrow().changed();
        let query = replica
            .index
            .borrow()
            .query(offset, req.begin_mod_time, now_unix());
        let (next, fragment, file) = match query {
            Query::Found {
                offset: found,
                fragment,
                file,
            } => (found, fragment, file),
            Query::NotFound {
                offset: at,
                write_head,
            } => {
                if !req.block {
                    return out
                        .send(&ReadResponse {
                            status: Status::OffsetNotYetAvailable as i32,
                            header: header.take(),
                            offset: at,
                            write_head,
                            ..Default::default()
                        })
                        .await;
                }
                if offset == -1 {
                    // Keep waiting at the head as it was when the read began.
                    offset = write_head;
                }
                // Block until the index changes or the client goes away.
                let woke = futures_lite::future::or(
                    async {
                        changed.await;
                        true
                    },
                    async {
                        out.cancelled().await;
                        false
                    },
                )
                .await;
                if !woke {
                    return Err(RpcError::cancelled());
                }
                if replica.index.borrow().is_closed() {
                    // The journal was deleted (or moved away): end the read cleanly.
                    return Ok(());
                }
                continue;
            }
        };
        offset = next;
        let write_head = replica.index.borrow().write_head();
        out.send(&ReadResponse {
            status: Status::Ok as i32,
            header: header.take(),
            offset,
            write_head,
            fragment: Some(fragment.clone()),
            ..Default::default()
        })
        .await?;
        if req.metadata_only || (req.end_offset != 0 && offset >= req.end_offset) {
            return Ok(());
        }
        let Some(file) = file else {
            // A persisted fragment: streaming it from its store arrives with fragment stores.
            return Err(RpcError::unknown(format!(
                "fragment {}-{} is not held locally and fragment stores are not supported yet",
                fragment.begin, fragment.end
            )));
        };
        let mut end = fragment.end;
        if req.end_offset != 0 {
            end = end.min(req.end_offset);
        }
        while offset < end {
            let want = ((end - offset) as usize).min(READ_CHUNK);
            let content = file
                .read_at(offset, want)
                .await
                .map_err(|e| RpcError::unknown(format!("reading fragment: {e}")))?;
            if content.is_empty() {
                return Err(RpcError::unknown(format!(
                    "reading fragment: unexpected end of file at offset {offset}"
                )));
            }
            let n = content.len() as i64;
            out.send(&ReadResponse {
                offset,
                content,
                ..Default::default()
            })
            .await?;
            offset += n;
        }
        if req.end_offset != 0 && offset >= req.end_offset {
            return Ok(());
        }
    }
}

/// Default and largest `page_limit` of ListFragments.
const DEFAULT_PAGE_LIMIT: i32 = 1000;

pub async fn list_fragments(
    core: &Rc<Core>,
    req: FragmentsRequest,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    req.validate()
        .map_err(|e| RpcError::unknown(e.to_string()))?;
    let res = resolver::resolve(
        core,
        Args {
            journal: &req.journal,
            require_primary: false,
            may_proxy: !req.do_not_proxy,
            min_etcd_revision: 0,
            proxy_header: req.header.as_ref(),
        },
    )
    .await?;
    let respond = |status: Status, header: Header| FragmentsResponse {
        status: status as i32,
        header: Some(header),
        ..Default::default()
    };
    if res.status != Status::Ok {
        return out.send(&respond(res.status, res.header)).await;
    }
    let spec = res.spec.clone().expect("an OK resolution has a spec");
    if !may_read(&spec) {
        return out.send(&respond(Status::NotAllowed, res.header)).await;
    }
    let replica = core.replica(&res.journal).await?;
    let limit = if req.page_limit == 0 {
        DEFAULT_PAGE_LIMIT
    } else {
        req.page_limit
    } as usize;

    let mut resp = respond(Status::Ok, res.header);
    let all = replica.index.borrow().fragments();
    let mut next_page_token = 0;
    for (fragment, _file) in all
        .into_iter()
        .filter(|(f, _)| f.begin >= req.next_page_token)
    {
        if resp.fragments.len() == limit {
            next_page_token = fragment.begin;
            break;
        }
        let skip = (fragment.mod_time != 0 && fragment.mod_time < req.begin_mod_time)
            || (req.end_mod_time != 0
                && (fragment.mod_time == 0 || fragment.mod_time > req.end_mod_time));
        if skip {
            continue;
        }
        resp.fragments.push(fragments_response::Fragment {
            spec: Some(fragment),
            // Local fragments have no backing store, hence nothing to sign.
            signed_url: String::new(),
        });
    }
    resp.next_page_token = next_page_token;
    out.send(&resp).await
}
