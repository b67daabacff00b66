//! [`Client`]: a connection pool over one or several brokers, with a route cache that
//! sends each journal's calls to its primary (appends) or a member (reads), and the calls
//! that concern no single journal (List, its watch, Apply).
//!
//! Lives on: any tokio runtime. A `Client` is a cheap `Clone` (an `Arc`); its pool and
//! route cache are shared by every clone.

use crate::endpoint::Endpoint;
use crate::pool::Pool;
use crate::retry::Retry;
use crate::routes::{RouteCache, pick_endpoint};
use crate::{Error, error::status_name};
use protocol::grpc::{Channel, ClientCall, Code, RpcError};
use protocol::method::Method;
use protocol::{
    ApplyRequest, ApplyResponse, Header, JournalSpec, LabelSelector, ListRequest, ListResponse,
    Route, Status, apply_request, list_response,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How a [`Client`] connects and retries.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Broker addresses (`http://host:port`), used when no Route is known.
    pub endpoints: Vec<String>,
    /// The local root of `file://` fragment stores (a shared file system, as Go's
    /// `InstallFileTransport`). Without it, persisted fragments of `file://` stores are
    /// read through the broker.
    pub file_root: Option<PathBuf>,
    /// How long transient failures are retried before the last one is surfaced.
    pub retry_timeout: Duration,
    /// How long dialling a broker may take.
    pub dial_timeout: Duration,
    /// Routes cached (journals); 0 disables routing: every call goes to `endpoints`, which
    /// proxy it (Go's `NoopDispatchRouter`).
    pub route_cache_size: usize,
    /// How long a cached Route is trusted.
    pub route_cache_ttl: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            endpoints: Vec::new(),
            file_root: None,
            retry_timeout: Duration::from_secs(60),
            dial_timeout: Duration::from_secs(5),
            route_cache_size: 1024,
            route_cache_ttl: Duration::from_secs(60),
        }
    }
}

/// A client of `protocol.Journal`: see the module documentation.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.inner.endpoints)
            .field("routing", &self.routing())
            .finish()
    }
}

struct Inner {
    endpoints: Vec<Endpoint>,
    next: AtomicUsize,
    pool: Pool,
    routes: Option<RouteCache>,
    options: ClientOptions,
    http: OnceLock<Result<reqwest::Client, String>>,
}

/// Where one call goes: the channel, its endpoint, and whether a Route chose it.
pub(crate) struct Dispatch {
    pub(crate) channel: Channel,
    pub(crate) endpoint: Endpoint,
}

