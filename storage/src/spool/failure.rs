//! Why a spool's sync (or a core's commit log) failed, kept so that every later waiter gets
//! the same error: a failed sync is never retried (see [`super::durable`]).
//!
//! Lives on: the owner core of the gate or log holding it (a plain value).

use std::path::PathBuf;

use crate::StorageError;

/// Why a gate failed, kept to answer every later waiter.
#[derive(Clone)]
pub(crate) struct Failure {
    path: PathBuf,
    /// The OS error, when the failure had one.
    code: Option<i32>,
    kind: std::io::ErrorKind,
    text: String,
}

impl Failure {
    pub(crate) fn of(err: &StorageError) -> Failure {
        match err {
            StorageError::Io { path, source, .. } => Failure {
                path: path.clone(),
                code: source
                    .raw_os_error()
                    .or_else(|| os_code_in(&source.to_string())),
                kind: source.kind(),
                // Keeps "(os error N)" in the text, which the broker's messages look for.
                text: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
                    None => source.to_string(),
                },
            },
            other => Failure {
                path: PathBuf::new(),
                code: None,
                kind: std::io::ErrorKind::Other,
                text: other.to_string(),
            },
        }
    }

    pub(crate) fn error(&self) -> StorageError {
        let source = match self.code {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(self.kind, self.text.clone()),
        };
        StorageError::io("syncing", &self.path, source)
    }
}

/// The `N` of "(os error N)" in an error's text (glommio wraps the OS error in its own).
fn os_code_in(text: &str) -> Option<i32> {
    let at = text.rfind("(os error ")?;
    text[at + 10..].split(')').next()?.parse().ok()
}
