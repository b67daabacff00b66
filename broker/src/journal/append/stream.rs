//! Streaming the client's content (Gazette's onStreamContent): each chunk is checked, paced
//! by the journal's max append rate and the broker's min append rate, sent to the peers
//! and written to the spool, until the empty commit chunk and EOF. The per-chunk decisions
//! are pure functions.
//!
//! Lives on: the journal's owner core, writing the spool the append holds.

use super::Held;
use super::sync::storage_err;
use crate::core::Core;
use crate::core::call::CallIn;
use crate::journal::flow::MinRate;
use protocol::grpc::{Code, RpcError};
use protocol::validate::Validate;
use protocol::{AppendRequest, JournalSpec, Sha1Sum};
use std::rc::Rc;
use storage::Summer;

/// What the content stream works with.
pub(super) struct StreamCtx<'a> {
    pub core: &'a Rc<Core>,
    pub journal: &'a str,
    pub spec: &'a JournalSpec,
    /// The journal takes content and the request is an ordinary append.
    pub may_append: bool,
}

/// What a finished stream leaves for the commit and the reply.
#[derive(Debug, Default)]
pub(super) struct Record {
    /// The offset of the client's first byte.
    pub begin: i64,
    /// Bytes received.
    pub appended: i64,
    pub total_chunks: i64,
    pub delayed_chunks: i64,
    /// SHA-1 over the client's bytes only (of "" for an empty append, as in Gazette).
    pub sum: Option<Sha1Sum>,
    /// The committed fragment's codec and the journal's registers after the commit.
    pub codec: i32,
    pub registers: protocol::LabelSet,
    /// A content chunk came that the journal or the request's mode does not allow.
    pub not_allowed: bool,
}

/// What to do with a chunk.
#[derive(Debug, PartialEq)]
pub(super) enum ChunkStep {
    /// The empty commit chunk: only EOF may follow.
    Commit,
    /// Content for a journal (or a suspension control) that takes none.
    Refuse,
    /// Content to write.
    Write,
}

/// The client's EOF: it must follow the commit chunk.
pub(super) fn at_eof(committing: bool) -> Result<(), RpcError> {
    if committing {
        Ok(())
    } else {
        Err(RpcError::unknown("append stream: unexpected EOF"))
    }
}

/// A chunk of the stream, after `committing` (the commit chunk was seen).
pub(super) fn on_chunk(
    committing: bool,
    chunk: &AppendRequest,
    may_append: bool,
) -> Result<ChunkStep, RpcError> {
    if committing {
        return Err(RpcError::unknown(
            "append stream: expected EOF after empty Content chunk",
        ));
    }
    chunk_is_content(chunk)?;
    Ok(if chunk.content.is_empty() {
        ChunkStep::Commit
    } else if !may_append {
        ChunkStep::Refuse
    } else {
        ChunkStep::Write
    })
}

/// Streams the client's chunks into the spool and the pipeline, filling `record`.
pub(super) async fn stream(
    cx: &StreamCtx<'_>,
    held: &mut Held<'_>,
    input: &mut CallIn,
    record: &mut Record,
) -> Result<(), RpcError> {
    *record = Record {
        begin: held.spool.fragment().end,
        ..Record::default()
    };
    let mut summer = Summer::new();
    let mut min_rate = MinRate::new(cx.core.cfg.min_append_rate);
    let mut committing = false;
    loop {
        let Some(chunk) = min_rate.recv(input).await.map_err(with_context)? else {
            at_eof(committing)?;
            break;
        };
        record.total_chunks += 1;
        match on_chunk(committing, &chunk, cx.may_append)? {
            ChunkStep::Commit => committing = true,
            ChunkStep::Refuse => {
                record.not_allowed = true;
                return Ok(());
            }
            ChunkStep::Write => {
                if let Some(wait) =
                    held.replica
                        .max_rate_wait(cx.core, cx.spec, chunk.content.len())
                {
                    record.delayed_chunks += 1;
                    glommio::timer::sleep(wait).await;
                }
                min_rate.on_bytes(chunk.content.len());
                write(cx, held, &chunk.content, record.appended, &mut summer).await?;
                record.appended += chunk.content.len() as i64;
            }
        }
    }
    record.sum = Some(protocol::sum::sum_from_bytes(&summer.digest()));
    record.codec = held.spool.fragment().compression_codec;
    record.registers = held.spool.registers().clone();
    Ok(())
}

