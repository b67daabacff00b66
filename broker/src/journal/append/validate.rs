//! The append's preconditions as pure functions over plain facts (Gazette's
//! onValidatePreconditions, in its order): the register check, the offsets
//! (INDEX_HAS_GREATER_OFFSET, WRONG_APPEND_OFFSET, Courant's resume of its own persisted
//! history), the suspension decisions, and the rolls (the first fragment's, and Gazette's
//! maybeRollFragment).
//!
//! Lives on: the journal's owner core; every input is copied out of the spool, the index
//! and the spec by the driver while it holds the spool.

use crate::mutation::{Mutation, active};
use protocol::append_request::Suspend as SuspendMode;
use protocol::journal_spec::suspend::Level;
use protocol::{Fragment, JournalSpec, LabelSelector, LabelSet, Status};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The flush interval of a spec that sets none: its index counts as "clean" (the journal
/// idle) once its last fragment was persisted this long ago (Gazette's default).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// Everything the preconditions decide on, copied out while the spool is held.
#[derive(Debug, Clone, PartialEq)]
pub struct Preconditions {
    /// The spool's registers.
    pub registers: LabelSet,
    /// The request's `check_registers`.
    pub check_registers: Option<LabelSelector>,
    /// The spool's current fragment `[spool_begin, spool_end)`.
    pub spool_begin: i64,
    pub spool_end: i64,
    /// The fragment index's `(begin, end, mod_time)` summary.
    pub index_min: i64,
    pub index_max: i64,
    pub index_mod_time: i64,
    /// This broker's data directory held the journal's spool before its replica opened.
    pub wrote_before: bool,
    /// The spec's suspension.
    pub level: Level,
    pub suspend_offset: i64,
    /// The spec's flags and flush interval (seconds; 0 when unset).
    pub flags: u32,
    pub flush_interval: i64,
    /// The request's `offset` and `suspend` mode.
    pub offset: i64,
    pub suspend_mode: i32,
    /// Seconds since the Unix epoch.
    pub now: i64,
}

/// How the append goes on once the preconditions hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The offset to roll the spool to before streaming, if any.
    pub roll_to: Option<i64>,
    /// The status of the reply when the content is committed.
    pub final_status: Status,
}

/// The preconditions' decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Answer `status` at once (with the registers for REGISTER_MISMATCH).
    Reject {
        status: Status,
        registers: Option<LabelSet>,
    },
    /// Suspend the journal fully at `offset` and answer the status resolved after.
    SuspendFully { offset: i64 },
    /// Write `suspend` (level, offset) first if given, then roll and stream per `plan`.
    Proceed {
        suspend: Option<(Level, i64)>,
        plan: Plan,
    },
}

/// Decides the preconditions in Gazette's order: registers, offsets, suspension, and the
/// first fragment's roll.
pub fn preconditions(p: &Preconditions) -> Verdict {
    if !registers_match(p.check_registers.as_ref(), &p.registers) {
        return Verdict::Reject {
            status: Status::RegisterMismatch,
            registers: Some(p.registers.clone()),
        };
    }
    match offsets(p) {
        Ok((roll_to, spool_end)) => suspension(p, roll_to, spool_end),
        Err(status) => Verdict::Reject {
            status,
            registers: None,
        },
    }
}

/// The request's `check_registers` hold when the journal has no registers yet or they
/// match. (Broken on purpose by [`Mutation::SkipRegisterCheck`] in test builds.)
pub fn registers_match(check: Option<&LabelSelector>, registers: &LabelSet) -> bool {
    if active(Mutation::SkipRegisterCheck) {
        return true;
    }
    match check {
        Some(check) => registers.labels.is_empty() || protocol::labels::matches(check, registers),
        None => true,
    }
}

