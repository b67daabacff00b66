//! Gazette's [`Publisher`] (Go `message/publisher.go`): stamps each message with a UUID of
//! its producer and ticking clock, frames it for its journal, and hands it to an
//! [`Appender`] without waiting for the broker; [`Publisher::flush`] waits for all of it.
//!
//! Transactions, as Gazette's consumers run them: CONTINUE_TXN messages
//! ([`Publisher::publish_uncommitted`]) to any journals, then one ACK_TXN per journal touched
//! ([`Publisher::build_ack_intents`], written with [`Publisher::write_intents`], or both at
//! once with [`Publisher::commit`]). A consumer stores the ACK intents in its checkpoint before
//! writing them, so that it writes them again after a crash.
//!
//! A rollback ([`Publisher::rollback`]) writes to each journal touched an ACK_TXN carrying the
//! clock readers already hold as the producer's last acknowledged one: Go's sequencer treats
//! an ACK at that clock as `QueueAckRollback` and drops the pending messages. (A lower clock
//! would also roll back, but would lower the readers' bound and weaken exactly-once.) It is
//! what a Gazette consumer does when it re-writes the ACK intents of its last checkpoint.
//!
//! Lives on: the task that publishes; methods take `&mut self`, since a clock tick and the
//! enqueue of its message must not interleave with another's (readers drop a CONTINUE_TXN
//! whose clock is below one already read).

use super::framing::{Framing, Message};
use super::uuid::{Clock, Flags, ProducerId, Uuid};
use super::{AppendTicket, Appender};
use crate::Error;
use bytes::Bytes;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// A framed ACK_TXN message to write to a journal (Go `AckIntent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckIntent {
    pub journal: String,
    pub intent: Bytes,
}

/// A journal touched by the current transaction.
#[derive(Debug)]
struct Touched {
    journal: String,
    framing: Framing,
    /// The first message published to it, whose shape an acknowledgement copies (CSV keeps
    /// the field count).
    template: Message,
    first_clock: Clock,
}

/// Tickets held before resolved ones are swept out.
const SWEEP_TICKETS: usize = 4096;
/// How many of the latest tickets a new one is compared with, to share an append's.
const RECENT_TICKETS: usize = 16;

/// Publishes messages of one producer.
pub struct Publisher<A: Appender> {
    appender: A,
    producer: ProducerId,
    clock: Clock,
    auto_update: bool,
    touched: Vec<Touched>,
    /// Per journal, the clock readers hold as this producer's last acknowledged one.
    acknowledged: HashMap<String, Clock>,
    /// One ticket per append still to wait for (messages sharing an append share it).
    tickets: Vec<AppendTicket>,
    failed: Option<Error>,
    /// Reused for framing each message; each message's bytes are split off it.
    framed: Vec<u8>,
}

impl<A: Appender> Publisher<A> {
    /// A publisher with a random producer and a clock that follows wall time (Go's
    /// `NewPublisher(ajc, nil)`).
    pub fn new(appender: A) -> Publisher<A> {
        let mut publisher = Publisher::with_clock(appender, ProducerId::random(), Clock::now());
        publisher.auto_update = true;
        publisher
    }

    /// A publisher with the given producer and a clock it only ticks (Go's
    /// `NewPublisher(ajc, &clock)`): a consumer restores both from its checkpoint.
    pub fn with_clock(appender: A, producer: ProducerId, clock: Clock) -> Publisher<A> {
        Publisher {
            appender,
            producer,
            clock,
            auto_update: false,
            touched: Vec::new(),
            acknowledged: HashMap::new(),
            tickets: Vec::new(),
            failed: None,
            framed: Vec::new(),
        }
    }

    pub fn producer(&self) -> ProducerId {
        self.producer
    }

    /// The clock of the last message stamped.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Moves the clock up to `unix_nanos` (never down), as a consumer does at each
    /// transaction start.
    pub fn update_clock(&mut self, unix_nanos: u64) {
        self.clock.update(unix_nanos);
    }

