//! `courant.Reader`: a journal read as an iterator of `bytes` chunks. A task on the
//! runtime pumps the Rust `RetryReader` into a small channel; Python's `__next__` takes
//! from it without the GIL. Closing (or dropping) the reader aborts the task, which ends
//! the broker stream.
//!
//! Lives on: the Python object (the channel's receiving end, the last offsets) and the
//! runtime (the pump task and its reader).

use crate::errors::to_py;
use crate::runtime::{recv, runtime};
use bytes::Bytes;
use courant_client::{Error, RetryReader};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Chunks read ahead of Python.
const READ_AHEAD: usize = 4;

/// What the pump hands over: a chunk with its offset, or the read's failure.
type Item = Result<(i64, Bytes), Error>;

/// A read of one journal (see `Client.read`): an iterator of `bytes` chunks and a
/// context manager that closes the broker stream.
#[pyclass(module = "courant._courant", name = "Reader")]
pub struct Reader {
    journal: String,
    state: Mutex<State>,
}

struct State {
    rx: Option<mpsc::Receiver<Item>>,
    task: Option<JoinHandle<()>>,
    /// The offset after the last chunk handed to Python.
    offset: i64,
    /// The offset of the last chunk's first byte.
    chunk_offset: i64,
}

impl Reader {
    /// Starts pumping `reader`.
    pub fn start(mut reader: RetryReader) -> Reader {
        let journal = reader.journal().to_string();
        let offset = reader.offset();
        let (tx, rx) = mpsc::channel::<Item>(READ_AHEAD);
        let task = runtime().spawn(async move {
            loop {
                let item = match reader.next_chunk().await {
                    Ok(Some(chunk)) => Ok(chunk),
                    Ok(None) => return,
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        Reader {
            journal,
            state: Mutex::new(State {
                rx: Some(rx),
                task: Some(task),
                offset,
                chunk_offset: offset,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.rx = None;
    }
}

#[pymethods]
impl Reader {
    /// The journal being read.
    #[getter]
    fn journal(&self) -> String {
        self.journal.clone()
    }

    /// The offset after the last chunk returned (where a new read would resume).
    #[getter]
    fn offset(&self) -> i64 {
        self.state().offset
    }

    /// The journal offset of the last chunk's first byte (past the previous chunk's end
    /// when the journal's offsets jumped).
    #[getter]
    fn chunk_offset(&self) -> i64 {
        self.state().chunk_offset
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next chunk of the journal's bytes.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        // The receiver leaves the state while waiting, so `close` from another thread
        // is not blocked behind the wait.
        let Some(mut rx) = self.state().rx.take() else {
            return Ok(None);
        };
        let item = recv(py, &mut rx);
        let mut state = self.state();
        match item {
            Err(interrupted) => {
                state.rx = Some(rx);
                Err(interrupted)
            }
            Ok(None) => {
                state.close();
                Ok(None)
            }
            Ok(Some(Err(e))) => {
                state.close();
                Err(to_py(py, e))
            }
            Ok(Some(Ok((offset, bytes)))) => {
                if state.task.is_some() {
                    state.rx = Some(rx);
                }
                state.chunk_offset = offset;
                state.offset = offset + bytes.len() as i64;
                Ok(Some(PyBytes::new(py, &bytes)))
            }
        }
    }

    /// Ends the read (the broker stream is closed). Reading on returns nothing.
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
        format!("Reader({:?}, offset={})", self.journal, self.offset())
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.state().close();
    }
}