/// Sends a chunk to the peers (at `delta` bytes into this append), then writes it to the
/// spool.
async fn write(
    cx: &StreamCtx<'_>,
    held: &mut Held<'_>,
    content: &bytes::Bytes,
    delta: i64,
    summer: &mut Summer,
) -> Result<(), RpcError> {
    held.pipeline()
        .content(cx.core, cx.journal, content, delta)
        .await?;
    held.spool
        .write_summing(content, Some(summer))
        .await
        .map_err(storage_err)
}

/// A content chunk may carry nothing but content.
fn chunk_is_content(chunk: &AppendRequest) -> Result<(), RpcError> {
    chunk
        .validate()
        .map_err(|e| RpcError::unknown(format!("append stream: {e}")))?;
    if !chunk.journal.is_empty() {
        return Err(RpcError::unknown("append stream: expected Content chunk"));
    }
    Ok(())
}

/// Errors of the client's stream: Go wraps plain errors with "append stream", while gRPC
/// transport statuses (size limits, compression) pass through as they are.
pub(super) fn with_context(err: RpcError) -> RpcError {
    if err.code != Code::Unknown {
        return err;
    }
    RpcError::new(err.code, format!("append stream: {}", err.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(bytes: &'static [u8]) -> AppendRequest {
        AppendRequest {
            content: bytes::Bytes::from_static(bytes),
            ..Default::default()
        }
    }

    #[test]
    fn eof_must_follow_the_commit_chunk() {
        assert_eq!(at_eof(true), Ok(()));
        assert_eq!(
            at_eof(false),
            Err(RpcError::unknown("append stream: unexpected EOF"))
        );
    }

    #[test]
    fn chunks_write_commit_or_refuse() {
        assert_eq!(on_chunk(false, &content(b"x"), true), Ok(ChunkStep::Write));
        assert_eq!(
            on_chunk(false, &content(b"x"), false),
            Ok(ChunkStep::Refuse)
        );
        assert_eq!(on_chunk(false, &content(b""), false), Ok(ChunkStep::Commit));
        assert_eq!(on_chunk(false, &content(b""), true), Ok(ChunkStep::Commit));
    }

    #[test]
    fn nothing_may_follow_the_commit_chunk() {
        for chunk in [content(b""), content(b"x")] {
            assert_eq!(
                on_chunk(true, &chunk, true),
                Err(RpcError::unknown(
                    "append stream: expected EOF after empty Content chunk"
                ))
            );
        }
    }

    #[test]
    fn a_chunk_naming_a_journal_is_not_content() {
        let chunk = AppendRequest {
            journal: "a/journal".into(),
            ..content(b"")
        };
        assert_eq!(
            on_chunk(false, &chunk, true),
            Err(RpcError::unknown("append stream: expected Content chunk"))
        );
    }

    #[test]
    fn an_invalid_chunk_fails_with_its_validation_error() {
        let chunk = AppendRequest {
            offset: -1,
            ..content(b"x")
        };
        let err = on_chunk(false, &chunk, true).unwrap_err();
        assert!(err.message.starts_with("append stream: "), "{err:?}");
        assert_ne!(err.message, "append stream: expected Content chunk");
    }

    #[test]
    fn stream_errors_say_append_stream_unless_they_are_transport_statuses() {
        let plain = with_context(RpcError::unknown("broken pipe"));
        assert_eq!(plain, RpcError::unknown("append stream: broken pipe"));
        let sized = RpcError::new(Code::ResourceExhausted, "too large");
        assert_eq!(with_context(sized.clone()), sized);
    }
}
