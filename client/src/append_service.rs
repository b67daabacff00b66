//! [`AppendService`] (Go's `client.AppendService`): many writers' records batched per
//! journal into one append. Per journal, one append is in flight while the next batch
//! gathers, in one growing buffer, everything writers enqueue meanwhile (pipelining), up to
//! [`MAX_BATCH`] bytes a batch; buffered bytes per journal are bounded (enqueue waits:
//! back-pressure); a journal's records are appended in the order they were enqueued, so
//! each writer's order is kept.
//!
//! Every enqueue returns an [`AppendTicket`] resolved with the `[begin, end)` offsets of
//! the append that carried it; all tickets of one batch share its one outcome. An append
//! that fails is not retried beyond what [`Client::append_with`] retries safely; its
//! tickets, and those queued behind it at that moment, get the error, so no writer sees a
//! later record committed after an earlier one failed.
//!
//! Lives on: one tokio task per journal (spawned on first use, ended once the service is
//! dropped and its queue is appended); each journal's queue is behind its own mutex, and
//! the service's map of journals behind another.

use crate::Error;
use crate::client::Client;
use crate::message::{AppendOutcome, AppendTicket, Appender};
use bytes::{Bytes, BytesMut};
use protocol::AppendRequest;
use protocol::validate::validate_journal_name;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Default bound of buffered bytes per journal.
pub const DEFAULT_MAX_BUFFERED: usize = 8 << 20;
/// A batch closes once it holds this many bytes (a larger single record goes alone).
pub const MAX_BATCH: usize = 4 << 20;
/// A new batch's first allocation: room for many small records before it grows.
const BATCH_CAPACITY: usize = 64 << 10;

/// Batches appends per journal: see the module documentation.
pub struct AppendService {
    client: Client,
    max_buffered: usize,
    journals: Mutex<HashMap<String, Arc<Journal>>>,
}

/// One journal's queue, shared by its writers and its task.
struct Journal {
    name: String,
    queue: Mutex<Queue>,
    /// Wakes the task: a batch was queued, or the service was dropped.
    wake: Notify,
    /// Wakes writers waiting for room in the buffer.
    room: Notify,
}

#[derive(Default)]
struct Queue {
    /// Batches waiting for their append, oldest first; writers add to the last one.
    batches: VecDeque<Batch>,
    /// Bytes queued or in flight.
    buffered: usize,
    /// The task waits for a batch (and needs a wake-up).
    idle: bool,
    /// The service was dropped: the task ends once the queue is empty.
    closed: bool,
}

/// The content of one future append and the outcome its tickets share.
struct Batch {
    content: BytesMut,
    outcome: AppendOutcome,
}

impl AppendService {
    /// A service appending through `client`, buffering at most
    /// [`DEFAULT_MAX_BUFFERED`] bytes per journal.
    pub fn new(client: &Client) -> AppendService {
        AppendService::with_max_buffered(client, DEFAULT_MAX_BUFFERED)
    }

    /// A service buffering at most `max_buffered` bytes per journal (in flight included).
    pub fn with_max_buffered(client: &Client, max_buffered: usize) -> AppendService {
        AppendService {
            client: client.clone(),
            max_buffered: max_buffered.max(1),
            journals: Mutex::new(HashMap::new()),
        }
    }

    /// Enqueues `content` for `journal`, waiting while the journal's buffer is full. A
    /// record larger than the buffer is refused.
    pub async fn append(&self, journal: &str, content: Bytes) -> Result<AppendTicket, Error> {
        if content.len() > self.max_buffered {
            return Err(Error::Invalid(format!(
                "journal {journal}: a record of {} bytes is larger than the append service's \
                 buffer of {} bytes per journal",
                content.len(),
                self.max_buffered
            )));
        }
        let journal = self.journal(journal)?;
        loop {
            // Registered before the check, so that room made in between still wakes us.
            let room = journal.room.notified();
            let mut room = std::pin::pin!(room);
            room.as_mut().enable();
            if let Some(ticket) = self.try_push(&journal, &content) {
                return Ok(ticket);
            }
            room.await;
        }
    }

