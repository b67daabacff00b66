//! The Read and ListFragments RPCs, served from the journal's fragment index.
//!
//! Lives on: the journal's owner core. Index borrows are taken and released between awaits;
//! content is read from fragment files through io_uring.

use crate::core::Core;
use crate::core::call::CallOut;
use crate::journal::journals::Journals;
use crate::journal::replica::Replica;
use crate::journal::routing::resolver::{self, Args};
use bytes::Bytes;
use protocol::grpc::RpcError;
use protocol::validate::Validate;
use protocol::{CompressionCodec, Fragment};
use protocol::{
    FragmentsRequest, FragmentsResponse, Header, JournalSpec, ReadRequest, ReadResponse, Status,
    fragments_response,
};
use std::rc::Rc;
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};
use storage::codec::Decompressor;
use storage::index::Query;

/// Largest content chunk of a ReadResponse: `(1 << 15) - 32`, so a marshalled message stays
/// under 32 KiB.
pub const READ_CHUNK: usize = (1 << 15) - 32;

fn may_read(spec: &JournalSpec) -> bool {
    protocol::flags::may_read(spec.flags)
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub async fn read(
    journals: &Rc<Journals>,
    req: ReadRequest,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let core = &journals.core;
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
    if !res.local {
        let header = header.take().unwrap_or_default();
        let mut req = req;
        req.header = Some(header.clone());
        return crate::journal::routing::proxy::server_streaming::<_, ReadResponse>(
            core,
            "/protocol.Journal/Read",
            &res.journal,
            &header,
            &req,
            out,
        )
        .await;
    }
    let replica = journals.replica(&res.journal).await?;
    crate::metrics::read_started(&res.journal);
    serve_local(core, &replica, &res.journal, &req, header, out).await
}

/// Serves a Read of a journal this broker holds: each fragment's metadata, then its
/// content, from the local file or the store, until the end offset or (not blocking) the
/// write head; blocks for more when asked to.
async fn serve_local(
    core: &Rc<Core>,
    replica: &Replica,
    journal: &str,
    req: &ReadRequest,
    mut header: Option<Header>,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let mut offset = req.offset;
    // Courant waits for the first listing of the journal's stores before serving, so that
    // a broker that just started does not answer OFFSET_NOT_YET_AVAILABLE for history its
    // stores hold (local fragments alone would suffice only for local history).
    wait_for_first_listing(replica).await;

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
                if !wait_for_change(replica, changed, out).await? {
                    return Ok(());
                }
                continue;
            }
        };
        offset = next;
        let write_head = replica.index.borrow().write_head();
        // A persisted fragment's metadata always carries a signed URL, even when this
        // broker then streams it itself (Gazette does the same).
        let fragment_url = if is_persisted(&fragment) {
            sign_one(core, &fragment, FRAGMENT_URL_TTL).await?
        } else {
            String::new()
        };
        out.send(&ReadResponse {
            status: Status::Ok as i32,
            header: header.take(),
            offset,
            write_head,
            fragment: Some(fragment.clone()),
            fragment_url,
            ..Default::default()
        })
        .await?;
        if req.metadata_only || (req.end_offset != 0 && offset >= req.end_offset) {
            return Ok(());
        }
        let Some(file) = file else {
            if req.do_not_proxy {
                // The client fetches `fragment_url` itself.
                return Ok(());
            }
            let from = offset;
            offset = stream_persisted(core, out, &fragment, offset, req.end_offset).await?;
            crate::metrics::read_bytes(journal, (offset - from) as u64);
            if req.end_offset != 0 && offset >= req.end_offset {
                return Ok(());
            }
            continue;
        };
        let mut end = fragment.end;
        if req.end_offset != 0 {
            end = end.min(req.end_offset);
        }
        offset = stream_local(&file, journal, offset, end, out).await?;
        if req.end_offset != 0 && offset >= req.end_offset {
            return Ok(());
        }
    }
}

/// Blocks a read until the replica's index changes (`changed`) or the client goes away
/// (CANCELLED). `false` when the index was closed: the journal was deleted or moved away,
/// and the read ends cleanly.
async fn wait_for_change(
    replica: &Replica,
    changed: impl Future<Output = ()>,
    out: &mut CallOut,
) -> Result<bool, RpcError> {
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
    Ok(!replica.index.borrow().is_closed())
}

/// Streams `file`'s content from `offset` to `end` in chunks; returns the offset reached.
async fn stream_local(
    file: &storage::FragmentFile,
    journal: &str,
    mut offset: i64,
    end: i64,
    out: &mut CallOut,
) -> Result<i64, RpcError> {
    while offset < end {
        let want = ((end - offset) as usize).min(READ_CHUNK);
        let content = file.read_at(offset, want).await.map_err(|e| {
            let e = crate::errors::storage_err(e);
            RpcError::unknown(format!("reading fragment: {}", e.message))
        })?;
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
        crate::metrics::read_bytes(journal, n as u64);
    }
    Ok(offset)
}

/// Waits until the replica's index has applied a store listing (or was closed).
async fn wait_for_first_listing(replica: &Replica) {
    loop {
        let changed = replica.index.borrow().changed();
        if replica.index.borrow().refreshed() || replica.index.borrow().is_closed() {
            return;
        }
        changed.await;
    }
}

/// TTL of the signed `fragment_url` of Read metadata.
const FRAGMENT_URL_TTL: Duration = Duration::from_secs(60);

fn is_persisted(f: &Fragment) -> bool {
    !f.backing_store.is_empty() && f.mod_time != 0
}

