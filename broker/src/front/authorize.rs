//! Authorization checks that need a core's view of the keyspace: whether a journal is
//! in a token's scope, and the answer to a call whose journal is not.
//!
//! Lives on: the core that runs the call (reads the core's keyspace snapshot).

use crate::auth::Claims;
use crate::core::{Core, msg::FirstRequest};
use protocol::grpc::Outbound;
use protocol::{AppendResponse, FragmentsResponse, ReadResponse, Status};

/// Whether `journal` is visible to `claims`: a journal outside the claims' selector looks
/// absent (Gazette's resolver). A journal not in the keyspace is left to the handler.
pub fn in_scope(core: &Core, claims: &Claims, journal: &str) -> bool {
    let snapshot = core.keyspace.current();
    match snapshot.journals.get(journal) {
        Some(item) => claims.admits(journal, item.spec.labels.as_ref()),
        None => true,
    }
}

/// Answers a journal call whose journal is out of the token's scope as if the journal
/// did not exist: status JOURNAL_NOT_FOUND and a header with an empty Route.
pub async fn answer_out_of_scope(core: &Core, first: &FirstRequest, mut out: Outbound) {
    let snapshot = core.keyspace.current();
    let header = Some(crate::journal::routing::resolver::unrouted_header(
        core, &snapshot,
    ));
    let status = Status::JournalNotFound as i32;
    let sent = match first {
        FirstRequest::Append(_) => {
            out.send(&AppendResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
        FirstRequest::Read(_) => {
            out.send(&ReadResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
        FirstRequest::Fragments(_) => {
            out.send(&FragmentsResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
        FirstRequest::Replicate(_) => {
            out.send(&protocol::ReplicateResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
    };
    out.finish(sent);
}
