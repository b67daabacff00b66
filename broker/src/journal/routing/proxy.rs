//! Proxying of journal calls to the broker that must serve them (spec §2.2 "Proxying",
//! §3): Append to the journal's primary, Read and ListFragments to a route member. The
//! first request carries `header` (our resolution, whose `process_id` names the target) so
//! that the peer waits for our keyspace revision and checks it is the intended broker;
//! everything else is relayed as is, and the peer's responses (or error) are returned
//! verbatim.
//!
//! Lives on: the journal's owner core, with this core's peer connections (`crate::core::peer`).

use crate::core::Core;
use crate::core::call::{CallIn, CallOut};
use protocol::grpc::RpcError;
use protocol::process_spec::Id;
use protocol::{AppendRequest, AppendResponse, Header, Route};
use std::rc::Rc;

/// The endpoint of the broker a proxied call goes to: the header's `process_id` when set
/// (the primary), else a member in our own zone, else the first member.
pub fn target(core: &Core, header: &Header) -> Result<String, RpcError> {
    let route = header.route.clone().unwrap_or_default();
    let pick =
        |i: usize| -> Option<String> { route.endpoints.get(i).filter(|e| !e.is_empty()).cloned() };
    let index = match header.process_id.as_ref().filter(|p| !is_zero(p)) {
        Some(pid) => route.members.iter().position(|m| m == pid),
        None => route
            .members
            .iter()
            .position(|m| m.zone == core.process_id.zone && *m != core.process_id)
            .or_else(|| (!route.members.is_empty()).then_some(0)),
    };
    index.and_then(pick).ok_or_else(|| {
        RpcError::unavailable(format!(
            "no endpoint to proxy to in route {}",
            describe_route(&route)
        ))
    })
}

fn is_zero(id: &Id) -> bool {
    id.zone.is_empty() && id.suffix.is_empty()
}

fn describe_route(route: &Route) -> String {
    let members: Vec<String> = route
        .members
        .iter()
        .map(|m| format!("{}#{}", m.zone, m.suffix))
        .collect();
    format!("[{}] primary {}", members.join(", "), route.primary)
}

/// Relays a server-streaming call (Read, ListFragments) whose first request is `req`.
pub async fn server_streaming<Req, Resp>(
    core: &Rc<Core>,
    path: &str,
    journal: &str,
    header: &Header,
    req: &Req,
    out: &mut CallOut,
) -> Result<(), RpcError>
where
    Req: prost::Message,
    Resp: prost::Message + Default,
{
    let endpoint = target(core, header)?;
    let mut call = core
        .peer_call(&endpoint, path, crate::auth::jwt::READ, journal)
        .await?;
    // A failed send is reported by the response side.
    let _ = call
        .sender
        .send_frame(protocol::grpc::encode_frame(req), true)
        .await;
    let mut stage = crate::shutdown::subscribe();
    loop {
        enum Step<M> {
            Msg(Result<Option<M>, RpcError>),
            ClientGone,
            ShuttingDown,
        }
        let step = futures_lite::future::or(
            async { Step::Msg(call.next::<Resp>().await) },
            futures_lite::future::or(
                async {
                    out.cancelled().await;
                    Step::ClientGone
                },
                async {
                    crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Closing).await;
                    Step::ShuttingDown
                },
            ),
        )
        .await;
        match step {
            Step::Msg(Ok(Some(msg))) => out.send(&msg).await?,
            Step::Msg(Ok(None)) => return Ok(()),
            Step::Msg(Err(err)) => return Err(err),
            Step::ClientGone => return Err(RpcError::cancelled()),
            // A proxied (blocking) read ends with a clean EOF when this broker shuts
            // down, as a local one does (spec §10 scenario 39); the client re-opens it.
            Step::ShuttingDown => return Ok(()),
        }
    }
}

/// Relays an Append: `first` (with `header` attached), then every chunk of the client and
/// its half-close; the primary's response is returned verbatim.
pub async fn append(
    core: &Rc<Core>,
    mut first: AppendRequest,
    header: Header,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let endpoint = target(core, &header)?;
    first.header = Some(header);
    let journal = first.journal.clone();
    let mut call = core
        .peer_call(
            &endpoint,
            "/protocol.Journal/Append",
            crate::auth::jwt::APPEND,
            &journal,
        )
        .await?;
    // Requests flow until the client half-closes; the response may come earlier (e.g.
    // NOT_ALLOWED on the first chunk), which ends the relay.
    let relay_requests = async {
        call.sender.send(&first).await?;
        loop {
            match input.next::<AppendRequest>().await? {
                Some(chunk) => call.sender.send(&chunk).await?,
                None => {
                    call.sender.close()?;
                    return Ok::<(), RpcError>(());
                }
            }
        }
    };
    let relayed = relay_requests.await;
    if let Err(err) = relayed {
        // The client failed or went away mid-stream: the primary must roll back, not
        // wait for more chunks.
        call.sender.cancel();
        return Err(err);
    }
    let resp = call.next::<AppendResponse>().await;
    match resp? {
        Some(resp) => {
            out.send(&resp).await?;
            // Drain to the trailers so that a trailing error is not missed.
            while call.next::<AppendResponse>().await?.is_some() {}
            Ok(())
        }
        None => Err(RpcError::unknown(
            "proxied append: the primary ended the call without a response",
        )),
    }
}
