//! The extension's one tokio runtime, and how Python threads wait on it: every wait
//! releases the GIL (`Python::detach`) and wakes up every [`POLL`] to let Python handle
//! signals (Ctrl-C raises `KeyboardInterrupt` even inside a blocking read).
//!
//! Lives on: a process-wide `OnceLock`; the runtime's worker threads are created on first
//! use and live as long as the process.

use pyo3::prelude::*;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

/// How often a waiting Python thread checks for signals.
const POLL: Duration = Duration::from_millis(100);

/// The module's runtime: two worker threads are plenty for a client (the work is I/O).
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("courant-io")
            .enable_all()
            .build()
            .expect("the courant extension could not start its tokio runtime")
    })
}

/// Runs `fut` to completion on the runtime without the GIL. The future runs as a task, so
/// an interrupt (a signal handler raising in Python) abandons the wait, not the task's
/// consistency: the task finishes on its own and its result is dropped.
pub fn run<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut handle = runtime().spawn(fut);
    loop {
        let step = py
            .detach(|| runtime().block_on(async { tokio::time::timeout(POLL, &mut handle).await }));
        match step {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(join)) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "a courant task failed: {join}"
                )));
            }
            Err(_elapsed) => py.check_signals()?,
        }
    }
}

/// Receives the next item of a pump task's channel without the GIL, checking signals
/// between waits; `None` once the task ended and the channel is drained.
pub fn recv<T: Send>(py: Python<'_>, rx: &mut mpsc::Receiver<T>) -> PyResult<Option<T>> {
    loop {
        let step =
            py.detach(|| runtime().block_on(async { tokio::time::timeout(POLL, rx.recv()).await }));
        match step {
            Ok(item) => return Ok(item),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}
