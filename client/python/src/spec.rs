//! The journal and fragment descriptions handed to Python: `JournalSpec` (what `apply`
//! writes, and what `list` reads back), `Journal` (a listed journal: its spec, revision
//! and Route) and `Fragment` (a listed fragment).
//!
//! Lives on: the Python objects; values only.

use crate::errors::Raised;
use courant_client::protocol::{self, CompressionCodec, journal_spec, list_response};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// The label that names a journal's message framing.
pub const CONTENT_TYPE_LABEL: &str = "content-type";

/// A journal's specification (Gazette's `JournalSpec`): pass it to `Client.apply`.
#[pyclass(module = "courant._courant", name = "JournalSpec", get_all, set_all)]
#[derive(Clone)]
pub struct JournalSpec {
    /// The journal's name (e.g. ``"examples/orders/part-000"``).
    pub name: String,
    /// Labels as ``(name, value)`` pairs; ``content-type`` names the message framing.
    pub labels: Vec<(String, String)>,
    /// How many brokers replicate the journal.
    pub replication: i32,
    /// Fragment length in bytes before a new fragment is started.
    pub fragment_length: i64,
    /// Compression of persisted fragments (``"NONE"``, ``"GZIP"``, ``"SNAPPY"``,
    /// ``"ZSTANDARD"``, ``"GZIP_OFFLOAD_DECOMPRESSION"``).
    pub compression: String,
    /// Fragment store URLs (``file:///``, ``s3://bucket/prefix/``...), first one written.
    pub stores: Vec<String>,
    /// Seconds between refreshes of the fragment stores' listing.
    pub refresh_interval: f64,
    /// Seconds fragments are kept in stores, or ``None`` (forever).
    pub retention: Option<f64>,
    /// Seconds after which a fragment is flushed to its store, or ``None``.
    pub flush_interval: Option<f64>,
    /// Gazette's path postfix template of fragment names (``""``: none).
    pub path_postfix_template: String,
    /// Bytes per second appends may add (0: unlimited).
    pub max_append_rate: i64,
}

#[pymethods]
impl JournalSpec {
    #[new]
    #[pyo3(signature = (name, *, labels = None, content_type = Some("application/x-ndjson".to_string()),
        replication = 1, fragment_length = 1 << 26, compression = "NONE".to_string(),
        stores = Vec::new(), refresh_interval = 60.0, retention = None, flush_interval = None,
        path_postfix_template = String::new(), max_append_rate = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        labels: Option<&Bound<'_, PyAny>>,
        content_type: Option<String>,
        replication: i32,
        fragment_length: i64,
        compression: String,
        stores: Vec<String>,
        refresh_interval: f64,
        retention: Option<f64>,
        flush_interval: Option<f64>,
        path_postfix_template: String,
        max_append_rate: i64,
    ) -> PyResult<JournalSpec> {
        let mut labels = match labels {
            None => Vec::new(),
            Some(l) => label_pairs(l)?,
        };
        if let Some(ct) = content_type {
            labels.retain(|(n, _)| n != CONTENT_TYPE_LABEL);
            labels.push((CONTENT_TYPE_LABEL.to_string(), ct));
        }
        Ok(JournalSpec {
            name,
            labels,
            replication,
            fragment_length,
            compression,
            stores,
            refresh_interval,
            retention,
            flush_interval,
            path_postfix_template,
            max_append_rate,
        })
    }

    /// The ``content-type`` label's value, or ``None``.
    #[getter]
    fn content_type(&self) -> Option<String> {
        self.labels
            .iter()
            .find(|(n, _)| n == CONTENT_TYPE_LABEL)
            .map(|(_, v)| v.clone())
    }

    fn __repr__(&self) -> String {
        format!(
            "JournalSpec({:?}, labels={:?}, replication={}, fragment_length={}, compression={:?}, stores={:?})",
            self.name,
            self.labels,
            self.replication,
            self.fragment_length,
            self.compression,
            self.stores
        )
    }
}

/// `(name, value)` pairs from a dict or an iterable of pairs.
fn label_pairs(labels: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    if let Ok(d) = labels.cast::<PyDict>() {
        return d
            .iter()
            .map(|(k, v)| Ok((k.extract()?, v.extract()?)))
            .collect();
    }
    if labels.is_instance_of::<PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "labels: a dict or a list of (name, value) pairs, not a string",
        ));
    }
    labels.extract()
}

impl JournalSpec {
    /// The protobuf spec, or why it cannot be one (the broker validates the rest).
    pub fn to_proto(&self) -> Result<protocol::JournalSpec, Raised> {
        let codec = CompressionCodec::from_str_name(&self.compression.to_ascii_uppercase())
            .filter(|c| *c != CompressionCodec::Invalid)
            .ok_or_else(|| {
                Raised::new(
                    "InvalidArgumentError",
                    format!(
                        "journal {}: unknown compression {:?} (NONE, GZIP, SNAPPY, ZSTANDARD, GZIP_OFFLOAD_DECOMPRESSION)",
                        self.name, self.compression
                    ),
                )
            })?;
        let pairs: Vec<(&str, &str)> = self
            .labels
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        Ok(protocol::JournalSpec {
            name: self.name.clone(),
            replication: self.replication,
            labels: Some(protocol::labels::label_set(&pairs)),
            fragment: Some(journal_spec::Fragment {
                length: self.fragment_length,
                compression_codec: codec as i32,
                stores: self.stores.clone(),
                refresh_interval: Some(duration(
                    &self.name,
                    "refresh_interval",
                    self.refresh_interval,
                )?),
                retention: opt_duration(&self.name, "retention", self.retention)?,
                flush_interval: opt_duration(&self.name, "flush_interval", self.flush_interval)?,
                path_postfix_template: self.path_postfix_template.clone(),
            }),
            flags: 0,
            max_append_rate: self.max_append_rate,
            suspend: None,
        })
    }
}

