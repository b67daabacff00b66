//! ListFragments through [`Client`]: a journal's fragments (local and persisted), a page
//! at a time or all of them, with signed URLs when asked.
//!
//! Lives on: the caller's task; the connection and Route state is the client's.

use crate::client::Client;
use crate::{Error, error::status_name};
use protocol::grpc::Code;
use protocol::method::Method;
use protocol::validate::validate_journal_name;
use protocol::{FragmentsRequest, FragmentsResponse, Status, fragments_response};
use std::time::Duration;

/// Statuses a ListFragments is retried on: the journal's Route is changing.
const RETRIED: [Status; 3] = [
    Status::NotJournalBroker,
    Status::InsufficientJournalBrokers,
    Status::NoJournalPrimaryBroker,
];

impl Client {
    /// One page of `req.journal`'s fragments, from a member of its Route (retrying
    /// transport failures and Route changes).
    pub async fn list_fragments(&self, req: FragmentsRequest) -> Result<FragmentsResponse, Error> {
        let journal = req.journal.clone();
        validate_journal_name(&journal)
            .map_err(|e| Error::Invalid(format!("journal {journal:?}: invalid name: {e}")))?;
        let what = || format!("journal {journal}: ListFragments");
        let mut retry = self.retry();
        loop {
            let dispatch = match self.dispatch(Some(&journal), None, false).await {
                Ok(d) => d,
                Err(e) => {
                    retry.wait(what, Error::rpc(&journal, e)).await?;
                    continue;
                }
            };
            let resp = dispatch
                .channel
                .unary::<_, FragmentsResponse>(Method::ListFragments.path(), &req)
                .await;
            match resp {
                Ok(resp) if resp.status == Status::Ok as i32 => {
                    let route = resp.header.as_ref().and_then(|h| h.route.as_ref());
                    self.update_route(&journal, route);
                    return Ok(resp);
                }
                Ok(resp) if RETRIED.iter().any(|s| *s as i32 == resp.status) => {
                    let route = resp.header.as_ref().and_then(|h| h.route.as_ref());
                    self.update_route(&journal, route);
                    let err = Error::Status {
                        journal: journal.clone(),
                        status: status_name(resp.status),
                    };
                    retry.wait(what, err).await?;
                }
                Ok(resp) => {
                    return Err(Error::Status {
                        journal: journal.clone(),
                        status: status_name(resp.status),
                    });
                }
                Err(e) if e.code == Code::Unavailable => {
                    self.transport_failed(&dispatch, Some(&journal));
                    retry.wait(what, Error::rpc(&journal, e)).await?;
                }
                Err(e) => return Err(Error::rpc(&journal, e)),
            }
        }
    }

    /// Every fragment of `journal` (all pages), with URLs signed for `signature_ttl` if
    /// given.
    pub async fn fragments(
        &self,
        journal: &str,
        signature_ttl: Option<Duration>,
    ) -> Result<Vec<fragments_response::Fragment>, Error> {
        let mut out = Vec::new();
        let mut req = FragmentsRequest {
            journal: journal.to_string(),
            signature_ttl: signature_ttl.map(|d| prost_types::Duration {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
            ..Default::default()
        };
        loop {
            let resp = self.list_fragments(req.clone()).await?;
            out.extend(resp.fragments);
            if resp.next_page_token == 0 {
                return Ok(out);
            }
            req.next_page_token = resp.next_page_token;
        }
    }
}
