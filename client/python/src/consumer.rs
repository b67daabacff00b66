//! `courant.Consumer`: the committed messages of several journals, each delivered once,
//! with a checkpoint to store atomically with what the caller did with them.
//!
//! One task per journal runs the message layer's `ReadCommitted` over a `RetryReader` and
//! hands each message over with the journal's checkpoint as of that message, so the
//! checkpoint Python takes covers exactly the messages it was given, however far the tasks
//! read ahead. A checkpoint is Gazette's `consumer.Checkpoint` protobuf (read-through offsets
//! and producer states per journal); resuming from it reads each journal again from where
//! a pending transaction began, and the producers' acknowledged clocks skip what was
//! delivered before.
//!
//! Lives on: the Python object (the channel's receiving end, the checkpoints of delivered
//! messages) and the runtime (one task per journal, aborted on close or drop).

use crate::client::Client;
use crate::errors::{Raised, to_py};
use crate::framings::{framing_of, to_python};
use crate::runtime::{recv, run, runtime};
use courant_client::message::{Checkpoint, Envelope, Limits, ReadCommitted};
use courant_client::{Error, RetryReader};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Messages read ahead of Python, over all journals.
const READ_AHEAD: usize = 64;

/// What a journal's task hands over.
enum Pumped {
    /// A committed message, and the journal's checkpoint once it is delivered.
    Message(Envelope, Checkpoint),
    /// The end of a non-blocking read, with the journal's final checkpoint.
    End(String, Checkpoint),
    Failed(Error),
}

/// Reads committed messages of journals, each once (see `courant.read_committed`).
///
/// `Consumer(client, journals, checkpoint=None, *, block=True, max_message_size=None)`:
/// iterating yields `courant.Message(value, journal, offset, uuid, end)`; `checkpoint()`
/// returns bytes to store with the effects of the messages so far, and a consumer made
/// with those bytes resumes after them. With `block=False` iteration ends once every
/// journal's write head is reached.
#[pyclass(module = "courant._courant", name = "Consumer")]
pub struct Consumer {
    journals: Vec<String>,
    state: Mutex<State>,
}

struct State {
    rx: Option<mpsc::Receiver<Pumped>>,
    tasks: Vec<JoinHandle<()>>,
    /// Journals whose task has not ended.
    live: usize,
    /// Per journal, the checkpoint as of the last message handed to Python.
    checkpoints: BTreeMap<String, Checkpoint>,
    delivered: u64,
}

impl State {
    fn close(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        self.rx = None;
    }
}

#[pymethods]
impl Consumer {
    #[new]
    #[pyo3(signature = (client, journals, checkpoint = None, *, block = true, max_message_size = None))]
    fn new(
        py: Python<'_>,
        client: PyRef<'_, Client>,
        journals: Vec<String>,
        checkpoint: Option<&[u8]>,
        block: bool,
        max_message_size: Option<usize>,
    ) -> PyResult<Consumer> {
        if journals.is_empty() {
            return Err(Raised::new(
                "InvalidArgumentError",
                "a consumer needs at least one journal",
            )
            .into_pyerr(py));
        }
        let resumed = match checkpoint {
            None => Checkpoint::default(),
            Some(bytes) => Checkpoint::from_proto(bytes).map_err(|e| to_py(py, e))?,
        };
        let client = client.inner.clone();
        let names = journals.clone();
        let framings = run(py, async move {
            let mut cache = HashMap::new();
            let mut out = Vec::new();
            for journal in &names {
                out.push(framing_of(&client, &mut cache, journal).await?);
            }
            Ok::<_, Error>((client, out))
        })?;
        let (client, framings) = framings.map_err(|e| to_py(py, e))?;
        let limits = Limits {
            max_message_size: max_message_size.unwrap_or(Limits::default().max_message_size),
        };
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let mut tasks = Vec::new();
        let mut checkpoints = BTreeMap::new();
        for (journal, framing) in journals.iter().zip(framings) {
            let start = resumed.start_offset(journal);
            let source =
                RetryReader::new(&client, journal, start, block).map_err(|e| to_py(py, e))?;
            let reader =
                ReadCommitted::resume(journal, framing, source, &resumed).with_limits(limits);
            checkpoints.insert(journal.clone(), own_part(&resumed, journal));
            tasks.push(runtime().spawn(pump(reader, tx.clone())));
        }
        Ok(Consumer {
            state: Mutex::new(State {
                rx: Some(rx),
                live: tasks.len(),
                tasks,
                checkpoints,
                delivered: 0,
            }),
            journals,
        })
    }