impl Client {
    /// A client of the brokers at `endpoints`, with default options. Nothing is dialled
    /// until the first call.
    pub fn new(endpoints: &[&str]) -> Result<Client, Error> {
        Client::with_options(ClientOptions {
            endpoints: endpoints.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
    }

    /// A client with `options`.
    pub fn with_options(options: ClientOptions) -> Result<Client, Error> {
        if options.endpoints.is_empty() {
            return Err(Error::Invalid(
                "a client needs at least one broker address (http://host:port)".into(),
            ));
        }
        let endpoints = options
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(root) = &options.file_root
            && !root.is_dir()
        {
            return Err(Error::Invalid(format!(
                "file_root {}: not a directory",
                root.display()
            )));
        }
        let routes = (options.route_cache_size > 0)
            .then(|| RouteCache::new(options.route_cache_size, options.route_cache_ttl));
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                next: AtomicUsize::new(0),
                pool: Pool::new(options.dial_timeout),
                routes,
                options,
                http: OnceLock::new(),
            }),
        })
    }

    /// The options the client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Whether calls follow Routes (a route cache is in use). Reads then ask brokers not to
    /// proxy (`do_not_proxy`), as Gazette's consumers do.
    pub fn routing(&self) -> bool {
        self.inner.routes.is_some()
    }

    pub(crate) fn file_root(&self) -> Option<&Path> {
        self.inner.options.file_root.as_deref()
    }

    pub(crate) fn retry(&self) -> Retry {
        Retry::new(self.inner.options.retry_timeout)
    }

    /// The cached Route of `journal`, if any.
    pub fn route(&self, journal: &str) -> Option<Route> {
        self.inner.routes.as_ref()?.get(journal)
    }

    /// Records the Route a broker advertised for `journal` (from a response Header).
    pub fn update_route(&self, journal: &str, route: Option<&Route>) {
        if let Some(routes) = &self.inner.routes {
            routes.update(journal, route);
        }
    }

    /// A channel for a call about `journal`: to the endpoint `hint` (or the cached Route)
    /// names, the primary's when `primary`, else to one of the configured endpoints.
    pub(crate) async fn dispatch(
        &self,
        journal: Option<&str>,
        hint: Option<&Route>,
        primary: bool,
    ) -> Result<Dispatch, RpcError> {
        let routed = match (hint, journal) {
            (Some(route), _) if self.routing() => pick_endpoint(route, primary),
            (_, Some(j)) => self.route(j).and_then(|r| pick_endpoint(&r, primary)),
            _ => None,
        };
        let endpoint = match routed.and_then(|e| Endpoint::parse(&e).ok()) {
            Some(endpoint) => endpoint,
            None => {
                let i = self.inner.next.fetch_add(1, Ordering::Relaxed);
                self.inner.endpoints[i % self.inner.endpoints.len()].clone()
            }
        };
        let channel = self.inner.pool.channel(&endpoint).await?;
        Ok(Dispatch { channel, endpoint })
    }

    /// A call about `journal` through `dispatch` failed in transport: forget the
    /// connection and the journal's Route, so the next attempt starts afresh.
    pub(crate) fn transport_failed(&self, dispatch: &Dispatch, journal: Option<&str>) {
        self.inner.pool.forget(&dispatch.endpoint);
        if let Some(journal) = journal {
            self.update_route(journal, None);
        }
    }

    /// The HTTP client for signed fragment URLs (rustls on ring, the system's roots).
    pub(crate) fn http(&self) -> Result<reqwest::Client, String> {
        self.inner.http.get_or_init(build_http).clone()
    }

    /// Every journal matching `selector`, in name order, with its Route (which also
    /// updates the route cache).
    pub async fn list(
        &self,
        selector: LabelSelector,
    ) -> Result<Vec<list_response::Journal>, Error> {
        let req = ListRequest {
            selector: Some(selector),
            watch: false,
            watch_resume: None,
        };
        let mut retry = self.retry();
        loop {
            let dispatch = match self.dispatch(None, None, false).await {
                Ok(d) => d,
                Err(e) => {
                    retry.wait(|| "List".into(), Error::call("List", e)).await?;
                    continue;
                }
            };
            let mut call = match dispatch
                .channel
                .server_streaming(Method::List.path(), &req)
                .await
            {
                Ok(call) => call,
                Err(e) => return Err(self.call_failed("List", &dispatch, e)),
            };
            match read_snapshot(&mut call, None).await {
                Ok((journals, _)) => {
                    self.note_routes(&journals);
                    return Ok(journals);
                }
                Err(SnapshotError::Rpc(e)) if e.code == Code::Unavailable => {
                    self.transport_failed(&dispatch, None);
                    retry.wait(|| "List".into(), Error::call("List", e)).await?;
                }
                Err(e) => return Err(e.into_error()),
            }
        }
    }

    /// A watch of the journals matching `selector`: each [`ListWatch::next`] returns the
    /// next snapshot that differs from the previous one.
    pub fn list_watch(&self, selector: LabelSelector) -> ListWatch {
        ListWatch {
            client: self.clone(),
            selector,
            call: None,
            resume: None,
            retry: self.retry(),
        }
    }

    /// Applies `changes` in one etcd transaction. A non-OK status (e.g.
    /// `ETCD_TRANSACTION_FAILED`) is an [`Error::Status`] naming the journals. Only a failure
    /// to reach any broker is retried: a sent Apply may have been applied.
    pub async fn apply(&self, changes: Vec<apply_request::Change>) -> Result<ApplyResponse, Error> {
        let names: Vec<&str> = changes
            .iter()
            .map(|c| {
                c.upsert
                    .as_ref()
                    .map_or(c.delete.as_str(), |s| s.name.as_str())
            })
            .collect();
        let what = format!("Apply of {}", names.join(", "));
        let req = ApplyRequest {
            changes: changes.clone(),
        };
        let mut retry = self.retry();
        let dispatch = loop {
            match self.dispatch(None, None, false).await {
                Ok(d) => break d,
                Err(e) => retry.wait(|| what.clone(), Error::call(&what, e)).await?,
            }
        };
        let resp: ApplyResponse = dispatch
            .channel
            .unary(Method::Apply.path(), &req)
            .await
            .map_err(|e| self.call_failed(&what, &dispatch, e))?;
        if resp.status != Status::Ok as i32 {
            return Err(Error::Status {
                journal: names.join(", "),
                status: status_name(resp.status),
            });
        }
        Ok(resp)
    }

    /// Creates or replaces `specs` whatever their current revision (`expect_mod_revision`
    /// −1), in one Apply; returns its etcd revision.
    pub async fn apply_specs(&self, specs: &[JournalSpec]) -> Result<i64, Error> {
        let changes = specs
            .iter()
            .map(|s| apply_request::Change {
                expect_mod_revision: -1,
                upsert: Some(s.clone()),
                delete: String::new(),
            })
            .collect();
        let resp = self.apply(changes).await?;
        Ok(resp.header.and_then(|h| h.etcd).map_or(0, |e| e.revision))
    }

    fn note_routes(&self, journals: &[list_response::Journal]) {
        for j in journals {
            if let Some(spec) = &j.spec {
                self.update_route(&spec.name, j.route.as_ref());
            }
        }
    }

    fn call_failed(&self, what: &str, dispatch: &Dispatch, err: RpcError) -> Error {
        if err.code == Code::Unavailable {
            self.transport_failed(dispatch, None);
        }
        Error::call(what, err)
    }
}

/// A List watch: see [`Client::list_watch`].
pub struct ListWatch {
    client: Client,
    selector: LabelSelector,
    call: Option<ClientCall>,
    /// The Header of the last snapshot: a reopened watch resumes after its revision.
    resume: Option<Header>,
    retry: Retry,
}

