//! In-memory journals: an [`Appender`] and a [`ByteSource`] over shared byte vectors, for
//! tests of the message layer (and of programs built on it) without a broker.
//!
//! Lives on: any thread; journals sit behind one mutex.

use super::{AppendTicket, Appender, ByteSource};
use crate::Error;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Journals held in memory; clones share them.
#[derive(Clone, Debug, Default)]
pub struct MemoryJournals {
    journals: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl MemoryJournals {
    /// A copy of a journal's content.
    pub fn content(&self, journal: &str) -> Vec<u8> {
        self.lock().get(journal).cloned().unwrap_or_default()
    }

    /// The journal's write head.
    pub fn head(&self, journal: &str) -> i64 {
        self.lock().get(journal).map_or(0, |c| c.len() as i64)
    }

    /// Appends raw bytes, as another writer would.
    pub fn append(&self, journal: &str, content: &[u8]) -> (i64, i64) {
        let mut journals = self.lock();
        let buf = journals.entry(journal.to_string()).or_default();
        let begin = buf.len() as i64;
        buf.extend_from_slice(content);
        (begin, buf.len() as i64)
    }

    /// Cuts a journal back to `len` bytes, as a lost append would.
    pub fn truncate(&self, journal: &str, len: usize) {
        if let Some(buf) = self.lock().get_mut(journal) {
            buf.truncate(len);
        }
    }

    /// A non-blocking read of `journal` from `offset`, in chunks of up to `chunk` bytes.
    pub fn source(&self, journal: &str, offset: i64, chunk: usize) -> MemorySource {
        MemorySource {
            journals: self.clone(),
            journal: journal.to_string(),
            offset,
            chunk: chunk.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.journals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Appender for MemoryJournals {
    async fn enqueue(&self, journal: &str, content: Bytes) -> Result<AppendTicket, Error> {
        Ok(AppendTicket::ready(Ok(self.append(journal, &content))))
    }
}

/// A read of a [`MemoryJournals`] journal.
#[derive(Debug)]
pub struct MemorySource {
    journals: MemoryJournals,
    journal: String,
    offset: i64,
    chunk: usize,
}

impl ByteSource for MemorySource {
    async fn next_chunk(&mut self) -> Result<Option<(i64, Bytes)>, Error> {
        let journals = self.journals.lock();
        let content = journals.get(&self.journal).map_or(&[][..], Vec::as_slice);
        let from = usize::try_from(self.offset)
            .unwrap_or(usize::MAX)
            .min(content.len());
        let to = (from + self.chunk).min(content.len());
        if from == to {
            return Ok(None);
        }
        let chunk = Bytes::copy_from_slice(&content[from..to]);
        let offset = self.offset;
        self.offset = to as i64;
        Ok(Some((offset, chunk)))
    }
}

/// A source that yields given chunks, offsets and all (to test offset jumps and errors).
#[derive(Debug, Default)]
pub struct ChunkSource {
    pub chunks: std::collections::VecDeque<Result<(i64, Bytes), Error>>,
}

impl ByteSource for ChunkSource {
    async fn next_chunk(&mut self) -> Result<Option<(i64, Bytes)>, Error> {
        self.chunks.pop_front().transpose()
    }
}