impl From<protocol::JournalSpec> for JournalSpec {
    fn from(s: protocol::JournalSpec) -> JournalSpec {
        let fragment = s.fragment.unwrap_or_default();
        let codec = CompressionCodec::try_from(fragment.compression_codec)
            .map(|c| c.as_str_name().to_string())
            .unwrap_or_else(|_| format!("CODEC_{}", fragment.compression_codec));
        let labels = s
            .labels
            .map(|set| set.labels.into_iter().map(|l| (l.name, l.value)).collect())
            .unwrap_or_default();
        JournalSpec {
            name: s.name,
            labels,
            replication: s.replication,
            fragment_length: fragment.length,
            compression: codec,
            stores: fragment.stores,
            refresh_interval: fragment.refresh_interval.map_or(0.0, |d| secs(&d)),
            retention: fragment.retention.map(|d| secs(&d)).filter(|s| *s > 0.0),
            flush_interval: fragment
                .flush_interval
                .map(|d| secs(&d))
                .filter(|s| *s > 0.0),
            path_postfix_template: fragment.path_postfix_template,
            max_append_rate: s.max_append_rate,
        }
    }
}

fn secs(d: &prost_types::Duration) -> f64 {
    d.seconds as f64 + d.nanos as f64 / 1e9
}

fn duration(journal: &str, what: &str, secs: f64) -> Result<prost_types::Duration, Raised> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(Raised::new(
            "InvalidArgumentError",
            format!(
                "journal {journal}: {what} {secs} is not a number of seconds (finite, not negative)"
            ),
        ));
    }
    Ok(prost_types::Duration {
        seconds: secs.trunc() as i64,
        nanos: (secs.fract() * 1e9).round() as i32,
    })
}

fn opt_duration(
    journal: &str,
    what: &str,
    secs: Option<f64>,
) -> Result<Option<prost_types::Duration>, Raised> {
    secs.map(|s| duration(journal, what, s)).transpose()
}

/// A journal as `Client.list` returns it.
#[pyclass(module = "courant._courant", name = "Journal", get_all, frozen)]
pub struct JournalInfo {
    /// The journal's name.
    pub name: String,
    /// Its specification (a copy: change it and pass it to ``Client.apply``).
    pub spec: Py<JournalSpec>,
    /// The etcd revision of its spec (for ``expect_mod_revision``).
    pub mod_revision: i64,
    /// Its Route's members as ``"zone/suffix"``, primary first (empty: unassigned).
    pub route: Vec<String>,
    /// Its Route's endpoints, in the order of ``route``.
    pub endpoints: Vec<String>,
}

impl JournalInfo {
    pub fn new(py: Python<'_>, j: list_response::Journal) -> PyResult<JournalInfo> {
        let spec = JournalSpec::from(j.spec.unwrap_or_default());
        let route = j.route.unwrap_or_default();
        let mut order: Vec<usize> = (0..route.members.len()).collect();
        if let Ok(primary) = usize::try_from(route.primary)
            && primary < order.len()
        {
            order.remove(primary);
            order.insert(0, primary);
        }
        let members = order
            .iter()
            .map(|&i| format!("{}/{}", route.members[i].zone, route.members[i].suffix))
            .collect();
        let endpoints = order
            .iter()
            .filter_map(|&i| route.endpoints.get(i).cloned())
            .collect();
        Ok(JournalInfo {
            name: spec.name.clone(),
            spec: Py::new(py, spec)?,
            mod_revision: j.mod_revision,
            route: members,
            endpoints,
        })
    }
}

#[pymethods]
impl JournalInfo {
    /// The ``content-type`` label's value, or ``None``.
    #[getter]
    fn content_type(&self, py: Python<'_>) -> Option<String> {
        self.spec.borrow(py).content_type()
    }

    fn __repr__(&self) -> String {
        format!(
            "Journal({:?}, mod_revision={}, route={:?})",
            self.name, self.mod_revision, self.route
        )
    }
}

/// A fragment of a journal: the span ``[begin, end)`` of its bytes in one file.
#[pyclass(module = "courant._courant", name = "Fragment", get_all, frozen)]
pub struct FragmentInfo {
    /// The journal.
    pub journal: String,
    /// The offset of its first byte.
    pub begin: i64,
    /// The offset after its last byte.
    pub end: i64,
    /// The SHA-1 of its content, as 40 hex digits.
    pub sum: String,
    /// Its compression codec's name.
    pub compression: String,
    /// The store holding it (``""``: only on the brokers so far).
    pub backing_store: String,
    /// When it was persisted (Unix seconds; 0: not persisted).
    pub mod_time: i64,
    /// A signed URL to fetch it, when the broker gave one.
    pub signed_url: String,
}

impl FragmentInfo {
    pub fn new(f: protocol::Fragment, signed_url: String) -> FragmentInfo {
        let sum = f
            .sum
            .map(|s| format!("{:016x}{:016x}{:08x}", s.part1, s.part2, s.part3))
            .unwrap_or_default();
        let compression = CompressionCodec::try_from(f.compression_codec)
            .map(|c| c.as_str_name().to_string())
            .unwrap_or_else(|_| format!("CODEC_{}", f.compression_codec));
        FragmentInfo {
            journal: f.journal,
            begin: f.begin,
            end: f.end,
            sum,
            compression,
            backing_store: f.backing_store,
            mod_time: f.mod_time,
            signed_url,
        }
    }
}

#[pymethods]
impl FragmentInfo {
    fn __repr__(&self) -> String {
        format!(
            "Fragment({:?}, begin={}, end={}, backing_store={:?})",
            self.journal, self.begin, self.end, self.backing_store
        )
    }
}
