//! Turns the client's [`Error`] into the Python exceptions of `courant.errors`, keeping the
//! journal and offset as attributes (they are in the message too).
//!
//! Lives on: values only; the exception classes live in the Python module `courant.errors`.

use courant_client::Error;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::time::Duration;

/// What a Python exception is built from (boxed: it travels in `Result`s).
pub struct Raised(Box<Detail>);

/// The class, message and attributes of a [`Raised`].
pub struct Detail {
    pub class: &'static str,
    pub message: String,
    pub journal: Option<String>,
    pub offset: Option<i64>,
    pub retried: Option<Duration>,
    pub status: Option<String>,
    pub code: Option<String>,
}

impl Raised {
    /// An exception of `class` (a name in `courant.errors`) with `message` only.
    pub fn new(class: &'static str, message: impl Into<String>) -> Raised {
        Raised(Box::new(Detail {
            class,
            message: message.into(),
            journal: None,
            offset: None,
            retried: None,
            status: None,
            code: None,
        }))
    }

    /// The exception concerns `journal` (at `offset`, where known).
    pub fn at(mut self, journal: &str, offset: Option<i64>) -> Raised {
        self.0.journal = Some(journal.to_string());
        self.0.offset = offset;
        self
    }

    /// The Python exception. If `courant.errors` cannot be imported (a broken install),
    /// the import's error is returned instead, which says so.
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self.build(py) {
            Ok(err) => err,
            Err(import_failed) => import_failed,
        }
    }

    fn build(self, py: Python<'_>) -> PyResult<PyErr> {
        let Raised(detail) = self;
        let detail = *detail;
        let class = py.import("courant.errors")?.getattr(detail.class)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("journal", detail.journal)?;
        kwargs.set_item("offset", detail.offset)?;
        kwargs.set_item("retried", detail.retried.map(|d| d.as_secs_f64()))?;
        let value = class.call((detail.message,), Some(&kwargs))?;
        if detail.status.is_some() || detail.code.is_some() {
            value.setattr("status", detail.status)?;
            value.setattr("code", detail.code)?;
        }
        Ok(PyErr::from_value(value))
    }
}

/// The Python exception for a client error.
pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    classify(&err).into_pyerr(py)
}

/// The exception class and attributes of a client error.
pub fn classify(err: &Error) -> Raised {
    let message = err.to_string();
    let mut raised = Raised::new("CourantError", message.clone());
    match err {
        Error::Rpc { journal, code, .. } => {
            raised = Raised::new(rpc_class(*code), message).at(journal, None);
            raised.0.code = Some(format!("{code:?}"));
        }
        Error::Call { code, .. } => {
            raised = Raised::new(rpc_class(*code), message);
            raised.0.code = Some(format!("{code:?}"));
        }
        Error::Status { journal, status } => {
            let class = if status == "JOURNAL_NOT_FOUND" {
                "JournalNotFoundError"
            } else {
                "BrokerError"
            };
            raised = Raised::new(class, message).at(journal, None);
            raised.0.status = Some(status.clone());
        }
        Error::Framing {
            journal,
            offset,
            detail,
        } => {
            let class = if is_too_large(detail) {
                "MessageTooLargeError"
            } else {
                "FramingError"
            };
            raised = Raised::new(class, message).at(journal, Some(*offset));
        }
        Error::Invalid(_) => raised = Raised::new("InvalidArgumentError", message),
        Error::Io { .. } => raised = Raised::new("TransportError", message),
        Error::AppendUncertain { journal, .. } => {
            raised = Raised::new("AppendUncertainError", message).at(journal, None);
        }
        Error::Fragment {
            journal, offset, ..
        } => raised = Raised::new("FragmentError", message).at(journal, Some(*offset)),
        Error::Protocol {
            journal, offset, ..
        } => raised = Raised::new("ProtocolError", message).at(journal, Some(*offset)),
        Error::RetriesExhausted { elapsed, last, .. } => {
            // The class is the last failure's (an unreachable broker stays a
            // TransportError), the message says how long it was retried.
            raised = classify(last);
            raised.0.message = message;
            raised.0.retried = Some(*elapsed);
        }
        #[allow(unreachable_patterns)]
        _ => {}
    }
    raised
}

/// gRPC failures that mean the broker was not reached are transport errors.
fn rpc_class(code: courant_client::protocol::grpc::Code) -> &'static str {
    use courant_client::protocol::grpc::Code;
    match code {
        Code::Unavailable | Code::DeadlineExceeded => "TransportError",
        Code::InvalidArgument => "InvalidArgumentError",
        _ => "BrokerError",
    }
}

/// Whether a framing failure is an oversized message (the framing's wording).
fn is_too_large(detail: &str) -> bool {
    let d = detail.to_ascii_lowercase();
    d.contains("too large") || d.contains("exceeds") || d.contains("larger than")
}
