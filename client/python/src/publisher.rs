//! `courant.Publisher` and `courant.Transaction`: Gazette's publisher over an
//! `AppendService` (appends batched per journal). Messages are dicts, framed as the
//! journal's `content-type` label says (JSON lines), with the UUID at `/UUID` as Gazette's
//! Go programs carry it.
//!
//! A transaction's messages are CONTINUE_TXN; leaving its `with` block normally writes an
//! ACK_TXN to every journal it touched (a commit), leaving it by an exception writes ACKs
//! that roll it back (readers drop its messages); both then wait for the appends.
//!
//! Lives on: the Python objects hold the publisher behind an async mutex shared with the
//! runtime's tasks, so a Python thread interrupted mid-call leaves it consistent.

use crate::client::Client;
use crate::errors::{Raised, to_py};
use crate::framings::{framing_of, json_message};
use crate::runtime::run;
use courant_client::message::framing::CONTENT_TYPE_JSON_LINES;
use courant_client::message::{Framing, Message, Publisher as Inner};
use courant_client::{AppendService, Error};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The largest message published by default (the readers' default limit).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 << 20;

struct State {
    publisher: Inner<AppendService>,
    framings: HashMap<String, Framing>,
    /// Whether a transaction is open (its messages are CONTINUE_TXN).
    in_transaction: bool,
}

type Shared = Arc<Mutex<State>>;

/// Publishes messages of one producer (a random producer id, a clock following wall time).
///
/// `Publisher(client, *, max_message_size=64 MiB)`. Messages are dicts; each is stamped
/// with a v1 UUID at its `"UUID"` key and framed as its journal's `content-type` label
/// says (`application/x-ndjson`).
#[pyclass(module = "courant._courant", name = "Publisher", frozen)]
pub struct Publisher {
    client: courant_client::Client,
    state: Shared,
    producer: String,
    max_message_size: usize,
}

#[pymethods]
impl Publisher {
    #[new]
    #[pyo3(signature = (client, *, max_message_size = DEFAULT_MAX_MESSAGE_SIZE))]
    fn new(client: PyRef<'_, Client>, max_message_size: usize) -> Publisher {
        let inner = client.inner.clone();
        let publisher = Inner::new(AppendService::new(&inner));
        let producer = publisher.producer().to_string();
        Publisher {
            client: inner,
            state: Arc::new(Mutex::new(State {
                publisher,
                framings: HashMap::new(),
                in_transaction: false,
            })),
            producer,
            max_message_size,
        }
    }

    /// The producer id stamped in every UUID this publisher writes (12 hex digits).
    #[getter]
    fn producer(&self) -> String {
        self.producer.clone()
    }

    /// Publishes `message` to `journal`, committed on its own (readers deliver it as soon
    /// as they read it). Returns its UUID. The append is not awaited: call `flush()`.
    fn publish(
        &self,
        py: Python<'_>,
        journal: &str,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        let message = json_message(py, journal, message, self.max_message_size)?;
        let outcome = self.send(py, journal, message, false)?;
        outcome.map_err(|r| r.into_pyerr(py))
    }

    /// Opens a transaction: a context manager whose `publish` writes messages readers hold
    /// back until it commits (normal exit of the `with` block) and drop if it rolls back
    /// (an exception).
    fn transaction(slf: Py<Self>, py: Python<'_>) -> PyResult<Transaction> {
        let state = slf.get().state.clone();
        let opened = run(py, async move {
            let mut state = state.lock().await;
            !std::mem::replace(&mut state.in_transaction, true)
        })?;
        if !opened {
            return Err(Raised::new(
                "CourantError",
                "a transaction of this publisher is already open (commit or roll it back first)",
            )
            .into_pyerr(py));
        }
        Ok(Transaction {
            publisher: slf,
            open: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Waits until everything published so far is acknowledged by the brokers; raises the
    /// first append failure since the last flush.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let state = self.state.clone();
        run(
            py,
            async move { state.lock().await.publisher.flush().await },
        )?
        .map_err(|e| to_py(py, e))
    }

    fn __repr__(&self) -> String {
        format!("Publisher(producer={})", self.producer)
    }
}

impl Publisher {
    /// Publishes one message (CONTINUE_TXN when `in_transaction`); the outer error is an
    /// interrupted wait, the inner one the publish's failure.
    fn send(
        &self,
        py: Python<'_>,
        journal: &str,
        mut message: Message,
        in_transaction: bool,
    ) -> PyResult<Result<String, Raised>> {
        let (client, state, journal) =
            (self.client.clone(), self.state.clone(), journal.to_string());
        run(py, async move {
            let mut state = state.lock().await;
            if state.in_transaction != in_transaction {
                let why = if in_transaction {
                    "the transaction is closed"
                } else {
                    "a transaction is open: publish through it, or commit it first"
                };
                let raised = Raised::new("CourantError", format!("journal {journal}: {why}"));
                return Err(raised.at(&journal, None));
            }
            let state = &mut *state;
            let framing = framing_of(&client, &mut state.framings, &journal)
                .await
                .map_err(|e| crate::errors::classify(&e))?;
            if !matches!(framing, Framing::JsonLines { .. }) {
                let detail = format!(
                    "journal {journal}: its content-type is {}, but this publisher writes JSON \
                     objects ({CONTENT_TYPE_JSON_LINES} journals) only",
                    framing.content_type()
                );
                return Err(Raised::new("FramingError", detail).at(&journal, None));
            }
            let publisher = &mut state.publisher;
            let uuid = if in_transaction {
                publisher
                    .publish_uncommitted(&journal, &framing, &mut message)
                    .await
            } else {
                publisher
                    .publish_committed(&journal, &framing, &mut message)
                    .await
            };
            uuid.map(|u| u.to_string())
                .map_err(|e| crate::errors::classify(&e))
        })
    }

    /// Ends the open transaction (commit or rollback), then waits for its appends.
    fn finish(&self, py: Python<'_>, commit: bool) -> PyResult<Vec<String>> {
        let state = self.state.clone();
        run(py, async move {
            let mut state = state.lock().await;
            state.in_transaction = false;
            let publisher = &mut state.publisher;
            let intents = if commit {
                publisher.commit().await
            } else {
                publisher.rollback().await
            };
            let flushed = publisher.flush().await;
            let journals = intents?.into_iter().map(|i| i.journal).collect();
            flushed.map(|()| journals)
        })?
        .map_err(|e: Error| to_py(py, e))
    }
}

/// A transaction of a `Publisher` (see `Publisher.transaction`).
#[pyclass(module = "courant._courant", name = "Transaction", frozen)]
pub struct Transaction {
    publisher: Py<Publisher>,
    open: std::sync::atomic::AtomicBool,
}

#[pymethods]
impl Transaction {
    /// Publishes `message` to `journal` within the transaction; returns its UUID.
    fn publish(
        &self,
        py: Python<'_>,
        journal: &str,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        if !self.is_open() {
            return Err(Raised::new(
                "ClosedError",
                format!("journal {journal}: the transaction was already committed or rolled back"),
            )
            .at(journal, None)
            .into_pyerr(py));
        }
        let publisher = self.publisher.get();
        let message = json_message(py, journal, message, publisher.max_message_size)?;
        let outcome = publisher.send(py, journal, message, true)?;
        outcome.map_err(|r| r.into_pyerr(py))
    }

    /// Commits: writes an acknowledgement to every journal touched and waits for all the
    /// transaction's appends. Returns the journals acknowledged.
    fn commit(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.close(py)?;
        self.publisher.get().finish(py, true)
    }

    /// Rolls back: writes acknowledgements that make readers drop the transaction's
    /// messages, and waits for the appends. Returns the journals acknowledged.
    fn rollback(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.close(py)?;
        self.publisher.get().finish(py, false)
    }

    /// Whether the transaction is still open.
    #[getter]
    fn is_open(&self) -> bool {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Commits on a normal exit, rolls back on an exception (which then propagates).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.is_open() {
            return Ok(false);
        }
        match exc_type {
            None => self.commit(py)?,
            Some(_) => self.rollback(py)?,
        };
        Ok(false)
    }
}

impl Transaction {
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.open.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Raised::new(
                "ClosedError",
                "the transaction was already committed or rolled back",
            )
            .into_pyerr(py))
        }
    }
}
