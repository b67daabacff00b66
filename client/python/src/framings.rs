//! A journal's message framing, from its `content-type` label (fetched once per journal
//! with a List of `name=<journal>`, then cached), and the conversion of messages between
//! Python objects and the message layer's [`Message`]: JSON through Python's `json` module,
//! so a dict round-trips exactly as `json.dumps`/`json.loads` would have it.
//!
//! Lives on: the cache belongs to the publisher or consumer that holds it.

use crate::errors::Raised;
use courant_client::message::{Framing, FramingOptions, Message};
use courant_client::protocol::labels::{label_set, value_of};
use courant_client::protocol::{LabelSelector, Status};
use courant_client::{Client, Error};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::HashMap;

/// The framing of `journal`, from `cache` or the broker.
pub async fn framing_of(
    client: &Client,
    cache: &mut HashMap<String, Framing>,
    journal: &str,
) -> Result<Framing, Error> {
    if let Some(framing) = cache.get(journal) {
        return Ok(framing.clone());
    }
    let selector = LabelSelector {
        include: Some(label_set(&[("name", journal)])),
        exclude: None,
    };
    let journals = client.list(selector).await?;
    let spec = journals
        .into_iter()
        .filter_map(|j| j.spec)
        .find(|s| s.name == journal)
        .ok_or_else(|| Error::Status {
            journal: journal.to_string(),
            status: Status::JournalNotFound.as_str_name().to_string(),
        })?;
    let labels = spec.labels.unwrap_or_default();
    let content_type = value_of(&labels, "content-type").unwrap_or("");
    let framing = Framing::for_content_type(journal, content_type, &FramingOptions::default())?;
    cache.insert(journal.to_string(), framing.clone());
    Ok(framing)
}

/// A Python dict as a JSON message, refused if its encoding exceeds `max_size` bytes.
pub fn json_message(
    py: Python<'_>,
    journal: &str,
    message: &Bound<'_, PyAny>,
    max_size: usize,
) -> PyResult<Message> {
    if !message.is_instance_of::<PyDict>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "journal {journal}: a message is a dict (a JSON object), not {}",
            message.get_type().name()?
        )));
    }
    let text: String = py
        .import("json")?
        .call_method1("dumps", (message,))?
        .extract()?;
    if text.len() + 1 > max_size {
        return Err(Raised::new(
            "MessageTooLargeError",
            format!(
                "journal {journal}: a message of {} bytes exceeds the limit of {max_size} bytes",
                text.len() + 1
            ),
        )
        .at(journal, None)
        .into_pyerr(py));
    }
    let value = serde_json::from_str(&text).map_err(|e| {
        Raised::new(
            "FramingError",
            format!("journal {journal}: the message is not JSON that can be framed: {e}"),
        )
        .at(journal, None)
        .into_pyerr(py)
    })?;
    Ok(Message::Json(value))
}

/// A message as a Python object: a JSON value as `json.loads` gives it, a CSV record as a
/// list of strings, a protobuf message as its bytes.
pub fn to_python(py: Python<'_>, message: &Message) -> PyResult<Py<PyAny>> {
    match message {
        Message::Json(value) => {
            let text = serde_json::to_string(value).map_err(|e| {
                pyo3::exceptions::PyValueError::new_err(format!("re-encoding a JSON message: {e}"))
            })?;
            Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
        }
        Message::Csv(fields) => Ok(fields.clone().into_pyobject(py)?.into_any().unbind()),
        Message::Proto(bytes) => Ok(PyBytes::new(py, bytes).into_any().unbind()),
    }
}
