//! The simulator's checker: what every run must satisfy, whatever the faults.
//!
//! 1. Every acknowledged append's bytes are, at its offsets, readable from every live member
//!    of its journal's Route after healing: from the member's own fragment files (what its
//!    fragment index holds locally) or from the store.
//! 2. No offset of a journal ever holds two contents: not on two brokers, not on one broker
//!    at two times (across crashes too), not in the store, not in two acknowledgements.
//! 3. A journal's write head never goes back: an append that starts after another was
//!    acknowledged lands after it, and acknowledged ranges never overlap.
//! 4. Every fragment the store receives has the SHA-1 of its bytes.
//! 5. Liveness: once faults stop, every journal accepts an append within a few attempts.
//! 6. An append whose register check matches no registers is never acknowledged while the
//!    journal holds registers (checked by the driver from the append's response).
//! 7. Readers never see unacknowledged content: what a journal's primary shows to readers
//!    (its index) is, like an acknowledged append, held by every member of its Route, so no
//!    offset of it is ever written again with other content (invariant 2 over what readers
//!    saw) unless every one of those members lost it (their leases expired before the store
//!    had it), as for acknowledged appends.
//!
//! Lives on: the simulation's one executor thread.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// An acknowledged append.
pub struct Ack {
    pub journal: usize,
    pub begin: i64,
    pub bytes: Bytes,
    pub step: usize,
    /// Members of the Route it was acknowledged through whose lease has not expired since.
    pub holders: BTreeSet<usize>,
}

/// A piece of a journal's offsets and the holders of the acknowledged append covering it
/// (`None`: no acknowledged append does).
pub type AckPiece = ((i64, i64), Option<BTreeSet<usize>>);

/// What readers saw at a journal's primary during one check (invariant 7).
pub struct Seen {
    pub journal: usize,
    pub broker: usize,
    pub step: usize,
    /// The members of the journal's Route at the time that hold it (see `check_local`),
    /// minus those whose lease expired since.
    pub holders: BTreeSet<usize>,
}

#[derive(Default)]
pub struct Checker {
    /// Per journal: offset → (byte, the sources that hold it).
    history: Vec<BTreeMap<i64, (u8, BTreeSet<usize>)>>,
    sources: Vec<String>,
    pub acks: Vec<Ack>,
    /// Per journal, the end of the last acknowledged append.
    pub heads: Vec<i64>,
    /// What readers saw at primaries, with the ranges they saw.
    seen: Vec<(Seen, Vec<(i64, i64)>)>,
}

impl Checker {
    pub fn new(journals: usize) -> Checker {
        Checker {
            history: vec![BTreeMap::new(); journals],
            heads: vec![0; journals],
            ..Default::default()
        }
    }

    fn source_id(&mut self, source: &str) -> usize {
        match self.sources.iter().position(|s| s == source) {
            Some(id) => id,
            None => {
                self.sources.push(source.to_string());
                self.sources.len() - 1
            }
        }
    }

    /// Invariant 2: records that `source` holds `bytes` at `offset` of journal `j`.
    pub fn record(
        &mut self,
        j: usize,
        offset: i64,
        bytes: &[u8],
        source: &str,
    ) -> Result<(), String> {
        let id = self.source_id(source);
        for (i, &byte) in bytes.iter().enumerate() {
            let at = offset + i as i64;
            match self.history[j].get_mut(&at) {
                None => {
                    self.history[j].insert(at, (byte, BTreeSet::from([id])));
                }
                Some((seen, by)) if *seen == byte => {
                    by.insert(id);
                }
                Some((seen, by)) => {
                    let by: Vec<&str> = by.iter().map(|&s| self.sources[s].as_str()).collect();
                    return Err(format!(
                        "invariant 2: offset {at} of journal-{j} holds {:?} ({}) and {:?} ({source})",
                        *seen as char,
                        by.join(", "),
                        byte as char
                    ));
                }
            }
        }
        Ok(())
    }

    /// `source` holds nothing any more (a broker whose lease expired: a restart recovers
    /// only what it records again; an acknowledgement that was lost).
    pub fn forget(&mut self, source: &str) {
        let id = self.source_id(source);
        for history in &mut self.history {
            history.retain(|_, (_, by)| {
                by.remove(&id);
                !by.is_empty()
            });
        }
    }

    /// Invariants 2 and 3 for an acknowledged append that started when the head was
    /// `head_at_start`.
    pub fn acknowledged(&mut self, ack: Ack, end: i64, head_at_start: i64) -> Result<(), String> {
        let (j, begin, step) = (ack.journal, ack.begin, ack.step);
        if end - begin != ack.bytes.len() as i64 {
            return Err(format!(
                "journal-{j}: an append of {} bytes was acknowledged as [{begin}, {end})",
                ack.bytes.len()
            ));
        }
        if begin < head_at_start {
            return Err(format!(
                "invariant 3: journal-{j}'s write head went back: an append acknowledged at \
                 [{begin}, {end}) started when [.., {head_at_start}) was acknowledged"
            ));
        }
        if let Some(a) = self
            .acks
            .iter()
            .find(|a| a.journal == j && a.begin < end && begin < a.begin + a.bytes.len() as i64)
        {
            return Err(format!(
                "invariant 3: journal-{j}: acknowledged appends [{}, {}) (step {}) and \
                 [{begin}, {end}) overlap",
                a.begin,
                a.begin + a.bytes.len() as i64,
                a.step
            ));
        }
        let bytes = ack.bytes.clone();
        self.record(j, begin, &bytes, &ack_source(begin, step))?;
        self.heads[j] = self.heads[j].max(end);
        self.acks.push(ack);
        Ok(())
    }

