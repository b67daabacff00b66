//! Dispatch of a call by its method: the handler table. Checks a call's headers and its
//! authorization, bounds it by its deadline, and runs it where it belongs: List, Apply and
//! FragmentStoreHealth on the accepting core, journal calls on the journal's owner core
//! (forwarding the call's frames there when that is another core). The HTTP front ends
//! start their calls here too.
//!
//! Lives on: the accepting core, and the owner core for the calls forwarded to it (its
//! inbox, [`serve_inbox`]).

use crate::core::Core;
use crate::core::call::{self, CallIn, CallOut};
use crate::core::msg::{CoreMsg, FirstRequest};
use crate::front::authorize;
use crate::journal::journals::Journals;
use crate::time::with_deadline;
use http::HeaderValue;
use protocol::grpc::{Code, RpcError, ServerCall, decode_message};
use protocol::method::Method;
use std::rc::Rc;
use std::time::Duration;

/// Serves the calls other cores forward to this one.
pub async fn serve_inbox(journals: Rc<Journals>, inbox: flume::Receiver<CoreMsg>) {
    while let Ok(msg) = inbox.recv_async().await {
        match msg {
            CoreMsg::Call {
                first,
                input,
                output,
                timeout,
            } => {
                call::spawn_call(run_journal_call(
                    journals.clone(),
                    first,
                    input,
                    output,
                    timeout,
                ));
            }
        }
    }
}

/// Starts a journal call on the journal's owner core for a front end other than gRPC
/// (the HTTP gateway), returning the client's ends; `None` if the owner has stopped.
pub async fn start_journal_call(
    core: &Core,
    first: FirstRequest,
    timeout: Option<Duration>,
) -> Option<call::ChannelClient> {
    let owner = core.owner_of(first.journal());
    let (input, output, client) = call::channel_call();
    let msg = CoreMsg::Call {
        first,
        input,
        output,
        timeout,
    };
    core.peers[owner].send_async(msg).await.ok()?;
    Some(client)
}

/// Starts a List on this core for a front end other than gRPC (the HTTP `/v1/` routes),
/// with already verified `claims`; returns the client's ends. Dropping them cancels it.
pub async fn start_list_call(
    core: &Rc<Core>,
    req: protocol::ListRequest,
    claims: crate::auth::Claims,
    timeout: Option<Duration>,
) -> call::ChannelClient {
    let (mut input, mut output, client) = call::channel_call();
    // The handler reads its request from the call's input, as a gRPC List does.
    let _ = client
        .requests
        .send_async(Ok(bytes::Bytes::from(prost::Message::encode_to_vec(&req))))
        .await;
    let core = core.clone();
    glommio::spawn_local(async move {
        crate::metrics::rpc_started("List");
        let outcome = with_deadline(timeout, async {
            crate::journal::list::list(&core, &claims, &mut input, &mut output).await
        })
        .await;
        crate::metrics::rpc_completed("List", outcome.is_ok());
        output.finish(outcome);
    })
    .detach();
    client
}

/// Routes one incoming call to its handler, on this core or the journal's owner.
pub async fn dispatch(journals: Rc<Journals>, mut call: ServerCall) {
    if let Err(err) = call.check_headers() {
        call.outbound.finish(Err(err));
        return;
    }
    call.outbound
        .insert_header("x-courant-core", HeaderValue::from(journals.core.index));
    let Some(method) = Method::from_path(&call.path) else {
        let err = RpcError::new(Code::Unimplemented, format!("unknown method {}", call.path));
        call.outbound.finish(Err(err));
        return;
    };
    let claims = match journals.core.auth.verify_call(method, &call.metadata) {
        Ok(claims) => claims,
        Err(err) => {
            call.outbound.finish(Err(err));
            return;
        }
    };
    // The call's deadline is at most its authorization's expiry.
    call.timeout = claims.bound(call.timeout);
    let timeout = call.timeout;
    let core = journals.core.clone();
    match method {
        Method::List => {
            Box::pin(run_local("List", call, timeout, async move |input, out| {
                crate::journal::list::list(&core, &claims, input, out).await
            }))
            .await
        }
        Method::Apply => {
            Box::pin(run_local(
                "Apply",
                call,
                timeout,
                async move |input, out| {
                    crate::journal::list::apply(&core, &claims, input, out).await
                },
            ))
            .await
        }
        Method::FragmentStoreHealth => {
            Box::pin(run_local(
                "FragmentStoreHealth",
                call,
                timeout,
                async move |input, out| {
                    crate::journal::store_health::health_rpc(&core, input, out).await
                },
            ))
            .await
        }
        Method::Append | Method::Read | Method::ListFragments | Method::Replicate => {
            route_journal_call(journals, call, method, claims).await
        }
    }
}

