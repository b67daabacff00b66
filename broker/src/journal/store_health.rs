//! Fragment store health as the append path and the FragmentStoreHealth RPC see it.
//!
//! Lives on: the core running the call; health itself is checked on the control thread
//! (`crate::control::stores::persist`) and published through a watch channel.

use crate::control::stores::STORE_HEALTH_CHECK_RETRIES;

/// Waits until the health of `url` allows an append, as Gazette's append FSM does: pass at
/// once if healthy; else wait for each next check, and give up after
/// [`STORE_HEALTH_CHECK_RETRIES`] failed ones (at once for a store that cannot be built).
/// `Err` carries the `store_health_error` text. Lives on: the journal's owner core.
pub async fn await_healthy(core: &crate::core::Core, url: &str) -> Result<(), String> {
    let mut rx = core
        .stores
        .health(url)
        .await
        .map_err(|e| format!("fragment store {url} unhealthy: {e}"))?;
    let mut waited = 0u32;
    loop {
        let health = rx.borrow_and_update().clone();
        let Some(error) = health.error else {
            return Ok(());
        };
        if health.permanent || waited > STORE_HEALTH_CHECK_RETRIES {
            return Err(format!("fragment store {url} unhealthy: {error}"));
        }
        if rx.changed().await.is_err() {
            return Err(format!("fragment store {url} unhealthy: {error}"));
        }
        waited += 1;
    }
}

/// The FragmentStoreHealth RPC: the store's last health check (waiting for the first), and
/// with `check_delete`, a PUT and DELETE probe. Lives on: the accepting core.
pub async fn health_rpc(
    core: &std::rc::Rc<crate::core::Core>,
    input: &mut crate::core::call::CallIn,
    out: &mut crate::core::call::CallOut,
) -> Result<(), protocol::grpc::RpcError> {
    use protocol::grpc::RpcError;
    use protocol::validate::Validate;
    use protocol::{FragmentStoreHealthRequest, FragmentStoreHealthResponse, Status};
    let req: FragmentStoreHealthRequest = input
        .next()
        .await?
        .ok_or_else(|| RpcError::unknown("FragmentStoreHealth: missing request"))?;
    req.validate()
        .map_err(|e| RpcError::unknown(e.to_string()))?;
    let header = crate::journal::routing::resolver::unrouted_header(core, &core.keyspace.current());
    let mut rx = core.stores.health(&req.fragment_store).await?;
    let mut health = rx.borrow_and_update().clone();
    if health.checks == 0 && rx.changed().await.is_ok() {
        health = rx.borrow_and_update().clone();
    }
    let mut resp = FragmentStoreHealthResponse {
        status: Status::Ok as i32,
        header: Some(header),
        store_health_error: String::new(),
    };
    if let Some(error) = health.error {
        resp.status = Status::FragmentStoreUnhealthy as i32;
        resp.store_health_error = error;
    } else if req.check_delete
        && let Err(error) = core
            .stores
            .handle
            .check_delete(req.fragment_store.clone(), req.check_delete_prefix.clone())
            .await
    {
        resp.status = Status::FragmentStoreUnhealthy as i32;
        resp.store_health_error = error.to_string();
    }
    out.send(&resp).await
}