    /// The appender messages go to.
    pub fn appender(&self) -> &A {
        &self.appender
    }

    /// Publishes a message committed on its own (OUTSIDE_TXN); sets its UUID.
    pub async fn publish_committed(
        &mut self,
        journal: &str,
        framing: &Framing,
        message: &mut Message,
    ) -> Result<Uuid, Error> {
        let uuid = self
            .publish(journal, framing, message, Flags::OUTSIDE_TXN)
            .await?;
        self.acknowledged.insert(journal.to_string(), uuid.clock());
        Ok(uuid)
    }

    /// Publishes a message of the current transaction (CONTINUE_TXN); sets its UUID.
    pub async fn publish_uncommitted(
        &mut self,
        journal: &str,
        framing: &Framing,
        message: &mut Message,
    ) -> Result<Uuid, Error> {
        let uuid = self
            .publish(journal, framing, message, Flags::CONTINUE_TXN)
            .await?;
        if !self.touched.iter().any(|t| t.journal == journal) {
            self.touched.push(Touched {
                journal: journal.to_string(),
                framing: framing.clone(),
                template: message.clone(),
                first_clock: uuid.clock(),
            });
        }
        Ok(uuid)
    }

    async fn publish(
        &mut self,
        journal: &str,
        framing: &Framing,
        message: &mut Message,
        flags: Flags,
    ) -> Result<Uuid, Error> {
        if self.auto_update {
            self.clock.update(unix_nanos_now());
        }
        let uuid = Uuid::build(self.producer, self.clock.tick(), flags)?;
        let invalid = |detail: String| Error::Invalid(format!("journal {journal}: {detail}"));
        framing.set_uuid(message, uuid).map_err(invalid)?;
        self.framed.clear();
        framing
            .marshal(message, &mut self.framed)
            .map_err(invalid)?;
        let content = Bytes::copy_from_slice(&self.framed);
        self.enqueue(journal, content).await?;
        Ok(uuid)
    }

    async fn enqueue(&mut self, journal: &str, content: Bytes) -> Result<(), Error> {
        let ticket = self.appender.enqueue(journal, content).await?;
        // Consecutive messages to a few journals share their appends: a ticket of an append
        // already held among the last few is not kept twice.
        let recent = self.tickets.len().saturating_sub(RECENT_TICKETS);
        if !self.tickets[recent..]
            .iter()
            .any(|t| t.same_append(&ticket))
        {
            self.tickets.push(ticket);
        }
        if self.tickets.len() >= SWEEP_TICKETS {
            self.sweep();
        }
        Ok(())
    }

