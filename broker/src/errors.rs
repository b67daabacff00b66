//! What clients are told when something fails inside the broker: Gazette's gRPC code and a
//! message they can act on, never a server path or file descriptor (those go to the
//! broker's log, at the point of failure, with everything needed to investigate).
//!
//! * [`storage_err`]: spool and fragment-file failures (a full disk, an I/O error) answer
//!   UNKNOWN, as Gazette's do, with the operation and the OS error ("No space left on
//!   device (os error 28)"), not glommio's `op: Writing path: Some(…) with fd: Some(26)`.
//! * [`peer_err`]: a failed replication to a peer keeps the peer call's code when it is
//!   UNAVAILABLE (a broker that is down or unreachable, as Gazette's gRPC dial answers), so
//!   clients that retry on UNAVAILABLE do, and says what to check.
//! * [`validate_append`]: an Append naming journal `""` answers the invalid-name error
//!   Read answers, not JOURNAL_NOT_FOUND.
//!
//! * [`BrokerError`]: a failure inside the broker as its layers report it to each other
//!   (now: the control thread's answers to the cores); `From<BrokerError> for RpcError` is
//!   the one place where each kind becomes a gRPC status.
//!
//! Lives on: pure functions, called on whichever core handles the call.

use protocol::grpc::{Code, RpcError};

/// A failure inside the broker, as one layer reports it to another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The control thread is gone (the process is exiting): nothing reached it.
    #[error("the control thread has stopped")]
    ControlStopped,
    /// The control thread took a request but dropped it without an answer.
    #[error("the control thread dropped a {0}")]
    ControlDropped(&'static str),
    /// The keyspace or a fragment store refused or failed the request: its own message,
    /// which names the key, journal or store.
    #[error("{0}")]
    Control(String),
}

impl From<BrokerError> for RpcError {
    /// Every control-thread failure answers UNKNOWN with its message, as Gazette's broker
    /// answers an etcd or store error it does not recognise.
    fn from(err: BrokerError) -> RpcError {
        match err {
            BrokerError::ControlStopped | BrokerError::ControlDropped(_) => {
                RpcError::unknown(err.to_string())
            }
            BrokerError::Control(message) => RpcError::unknown(message),
        }
    }
}
use storage::StorageError;

/// The OS-level cause of an I/O error, without paths: the innermost `io::Error` that has
/// an OS error code, else the error's kind.
fn os_cause(err: &std::io::Error) -> String {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(code) = io.raw_os_error()
        {
            return std::io::Error::from_raw_os_error(code).to_string();
        }
        next = e.source();
    }
    // glommio wraps the OS error in its own text (with the path and fd): find the OS
    // error code in the text instead.
    let text = err.to_string();
    if let Some(at) = text.rfind("(os error ")
        && let Some(code) = text[at + 10..]
            .split(')')
            .next()
            .and_then(|c| c.parse::<i32>().ok())
    {
        return std::io::Error::from_raw_os_error(code).to_string();
    }
    err.kind().to_string()
}

/// A spool or fragment-file failure as clients see it. The full error (with paths) is
/// logged here.
pub fn storage_err(err: StorageError) -> RpcError {
    tracing::warn!(error = %err, "spool failure");
    RpcError::unknown(storage_message(&err))
}

/// The client-facing text of a storage error: no paths, no file descriptors.
pub fn storage_message(err: &StorageError) -> String {
    match err {
        StorageError::Io { op, source, .. } => format!(
            "spool: {op} failed: {} (details in the broker log)",
            os_cause(source)
        ),
        StorageError::Poisoned { journal, .. } => format!(
            "spool of {journal} is unusable after an earlier write failure; the broker \
             recovers it on the next Append (details in the broker log)"
        ),
        StorageError::JournalMismatch { journal, .. } => {
            format!("spool of {journal}: its directory belongs to another journal")
        }
        other => format!("spool: {other}"),
    }
}

/// A failed replication to peer `peer` (`what` is the step, if known). UNAVAILABLE from
/// the peer call (dialing a down broker, a reset connection) stays UNAVAILABLE, as in
/// Gazette; other failures are UNKNOWN, as Gazette's pipeline errors are.
pub fn peer_err(peer: &str, what: Option<&str>, e: RpcError) -> RpcError {
    let step = what.map(|w| format!(" ({w})")).unwrap_or_default();
    if e.code == Code::Unavailable {
        return RpcError::unavailable(format!(
            "replication to {peer}{step}: {}: the peer broker is down or unreachable; \
             the append can be retried (it is re-routed once the peer's assignment moves), \
             and the peer's process and advertised endpoint should be checked",
            e.message
        ));
    }
    RpcError::unknown(format!("replication to {peer}{step}: {}", e.message))
}