    /// Splits journal `j`'s [begin, end) at the edges of its acknowledged appends: each
    /// piece with the holders of the append that covers it (`None`: no append does).
    pub fn split_by_acks(&self, j: usize, begin: i64, end: i64) -> Vec<AckPiece> {
        let mut acks: Vec<&Ack> = self
            .acks
            .iter()
            .filter(|a| a.journal == j && a.begin < end && a.begin + a.bytes.len() as i64 > begin)
            .collect();
        acks.sort_by_key(|a| a.begin);
        let mut out = Vec::new();
        let mut at = begin;
        for a in acks {
            let (from, to) = (a.begin.max(at), (a.begin + a.bytes.len() as i64).min(end));
            if from >= to {
                continue;
            }
            if at < from {
                out.push(((at, from), None));
            }
            out.push(((from, to), Some(a.holders.clone())));
            at = to;
        }
        if at < end {
            out.push(((at, end), None));
        }
        out
    }

    /// Invariant 7: readers saw `readable` at a journal's primary; it must never be
    /// contradicted while any of its holders keeps it.
    pub fn seen(&mut self, seen: Seen, readable: &Readable) -> Result<(), String> {
        let ranges: Vec<(i64, i64)> = readable
            .ranges
            .iter()
            .map(|(at, bytes)| (*at, *at + bytes.len() as i64))
            .collect();
        let source = seen_source(&seen, &ranges);
        for (at, bytes) in &readable.ranges {
            self.record(seen.journal, *at, bytes, &source)
                .map_err(|e| format!("invariant 7: {e}"))?;
        }
        if !ranges.is_empty() {
            self.seen.push((seen, ranges));
        }
        Ok(())
    }

    /// Broker `b`'s lease expired: it holds no acknowledged append any more. An append
    /// whose every holder is gone before the store had it is lost, as in Gazette (a
    /// journal's spools die with its brokers): it is forgotten, and its offsets may be
    /// written again. Returns a line per forgotten append.
    pub fn lost_holder(&mut self, b: usize, store: &super::world::Store) -> Vec<String> {
        let mut lines = Vec::new();
        let mut i = 0;
        while i < self.acks.len() {
            let a = &mut self.acks[i];
            a.holders.remove(&b);
            let end = a.begin + a.bytes.len() as i64;
            let stored = store
                .fragments
                .get(&super::journal_name(a.journal))
                .is_some_and(|m| {
                    m.values()
                        .any(|s| s.fragment.begin <= a.begin && end <= s.fragment.end)
                });
            if !a.holders.is_empty() || stored {
                i += 1;
                continue;
            }
            let a = self.acks.remove(i);
            lines.push(format!(
                "lost: journal-{} [{}, {end}) acknowledged at step {}: every holder's lease expired",
                a.journal, a.begin, a.step
            ));
            self.forget(&ack_source(a.begin, a.step));
            self.heads[a.journal] = self
                .acks
                .iter()
                .filter(|x| x.journal == a.journal)
                .map(|x| x.begin + x.bytes.len() as i64)
                .max()
                .unwrap_or(0);
        }
        // What readers saw is forgotten likewise, range by range (the store may hold some).
        let mut forget = Vec::new();
        for (seen, ranges) in &mut self.seen {
            seen.holders.remove(&b);
            if !seen.holders.is_empty() {
                continue;
            }
            let fragments = store.fragments.get(&super::journal_name(seen.journal));
            let stored = |(begin, end): &(i64, i64)| {
                fragments.is_some_and(|m| {
                    m.values()
                        .any(|s| s.fragment.begin <= *begin && *end <= s.fragment.end)
                })
            };
            if !ranges.iter().all(stored) {
                forget.push(seen_source(seen, ranges));
            }
        }
        self.seen.retain(|(s, _)| !s.holders.is_empty());
        for source in forget {
            self.forget(&source);
        }
        lines
    }
}

fn seen_source(seen: &Seen, ranges: &[(i64, i64)]) -> String {
    let spans: Vec<String> = ranges.iter().map(|(b, e)| format!("[{b}, {e})")).collect();
    format!(
        "what readers saw at broker-{} at step {} ({})",
        seen.broker,
        seen.step,
        spans.join(", ")
    )
}

fn ack_source(begin: i64, step: usize) -> String {
    format!("the append acknowledged at {begin} at step {step}")
}

/// The source of what broker `b` holds in its files.
pub fn broker_source(b: usize) -> String {
    format!("broker-{b}'s files")
}

/// What one broker (or the store) can read of a journal: offset ranges and their bytes.
#[derive(Default)]
pub struct Readable {
    pub ranges: Vec<(i64, Bytes)>,
}

impl Readable {
    /// The bytes at [begin, begin + len), if one range holds them all.
    pub fn read(&self, begin: i64, len: usize) -> Option<&[u8]> {
        self.ranges.iter().find_map(|(at, bytes)| {
            let from = usize::try_from(begin - at).ok()?;
            bytes.get(from..from + len)
        })
    }
}
