//! `courant.Client`: List, Apply (journal creation and deletion), Append, Read and
//! ListFragments over the Rust client, with every call made without the GIL.
//!
//! Lives on: the Python objects; a `Client` holds a cheap clone of the Rust client, whose
//! connection pool and route cache are shared with every reader and publisher made from it.

use crate::errors::{Raised, to_py};
use crate::reader::Reader;
use crate::runtime::run;
use crate::spec::{FragmentInfo, JournalInfo, JournalSpec};
use bytes::Bytes;
use courant_client::protocol::labels::parse_selector;
use courant_client::protocol::{LabelSelector, apply_request};
use courant_client::{ClientOptions, RetryReader};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// A client of one or several brokers (Courant or Gazette).
///
/// `Client(endpoints, *, retry_timeout=60.0, dial_timeout=5.0, file_root=None, route=True)`:
/// `endpoints` is an address (`"http://127.0.0.1:8080"`) or a list of them; transient
/// failures are retried for `retry_timeout` seconds; `file_root` is the local root of
/// `file://` fragment stores; `route=False` sends every call to `endpoints` (which proxy).
/// Nothing is dialled until the first call; every call releases the GIL.
#[pyclass(module = "courant._courant", name = "Client", frozen)]
pub struct Client {
    pub(crate) inner: courant_client::Client,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (endpoints, *, retry_timeout = 60.0, dial_timeout = 5.0, file_root = None, route = true))]
    fn new(
        py: Python<'_>,
        endpoints: &Bound<'_, PyAny>,
        retry_timeout: f64,
        dial_timeout: f64,
        file_root: Option<PathBuf>,
        route: bool,
    ) -> PyResult<Client> {
        let endpoints: Vec<String> = if let Ok(s) = endpoints.cast::<PyString>() {
            vec![s.extract::<String>()?]
        } else {
            endpoints.extract()?
        };
        let defaults = ClientOptions::default();
        let options = ClientOptions {
            endpoints,
            file_root,
            retry_timeout: seconds("retry_timeout", retry_timeout).map_err(|r| r.into_pyerr(py))?,
            dial_timeout: seconds("dial_timeout", dial_timeout).map_err(|r| r.into_pyerr(py))?,
            route_cache_size: if route { defaults.route_cache_size } else { 0 },
            ..defaults
        };
        let inner = courant_client::Client::with_options(options).map_err(|e| to_py(py, e))?;
        Ok(Client { inner })
    }

    /// The broker addresses the client was made with.
    #[getter]
    fn endpoints(&self) -> Vec<String> {
        self.inner.options().endpoints.clone()
    }

    /// The journals matching `selector` (Gazette's label selector syntax, e.g.
    /// `"app=orders,!deprecated"`; `None`: all), in name order.
    #[pyo3(signature = (selector = None))]
    fn list(&self, py: Python<'_>, selector: Option<&str>) -> PyResult<Vec<JournalInfo>> {
        let selector = match selector {
            None | Some("") => LabelSelector::default(),
            Some(text) => parse_selector(text).map_err(|e| {
                Raised::new("InvalidArgumentError", format!("selector {text:?}: {e}"))
                    .into_pyerr(py)
            })?,
        };
        let client = self.inner.clone();
        let journals =
            run(py, async move { client.list(selector).await })?.map_err(|e| to_py(py, e))?;
        journals
            .into_iter()
            .map(|j| JournalInfo::new(py, j))
            .collect()
    }

    /// Creates or replaces the journals `upsert` (`JournalSpec`s) and deletes the journals
    /// named in `delete`, in one etcd transaction. `expect_mod_revision` maps a journal
    /// name to the revision it must have (0: must not exist); others are changed whatever
    /// their revision. Returns the etcd revision of the change.
    #[pyo3(signature = (upsert = Vec::new(), delete = Vec::new(), expect_mod_revision = None))]
    fn apply(
        &self,
        py: Python<'_>,
        upsert: Vec<PyRef<'_, JournalSpec>>,
        delete: Vec<String>,
        expect_mod_revision: Option<HashMap<String, i64>>,
    ) -> PyResult<i64> {
        let expect = expect_mod_revision.unwrap_or_default();
        let revision_of = |name: &str| expect.get(name).copied().unwrap_or(-1);
        let mut changes = Vec::with_capacity(upsert.len() + delete.len());
        for spec in &upsert {
            let spec = spec.to_proto().map_err(|r| r.into_pyerr(py))?;
            changes.push(apply_request::Change {
                expect_mod_revision: revision_of(&spec.name),
                upsert: Some(spec),
                delete: String::new(),
            });
        }
        for name in delete {
            changes.push(apply_request::Change {
                expect_mod_revision: revision_of(&name),
                upsert: None,
                delete: name,
            });
        }
        if changes.is_empty() {
            return Err(
                Raised::new("InvalidArgumentError", "apply: nothing to upsert or delete")
                    .into_pyerr(py),
            );
        }
        let client = self.inner.clone();
        let resp =
            run(py, async move { client.apply(changes).await })?.map_err(|e| to_py(py, e))?;
        Ok(resp.header.and_then(|h| h.etcd).map_or(0, |e| e.revision))
    }

    /// Creates (or replaces) the journal `name`; keyword arguments are those of
    /// `JournalSpec` (`labels`, `content_type`, `replication`, `fragment_length`,
    /// `stores`...). Returns the etcd revision of the change.
    #[pyo3(signature = (name, **kwargs))]
    fn create_journal(
        &self,
        py: Python<'_>,
        name: &str,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<i64> {
        let spec = py
            .get_type::<JournalSpec>()
            .call((name,), kwargs)?
            .cast_into::<JournalSpec>()?;
        self.apply(py, vec![spec.borrow()], Vec::new(), None)
    }

    /// Deletes the journal `name` (its fragments in stores are kept). Returns the etcd
    /// revision of the change.
    fn delete_journal(&self, py: Python<'_>, name: String) -> PyResult<i64> {
        self.apply(py, Vec::new(), vec![name], None)
    }

    /// Appends `data` to `journal` as one append; returns the `(begin, end)` offsets it
    /// was written at. Raises `AppendUncertainError` if the connection failed after the
    /// append was committed and before the broker answered (it is then not retried).
    fn append(&self, py: Python<'_>, journal: &str, data: &[u8]) -> PyResult<(i64, i64)> {
        let (client, journal) = (self.inner.clone(), journal.to_string());
        let content = Bytes::copy_from_slice(data);
        let commit = run(py, async move { client.append(&journal, content).await })?
            .map_err(|e| to_py(py, e))?;
        Ok((commit.begin, commit.end))
    }

    /// Reads `journal` from `offset` (-1: its write head) as an iterator of `bytes`
    /// chunks, following the journal into its fragment stores. With `block=False` the
    /// iteration ends at the write head; with `block=True` it waits for more. Use it as a
    /// context manager to close the stream.
    #[pyo3(signature = (journal, offset = 0, block = false))]
    fn read(&self, py: Python<'_>, journal: &str, offset: i64, block: bool) -> PyResult<Reader> {
        let reader =
            RetryReader::new(&self.inner, journal, offset, block).map_err(|e| to_py(py, e))?;
        Ok(Reader::start(reader))
    }

    /// The fragments of `journal` (on the brokers and in its stores), in offset order.
    /// With `signature_ttl` (seconds), persisted fragments come with signed URLs.
    #[pyo3(signature = (journal, *, signature_ttl = None))]
    fn list_fragments(
        &self,
        py: Python<'_>,
        journal: &str,
        signature_ttl: Option<f64>,
    ) -> PyResult<Vec<FragmentInfo>> {
        let ttl = signature_ttl
            .map(|s| seconds("signature_ttl", s))
            .transpose()
            .map_err(|r| r.into_pyerr(py))?;
        let (client, journal) = (self.inner.clone(), journal.to_string());
        let fragments = run(py, async move { client.fragments(&journal, ttl).await })?
            .map_err(|e| to_py(py, e))?;
        Ok(fragments
            .into_iter()
            .map(|f| FragmentInfo::new(f.spec.unwrap_or_default(), f.signed_url))
            .collect())
    }

    fn __repr__(&self) -> String {
        format!("courant.Client({:?})", self.inner.options().endpoints)
    }
}

/// A non-negative, finite number of seconds.
fn seconds(what: &str, value: f64) -> Result<Duration, Raised> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        Raised::new(
            "InvalidArgumentError",
            format!("{what}: {value} is not a number of seconds (finite, not negative)"),
        )
    })
}