    /// Drops tickets already resolved, keeping the first failure for [`Publisher::flush`].
    fn sweep(&mut self) {
        let mut kept = Vec::with_capacity(self.tickets.len());
        for ticket in self.tickets.drain(..) {
            match ticket.try_result() {
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    self.failed.get_or_insert(err);
                }
                None => kept.push(ticket),
            }
        }
        self.tickets = kept;
    }

    /// The ACK_TXN messages that commit the current transaction, one per journal touched, in
    /// the order the journals were first touched (Go `BuildAckIntents`). Each ticks the
    /// clock. The transaction is over once they are built; write them with
    /// [`Publisher::write_intents`] (after storing them in a checkpoint, for a consumer).
    pub fn build_ack_intents(&mut self) -> Result<Vec<AckIntent>, Error> {
        let touched = std::mem::take(&mut self.touched);
        let mut intents = Vec::with_capacity(touched.len());
        for t in touched {
            let clock = self.clock.tick();
            intents.push(self.intent(&t, clock)?);
            self.acknowledged.insert(t.journal, clock);
        }
        Ok(intents)
    }

    /// The ACK_TXN messages that roll back the current transaction: each carries the clock
    /// readers hold as the producer's last acknowledged one in that journal.
    pub fn build_rollback_intents(&mut self) -> Result<Vec<AckIntent>, Error> {
        let touched = std::mem::take(&mut self.touched);
        let mut intents = Vec::with_capacity(touched.len());
        for t in touched {
            let clock = match self.acknowledged.get(&t.journal) {
                Some(&clock) => clock,
                // Readers start a producer they have not seen at its first clock less one.
                // If they had seen it (this publisher restarted), that clock is above their
                // bound and below every pending clock: an ACK there commits none of them,
                // which drops them just the same.
                None => Clock(t.first_clock.0 - 1),
            };
            intents.push(self.intent(&t, clock)?);
            self.acknowledged.insert(t.journal, clock);
        }
        Ok(intents)
    }

    fn intent(&self, touched: &Touched, clock: Clock) -> Result<AckIntent, Error> {
        let invalid =
            |detail: String| Error::Invalid(format!("journal {}: {detail}", touched.journal));
        let uuid = Uuid::build(self.producer, clock, Flags::ACK_TXN)?;
        let ack = touched
            .framing
            .new_acknowledgement(&touched.template, uuid)
            .map_err(invalid)?;
        let mut framed = Vec::new();
        touched
            .framing
            .marshal(&ack, &mut framed)
            .map_err(invalid)?;
        Ok(AckIntent {
            journal: touched.journal.clone(),
            intent: Bytes::from(framed),
        })
    }

    /// Writes ACK intents (built here, or restored from a checkpoint after a crash).
    pub async fn write_intents(&mut self, intents: &[AckIntent]) -> Result<(), Error> {
        for intent in intents {
            self.enqueue(&intent.journal, intent.intent.clone()).await?;
        }
        Ok(())
    }

    /// Commits the current transaction: builds and writes its ACK intents.
    pub async fn commit(&mut self) -> Result<Vec<AckIntent>, Error> {
        let intents = self.build_ack_intents()?;
        self.write_intents(&intents).await?;
        Ok(intents)
    }

    /// Rolls back the current transaction: readers drop its messages.
    pub async fn rollback(&mut self) -> Result<Vec<AckIntent>, Error> {
        let intents = self.build_rollback_intents()?;
        self.write_intents(&intents).await?;
        Ok(intents)
    }

    /// Journals the current transaction has touched.
    pub fn touched(&self) -> Vec<String> {
        self.touched.iter().map(|t| t.journal.clone()).collect()
    }

    /// Waits until everything enqueued so far is durable (acknowledged by the brokers), and
    /// returns the first failure since the last flush.
    pub async fn flush(&mut self) -> Result<(), Error> {
        let tickets = std::mem::take(&mut self.tickets);
        let mut result = match self.failed.take() {
            Some(err) => Err(err),
            None => Ok(()),
        };
        for ticket in tickets {
            if let Err(err) = ticket.wait().await {
                result = result.and(Err(err));
            }
        }
        result
    }
}

