//! One RPC as its handler sees it, wherever its connection lives.
//!
//! A connection belongs to the core that accepted it; a journal belongs to its owner core.
//! When they differ, the accepting core keeps the socket and pumps the call's frames to
//! and from the owner over bounded channels ([`CallIn::Remote`], [`CallOut::Remote`]), so a
//! handler runs on the owner core with the same code either way. Frames are `Bytes`, moved
//! and never copied across cores. A full channel is backpressure, never a drop.
//!
//! Lives on: both cores of a forwarded call: the accepting core holds the socket, the owner
//! core runs the handler; only owned frames cross between them.

use bytes::Bytes;
use futures_lite::future;
use protocol::grpc::{Inbound, Outbound, RpcError, decode_message, encode_frame};

/// Frames in flight per direction of a forwarded call.
const FORWARD_DEPTH: usize = 32;

/// Messages of a forwarded call from its owner core back to the accepting core.
pub enum OutMsg {
    Frame(Bytes),
    Finish(Result<(), RpcError>),
}

/// The request side of a call.
pub enum CallIn {
    H2(Inbound),
    Remote(flume::Receiver<Result<Bytes, RpcError>>),
}

impl CallIn {
    /// The next request frame; `None` once the client half-closed.
    pub async fn next_frame(&mut self) -> Result<Option<Bytes>, RpcError> {
        match self {
            CallIn::H2(inbound) => inbound.next_frame().await,
            CallIn::Remote(rx) => match rx.recv_async().await {
                Ok(frame) => frame.map(Some),
                Err(_) => Ok(None),
            },
        }
    }

    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, RpcError> {
        match self.next_frame().await? {
            Some(body) => decode_message(body).map(Some),
            None => Ok(None),
        }
    }
}

/// The response side of a call.
pub enum CallOut {
    H2(Outbound),
    Remote {
        tx: flume::Sender<OutMsg>,
        /// Disconnects when the accepting core sees the client go away.
        cancel: flume::Receiver<()>,
    },
}

impl CallOut {
    pub async fn send<M: prost::Message>(&mut self, msg: &M) -> Result<(), RpcError> {
        self.send_frame(encode_frame(msg)).await
    }

    pub async fn send_frame(&mut self, frame: Bytes) -> Result<(), RpcError> {
        match self {
            CallOut::H2(out) => out.send_frame(frame).await,
            CallOut::Remote { tx, .. } => tx
                .send_async(OutMsg::Frame(frame))
                .await
                .map_err(|_| RpcError::cancelled()),
        }
    }

    pub fn finish(self, outcome: Result<(), RpcError>) {
        match self {
            CallOut::H2(out) => out.finish(outcome),
            CallOut::Remote { tx, .. } => {
                // The channel may be full of response frames still on their way: the outcome
                // must queue behind them, never be dropped (the client would see an error
                // instead of the real end of its call). If the accepting core is gone with
                // its client, there is nobody left to tell.
                if let Err(flume::TrySendError::Full(msg)) = tx.try_send(OutMsg::Finish(outcome)) {
                    glommio::spawn_local(async move {
                        let _ = tx.send_async(msg).await;
                    })
                    .detach();
                }
            }
        }
    }

    /// Resolves when the client has gone away (reset or disconnected).
    pub async fn cancelled(&mut self) {
        match self {
            CallOut::H2(out) => out.cancelled().await,
            CallOut::Remote { cancel, .. } => {
                let _ = cancel.recv_async().await;
            }
        }
    }
}

/// Starts a call's task at the back of the core's run queue (a connection's new call, or a
/// call forwarded to this core).
///
/// Not `glommio::spawn_local`, which polls a new task once inside the task that spawns it:
/// a connection task then carries every call's first poll and, while its client keeps the
/// socket fed, holds the core for a whole preemption slice (ARCHITECTURE.md, invariants).
pub fn spawn_call(call: impl std::future::Future<Output = ()> + 'static) {
    if let Some(task) = queue_call(call) {
        task.detach();
    }
}

/// [`spawn_call`] keeping the task's handle (the simulator starts its calls so, to cancel
/// them): the same queueing, so the simulated path schedules as the served one does.
pub fn queue_call(
    call: impl std::future::Future<Output = ()> + 'static,
) -> Option<glommio::Task<()>> {
    match glommio::spawn_local_into(call, glommio::TaskQueueHandle::default()) {
        Ok(task) => Some(task),
        // The default queue always exists while the executor runs.
        Err(err) => {
            tracing::error!(%err, "cannot queue a call's task");
            None
        }
    }
}