async fn sign_one(core: &Rc<Core>, f: &Fragment, ttl: Duration) -> Result<String, RpcError> {
    let signed = core.stores.handle.sign(vec![f.clone()], ttl).await?;
    signed
        .into_iter()
        .next()
        .unwrap_or_else(|| Err("no signature returned".into()))
        .map_err(|e| RpcError::unknown(format!("signing fragment URL: {e}")))
}

/// Streams a persisted fragment from its store, from `offset` to its end (or `end_offset`):
/// raw chunks arrive from the control thread, are decompressed here in bounded pieces, the
/// bytes before `offset` are discarded, and the rest go out in chunks of at most
/// [`READ_CHUNK`]. A store error, a corrupt object, or one that holds fewer bytes than the
/// fragment's span fails the read (an RPC error, never a crash). Returns the next offset.
async fn stream_persisted(
    core: &Rc<Core>,
    out: &mut CallOut,
    fragment: &Fragment,
    mut offset: i64,
    end_offset: i64,
) -> Result<i64, RpcError> {
    let fail = |what: String| {
        RpcError::unknown(format!(
            "reading fragment {} of {}: {what}",
            storage::naming::content_name(fragment),
            fragment.backing_store
        ))
    };
    let end = if end_offset != 0 {
        fragment.end.min(end_offset)
    } else {
        fragment.end
    };
    let reader = core
        .stores
        .handle
        .open(fragment.clone())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let codec =
        CompressionCodec::try_from(fragment.compression_codec).unwrap_or(CompressionCodec::None);
    let mut decoder =
        Decompressor::new(codec, reader.gzip_encoded).map_err(|e| fail(e.to_string()))?;
    // Journal offset of the next decompressed byte.
    let mut pos = fragment.begin;
    let mut buf = Vec::new();
    let mut finished = false;
    while offset < end {
        buf.clear();
        match reader.chunks.recv_async().await {
            Ok(Ok(chunk)) => decoder
                .push(&chunk, &mut buf)
                .map_err(|e| fail(e.to_string()))?,
            Ok(Err(e)) => return Err(fail(e)),
            Err(_) if !finished => {
                decoder.finish(&mut buf).map_err(|e| fail(e.to_string()))?;
                finished = true;
            }
            Err(_) => {
                return Err(fail(format!(
                    "unexpected EOF at offset {pos} (the fragment ends at {})",
                    fragment.end
                )));
            }
        }
        // Discard up to `offset`, then send what lies before `end`.
        let mut data: &[u8] = &buf;
        if pos < offset {
            let skip = ((offset - pos) as usize).min(data.len());
            data = &data[skip..];
            pos += skip as i64;
        }
        while !data.is_empty() && offset < end {
            debug_assert_eq!(pos, offset);
            let n = data.len().min(READ_CHUNK).min((end - offset) as usize);
            out.send(&ReadResponse {
                offset,
                content: Bytes::copy_from_slice(&data[..n]),
                ..Default::default()
            })
            .await?;
            data = &data[n..];
            offset += n as i64;
            pos += n as i64;
        }
    }
    Ok(offset)
}

/// Default and largest `page_limit` of ListFragments.
const DEFAULT_PAGE_LIMIT: i32 = 1000;

pub async fn list_fragments(
    journals: &Rc<Journals>,
    req: FragmentsRequest,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let core = &journals.core;
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
    if !res.local {
        let mut req = req;
        req.header = Some(res.header.clone());
        if req.page_limit == 0 {
            req.page_limit = DEFAULT_PAGE_LIMIT;
        }
        return crate::journal::routing::proxy::server_streaming::<_, FragmentsResponse>(
            core,
            "/protocol.Journal/ListFragments",
            &res.journal,
            &res.header,
            &req,
            out,
        )
        .await;
    }
    let replica = journals.replica(&res.journal).await?;
    let limit = if req.page_limit == 0 {
        DEFAULT_PAGE_LIMIT
    } else {
        req.page_limit
    } as usize;

    wait_for_first_listing(&replica).await;
    let mut resp = respond(Status::Ok, res.header);
    let all = replica.index.borrow().fragments();
    resp.next_page_token = page_of(&mut resp, all, &req, limit);
    if let Some(ttl) = req.signature_ttl {
        // Only persisted fragments have something to sign.
        let ttl = Duration::new(ttl.seconds.max(0) as u64, ttl.nanos.max(0) as u32);
        sign_page(core, &mut resp, ttl).await?;
    }
    out.send(&resp).await
}

/// Fills `resp` with a page of `all` (at most `limit` fragments from `req`'s page token,
/// within its modification times); returns the next page's token (0 after the last).
fn page_of<F>(
    resp: &mut FragmentsResponse,
    all: Vec<(Fragment, F)>,
    req: &FragmentsRequest,
    limit: usize,
) -> i64 {
    for (fragment, _file) in all
        .into_iter()
        .filter(|(f, _)| f.begin >= req.next_page_token)
    {
        if resp.fragments.len() == limit {
            return fragment.begin;
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
    0
}

/// Signs the URLs of the persisted fragments of `resp`, valid for `ttl`.
async fn sign_page(
    core: &Core,
    resp: &mut FragmentsResponse,
    ttl: Duration,
) -> Result<(), RpcError> {
    let persisted: Vec<usize> = (0..resp.fragments.len())
        .filter(|&i| resp.fragments[i].spec.as_ref().is_some_and(is_persisted))
        .collect();
    let specs = persisted
        .iter()
        .filter_map(|&i| resp.fragments[i].spec.clone())
        .collect();
    let signed = core.stores.handle.sign(specs, ttl).await?;
    for (i, url) in persisted.into_iter().zip(signed) {
        resp.fragments[i].signed_url =
            url.map_err(|e| RpcError::unknown(format!("signing fragment URL: {e}")))?;
    }
    Ok(())
}
