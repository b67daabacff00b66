//! Appends through [`Client`]: one content `Bytes`, several chunks, or a stream of chunks.
//!
//! An append is retried only when the broker certainly did not commit it: it answered
//! with a retryable status (which it sends before taking content), or the call failed
//! before its commit (the final empty chunk) was sent. A transport failure after the
//! commit was sent is [`Error::AppendUncertain`], never retried: the broker may have
//! committed, and a retry would write the content twice.
//!
//! Lives on: the caller's task; the connection and Route state is the client's.

use crate::client::{Client, Dispatch};
use crate::{Error, error::status_name};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use protocol::grpc::{ClientCall, Code, RpcError};
use protocol::method::Method;
use protocol::validate::validate_journal_name;
use protocol::{AppendRequest, AppendResponse, Fragment, Status};

/// Content is sent in messages of at most this size, well under the broker's 4 MiB
/// message limit.
pub const APPEND_CHUNK: usize = 1 << 20;

/// Statuses Gazette's `client.Append` retries: the broker answers them before taking
/// any content.
const RETRIED: [Status; 3] = [
    Status::NotJournalPrimaryBroker,
    Status::NoJournalPrimaryBroker,
    Status::InsufficientJournalBrokers,
];

/// One attempt's failure: retry it, or surface it.
enum Failure {
    Retry(Error),
    Final(Error),
}

impl Client {
    /// Appends `content` to `journal`; returns the committed span (`begin`, `end`, SHA-1).
    pub async fn append(&self, journal: &str, content: Bytes) -> Result<Fragment, Error> {
        let req = AppendRequest {
            journal: journal.to_string(),
            ..Default::default()
        };
        let resp = self.append_with(req, vec![content]).await?;
        Ok(resp.commit.unwrap_or_default())
    }

    /// Appends `chunks` with the options of `req` (registers, offset, suspend), retrying
    /// what is safe to retry. A non-OK status is an [`Error::Status`].
    pub async fn append_with(
        &self,
        req: AppendRequest,
        chunks: Vec<Bytes>,
    ) -> Result<AppendResponse, Error> {
        check_request(&req)?;
        let journal = req.journal.clone();
        let bytes: usize = chunks.iter().map(Bytes::len).sum();
        let mut retry = self.retry();
        loop {
            let failure = match self.append_once(&req, &chunks).await {
                Ok(resp) => return Ok(resp),
                Err(f) => f,
            };
            match failure {
                Failure::Final(e) => return Err(e),
                Failure::Retry(e) => {
                    let what = || format!("journal {journal}: append of {bytes} bytes");
                    retry.wait(what, e).await?
                }
            }
        }
    }

    /// Appends the chunks `content` yields, as one append. A stream cannot be replayed, so
    /// only a failure to reach a broker (before any chunk is taken) is retried.
    pub async fn append_stream<S>(&self, journal: &str, mut content: S) -> Result<Fragment, Error>
    where
        S: Stream<Item = Bytes> + Send + Unpin,
    {
        let req = AppendRequest {
            journal: journal.to_string(),
            ..Default::default()
        };
        check_request(&req)?;
        let mut retry = self.retry();
        let dispatch = loop {
            match self.dispatch(Some(journal), None, true).await {
                Ok(d) => break d,
                Err(e) => {
                    let what = || format!("journal {journal}: append");
                    retry.wait(what, Error::rpc(journal, e)).await?
                }
            }
        };
        let mut call = start(&dispatch, &req)
            .await
            .map_err(|e| Error::rpc(journal, e))?;
        let mut sent_ok = true;
        let mut bytes = 0;
        while sent_ok && let Some(chunk) = content.next().await {
            bytes += chunk.len();
            sent_ok = send_content(&mut call, chunk).await.is_ok();
        }
        let committed = sent_ok && commit(&mut call).await.is_ok();
        match self
            .finish(&dispatch, &req.journal, &mut call, committed, bytes)
            .await
        {
            Ok(resp) => Ok(resp.commit.unwrap_or_default()),
            Err(Failure::Final(e) | Failure::Retry(e)) => Err(e),
        }
    }

    /// One attempt of an append of `chunks`.
    async fn append_once(
        &self,
        req: &AppendRequest,
        chunks: &[Bytes],
    ) -> Result<AppendResponse, Failure> {
        let journal = req.journal.as_str();
        let dispatch = self
            .dispatch(Some(journal), None, true)
            .await
            .map_err(|e| Failure::Retry(Error::rpc(journal, e)))?;
        let mut call = match start(&dispatch, req).await {
            Ok(call) => call,
            Err(e) => {
                self.transport_failed(&dispatch, Some(journal));
                return Err(Failure::Retry(Error::rpc(journal, e)));
            }
        };
        let mut sent_ok = true;
        for chunk in chunks {
            if sent_ok {
                sent_ok = send_content(&mut call, chunk.clone()).await.is_ok();
            }
        }
        // The broker may answer (and reset the stream) before taking everything: then the
        // send fails and its response says why.
        let committed = sent_ok && commit(&mut call).await.is_ok();
        let bytes = chunks.iter().map(Bytes::len).sum();
        self.finish(&dispatch, journal, &mut call, committed, bytes)
            .await
    }