/// Builds the owner's ends of a forwarded call and runs the accepting core's pumps until
/// the call ends. `hand_off` receives the owner's ends and must deliver them to the owner.
pub async fn forward(
    mut inbound: Inbound,
    mut outbound: Outbound,
    hand_off: impl AsyncFnOnce(CallIn, CallOut) -> bool,
) {
    let (in_tx, in_rx) = flume::bounded(FORWARD_DEPTH);
    let (out_tx, out_rx) = flume::bounded(FORWARD_DEPTH);
    let (cancel_tx, cancel_rx) = flume::bounded::<()>(1);
    let owner_out = CallOut::Remote {
        tx: out_tx,
        cancel: cancel_rx,
    };
    if !hand_off(CallIn::Remote(in_rx), owner_out).await {
        outbound.finish(Err(RpcError::unavailable(
            "the journal's owner core has stopped",
        )));
        return;
    }

    // Requests flow to the owner until the client half-closes or fails.
    let pump_in = async move {
        loop {
            match inbound.next_frame().await {
                Ok(Some(frame)) => {
                    crate::metrics::cross_core_message();
                    if in_tx.send_async(Ok(frame)).await.is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let _ = in_tx.send_async(Err(err)).await;
                    break;
                }
            }
        }
        // Keep the task alive (not dropping `in_tx` early is unnecessary: drop signals EOF).
        drop(in_tx);
        future::pending::<()>().await;
    };

    // Responses flow back until the owner finishes or the client goes away.
    let pump_out = async move {
        enum Step {
            Msg(Result<OutMsg, flume::RecvError>),
            Cancelled,
        }
        loop {
            let step = future::or(async { Step::Msg(out_rx.recv_async().await) }, async {
                outbound.cancelled().await;
                Step::Cancelled
            })
            .await;
            if matches!(step, Step::Msg(Ok(_))) {
                crate::metrics::cross_core_message();
            }
            match step {
                Step::Msg(Ok(OutMsg::Frame(frame))) => {
                    if outbound.send_frame(frame).await.is_err() {
                        break;
                    }
                }
                Step::Msg(Ok(OutMsg::Finish(outcome))) => {
                    outbound.finish(outcome);
                    break;
                }
                Step::Msg(Err(_)) => {
                    outbound.finish(Err(RpcError::internal(
                        "the journal's owner core dropped the call",
                    )));
                    break;
                }
                Step::Cancelled => break,
            }
        }
        drop(cancel_tx);
    };
    future::or(pump_in, pump_out).await;
}

/// The client's ends of a call that a front end other than gRPC (the HTTP gateway) issues
/// to a journal's owner core: request frame bodies in, encoded response frames out.
pub struct ChannelClient {
    /// Request frame bodies (protobuf, no gRPC prefix). Dropping it is the client's EOF.
    pub requests: flume::Sender<Result<Bytes, RpcError>>,
    pub responses: flume::Receiver<OutMsg>,
    /// Dropping it tells the owner that the client went away (never sent on).
    #[allow(dead_code)]
    pub cancel: flume::Sender<()>,
}

impl ChannelClient {
    /// The next response message; `Ok(None)` once the call finished OK.
    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, RpcError> {
        match self.responses.recv_async().await {
            Ok(OutMsg::Frame(frame)) => {
                // Frames are whole gRPC frames (5-byte prefix) made by `encode_frame`.
                decode_message(frame.slice(5.min(frame.len())..)).map(Some)
            }
            Ok(OutMsg::Finish(outcome)) => outcome.map(|()| None),
            Err(_) => Err(RpcError::internal(
                "the journal's owner core dropped the call",
            )),
        }
    }
}

/// Builds a call over channels: the owner's ends and the client's.
pub fn channel_call() -> (CallIn, CallOut, ChannelClient) {
    let (in_tx, in_rx) = flume::bounded(FORWARD_DEPTH);
    let (out_tx, out_rx) = flume::bounded(FORWARD_DEPTH);
    let (cancel_tx, cancel_rx) = flume::bounded::<()>(1);
    let output = CallOut::Remote {
        tx: out_tx,
        cancel: cancel_rx,
    };
    let client = ChannelClient {
        requests: in_tx,
        responses: out_rx,
        cancel: cancel_tx,
    };
    (CallIn::Remote(in_rx), output, client)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn a_call_task_waits_its_turn_instead_of_running_inside_the_connection_task() {
        glommio::LocalExecutorBuilder::default()
            .make()
            .expect("executor")
            .run(async {
                let polled = Rc::new(Cell::new(false));
                let flag = polled.clone();
                super::spawn_call(async move { flag.set(true) });
                // glommio's spawn_local would have polled it already, here.
                assert!(!polled.get(), "the call ran inside its spawner");
                glommio::executor().yield_now().await;
                assert!(polled.get(), "the call never ran");
            });
    }
}