    /// Adds `content` to the journal's last batch if the buffer has room for it.
    fn try_push(&self, journal: &Journal, content: &[u8]) -> Option<AppendTicket> {
        let mut queue = journal.lock();
        if queue.buffered + content.len() > self.max_buffered {
            return None;
        }
        queue.buffered += content.len();
        let fits = |b: &Batch| b.content.len() + content.len() <= MAX_BATCH;
        let batch = match queue.batches.back_mut() {
            Some(last) if fits(last) => last,
            _ => {
                queue.batches.push_back(Batch {
                    content: BytesMut::with_capacity(content.len().max(BATCH_CAPACITY)),
                    outcome: AppendOutcome::new(&journal.name),
                });
                queue.batches.back_mut()?
            }
        };
        batch.content.extend_from_slice(content);
        let ticket = batch.outcome.ticket();
        if std::mem::take(&mut queue.idle) {
            journal.wake.notify_one();
        }
        Some(ticket)
    }

    /// The journal's queue, its task started on first use.
    fn journal(&self, journal: &str) -> Result<Arc<Journal>, Error> {
        let mut journals = self.journals.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(j) = journals.get(journal) {
            return Ok(j.clone());
        }
        validate_journal_name(journal)
            .map_err(|e| Error::Invalid(format!("journal {journal:?}: invalid name: {e}")))?;
        let j = Arc::new(Journal {
            name: journal.to_string(),
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            room: Notify::new(),
        });
        tokio::spawn(serve(self.client.clone(), j.clone()));
        journals.insert(journal.to_string(), j.clone());
        Ok(j)
    }
}

impl Drop for AppendService {
    /// Each journal's task appends what is queued, then ends.
    fn drop(&mut self) {
        let journals = self.journals.get_mut().unwrap_or_else(|p| p.into_inner());
        for journal in journals.values() {
            journal.lock().closed = true;
            journal.wake.notify_one();
        }
    }
}

impl Appender for AppendService {
    fn enqueue(
        &self,
        journal: &str,
        content: Bytes,
    ) -> impl Future<Output = Result<AppendTicket, Error>> + Send {
        self.append(journal, content)
    }
}

impl Journal {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The oldest batch, or `None` once the service is dropped and nothing is queued.
    async fn next_batch(&self) -> Option<Batch> {
        loop {
            {
                let mut queue = self.lock();
                if let Some(batch) = queue.batches.pop_front() {
                    return Some(batch);
                }
                if queue.closed {
                    return None;
                }
                queue.idle = true;
            }
            // A wake-up sent before this wait is kept by the Notify, so none is lost.
            self.wake.notified().await;
        }
    }

    /// Releases `bytes` of the buffer and wakes the writers waiting for room.
    fn release(&self, bytes: usize) {
        self.lock().buffered -= bytes;
        self.room.notify_waiters();
    }

    /// Fails every queued batch: an earlier append failed with `err`.
    fn fail_queued(&self, err: &Error) {
        let failed: Vec<Batch> = self.lock().batches.drain(..).collect();
        let bytes = failed.iter().map(|b| b.content.len()).sum();
        for batch in failed {
            batch.outcome.resolve(Err(Error::Invalid(format!(
                "journal {}: not appended, because an earlier append failed: {err}",
                self.name
            ))));
        }
        self.release(bytes);
    }
}

/// Appends `journal`'s batches, one at a time, until the service is dropped.
async fn serve(client: Client, journal: Arc<Journal>) {
    loop {
        // Writers running on this thread get a turn to add to the batch before it closes.
        tokio::task::yield_now().await;
        let Some(batch) = journal.next_batch().await else {
            return;
        };
        let bytes = batch.content.len();
        let req = AppendRequest {
            journal: journal.name.clone(),
            ..Default::default()
        };
        match client.append_with(req, vec![batch.content.freeze()]).await {
            Ok(resp) => {
                let commit = resp.commit.unwrap_or_default();
                batch.outcome.resolve(Ok((commit.begin, commit.end)));
            }
            Err(err) => {
                journal.fail_queued(&err);
                batch.outcome.resolve(Err(err));
            }
        }
        journal.release(bytes);
    }
}
