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
    match err {
        Error::Rpc { journal, code, .. } => {
            let mut raised = Raised::new(rpc_class(*code), message).at(journal, None);
            raised.0.code = Some(format!("{code:?}"));
            raised
        }
        Error::Call { code, .. } => {
            let mut raised = Raised::new(rpc_class(*code), message);
            raised.0.code = Some(format!("{code:?}"));
            raised
        }
        Error::Status { journal, status } => {
            let class = if status == "JOURNAL_NOT_FOUND" {
                "JournalNotFoundError"
            } else {
                "BrokerError"
            };
            let mut raised = Raised::new(class, message).at(journal, None);
            raised.0.status = Some(status.clone());
            raised
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
            Raised::new(class, message).at(journal, Some(*offset))
        }
        Error::Sequencer {
            journal, offset, ..
        } => Raised::new("CourantError", message).at(journal, Some(*offset)),
        Error::Invalid(_) => Raised::new("InvalidArgumentError", message),
        Error::Io { .. } => Raised::new("TransportError", message),
        Error::AppendUncertain { journal, .. } => {
            Raised::new("AppendUncertainError", message).at(journal, None)
        }
        Error::Fragment {
            journal, offset, ..
        } => Raised::new("FragmentError", message).at(journal, Some(*offset)),
        Error::Protocol {
            journal, offset, ..
        } => Raised::new("ProtocolError", message).at(journal, Some(*offset)),
        Error::RetriesExhausted { elapsed, last, .. } => {
            // The class is the last failure's (an unreachable broker stays a
            // TransportError); the message says how long it was retried.
            let mut raised = classify(last);
            raised.0.message = message;
            raised.0.retried = Some(*elapsed);
            raised
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use courant_client::protocol::grpc::Code;

    fn class_at(err: Error) -> (&'static str, Option<String>, Option<i64>) {
        let raised = classify(&err);
        (raised.0.class, raised.0.journal, raised.0.offset)
    }

    #[test]
    fn every_error_has_its_class_journal_and_offset() {
        let j = || "a/j".to_string();
        let some_j = Some(j());
        let cases = [
            (
                Error::Status {
                    journal: j(),
                    status: "JOURNAL_NOT_FOUND".into(),
                },
                ("JournalNotFoundError", some_j.clone(), None),
            ),
            (
                Error::Status {
                    journal: j(),
                    status: "WRONG_APPEND_OFFSET".into(),
                },
                ("BrokerError", some_j.clone(), None),
            ),
            (
                Error::Rpc {
                    journal: j(),
                    code: Code::Unavailable,
                    message: "down".into(),
                },
                ("TransportError", some_j.clone(), None),
            ),
            (
                Error::Call {
                    call: "List".into(),
                    code: Code::Internal,
                    message: "x".into(),
                },
                ("BrokerError", None, None),
            ),
            (
                Error::Framing {
                    journal: j(),
                    offset: 7,
                    detail: "bad line".into(),
                },
                ("FramingError", some_j.clone(), Some(7)),
            ),
            (
                Error::Framing {
                    journal: j(),
                    offset: 9,
                    detail: "a message of 2000 bytes exceeds the limit of 1024".into(),
                },
                ("MessageTooLargeError", some_j.clone(), Some(9)),
            ),
            (
                Error::Sequencer {
                    journal: j(),
                    offset: 3,
                    detail: "x".into(),
                },
                ("CourantError", some_j.clone(), Some(3)),
            ),
            (
                Error::Invalid("bad".into()),
                ("InvalidArgumentError", None, None),
            ),
            (
                Error::AppendUncertain {
                    journal: j(),
                    bytes: 5,
                    detail: "reset".into(),
                },
                ("AppendUncertainError", some_j.clone(), None),
            ),
            (
                Error::Fragment {
                    journal: j(),
                    offset: 11,
                    location: "file:///f".into(),
                    detail: "gone".into(),
                },
                ("FragmentError", some_j.clone(), Some(11)),
            ),
            (
                Error::Protocol {
                    journal: j(),
                    offset: 12,
                    detail: "behind".into(),
                },
                ("ProtocolError", some_j.clone(), Some(12)),
            ),
        ];
        for (err, want) in cases {
            let text = err.to_string();
            assert_eq!(class_at(err), want, "{text}");
        }
    }

    #[test]
    fn exhausted_retries_keep_the_last_failure_class_and_say_how_long() {
        let last = Error::Rpc {
            journal: "a/j".into(),
            code: Code::Unavailable,
            message: "connection refused".into(),
        };
        let err = Error::RetriesExhausted {
            context: "journal a/j: append".into(),
            elapsed: Duration::from_secs(2),
            last: Box::new(last),
        };
        let raised = classify(&err);
        assert_eq!(raised.0.class, "TransportError");
        assert_eq!(raised.0.retried, Some(Duration::from_secs(2)));
        assert!(
            raised.0.message.contains("still failing after retrying"),
            "{}",
            raised.0.message
        );
    }
}