/// The offset checks: returns the offset to roll to (if any) and the spool's end after
/// it, or the status that rejects the append.
///
/// A spool behind its suspension offset rolls there. Courant's single node is the
/// journal's only writer: when its own earlier fragments were all persisted (and their
/// local files removed), its empty spool resumes at the listed write head rather than
/// failing with INDEX_HAS_GREATER_OFFSET. A journal this broker never wrote keeps
/// Gazette's rule (`gazctl journals reset-head`), and an explicit `offset` must be the
/// journal's write head, rolling the spool there.
pub fn offsets(p: &Preconditions) -> Result<(Option<i64>, i64), Status> {
    let mut roll_to = None;
    if p.spool_end < p.suspend_offset {
        roll_to = Some(p.suspend_offset);
    }
    if roll_to.is_none()
        && p.wrote_before
        && p.spool_begin == p.spool_end
        && p.spool_end < p.index_max
    {
        roll_to = Some(p.index_max);
    }
    let spool_end = roll_to.unwrap_or(p.spool_end);
    let max_offset = spool_end.max(p.index_max);
    if spool_end != max_offset && p.offset == 0 && may_write(p.flags) {
        return Err(Status::IndexHasGreaterOffset);
    }
    if p.offset != 0 && p.offset != max_offset {
        return Err(Status::WrongAppendOffset);
    }
    if p.offset != 0 && spool_end != max_offset {
        roll_to = Some(max_offset);
    }
    Ok((roll_to, roll_to.unwrap_or(spool_end)))
}

/// The suspension decisions of the request's mode over the journal's suspension `level`.
fn suspension(p: &Preconditions, roll_to: Option<i64>, spool_end: i64) -> Verdict {
    let proceed = |suspend, roll_to, final_status| Verdict::Proceed {
        suspend,
        plan: Plan {
            roll_to: first_fragment_roll(p, roll_to),
            final_status,
        },
    };
    let mode = SuspendMode::try_from(p.suspend_mode).unwrap_or(SuspendMode::Resume);
    match mode {
        SuspendMode::Resume if p.level != Level::None => {
            proceed(Some((Level::None, spool_end)), roll_to, Status::Ok)
        }
        SuspendMode::NoResume if p.level != Level::None => Verdict::Reject {
            status: Status::Suspended,
            registers: None,
        },
        SuspendMode::IfFlushed | SuspendMode::Now => {
            if p.level != Level::Full && p.index_min == p.index_max {
                return Verdict::SuspendFully { offset: spool_end };
            }
            let dirty = index_dirty(p.index_mod_time, p.now, p.flush_interval);
            if p.level == Level::None && (!dirty || mode == SuspendMode::Now) {
                proceed(
                    Some((Level::Partial, spool_end)),
                    Some(spool_end),
                    Status::Suspended,
                )
            } else if p.level == Level::Partial {
                proceed(None, roll_to, Status::Suspended)
            } else {
                proceed(None, roll_to, Status::Ok)
            }
        }
        _ => proceed(None, roll_to, Status::Ok),
    }
}

/// The spool holding the journal's first write is rolled after it, so that the first
/// fragment is completed promptly.
pub fn first_fragment_roll(p: &Preconditions, roll_to: Option<i64>) -> Option<i64> {
    if roll_to.is_none() && p.spool_begin == p.index_min {
        return Some(p.spool_end);
    }
    roll_to
}

/// The index is "clean" when its last fragment was persisted longer than the flush
/// interval ago (`flush_interval` seconds, [`DEFAULT_FLUSH_INTERVAL`] when 0): the journal
/// is idle. An index with no persisted fragment (`mod_time` 0) is dirty.
pub fn index_dirty(mod_time: i64, now: i64, flush_interval: i64) -> bool {
    let interval = if flush_interval == 0 {
        DEFAULT_FLUSH_INTERVAL.as_secs() as i64
    } else {
        flush_interval
    };
    mod_time == 0 || mod_time > now - interval
}

/// The spec's flush interval in seconds (0 when unset).
pub fn flush_interval(spec: &JournalSpec) -> i64 {
    spec.fragment
        .as_ref()
        .and_then(|f| f.flush_interval)
        .map_or(0, |d| d.seconds)
}