fn unix_nanos_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::framing::{CONTENT_TYPE_JSON_LINES, FramingOptions};
    use crate::message::memory::MemoryJournals;
    use serde_json::json;

    fn json_framing() -> Framing {
        Framing::for_content_type("j", CONTENT_TYPE_JSON_LINES, &FramingOptions::default()).unwrap()
    }

    const PRODUCER: ProducerId = ProducerId([0x01, 0x02, 0x03, 0x04, 0x05, 0x06]);

    #[tokio::test]
    async fn stamps_uuids_and_frames_messages() {
        let journals = MemoryJournals::default();
        let mut publisher = Publisher::with_clock(journals.clone(), PRODUCER, Clock(0x1000));
        let framing = json_framing();
        let mut message = Message::Json(json!({"n": 1}));
        let uuid = publisher
            .publish_committed("a", &framing, &mut message)
            .await
            .unwrap();
        assert_eq!(
            (uuid.clock(), uuid.flags(), uuid.producer()),
            (Clock(0x10a0), Flags::OUTSIDE_TXN, PRODUCER)
        );
        publisher.flush().await.unwrap();
        let expect = format!("{{\"UUID\":\"{uuid}\",\"n\":1}}\n");
        assert_eq!(String::from_utf8(journals.content("a")).unwrap(), expect);
        assert_eq!(uuid.to_string(), "0000010a-0000-1000-8000-010203040506");
    }

    #[tokio::test]
    async fn ack_intents_tick_per_journal_and_rollbacks_reuse_the_acknowledged_clock() {
        let journals = MemoryJournals::default();
        let mut publisher = Publisher::with_clock(journals.clone(), PRODUCER, Clock(0x1000));
        let framing = json_framing();
        for journal in ["a", "b", "a"] {
            let mut message = Message::Json(json!({}));
            publisher
                .publish_uncommitted(journal, &framing, &mut message)
                .await
                .unwrap();
        }
        assert_eq!(publisher.touched(), ["a", "b"]);
        let intents = publisher.commit().await.unwrap();
        let clocks: Vec<Clock> = intents
            .iter()
            .map(|i| ack_uuid(&i.intent).clock())
            .collect();
        assert_eq!(clocks, [Clock(0x1000 + 4 * 160), Clock(0x1000 + 5 * 160)]);
        assert!(
            intents
                .iter()
                .all(|i| ack_uuid(&i.intent).flags() == Flags::ACK_TXN)
        );
        assert!(publisher.touched().is_empty());

        // A transaction touching "b" (acknowledged) and "c" (never seen), rolled back.
        for journal in ["b", "c"] {
            let mut message = Message::Json(json!({}));
            publisher
                .publish_uncommitted(journal, &framing, &mut message)
                .await
                .unwrap();
        }
        let intents = publisher.rollback().await.unwrap();
        let clocks: Vec<Clock> = intents
            .iter()
            .map(|i| ack_uuid(&i.intent).clock())
            .collect();
        assert_eq!(
            clocks,
            [Clock(0x1000 + 5 * 160), Clock(0x1000 + 7 * 160 - 1)]
        );
        publisher.flush().await.unwrap();
    }

    fn ack_uuid(intent: &[u8]) -> Uuid {
        let value: serde_json::Value = serde_json::from_slice(intent).unwrap();
        assert_eq!(
            value.as_object().unwrap().len(),
            1,
            "an ACK carries only its UUID"
        );
        Uuid::parse(value["UUID"].as_str().unwrap()).unwrap()
    }

    /// An appender whose appends all fail at the broker.
    struct Failing;

    impl Appender for Failing {
        async fn enqueue(&self, journal: &str, _: Bytes) -> Result<AppendTicket, Error> {
            Ok(AppendTicket::ready(Err(Error::Status {
                journal: journal.to_string(),
                status: "WRONG_APPEND_OFFSET".into(),
            })))
        }
    }

    #[tokio::test]
    async fn flush_reports_failed_appends_even_after_sweeps() {
        let mut publisher = Publisher::with_clock(Failing, PRODUCER, Clock(0x1000));
        let framing = json_framing();
        for _ in 0..SWEEP_TICKETS + 1 {
            let mut message = Message::Json(json!({}));
            publisher
                .publish_committed("x", &framing, &mut message)
                .await
                .unwrap();
        }
        assert!(
            publisher.tickets.len() < SWEEP_TICKETS,
            "resolved tickets are swept"
        );
        let err = publisher.flush().await.unwrap_err();
        assert!(err.to_string().contains("WRONG_APPEND_OFFSET"), "{err}");
        assert!(
            publisher.flush().await.is_ok(),
            "a flush reports a failure once"
        );
    }

    #[tokio::test]
    async fn a_message_that_does_not_fit_the_framing_is_refused() {
        let mut publisher =
            Publisher::with_clock(MemoryJournals::default(), PRODUCER, Clock(0x1000));
        let mut message = Message::Csv(vec!["x".into()]);
        let err = publisher
            .publish_committed("a/j", &json_framing(), &mut message)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("a/j"), "{err}");
    }
}