/// Gazette's validation of an Append's first request, plus the empty journal name that
/// Read refuses as invalid (Gazette's `Journal.Validate`).
pub fn validate_append(req: &protocol::AppendRequest) -> Result<(), RpcError> {
    use protocol::validate::Validate;
    if req.journal.is_empty() {
        let read = protocol::ReadRequest::default();
        let err = read
            .validate()
            .err()
            .map_or_else(|| "Journal: invalid length".to_string(), |e| e.to_string());
        return Err(RpcError::unknown(err));
    }
    req.validate().map_err(|e| RpcError::unknown(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_failures_answer_unknown_with_their_message() {
        let cases = [
            (
                BrokerError::ControlStopped,
                "the control thread has stopped",
            ),
            (
                BrokerError::ControlDropped("keyspace transaction"),
                "the control thread dropped a keyspace transaction",
            ),
            (
                BrokerError::Control("etcd: request timed out".into()),
                "etcd: request timed out",
            ),
        ];
        for (err, message) in cases {
            assert_eq!(err.to_string(), message);
            let rpc = RpcError::from(err);
            assert_eq!((rpc.code, rpc.message.as_str()), (Code::Unknown, message));
        }
    }

    #[test]
    fn a_full_disk_answers_without_paths_or_fds() {
        // As the spool sees it through glommio: the OS error wrapped in glommio's text.
        let glommio_like = std::io::Error::other(
            "op: Writing path: Some(\"/srv/courant/data/spool/00ab/0000000000000000.spool\") \
             with fd: Some(26): No space left on device (os error 28)",
        );
        let err = StorageError::Io {
            op: "writing",
            path: "/srv/courant/data/spool/00ab/0000000000000000.spool".into(),
            source: glommio_like,
        };
        let rpc = storage_err(err);
        assert_eq!(rpc.code, Code::Unknown);
        assert!(
            rpc.message.contains("No space left on device"),
            "{}",
            rpc.message
        );
        assert!(!rpc.message.contains("/srv"), "{}", rpc.message);
        assert!(!rpc.message.contains("fd"), "{}", rpc.message);

        // A plain OS error.
        let err = StorageError::Io {
            op: "syncing",
            path: "/srv/x".into(),
            source: std::io::Error::from_raw_os_error(5),
        };
        let msg = storage_message(&err);
        assert!(msg.contains("Input/output error"), "{msg}");
        assert!(!msg.contains("/srv"), "{msg}");

        let err = StorageError::JournalMismatch {
            dir: "/srv/x".into(),
            journal: "a/b".into(),
            found: "c".into(),
        };
        assert!(!storage_message(&err).contains("/srv"));
        let err = StorageError::Poisoned {
            journal: "a/b".into(),
            cause: "writing /srv/x: boom".into(),
        };
        assert!(!storage_message(&err).contains("/srv"));
    }

    #[test]
    fn an_unreachable_peer_is_unavailable() {
        let e = peer_err(
            "zone#b",
            None,
            RpcError::unavailable("dialing peer http://127.0.0.1:1: Connection refused"),
        );
        assert_eq!(e.code, Code::Unavailable);
        assert!(e.message.contains("replication to zone#b"), "{}", e.message);
        assert!(e.message.contains("down or unreachable"), "{}", e.message);
        let e = peer_err("zone#b", Some("sending"), RpcError::unknown("boom"));
        assert_eq!(e.code, Code::Unknown);
        assert_eq!(e.message, "replication to zone#b (sending): boom");
    }

    #[test]
    fn an_append_to_the_empty_journal_is_an_invalid_name() {
        let err = validate_append(&protocol::AppendRequest::default()).unwrap_err();
        assert_eq!(err.code, Code::Unknown);
        assert!(
            err.message.starts_with("Journal: invalid length"),
            "{}",
            err.message
        );
        let ok = validate_append(&protocol::AppendRequest {
            journal: "a/bcd".into(),
            ..Default::default()
        });
        assert!(ok.is_ok(), "{ok:?}");
    }
}
