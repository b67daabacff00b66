//! The crate's one error type.

use std::path::PathBuf;

/// Failures of spool and fragment-file I/O. Expected outcomes of the Gazette
/// protocol (mismatched proposals, offsets not yet available, ...) are not
/// errors of this crate; the broker derives them from spool and index state.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An I/O operation on a file or directory failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An earlier sync failed, so the spool's durability is unknown. Every later call fails with this; the owner must drop the
    /// spool and reopen (recover) it from disk.
    #[error("spool of {journal} is poisoned by an earlier failure: {cause}")]
    Poisoned { journal: String, cause: String },
    /// The journal directory exists but its `JOURNAL` file names another
    /// journal (a collision of the 64-bit name hash, or a foreign directory).
    #[error("spool directory {dir} belongs to journal {found:?}, not {journal:?}")]
    JournalMismatch {
        dir: PathBuf,
        journal: String,
        found: String,
    },
    /// `Spool::roll` to an offset before the spool's committed end.
    #[error("cannot roll spool of {journal} to offset {at}: committed end is {end}")]
    InvalidRoll { journal: String, at: i64, end: i64 },
    /// A read of a fragment file at an offset outside of the fragment.
    #[error("read at offset {offset} outside of fragment beginning at {begin}")]
    InvalidOffset { offset: i64, begin: i64 },
    /// An object name in a fragment store that is not a fragment's content
    /// name (listings skip such objects with a log line).
    #[error("not a fragment name ({name}): {reason}")]
    InvalidName { name: String, reason: String },
}

impl StorageError {
    /// The error as a client may see it: without server paths (e.g. `spool: writing
    /// content: No space left on device`).
    pub fn client_message(&self) -> String {
        match self {
            // The source's own text may name the path too (glommio's errors do).
            StorageError::Io { op, source, .. } => match source.raw_os_error() {
                Some(code) => format!(
                    "{op} a spool file: {}",
                    std::io::Error::from_raw_os_error(code)
                ),
                None => format!("{op} a spool file: {}", source.kind()),
            },
            StorageError::Poisoned { journal, .. } => {
                format!("spool of {journal} is poisoned by an earlier failure")
            }
            StorageError::JournalMismatch { journal, .. } => {
                format!("the spool directory of {journal:?} belongs to another journal")
            }
            other => other.to_string(),
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StorageError;

    #[test]
    fn client_messages_name_no_server_path() {
        let io = StorageError::io(
            "writing",
            "/srv/secret/data/0000.spool",
            std::io::ErrorKind::StorageFull.into(),
        );
        assert!(io.to_string().contains("/srv/secret"));
        let msg = io.client_message();
        assert!(!msg.contains("/srv") && msg.contains("writing"), "{msg}");
        let wrapped = StorageError::io(
            "writing",
            "/srv/secret/x",
            std::io::Error::new(std::io::ErrorKind::StorageFull, "at /srv/secret/x"),
        );
        let msg = wrapped.client_message();
        assert!(!msg.contains("/srv") && msg.contains("storage"), "{msg}");
        let mismatch = StorageError::JournalMismatch {
            dir: "/srv/secret".into(),
            journal: "a/b".into(),
            found: "c/d".into(),
        };
        assert!(!mismatch.client_message().contains("/srv"));
    }
}