    /// The journals read.
    #[getter]
    fn journals(&self) -> Vec<String> {
        self.journals.clone()
    }

    /// How many messages were handed out.
    #[getter]
    fn delivered(&self) -> u64 {
        self.state().delivered
    }

    /// The checkpoint covering every message handed out so far (Gazette's
    /// `consumer.Checkpoint` protobuf). Store it in the same transaction as the effects of
    /// those messages; a consumer made with it delivers each later message exactly once.
    fn checkpoint<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let state = self.state();
        let mut merged = Checkpoint::default();
        for part in state.checkpoints.values() {
            merged.merge(part.clone());
        }
        PyBytes::new(py, &merged.to_proto())
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next committed message; waits for one when the consumer blocks.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        loop {
            let Some(mut rx) = self.state().rx.take() else {
                return Ok(None);
            };
            let item = recv(py, &mut rx);
            let mut state = self.state();
            state.rx = Some(rx);
            match item {
                Err(interrupted) => return Err(interrupted),
                Ok(None) => {
                    state.close();
                    return Ok(None);
                }
                Ok(Some(Pumped::Failed(e))) => {
                    state.close();
                    return Err(to_py(py, e));
                }
                Ok(Some(Pumped::End(journal, checkpoint))) => {
                    state.checkpoints.insert(journal, checkpoint);
                    state.live -= 1;
                    if state.live == 0 {
                        state.close();
                        return Ok(None);
                    }
                }
                Ok(Some(Pumped::Message(env, checkpoint))) => {
                    state.checkpoints.insert(env.journal.clone(), checkpoint);
                    state.delivered += 1;
                    drop(state);
                    return message(py, env).map(Some);
                }
            }
        }
    }

    /// Stops reading (the broker streams are closed).
    fn close(&self) {
        self.state().close();
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "Consumer({:?}, delivered={})",
            self.journals,
            self.delivered()
        )
    }
}

impl Consumer {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.state().close();
    }
}

/// The part of `checkpoint` that concerns `journal`.
fn own_part(checkpoint: &Checkpoint, journal: &str) -> Checkpoint {
    let mut own = Checkpoint::default();
    if let Some(source) = checkpoint.sources.get(journal) {
        own.sources.insert(journal.to_string(), source.clone());
    }
    own
}

/// Runs one journal's read-committed reader into the channel.
async fn pump(mut reader: ReadCommitted<RetryReader>, tx: mpsc::Sender<Pumped>) {
    loop {
        let item = match reader.next().await {
            Ok(Some(env)) => {
                let checkpoint = reader.checkpoint();
                Pumped::Message(env, checkpoint)
            }
            Ok(None) => Pumped::End(reader.journal().to_string(), reader.checkpoint()),
            Err(e) => Pumped::Failed(e),
        };
        let last = !matches!(item, Pumped::Message(..));
        if tx.send(item).await.is_err() || last {
            return;
        }
    }
}

/// A delivered message as a `courant.Message` named tuple.
fn message(py: Python<'_>, env: Envelope) -> PyResult<Py<PyAny>> {
    let value = to_python(py, &env.message)?;
    let class = py.import("courant._message")?.getattr("Message")?;
    let args = (value, env.journal, env.begin, env.uuid.to_string(), env.end);
    Ok(class.call1(args)?.unbind())
}
