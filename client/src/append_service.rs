//! [`AppendService`] (Go's `client.AppendService`): many writers' records batched per
//! journal into one append. Per journal, one append is in flight while the next batch
//! gathers what writers enqueue meanwhile (pipelining); buffered bytes per journal are
//! bounded (enqueue waits: back-pressure); a journal's records are appended in the order
//! they were enqueued, so each writer's order is kept.
//!
//! Every enqueue returns an [`AppendTicket`] resolved with the `[begin, end)` offsets of
//! the append that carried it. An append that fails is not retried beyond what
//! [`Client::append_with`] retries safely; its tickets, and those queued behind it at that
//! moment, get the error, so no writer sees a later record committed after an earlier one
//! failed.
//!
//! Lives on: one tokio task per journal (spawned on first use, ended when the service is
//! dropped); the service's map of journal queues is behind a mutex.

use crate::Error;
use crate::client::Client;
use crate::message::{AppendTicket, Appender};
use bytes::Bytes;
use protocol::AppendRequest;
use protocol::validate::validate_journal_name;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// Default bound of buffered bytes per journal.
pub const DEFAULT_MAX_BUFFERED: usize = 8 << 20;
/// A batch closes once it holds this many bytes (a larger single record goes alone).
const MAX_BATCH: usize = 4 << 20;

/// Batches appends per journal: see the module documentation.
pub struct AppendService {
    client: Client,
    max_buffered: usize,
    queues: Mutex<HashMap<String, Queue>>,
}

#[derive(Clone)]
struct Queue {
    tx: mpsc::UnboundedSender<Pending>,
    budget: Arc<Semaphore>,
}

/// One enqueued record: its bytes, its share of the journal's budget, its ticket.
struct Pending {
    content: Bytes,
    _permit: OwnedSemaphorePermit,
    ack: oneshot::Sender<Result<(i64, i64), Error>>,
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
            max_buffered: max_buffered.clamp(1, Semaphore::MAX_PERMITS),
            queues: Mutex::new(HashMap::new()),
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
        let queue = self.queue(journal)?;
        let permits = u32::try_from(content.len().max(1)).unwrap_or(u32::MAX);
        let permit = queue
            .budget
            .acquire_many_owned(permits)
            .await
            .map_err(|_| {
                Error::Invalid(format!("journal {journal}: the append service stopped"))
            })?;
        let (ack, rx) = oneshot::channel();
        let pending = Pending {
            content,
            _permit: permit,
            ack,
        };
        if queue.tx.send(pending).is_err() {
            return Err(Error::Invalid(format!(
                "journal {journal}: the append service stopped"
            )));
        }
        Ok(AppendTicket(rx))
    }

    /// The queue of `journal`, started on first use.
    fn queue(&self, journal: &str) -> Result<Queue, Error> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = queues.get(journal) {
            return Ok(q.clone());
        }
        validate_journal_name(journal)
            .map_err(|e| Error::Invalid(format!("journal {journal:?}: invalid name: {e}")))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Queue {
            tx,
            budget: Arc::new(Semaphore::new(self.max_buffered)),
        };
        tokio::spawn(serve(self.client.clone(), journal.to_string(), rx));
        queues.insert(journal.to_string(), queue.clone());
        Ok(queue)
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

/// Appends `journal`'s records, a batch at a time, until the service is dropped.
async fn serve(client: Client, journal: String, mut rx: mpsc::UnboundedReceiver<Pending>) {
    while let Some(first) = rx.recv().await {
        let mut size = first.content.len();
        let mut batch = vec![first];
        while size < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) if size + p.content.len() <= MAX_BATCH => {
                    size += p.content.len();
                    batch.push(p);
                }
                Ok(p) => {
                    // Too big for this batch: it opens the next one, in order.
                    run(&client, &journal, batch, &mut rx).await;
                    batch = vec![p];
                    size = batch[0].content.len();
                }
                Err(_) => break,
            }
        }
        run(&client, &journal, batch, &mut rx).await;
    }
}

/// Appends one batch and resolves its tickets; on failure also fails what is queued.
async fn run(
    client: &Client,
    journal: &str,
    batch: Vec<Pending>,
    rx: &mut mpsc::UnboundedReceiver<Pending>,
) {
    let chunks: Vec<Bytes> = batch.iter().map(|p| p.content.clone()).collect();
    let req = AppendRequest {
        journal: journal.to_string(),
        ..Default::default()
    };
    match client.append_with(req, chunks).await {
        Ok(resp) => {
            let commit = resp.commit.unwrap_or_default();
            for p in batch {
                let _ = p.ack.send(Ok((commit.begin, commit.end)));
            }
        }
        Err(err) => {
            for p in batch {
                let _ = p.ack.send(Err(err.duplicate()));
            }
            while let Ok(p) = rx.try_recv() {
                let _ = p.ack.send(Err(Error::Invalid(format!(
                    "journal {journal}: not appended, because an earlier append failed: {err}"
                ))));
            }
        }
    }
}