/// Gazette's maybeRollFragment: the offset to roll the spool's fragment `cur` to before
/// this append, if any. `first_append` is when the fragment got its first content.
pub fn maybe_roll(
    cur: &Fragment,
    roll_to: Option<i64>,
    spec: &JournalSpec,
    first_append: Option<SystemTime>,
    now: SystemTime,
) -> Option<i64> {
    let content_len = cur.end - cur.begin;
    let fragment = spec.fragment.clone().unwrap_or_default();
    let mut flush = content_len == 0
        || content_len > fragment.length
        || roll_to.is_some_and(|r| r != 0 && r != cur.begin);
    let interval = flush_interval(spec);
    if interval > 0 {
        let first = first_append.map_or(0, unix_secs);
        if first / interval != unix_secs(now) / interval {
            flush = true;
        }
    }
    if !flush {
        return None;
    }
    let at = roll_to.filter(|&r| r != 0).unwrap_or(cur.end);
    // An empty spool at the right offset with the right codec needs no roll.
    if content_len == 0 && at == cur.end && cur.compression_codec == codec_of(spec) as i32 {
        return None;
    }
    Some(at)
}

pub fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The spec's compression codec (none when unset or unknown).
pub fn codec_of(spec: &JournalSpec) -> protocol::CompressionCodec {
    spec.fragment
        .as_ref()
        .and_then(|f| protocol::CompressionCodec::try_from(f.compression_codec).ok())
        .unwrap_or(protocol::CompressionCodec::None)
}

/// The spec's suspension level and offset.
pub fn suspend_of(spec: Option<&JournalSpec>) -> (Level, i64) {
    match spec.and_then(|s| s.suspend.as_ref()) {
        Some(s) => (Level::try_from(s.level).unwrap_or(Level::None), s.offset),
        None => (Level::None, 0),
    }
}

/// Gazette's MayWrite: unspecified, write-only or read-write (not read-only).
pub use protocol::flags::may_write;

