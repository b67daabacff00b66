//! The cover set: fragments ordered by begin and end, none fully contained
//! in another.
//!
//! Intuitively, a cover set is the set of journal offsets covered by a
//! collection of fragments, mapping each offset to a best covering fragment.
//! It prefers larger fragments: adding one replaces every fragment it
//! contains. Because no member contains another, no two share a begin or an
//! end, and both begins and ends strictly increase through the set (members
//! may still overlap). The set's first begin is its lowest offset and its
//! last end its highest.
//!
//! Lives on: the journal's owner core (members hold `Rc<FragmentFile>`).

use std::rc::Rc;

use protocol::Fragment;

use crate::fragment::FragmentFile;

/// A member of a cover set: a fragment, with its file if it is local.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub fragment: Fragment,
    pub file: Option<Rc<FragmentFile>>,
}

impl Entry {
    fn begin(&self) -> i64 {
        self.fragment.begin
    }
    fn end(&self) -> i64 {
        self.fragment.end
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CoverSet {
    entries: Vec<Entry>,
}

impl CoverSet {
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Lowest offset covered, or 0 when empty.
    pub fn begin_offset(&self) -> i64 {
        self.entries.first().map_or(0, Entry::begin)
    }

    /// Highest offset covered (exclusive), or 0 when empty.
    pub fn end_offset(&self) -> i64 {
        self.entries.last().map_or(0, Entry::end)
    }

    /// Adds `entry` unless it is empty or some member contains it without
    /// being equal to it; it replaces every member it contains (including an
    /// equal one). Returns whether the set changed.
    pub fn add(&mut self, entry: Entry) -> bool {
        let f = &entry.fragment;
        if let Some(first) = self.entries.first() {
            assert_eq!(first.fragment.journal, f.journal, "journal mismatch");
        }
        if f.end <= f.begin {
            return false;
        }
        // Fast path: the fragment extends past the last member and begins
        // after it, so it is appended.
        if let Some(last) = self.entries.last() {
            if last.end() < f.end && last.begin() < f.begin {
                self.entries.push(entry);
                return true;
            }
        } else {
            self.entries.push(entry);
            return true;
        }

        // Find the first member ending after the fragment begins, then walk to
        // the first member not beginning before it, checking on the way that
        // none contains it.
        let len = self.entries.len();
        let mut first = self.entries.partition_point(|e| e.end() <= f.begin);
        while first != len {
            let e = &self.entries[first];
            if (e.begin() <= f.begin && e.end() > f.end)
                || (e.begin() < f.begin && e.end() >= f.end)
            {
                return false;
            }
            if e.begin() >= f.begin {
                break;
            }
            first += 1;
        }
        // Members from `first` begin at or after the fragment; those that also
        // end within it are contained, and replaced.
        let mut last = first;
        while last != len && self.entries[last].end() <= f.end {
            last += 1;
        }
        self.entries.splice(first..last, std::iter::once(entry));
        self.debug_check();
        true
    }

    /// Index of the member covering `offset` that extends furthest past it,
    /// and true; or, if no member covers it, the index of the first member
    /// beginning after it (possibly `len()`), and false.
    pub fn longest_overlapping(&self, offset: i64) -> (usize, bool) {
        longest_in(&self.entries, offset)
    }

    /// Members of `a` covering some offset not covered by `b`. A member of
    /// `a` counts as covered if a contiguous run of members of `b` covers it.
    pub fn difference(a: &CoverSet, b: &CoverSet) -> CoverSet {
        let mut out = CoverSet::default();
        let mut rest: &[Entry] = &b.entries;

        for x in &a.entries {
            // No member of `rest` before `ind` can overlap offsets >= x.begin,
            // and members of `a` are visited in increasing begin order.
            let (ind, _) = longest_in(rest, x.begin());
            rest = &rest[ind..];

            // Extend over members that continue the covered span until x.end.
            let mut ind = 0;
            while ind + 1 < rest.len()
                && rest[ind].end() < x.end()
                && rest[ind + 1].begin() <= rest[ind].end()
            {
                ind += 1;
            }
            if rest.len() == ind || x.begin() < rest[0].begin() || x.end() > rest[ind].end() {
                out.entries.push(x.clone());
            }
        }
        out
    }

    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            for pair in self.entries.windows(2) {
                assert!(pair[0].begin() < pair[1].begin(), "begins not increasing");
                assert!(pair[0].end() < pair[1].end(), "ends not increasing");
            }
        }
    }
}