async fn route_journal_call(
    journals: Rc<Journals>,
    mut call: ServerCall,
    method: Method,
    claims: crate::auth::Claims,
) {
    let first = match call.inbound.next_frame().await {
        Ok(Some(frame)) => frame,
        Ok(None) => {
            call.outbound.finish(Err(RpcError::unknown(format!(
                "{}: stream ended before the first request",
                method.name()
            ))));
            return;
        }
        Err(err) => {
            call.outbound.finish(Err(err));
            return;
        }
    };
    let first = match method {
        Method::Append => decode_message(first).map(FirstRequest::Append),
        Method::Read => decode_message(first).map(FirstRequest::Read),
        Method::Replicate => decode_message(first).map(FirstRequest::Replicate),
        _ => decode_message(first).map(FirstRequest::Fragments),
    };
    let first = match first {
        Ok(first) => first,
        Err(err) => {
            call.outbound.finish(Err(err));
            return;
        }
    };
    let core = &journals.core;
    if !authorize::in_scope(core, &claims, first.journal()) {
        Box::pin(authorize::answer_out_of_scope(core, &first, call.outbound)).await;
        return;
    }
    let owner = core.owner_of(first.journal());
    call.outbound
        .insert_header("x-courant-owner-core", HeaderValue::from(owner));
    let timeout = call.timeout;
    if owner == core.index {
        let input = CallIn::H2(call.inbound);
        let output = CallOut::H2(call.outbound);
        run_journal_call(journals, first, input, output, timeout).await;
        return;
    }
    let peer = core.peers[owner].clone();
    call::forward(call.inbound, call.outbound, async move |input, output| {
        crate::metrics::cross_core_message();
        peer.send_async(CoreMsg::Call {
            first,
            input,
            output,
            timeout,
        })
        .await
        .is_ok()
    })
    .await;
}

/// Runs a handler not scoped to a journal on the accepting core.
async fn run_local(
    operation: &str,
    call: ServerCall,
    timeout: Option<Duration>,
    handler: impl AsyncFnOnce(&mut CallIn, &mut CallOut) -> Result<(), RpcError>,
) {
    crate::metrics::rpc_started(operation);
    let mut input = CallIn::H2(call.inbound);
    let mut output = CallOut::H2(call.outbound);
    let outcome = with_deadline(timeout, handler(&mut input, &mut output)).await;
    crate::metrics::rpc_completed(operation, outcome.is_ok());
    output.finish(outcome);
}

/// Runs a journal-scoped handler on the journal's owner core (this one).
async fn run_journal_call(
    journals: Rc<Journals>,
    first: FirstRequest,
    mut input: CallIn,
    mut output: CallOut,
    timeout: Option<Duration>,
) {
    let operation = first.operation();
    crate::metrics::rpc_started(operation);
    let outcome = with_deadline(timeout, async {
        match first {
            FirstRequest::Append(req) => {
                crate::journal::append::append(&journals, req, &mut input, &mut output).await
            }
            // Boxed: a task's future is as large as its largest state, and every call's
            // task is moved (copied) when it is spawned, so rarer and larger handlers live
            // on the heap instead of inflating every Append's task.
            FirstRequest::Read(req) => {
                Box::pin(crate::journal::read::read(&journals, req, &mut output)).await
            }
            FirstRequest::Fragments(req) => {
                Box::pin(crate::journal::read::list_fragments(
                    &journals,
                    req,
                    &mut output,
                ))
                .await
            }
            FirstRequest::Replicate(req) => {
                Box::pin(crate::journal::replicate::replicate(
                    &journals,
                    req,
                    &mut input,
                    &mut output,
                ))
                .await
            }
        }
    })
    .await;
    crate::metrics::rpc_completed(operation, outcome.is_ok());
    output.finish(outcome);
}