/// Only ordinary appends may carry content; suspension controls are empty barriers.
pub fn may_carry_content(mode: i32) -> bool {
    mode == SuspendMode::Resume as i32 || mode == SuspendMode::NoResume as i32
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use protocol::flags::{NOT_SPECIFIED, O_RDONLY, O_RDWR, O_WRONLY};
    use protocol::journal_spec::Fragment as FragmentSpec;

    /// A writable journal with a fresh spool and an empty index, no suspension: the
    /// append goes on and rolls after its first write.
    pub fn facts() -> Preconditions {
        Preconditions {
            registers: LabelSet::default(),
            check_registers: None,
            spool_begin: 0,
            spool_end: 0,
            index_min: 0,
            index_max: 0,
            index_mod_time: 0,
            wrote_before: false,
            level: Level::None,
            suspend_offset: 0,
            flags: NOT_SPECIFIED,
            flush_interval: 0,
            offset: 0,
            suspend_mode: SuspendMode::Resume as i32,
            now: 1_000_000,
        }
    }

    pub fn regs(pairs: &[(&str, &str)]) -> LabelSet {
        LabelSet {
            labels: pairs
                .iter()
                .map(|(n, v)| protocol::Label {
                    name: (*n).into(),
                    value: (*v).into(),
                    prefix: false,
                })
                .collect(),
        }
    }

    pub fn sel(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            include: Some(regs(pairs)),
            exclude: None,
        }
    }

    fn proceed(suspend: Option<(Level, i64)>, roll_to: Option<i64>, status: Status) -> Verdict {
        Verdict::Proceed {
            suspend,
            plan: Plan {
                roll_to,
                final_status: status,
            },
        }
    }

    fn reject(status: Status) -> Verdict {
        Verdict::Reject {
            status,
            registers: None,
        }
    }

    /// A spool with content `[100, 150)` over an index `[0, 150)`: no roll is due.
    fn writing() -> Preconditions {
        Preconditions {
            spool_begin: 100,
            spool_end: 150,
            index_min: 0,
            index_max: 150,
            ..facts()
        }
    }

    // --- register check ---

    #[test]
    fn registers_match_when_unchecked_empty_or_matching() {
        let journal = regs(&[("owner", "a")]);
        assert!(registers_match(None, &journal));
        assert!(registers_match(Some(&sel(&[("owner", "b")])), &regs(&[])));
        assert!(registers_match(Some(&sel(&[("owner", "a")])), &journal));
        assert!(!registers_match(Some(&sel(&[("owner", "b")])), &journal));
    }

    /// Registers `owner=a` checked against `owner=b`, and the verdict that rejects them.
    fn mismatch() -> (Preconditions, Verdict) {
        let p = Preconditions {
            registers: regs(&[("owner", "a")]),
            check_registers: Some(sel(&[("owner", "b")])),
            ..writing()
        };
        let rejected = Verdict::Reject {
            status: Status::RegisterMismatch,
            registers: Some(regs(&[("owner", "a")])),
        };
        (p, rejected)
    }

    #[test]
    fn a_mismatch_rejects_with_the_journals_registers_before_any_offset_check() {
        let (p, rejected) = mismatch();
        let p = Preconditions {
            offset: 999, // would be WRONG_APPEND_OFFSET
            ..p
        };
        assert_eq!(preconditions(&p), rejected);
    }

    #[test]
    fn the_skip_register_check_mutation_lets_a_mismatch_through() {
        let (p, rejected) = mismatch();
        crate::mutation::set(Some(Mutation::SkipRegisterCheck));
        let mutated = preconditions(&p);
        crate::mutation::set(None);
        assert_eq!(mutated, proceed(None, None, Status::Ok));
        assert_eq!(preconditions(&p), rejected);
    }

    // --- offsets ---

    #[test]
    fn an_index_ahead_of_the_spool_rejects_a_writable_journal() {
        let p = Preconditions {
            spool_begin: 0,
            spool_end: 0,
            index_max: 100,
            ..facts()
        };
        assert_eq!(preconditions(&p), reject(Status::IndexHasGreaterOffset));
        // A read-only journal does not care (its appends carry no content).
        let ro = Preconditions {
            flags: O_RDONLY,
            ..p
        };
        assert_eq!(offsets(&ro), Ok((None, 0)));
    }

    #[test]
    fn an_empty_spool_of_a_journal_this_broker_wrote_resumes_at_the_index_head() {
        let p = Preconditions {
            spool_begin: 40,
            spool_end: 40,
            index_min: 0,
            index_max: 100,
            wrote_before: true,
            ..facts()
        };
        assert_eq!(offsets(&p), Ok((Some(100), 100)));
        // Not when the spool holds content of its own.
        let p = Preconditions {
            spool_begin: 20,
            ..p
        };
        assert_eq!(offsets(&p), Err(Status::IndexHasGreaterOffset));
    }

    #[test]
    fn an_explicit_offset_must_be_the_write_head_and_rolls_the_spool_there() {
        let behind = Preconditions {
            spool_begin: 0,
            spool_end: 0,
            index_max: 100,
            ..facts()
        };
        let at = |offset| Preconditions {
            offset,
            ..behind.clone()
        };
        assert_eq!(offsets(&at(100)), Ok((Some(100), 100)));
        assert_eq!(offsets(&at(50)), Err(Status::WrongAppendOffset));
        assert_eq!(offsets(&at(150)), Err(Status::WrongAppendOffset));
        // At the spool's own end, no roll.
        let p = Preconditions {
            offset: 150,
            ..writing()
        };
        assert_eq!(offsets(&p), Ok((None, 150)));
    }

    #[test]
    fn a_spool_behind_its_suspension_offset_rolls_to_it() {
        let p = Preconditions {
            spool_begin: 0,
            spool_end: 0,
            suspend_offset: 1024,
            index_min: 0,
            index_max: 1024,
            ..facts()
        };
        assert_eq!(offsets(&p), Ok((Some(1024), 1024)));
    }

    // --- suspension ---

    fn suspended(level: Level, mode: SuspendMode) -> Preconditions {
        Preconditions {
            level,
            suspend_offset: 150,
            suspend_mode: mode as i32,
            ..writing()
        }
    }

    #[test]
    fn resume_clears_a_suspension_at_the_spool_end() {
        for level in [Level::Partial, Level::Full] {
            assert_eq!(
                preconditions(&suspended(level, SuspendMode::Resume)),
                proceed(Some((Level::None, 150)), None, Status::Ok)
            );
        }
        assert_eq!(
            preconditions(&suspended(Level::None, SuspendMode::Resume)),
            proceed(None, None, Status::Ok)
        );
    }

    #[test]
    fn no_resume_answers_suspended_only_when_suspended() {
        assert_eq!(
            preconditions(&suspended(Level::Partial, SuspendMode::NoResume)),
            reject(Status::Suspended)
        );
        assert_eq!(
            preconditions(&suspended(Level::None, SuspendMode::NoResume)),
            proceed(None, None, Status::Ok)
        );
    }

    #[test]
    fn an_empty_index_suspends_fully() {
        for mode in [SuspendMode::IfFlushed, SuspendMode::Now] {
            for level in [Level::None, Level::Partial] {
                let p = Preconditions {
                    index_min: 150,
                    ..suspended(level, mode)
                };
                assert_eq!(preconditions(&p), Verdict::SuspendFully { offset: 150 });
            }
        }
    }

    #[test]
    fn suspend_now_suspends_partially_and_rolls_to_the_spool_end() {
        let p = Preconditions {
            index_mod_time: 1_000_000, // persisted just now: dirty
            ..suspended(Level::None, SuspendMode::Now)
        };
        assert_eq!(
            preconditions(&p),
            proceed(Some((Level::Partial, 150)), Some(150), Status::Suspended)
        );
    }

    #[test]
    fn suspend_if_flushed_waits_for_a_clean_index() {
        let dirty = Preconditions {
            index_mod_time: 1_000_000 - 10,
            ..suspended(Level::None, SuspendMode::IfFlushed)
        };
        assert_eq!(preconditions(&dirty), proceed(None, None, Status::Ok));
        let clean = Preconditions {
            index_mod_time: 1_000_000 - DEFAULT_FLUSH_INTERVAL.as_secs() as i64 - 1,
            ..dirty
        };
        assert_eq!(
            preconditions(&clean),
            proceed(Some((Level::Partial, 150)), Some(150), Status::Suspended)
        );
    }

    #[test]
    fn an_already_partial_suspension_answers_suspended_without_writing() {
        let p = suspended(Level::Partial, SuspendMode::IfFlushed);
        assert_eq!(preconditions(&p), proceed(None, None, Status::Suspended));
        let full = suspended(Level::Full, SuspendMode::Now);
        assert_eq!(preconditions(&full), proceed(None, None, Status::Ok));
    }

    #[test]
    fn the_index_is_clean_after_the_flush_interval() {
        assert!(index_dirty(0, 1_000_000, 0), "nothing persisted");
        assert!(index_dirty(999_990, 1_000_000, 60));
        assert!(!index_dirty(999_900, 1_000_000, 60));
        let day = DEFAULT_FLUSH_INTERVAL.as_secs() as i64;
        assert!(index_dirty(1_000_000 - day + 1, 1_000_000, 0));
        assert!(!index_dirty(1_000_000 - day - 1, 1_000_000, 0));
    }

    // --- rolls ---

    #[test]
    fn the_spool_of_the_first_write_rolls_after_it() {
        assert_eq!(preconditions(&facts()), proceed(None, Some(0), Status::Ok));
        let p = Preconditions {
            spool_begin: 0,
            spool_end: 30,
            index_max: 30,
            ..facts()
        };
        assert_eq!(first_fragment_roll(&p, None), Some(30));
        assert_eq!(first_fragment_roll(&p, Some(50)), Some(50));
        assert_eq!(first_fragment_roll(&writing(), None), None);
    }

    fn spec(length: i64, flush_secs: i64, codec: protocol::CompressionCodec) -> JournalSpec {
        JournalSpec {
            fragment: Some(FragmentSpec {
                length,
                compression_codec: codec as i32,
                flush_interval: (flush_secs > 0).then_some(prost_types::Duration {
                    seconds: flush_secs,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn frag(begin: i64, end: i64, codec: protocol::CompressionCodec) -> Fragment {
        Fragment {
            begin,
            end,
            compression_codec: codec as i32,
            ..Default::default()
        }
    }

    #[test]
    fn maybe_roll_follows_gazettes_rules() {
        use protocol::CompressionCodec::{Gzip, None as Plain};
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = spec(100, 0, Plain);
        // An empty spool with the spec's codec, where it should be: no roll.
        assert_eq!(maybe_roll(&frag(10, 10, Plain), None, &s, None, now), None);
        // ...with another codec: rolled in place.
        assert_eq!(
            maybe_roll(&frag(10, 10, Gzip), None, &s, None, now),
            Some(10)
        );
        // Content under the length: kept; over it: rolled at its end.
        assert_eq!(maybe_roll(&frag(0, 50, Plain), None, &s, None, now), None);
        assert_eq!(
            maybe_roll(&frag(0, 150, Plain), None, &s, None, now),
            Some(150)
        );
        // An explicit roll_to elsewhere than the fragment's begin wins; 0 means none.
        assert_eq!(
            maybe_roll(&frag(0, 50, Plain), Some(80), &s, None, now),
            Some(80)
        );
        assert_eq!(
            maybe_roll(&frag(0, 50, Plain), Some(0), &s, None, now),
            None
        );
        assert_eq!(
            maybe_roll(&frag(0, 50, Plain), Some(0), &s, None, now),
            None
        );
    }

    #[test]
    fn maybe_roll_flushes_across_a_flush_interval_boundary() {
        use protocol::CompressionCodec::None as Plain;
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        let s = spec(1000, 60, Plain);
        let f = frag(0, 50, Plain);
        assert_eq!(maybe_roll(&f, None, &s, Some(at(600)), at(659)), None);
        assert_eq!(maybe_roll(&f, None, &s, Some(at(600)), at(660)), Some(50));
        assert_eq!(maybe_roll(&f, None, &s, None, at(30)), None);
    }

    #[test]
    fn flags_and_modes() {
        assert!(may_write(NOT_SPECIFIED));
        assert!(may_write(O_WRONLY));
        assert!(may_write(O_RDWR));
        assert!(!may_write(O_RDONLY));
        assert!(!may_write(O_WRONLY | O_RDWR));
        assert!(may_carry_content(SuspendMode::Resume as i32));
        assert!(may_carry_content(SuspendMode::NoResume as i32));
        assert!(!may_carry_content(SuspendMode::IfFlushed as i32));
        assert!(!may_carry_content(SuspendMode::Now as i32));
        assert!(!may_carry_content(SuspendMode::Keep as i32));
    }

    #[test]
    fn spec_readers() {
        let s = spec(1, 90, protocol::CompressionCodec::Snappy);
        assert_eq!(flush_interval(&s), 90);
        assert_eq!(codec_of(&s), protocol::CompressionCodec::Snappy);
        assert_eq!(
            codec_of(&JournalSpec::default()),
            protocol::CompressionCodec::None
        );
        assert_eq!(suspend_of(None), (Level::None, 0));
        let suspended = JournalSpec {
            suspend: Some(protocol::journal_spec::Suspend {
                level: Level::Full as i32,
                offset: 12,
            }),
            ..Default::default()
        };
        assert_eq!(suspend_of(Some(&suspended)), (Level::Full, 12));
    }
}