fn longest_in(entries: &[Entry], offset: i64) -> (usize, bool) {
    let mut ind = entries.partition_point(|e| e.end() <= offset);
    let found = ind < entries.len() && entries[ind].begin() <= offset;
    while ind + 1 < entries.len() && entries[ind + 1].begin() <= offset {
        ind += 1;
    }
    (ind, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(begin: i64, end: i64) -> Entry {
        Entry {
            fragment: Fragment {
                begin,
                end,
                ..Default::default()
            },
            file: None,
        }
    }

    fn add(set: &mut CoverSet, begin: i64, end: i64) -> bool {
        set.add(entry(begin, end))
    }

    fn spans(set: &CoverSet) -> Vec<(i64, i64)> {
        set.entries.iter().map(|e| (e.begin(), e.end())).collect()
    }

    fn build(spans: &[(i64, i64)]) -> CoverSet {
        let mut set = CoverSet::default();
        for &(b, e) in spans {
            assert!(add(&mut set, b, e), "({b}, {e})");
        }
        set
    }

    #[test]
    fn insert_at_end() {
        let set = build(&[(100, 200), (200, 300), (201, 301)]);
        assert_eq!(spans(&set), [(100, 200), (200, 300), (201, 301)]);
    }

    #[test]
    fn replace_range_at_end() {
        let set = build(&[(100, 200), (200, 300), (300, 400), (400, 500), (150, 500)]);
        assert_eq!(spans(&set), [(100, 200), (150, 500)]);
        // A fragment beginning before every member and ending after the last
        // replaces them all.
        let set = build(&[(100, 200), (200, 300), (300, 400), (50, 600)]);
        assert_eq!(spans(&set), [(50, 600)]);
    }

    #[test]
    fn replace_one_at_end() {
        let set = build(&[(100, 200), (200, 300), (199, 300)]);
        assert_eq!(spans(&set), [(100, 200), (199, 300)]);
        let set = build(&[(100, 200), (200, 300), (200, 301)]);
        assert_eq!(spans(&set), [(100, 200), (200, 301)]);
    }

    #[test]
    fn replace_in_middle() {
        let set = build(&[(100, 200), (200, 300), (300, 400), (400, 500), (150, 450)]);
        assert_eq!(spans(&set), [(100, 200), (150, 450), (400, 500)]);
        let set = build(&[(100, 200), (200, 300), (300, 400), (150, 350)]);
        assert_eq!(spans(&set), [(100, 200), (150, 350), (300, 400)]);
    }

    #[test]
    fn insert_in_middle() {
        let set = build(&[(100, 200), (300, 400), (200, 300)]);
        assert_eq!(spans(&set), [(100, 200), (200, 300), (300, 400)]);
        let set = build(&[(100, 200), (300, 400), (201, 299)]);
        assert_eq!(spans(&set), [(100, 200), (201, 299), (300, 400)]);
    }

    #[test]
    fn replace_and_insert_at_beginning() {
        let set = build(&[(100, 200), (200, 300), (300, 400), (100, 300)]);
        assert_eq!(spans(&set), [(100, 300), (300, 400)]);
        let set = build(&[(100, 200), (200, 300), (300, 400), (99, 200)]);
        assert_eq!(spans(&set), [(99, 200), (200, 300), (300, 400)]);
        let set = build(&[(200, 300), (300, 400), (199, 200)]);
        assert_eq!(spans(&set), [(199, 200), (200, 300), (300, 400)]);
    }

    #[test]
    fn overlapping_ranges() {
        let set = build(&[
            (100, 150),
            (149, 201),
            (200, 250),
            (250, 300),
            (299, 351),
            (350, 400),
            (200, 300),
            (300, 400),
            (100, 200),
        ]);
        assert_eq!(
            spans(&set),
            [(100, 200), (149, 201), (200, 300), (299, 351), (300, 400)]
        );
    }

    #[test]
    fn no_action() {
        let mut set = build(&[(100, 200), (200, 300), (300, 400)]);
        // Only adds that exactly replace a member are accepted.
        assert!(!add(&mut set, 101, 200));
        assert!(!add(&mut set, 100, 199));
        assert!(add(&mut set, 100, 200));
        assert!(!add(&mut set, 201, 300));
        assert!(!add(&mut set, 200, 299));
        assert!(add(&mut set, 200, 300));
        assert!(!add(&mut set, 301, 400));
        assert!(add(&mut set, 300, 400));
        assert!(!add(&mut set, 350, 350)); // Empty.
        assert_eq!(spans(&set), [(100, 200), (200, 300), (300, 400)]);
    }

    #[test]
    fn offsets() {
        let mut set = CoverSet::default();
        assert_eq!((set.begin_offset(), set.end_offset()), (0, 0));
        add(&mut set, 100, 150);
        assert_eq!((set.begin_offset(), set.end_offset()), (100, 150));
        add(&mut set, 140, 250);
        assert_eq!((set.begin_offset(), set.end_offset()), (100, 250));
        add(&mut set, 50, 100);
        assert_eq!((set.begin_offset(), set.end_offset()), (50, 250));
    }

    #[test]
    fn longest_overlapping() {
        let set = build(&[
            (100, 200),
            (149, 201),
            (200, 300),
            (299, 351),
            (300, 400),
            (500, 600),
        ]);
        for (offset, found, ind) in [
            (0, false, 0),
            (100, true, 0),
            (148, true, 0),
            (149, true, 1),
            (199, true, 1),
            (200, true, 2),
            (298, true, 2),
            (299, true, 3),
            (300, true, 4),
            (350, true, 4),
            (399, true, 4),
            (400, false, 5),
            (401, false, 5),
            (499, false, 5),
            (500, true, 5),
            (599, true, 5),
            (600, false, 6),
        ] {
            assert_eq!(
                set.longest_overlapping(offset),
                (ind, found),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn difference() {
        let b = build(&[(100, 200), (150, 225), (225, 250), (250, 300), (301, 400)]);
        let a = build(&[
            (99, 105),  // Begins before the first member of b.
            (100, 110), // Small, within one member of b.
            (110, 120), // Another.
            (130, 210), // Covered by two members of b.
            (150, 225), // Exactly a member of b.
            (151, 300), // Covered by three members of b.
            (152, 301), // Not covered: a one-byte gap in b.
            (300, 350), // Not covered, same gap.
            (301, 360), // Covered.
            (360, 401), // Extends past b.
            (400, 450), // Entirely past b.
        ]);
        assert_eq!(
            spans(&CoverSet::difference(&a, &b)),
            [(99, 105), (152, 301), (300, 350), (360, 401), (400, 450)]
        );
        assert_eq!(
            spans(&CoverSet::difference(&a, &CoverSet::default())),
            spans(&a)
        );
    }

    #[test]
    fn invariants_hold_under_random_adds() {
        // A small deterministic generator; the reference is a brute-force
        // check of the cover-set rules after each add.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as i64
        };
        for _ in 0..200 {
            let mut set = CoverSet::default();
            let mut added: Vec<(i64, i64)> = Vec::new();
            for _ in 0..30 {
                let begin = next(100);
                let end = begin + next(40);
                set.add(entry(begin, end));
                if end > begin {
                    added.push((begin, end));
                }
                let got = spans(&set);
                for w in got.windows(2) {
                    assert!(w[0].0 < w[1].0 && w[0].1 < w[1].1, "{got:?}");
                }
                // Every offset covered by something added is still covered.
                for &(b, e) in &added {
                    for o in b..e {
                        assert!(set.longest_overlapping(o).1, "{o} lost in {got:?}");
                    }
                }
            }
        }
    }
}