    /// Reads an append's response and classifies its outcome.
    async fn finish(
        &self,
        dispatch: &Dispatch,
        journal: &str,
        call: &mut ClientCall,
        committed: bool,
        bytes: usize,
    ) -> Result<AppendResponse, Failure> {
        let outcome = match call.next::<AppendResponse>().await {
            Ok(Some(resp)) => {
                // The response is the broker's word; a failure after it changes nothing.
                let _ = call.next::<AppendResponse>().await;
                Ok(resp)
            }
            Ok(None) => Err(RpcError::internal("the append ended without a response")),
            Err(e) => Err(e),
        };
        let resp = match outcome {
            Ok(resp) => resp,
            Err(e) => {
                if e.code == Code::Unavailable {
                    self.transport_failed(dispatch, Some(journal));
                }
                return Err(classify_error(journal, e, committed, bytes));
            }
        };
        self.update_route(journal, resp.header.as_ref().and_then(|h| h.route.as_ref()));
        if resp.status == Status::Ok as i32 {
            if resp.commit.is_none() {
                return Err(Failure::Final(Error::Protocol {
                    journal: journal.to_string(),
                    offset: -1,
                    detail: "an OK AppendResponse without its commit".into(),
                }));
            }
            return Ok(resp);
        }
        let err = Error::Status {
            journal: journal.to_string(),
            status: status_name(resp.status),
        };
        // Every non-OK status is answered without committing content.
        if RETRIED.iter().any(|s| *s as i32 == resp.status) {
            return Err(Failure::Retry(err));
        }
        Err(Failure::Final(err))
    }
}

/// A failed call: before the commit was sent, the broker cannot have committed (it
/// rolls back an append that ends without its empty chunk), so transport failures are
/// retried; after, they are uncertain. An error the broker itself sent is final.
fn classify_error(journal: &str, e: RpcError, committed: bool, bytes: usize) -> Failure {
    let transport = e.code == Code::Unavailable || e.code == Code::Cancelled;
    match (transport, committed) {
        (true, false) => Failure::Retry(Error::rpc(journal, e)),
        (true, true) => Failure::Final(Error::AppendUncertain {
            journal: journal.to_string(),
            bytes,
            detail: e.to_string(),
        }),
        (false, _) => Failure::Final(Error::rpc(journal, e)),
    }
}

fn check_request(req: &AppendRequest) -> Result<(), Error> {
    validate_journal_name(&req.journal)
        .map_err(|e| Error::Invalid(format!("journal {:?}: invalid name: {e}", req.journal)))?;
    if !req.content.is_empty() {
        return Err(Error::Invalid(format!(
            "journal {}: the append's first message carries no content; pass content as chunks",
            req.journal
        )));
    }
    Ok(())
}

/// Opens the Append call and sends its first message (no content).
async fn start(dispatch: &Dispatch, req: &AppendRequest) -> Result<ClientCall, RpcError> {
    let mut call = dispatch.channel.call(Method::Append.path()).await?;
    let mut first = req.clone();
    first.content = Bytes::new();
    // A failed send shows in the response; the call itself is still returned.
    let _ = call.sender.send(&first).await;
    Ok(call)
}

/// Sends `chunk` as content messages of at most [`APPEND_CHUNK`] bytes.
async fn send_content(call: &mut ClientCall, mut chunk: Bytes) -> Result<(), RpcError> {
    while !chunk.is_empty() {
        let piece = chunk.split_to(chunk.len().min(APPEND_CHUNK));
        let msg = AppendRequest {
            content: piece,
            ..Default::default()
        };
        call.sender.send(&msg).await?;
    }
    Ok(())
}

/// Sends the empty chunk that asks the broker to commit, and half-closes.
async fn commit(call: &mut ClientCall) -> Result<(), RpcError> {
    call.sender.send(&AppendRequest::default()).await?;
    call.sender.close()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_before_the_commit_are_retried() {
        let unavailable = || RpcError::unavailable("transport: connection reset");
        assert!(matches!(
            classify_error("a/j", unavailable(), false, 3),
            Failure::Retry(_)
        ));
        let Failure::Final(e) = classify_error("a/j", unavailable(), true, 3) else {
            panic!("an append whose commit was sent is never retried");
        };
        let text = e.to_string();
        assert!(
            text.contains("journal a/j") && text.contains("unknown"),
            "{text}"
        );
        assert!(matches!(
            classify_error(
                "a/j",
                RpcError::unknown("append stream: unexpected EOF"),
                false,
                3
            ),
            Failure::Final(Error::Rpc { .. })
        ));
    }

    #[test]
    fn invalid_journal_names_are_refused_before_any_call() {
        let req = AppendRequest {
            journal: "/bad//name".into(),
            ..Default::default()
        };
        let text = check_request(&req).unwrap_err().to_string();
        assert!(
            text.starts_with("journal \"/bad//name\": invalid name"),
            "{text}"
        );
    }
}