impl ListWatch {
    /// The next snapshot of matching journals (the first one at once, later ones when the
    /// matched set changes). Transport failures reopen the watch where it left off.
    pub async fn next(&mut self) -> Result<Vec<list_response::Journal>, Error> {
        loop {
            if self.call.is_none() {
                let req = ListRequest {
                    selector: Some(self.selector.clone()),
                    watch: true,
                    watch_resume: self.resume.clone(),
                };
                let opened = match self.client.dispatch(None, None, false).await {
                    Ok(d) => d.channel.server_streaming(Method::List.path(), &req).await,
                    Err(e) => Err(e),
                };
                match opened {
                    Ok(call) => self.call = Some(call),
                    Err(e) => {
                        self.fail(e).await?;
                        continue;
                    }
                }
            }
            let call = self.call.as_mut().expect("opened above");
            match read_snapshot(call, self.resume.as_ref()).await {
                Ok((journals, header)) => {
                    self.retry.reset();
                    self.resume = Some(header);
                    self.client.note_routes(&journals);
                    return Ok(journals);
                }
                Err(SnapshotError::Rpc(e)) if e.code == Code::Unavailable => {
                    self.call = None;
                    self.fail(e).await?;
                }
                Err(SnapshotError::Ended) => {
                    self.call = None;
                    let e = RpcError::unavailable("the broker ended the watch");
                    self.fail(e).await?;
                }
                Err(e) => return Err(e.into_error()),
            }
        }
    }

    async fn fail(&mut self, e: RpcError) -> Result<(), Error> {
        self.retry
            .wait(|| "List watch".into(), Error::call("List watch", e))
            .await
    }
}

enum SnapshotError {
    Rpc(RpcError),
    Status(i32),
    /// The stream ended cleanly before a snapshot completed (a watch only).
    Ended,
    Invalid(String),
}

impl SnapshotError {
    fn into_error(self) -> Error {
        match self {
            SnapshotError::Rpc(e) => Error::call("List", e),
            SnapshotError::Status(s) => Error::Status {
                journal: "(List)".into(),
                status: status_name(s),
            },
            SnapshotError::Ended => Error::call("List", RpcError::unavailable("stream ended")),
            SnapshotError::Invalid(s) => Error::Invalid(format!("List: {s}")),
        }
    }
}

/// Reads one List snapshot: its first message (status and Header), then journals until
/// the end of the stream (a plain List) or the empty end-of-snapshot marker (a watch).
/// A watch snapshot at or before `resume`'s revision breaks Gazette's contract.
async fn read_snapshot(
    call: &mut ClientCall,
    resume: Option<&Header>,
) -> Result<(Vec<list_response::Journal>, Header), SnapshotError> {
    let mut journals = Vec::new();
    let mut header: Option<Header> = None;
    loop {
        let msg = call
            .next::<ListResponse>()
            .await
            .map_err(SnapshotError::Rpc)?;
        let Some(msg) = msg else {
            return match header {
                Some(h) if resume.is_none() => Ok((journals, h)),
                _ => Err(SnapshotError::Ended),
            };
        };
        if header.is_none() {
            if msg.status != Status::Ok as i32 {
                return Err(SnapshotError::Status(msg.status));
            }
            let h = msg.header.clone().unwrap_or_default();
            let rev = |h: &Header| h.etcd.as_ref().map_or(0, |e| e.revision);
            if let Some(r) = resume
                && rev(&h) <= rev(r)
            {
                return Err(SnapshotError::Invalid(format!(
                    "watch snapshot at revision {} is not after the resumed revision {}",
                    rev(&h),
                    rev(r)
                )));
            }
            header = Some(h);
            journals.extend(msg.journals);
            continue;
        }
        if msg.header.is_none() && msg.journals.is_empty() {
            // The end-of-snapshot marker of a watch.
            return Ok((journals, header.expect("set by the first message")));
        }
        journals.extend(msg.journals);
    }
}

fn build_http() -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A certificate the system lists but rustls cannot use is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(Duration::from_secs(10))
        // A store that stops sending mid-object fails the read instead of hanging it.
        .read_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("HTTP client setup: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_need_usable_endpoints_and_root() {
        assert!(
            Client::new(&[])
                .unwrap_err()
                .to_string()
                .contains("at least one")
        );
        let err = Client::new(&["https://x:1"]).err().unwrap().to_string();
        assert!(err.contains("only http://"), "{err}");
        let err = Client::with_options(ClientOptions {
            endpoints: vec!["http://127.0.0.1:1".into()],
            file_root: Some("/nonexistent/root".into()),
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_broker_is_retried_then_surfaced() {
        // A port nothing listens on: bind, take the port, and close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Client::with_options(ClientOptions {
            endpoints: vec![format!("http://127.0.0.1:{port}")],
            retry_timeout: Duration::from_millis(300),
            ..Default::default()
        })
        .unwrap();
        let err = client.list(LabelSelector::default()).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("List: still failing after retrying"),
            "{text}"
        );
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert_eq!(err.code(), Some(Code::Unavailable));
        assert!(client.http().is_ok());
    }
}
