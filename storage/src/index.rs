//! The fragment index: which fragment serves a read at a given offset.
//!
//! The index is the union of the *remote* set (fragments persisted to
//! stores, replaced wholesale by each store listing) and *local* fragments
//! (the spool's commits and completed spools not yet seen in a listing), kept
//! as one cover set. A local fragment is dropped once remote fragments cover
//! it. The write head is the end of the last fragment.
//!
//! Blocked reads wait for the next change of the index (a commit, a listing,
//! or `close`) with [`Index::changed`]. To avoid a lost wake-up, create the
//! `Changed` future *before* querying:
//!
//! ```ignore
//! loop {
//!     let changed = index.borrow().changed(); // registered now
//!     match index.borrow().query(offset, begin_mod_time, now_unix()) {
//!         Query::Found { .. } => break /* serve it */,
//!         Query::NotFound { .. } if !block => break /* OFFSET_NOT_YET_AVAILABLE */,
//!         Query::NotFound { .. } => {}
//!     }
//!     changed.await; // any change after `changed()` wakes it
//!     if index.borrow().is_closed() { break /* clean EOF */ }
//! }
//! ```
//!
//! (No `RefCell` borrow is held across the `.await`: each `borrow()` above is
//! a temporary.)
//!
//! Lives on: the journal's owner core (`!Send`).

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use protocol::Fragment;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::cover_set::{CoverSet, Entry};
use crate::fragment::{FragmentFile, LocalFragment};

/// When no fragment covers a read's offset, a later *persisted* fragment may
/// be served instead if it was last modified at least this long ago (or is
/// the first fragment of the index). Younger ones may be racing an upload of
/// the missing span, so the read waits.
pub const OFFSET_JUMP_AGE_THRESHOLD_SECS: i64 = 6 * 60 * 60;

/// Outcome of [`Index::query`].
#[derive(Clone, Debug)]
pub enum Query {
    /// `fragment` covers `offset` (which may be greater than the requested
    /// offset after an offset jump or a begin-mod-time skip). `file` is set
    /// when the fragment is local; its committed content ends at
    /// `fragment.end` as of this query.
    Found {
        offset: i64,
        fragment: Fragment,
        file: Option<Rc<FragmentFile>>,
    },
    /// Nothing can be served at `offset` yet (the requested offset, the write
    /// head if −1 was requested, or where skipping stopped).
    NotFound { offset: i64, write_head: i64 },
}

/// The fragment index of one journal.
///
/// Lives on: the journal's owner core (`!Send`).
pub struct Index {
    /// All fragments: remote and local.
    set: CoverSet,
    /// Local fragments only.
    local: CoverSet,
    notify: Arc<Notify>,
    refreshed: bool,
    closed: bool,
}

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

impl Index {
    pub fn new() -> Index {
        Index {
            set: CoverSet::default(),
            local: CoverSet::default(),
            notify: Arc::new(Notify::new()),
            refreshed: false,
            closed: false,
        }
    }

    /// Adds a local fragment: a spool commit (a growing spool re-adds its
    /// fragment with the same begin and a larger end, replacing the previous
    /// one), a completed spool, or a recovered one. Empty fragments and
    /// fragments contained in an indexed one are ignored.
    pub fn add_local(&mut self, f: LocalFragment) {
        let entry = Entry {
            fragment: f.fragment,
            file: Some(f.file),
        };
        self.set.add(entry.clone());
        self.local.add(entry);
        self.wake();
    }

    /// Replaces the remote fragments with a store listing. Local fragments
    /// covered by the listing are dropped (their files stay open for readers
    /// holding them); the rest stay indexed. Marks the index refreshed.
    pub fn replace_remote(&mut self, set: Vec<Fragment>) {
        let mut remote = CoverSet::default();
        for fragment in set {
            remote.add(Entry {
                fragment,
                file: None,
            });
        }
        self.local = CoverSet::difference(&self.local, &remote);
        for entry in self.local.entries() {
            let added = remote.add(entry.clone());
            assert!(
                added,
                "a local fragment not covered by the listing must be added"
            );
        }
        self.set = remote;
        self.refreshed = true;
        self.wake();
    }

    /// Records that a local fragment was persisted: `persisted` is the
    /// fragment as its store holds it (same journal, begin, end and sum, with
    /// `backing_store` and `mod_time` set). It replaces the local entry, and
    /// reads of it go to the store from now on. It stays indexed across store
    /// listings that do not show it yet, until one covers it. Returns whether
    /// the index held the local fragment (false if a listing or a larger
    /// fragment had already covered it).
    pub fn mark_persisted(&mut self, persisted: Fragment) -> bool {
        assert!(persisted.mod_time != 0 && !persisted.backing_store.is_empty());
        let held = self.local.entries().iter().any(|e| {
            e.file.is_some()
                && e.fragment.begin == persisted.begin
                && e.fragment.end == persisted.end
                && e.fragment.sum == persisted.sum
        });
        if !held {
            return false;
        }
        let entry = Entry {
            fragment: persisted,
            file: None,
        };
        // An equal span replaces the member it matches, in both sets.
        let replaced = self.local.add(entry.clone());
        assert!(replaced, "an equal local fragment must be replaced");
        self.set.add(entry);
        self.wake();
        true
    }

    /// Finds the fragment serving a read at `offset` (−1: the write head),
    /// following Gazette's rules:
    ///
    /// 1. Take the covering fragment extending furthest past the offset.
    /// 2. If none covers it but a later persisted fragment exists that is
    ///    the index's first fragment, or was modified more than six hours
    ///    before `now_unix`, jump the offset to that fragment's begin.
    /// 3. If the fragment is persisted with `mod_time < begin_mod_time`, skip
    ///    the offset to its end and repeat. Local fragments are never skipped.
    pub fn query(&self, offset: i64, begin_mod_time: i64, now_unix: i64) -> Query {
        let entries = self.set.entries();
        let mut offset = if offset == -1 {
            self.write_head()
        } else {
            offset
        };

        loop {
            let (ind, mut found) = self.set.longest_overlapping(offset);

            if !found
                && let Some(next) = entries.get(ind)
                && next.fragment.mod_time != 0
                && (ind == 0
                    || next.fragment.mod_time
                        < now_unix.saturating_sub(OFFSET_JUMP_AGE_THRESHOLD_SECS))
            {
                offset = next.fragment.begin;
                found = true;
                // Members before `ind` end at or before the old offset and
                // later ones begin after `next`: it alone covers the new one.
                debug_assert_eq!(self.set.longest_overlapping(offset), (ind, true));
            }
            if !found {
                return Query::NotFound {
                    offset,
                    write_head: self.write_head(),
                };
            }

            let entry = &entries[ind];
            let f = &entry.fragment;
            if f.mod_time != 0 && f.mod_time < begin_mod_time {
                assert!(f.end > offset);
                offset = f.end;
                continue;
            }
            return Query::Found {
                offset,
                fragment: f.clone(),
                file: entry.file.clone(),
            };
        }
    }

    /// End of the last fragment (0 when empty): where the next append lands.
    pub fn write_head(&self) -> i64 {
        self.set.end_offset()
    }

    /// Begin of the first fragment (0 when empty).
    pub fn begin(&self) -> i64 {
        self.set.begin_offset()
    }

    /// (begin, end, mod_time of the last fragment): the last fragment is
    /// local iff its mod_time is 0. All zero when empty.
    pub fn summary(&self) -> (i64, i64, i64) {
        match self.set.entries().last() {
            None => (0, 0, 0),
            Some(last) => (self.begin(), last.fragment.end, last.fragment.mod_time),
        }
    }

    /// The cover set in begin order, each fragment with its file if local.
    pub fn fragments(&self) -> Vec<(Fragment, Option<Rc<FragmentFile>>)> {
        self.set
            .entries()
            .iter()
            .map(|e| (e.fragment.clone(), e.file.clone()))
            .collect()
    }

    /// Number of fragments in the cover set.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.len() == 0
    }

    /// Whether a store listing was applied at least once. Appends and
    /// ListFragments wait for it (see `changed`).
    pub fn refreshed(&self) -> bool {
        self.refreshed
    }

    /// Ends blocked reads: wakes every waiter, and `is_closed` turns true.
    /// Used when the journal's replica goes away or the broker stops.
    pub fn close(&mut self) {
        self.closed = true;
        self.wake();
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// A future resolving at the next change of the index after this call
    /// (any `add_local`, `replace_remote` or `close`). Create it before
    /// querying, await it after; it holds no borrow of the index.
    pub fn changed(&self) -> Changed {
        let mut notified = Box::pin(self.notify.clone().notified_owned());
        // Register now, so a change between this call and the first poll is
        // not lost. (`notify_waiters` reaches futures from their creation,
        // but enabling makes the intent independent of that detail.)
        notified.as_mut().enable();
        Changed { notified }
    }

    fn wake(&self) {
        self.notify.notify_waiters();
    }
}

/// Resolves at the next change of an [`Index`]; see [`Index::changed`].
pub struct Changed {
    notified: Pin<Box<OwnedNotified>>,
}

impl Future for Changed {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.notified.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("set", &self.set)
            .field("local", &self.local.len())
            .field("refreshed", &self.refreshed)
            .field("closed", &self.closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::Spool;
    use crate::testing::run;
    use crate::testing::sum_of_bytes;
    use bytes::Bytes;
    use protocol::{CompressionCodec, LabelSet};
    use std::cell::RefCell;
    use std::path::Path;

    const J: &str = "a/journal";
    const T: i64 = 1_500_000_000;

    fn frag(begin: i64, end: i64, mod_time: i64) -> Fragment {
        Fragment {
            journal: J.into(),
            begin,
            end,
            mod_time,
            backing_store: if mod_time != 0 {
                "s3://bucket/".into()
            } else {
                String::new()
            },
            compression_codec: CompressionCodec::None as i32,
            ..Default::default()
        }
    }

    fn local(begin: i64, end: i64) -> LocalFragment {
        LocalFragment {
            fragment: frag(begin, end, 0),
            file: Rc::new(FragmentFile::new(Path::new("/nonexistent"), begin)),
        }
    }

    /// (offset, begin, end, mod_time, is_local) of a Found, or None.
    fn found(q: Query) -> Option<(i64, i64, i64, i64, bool)> {
        match q {
            Query::Found {
                offset,
                fragment,
                file,
            } => Some((
                offset,
                fragment.begin,
                fragment.end,
                fragment.mod_time,
                file.is_some(),
            )),
            Query::NotFound { .. } => None,
        }
    }

    fn not_found(q: Query) -> Option<(i64, i64)> {
        match q {
            Query::NotFound { offset, write_head } => Some((offset, write_head)),
            Query::Found { .. } => None,
        }
    }

    #[test]
    fn remote_and_local_queries() {
        let mut index = Index::new();
        assert!(!index.refreshed());
        index.replace_remote(vec![frag(100, 150, T), frag(150, 200, T)]);
        assert!(index.refreshed());
        assert_eq!(
            found(index.query(110, 0, T)),
            Some((110, 100, 150, T, false))
        );
        assert_eq!(index.write_head(), 200);

        index.add_local(local(200, 250));
        assert_eq!(
            found(index.query(210, 0, T)),
            Some((210, 200, 250, 0, true))
        );
        assert_eq!((index.begin(), index.write_head()), (100, 250));
        assert_eq!(index.summary(), (100, 250, 0));
    }

    #[test]
    fn remote_replaces_local() {
        let mut index = Index::new();
        index.add_local(local(100, 200));
        assert_eq!(
            found(index.query(110, 0, T)),
            Some((110, 100, 200, 0, true))
        );

        // The listing covers the local fragment with two smaller ones: the
        // local one is dropped, so only remote fragments serve.
        index.replace_remote(vec![frag(100, 150, T), frag(150, 200, T)]);
        assert_eq!(
            found(index.query(110, 0, T)),
            Some((110, 100, 150, T, false))
        );
        assert_eq!(index.len(), 2);

        // A later listing without them does not bring the local one back.
        index.replace_remote(vec![]);
        assert!(index.is_empty());
    }

    #[test]
    fn mark_persisted_survives_listings_until_covered() {
        let mut index = Index::new();
        index.add_local(local(100, 200));
        index.add_local(local(200, 300));
        // Scenario 24: only a local fragment at 100, so a read at 0 waits...
        assert_eq!(not_found(index.query(0, 0, T)), Some((0, 300)));

        // ... until it is persisted: then the read jumps to it.
        assert!(index.mark_persisted(frag(100, 200, T)));
        assert_eq!(found(index.query(0, 0, T)), Some((100, 100, 200, T, false)));
        // Marking again (or marking what the index never held) is a no-op.
        assert!(!index.mark_persisted(frag(100, 200, T)));
        assert!(!index.mark_persisted(frag(300, 400, T)));

        // A listing taken before the upload landed does not lose it.
        index.replace_remote(vec![]);
        assert_eq!(
            found(index.query(150, 0, T)),
            Some((150, 100, 200, T, false))
        );
        assert_eq!(
            found(index.query(250, 0, T)),
            Some((250, 200, 300, 0, true))
        );
        // A listing that shows it takes over.
        index.replace_remote(vec![frag(100, 200, T + 1)]);
        assert_eq!(
            found(index.query(150, 0, T)),
            Some((150, 100, 200, T + 1, false))
        );
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn growing_spool_replaces_its_fragment() {
        let mut index = Index::new();
        index.add_local(local(0, 9));
        index.add_local(local(0, 13));
        assert_eq!(index.len(), 1);
        assert_eq!(found(index.query(9, 0, T)), Some((9, 0, 13, 0, true)));
        // Zero-length fragments are ignored.
        index.add_local(local(13, 13));
        assert_eq!(index.len(), 1);
        // The local fragment survives a listing that does not cover it, and
        // a listed fragment it contains is not indexed.
        index.replace_remote(vec![frag(0, 5, T), frag(10, 20, T)]);
        assert_eq!(index.len(), 2);
        assert_eq!(found(index.query(14, 0, T)), Some((14, 10, 20, T, false)));
        assert_eq!(found(index.query(9, 0, T)), Some((9, 0, 13, 0, true)));
    }

    /// Scenario 20: reads at the head.
    #[test]
    fn query_at_head() {
        let mut index = Index::new();
        index.add_local(local(100, 200));
        assert_eq!(not_found(index.query(-1, 0, T)), Some((200, 200)));
        index.add_local(local(200, 250));
        assert_eq!(
            found(index.query(200, 0, T)),
            Some((200, 200, 250, 0, true))
        );
        assert_eq!(index.write_head(), 250);
        // An empty index's head is 0.
        assert_eq!(not_found(Index::new().query(-1, 0, T)), Some((0, 0)));
    }

    /// Scenario 24, first part: a gap at the beginning of the journal.
    #[test]
    fn query_at_missing_byte_zero() {
        let mut index = Index::new();
        index.add_local(local(100, 200));
        assert_eq!(not_found(index.query(0, 0, T)), Some((0, 200)));

        // Once persisted (even very recently), a read from byte zero jumps
        // to the first fragment.
        index.replace_remote(vec![frag(100, 200, T), frag(200, 300, 0)]);
        assert_eq!(found(index.query(0, 0, T)), Some((100, 100, 200, T, false)));
        assert_eq!(index.write_head(), 300);
    }

    /// Scenario 24, second part: a gap in the middle.
    #[test]
    fn query_at_missing_middle() {
        let mut index = Index::new();
        index.add_local(local(100, 200));
        index.add_local(local(300, 400));
        assert!(found(index.query(110, 0, T)).is_some());
        assert_eq!(not_found(index.query(210, 0, T)), Some((210, 400)));
        assert!(found(index.query(310, 0, T)).is_some());

        // Persisted just now: no jump yet, the gap may be an upload in flight.
        index.replace_remote(vec![frag(100, 200, T), frag(300, 400, T)]);
        assert_eq!(not_found(index.query(210, 0, T)), Some((210, 400)));
        let threshold = T + OFFSET_JUMP_AGE_THRESHOLD_SECS;
        assert_eq!(not_found(index.query(210, 0, threshold)), Some((210, 400)));

        // A fragment filling part of the gap arrives.
        index.add_local(local(200, 250));
        assert_eq!(
            found(index.query(210, 0, T)),
            Some((210, 200, 250, 0, true))
        );
        assert_eq!(not_found(index.query(250, 0, T)), Some((250, 400)));

        // Past the age threshold, the read jumps over the rest of the gap.
        assert_eq!(
            found(index.query(250, 0, threshold + 1)),
            Some((300, 300, 400, T, false))
        );
    }

    /// Scenario 25: begin_mod_time skips only persisted fragments.
    #[test]
    fn query_with_begin_mod_time() {
        let mut index = Index::new();
        index.replace_remote(vec![
            frag(100, 200, T - 10),
            frag(200, 300, T),
            frag(300, 400, T - 1),
            frag(400, 500, T + 100),
        ]);
        index.add_local(local(500, 600));

        for (offset, want) in [
            (50, (200, 200, 300, T, false)),
            (150, (200, 200, 300, T, false)),
            (200, (200, 200, 300, T, false)),
            (350, (400, 400, 500, T + 100, false)),
            (400, (400, 400, 500, T + 100, false)),
            (500, (500, 500, 600, 0, true)),
        ] {
            assert_eq!(
                found(index.query(offset, T, T)),
                Some(want),
                "offset {offset}"
            );
        }
        assert_eq!(index.write_head(), 600);
        // Without the constraint, offset 150 is served by its own fragment.
        assert_eq!(
            found(index.query(150, 0, T)),
            Some((150, 100, 200, T - 10, false))
        );
    }

    /// Scenario 35's fixture: overlapping fragments all stay in the cover
    /// set, listed in begin order.
    #[test]
    fn fragments_in_begin_order() {
        let mut index = Index::new();
        index.replace_remote(vec![
            frag(0, 40, 90),
            frag(40, 110, 101),
            frag(99, 130, 200),
            frag(131, 318, 150),
            frag(319, 400, 290),
        ]);
        index.add_local(local(380, 600));
        let listed: Vec<_> = index
            .fragments()
            .into_iter()
            .map(|(f, file)| (f.begin, f.end, file.is_some()))
            .collect();
        assert_eq!(
            listed,
            [
                (0, 40, false),
                (40, 110, false),
                (99, 130, false),
                (131, 318, false),
                (319, 400, false),
                (380, 600, true)
            ]
        );
    }

    /// Scenarios 16–19: blocked reads of a growing spool, through a real
    /// spool and the change notification.
    #[test]
    fn blocked_reads_follow_a_growing_spool() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        run(|| async move {
            let (mut spool, _) = Spool::open(&root, J, CompressionCodec::None).await.unwrap();
            let index = Rc::new(RefCell::new(Index::new()));
            // How far the reader got: the writer waits for it after each append, so each
            // append is seen as it lands (writes complete without yielding).
            let progress = Rc::new(std::cell::Cell::new(0i64));

            // A blocking reader at offset 0 that reads to end_offset 14,
            // collecting (offset, write_head, fragment end) per metadata
            // message and the content it streams.
            let reader = glommio::spawn_local({
                let index = index.clone();
                let progress = progress.clone();
                async move {
                    let mut offset = 0i64;
                    let mut metadata = Vec::new();
                    let mut content = Vec::new();
                    while offset < 14 {
                        let changed = index.borrow().changed();
                        let q = index.borrow().query(offset, 0, T);
                        let Query::Found {
                            offset: at,
                            fragment,
                            file,
                        } = q
                        else {
                            changed.await;
                            continue;
                        };
                        metadata.push((
                            at,
                            index.borrow().write_head(),
                            fragment.end,
                            fragment.sum,
                        ));
                        let len = (fragment.end.min(14) - at) as usize;
                        let bytes = file.unwrap().read_at(at, len).await.unwrap();
                        content.extend_from_slice(&bytes);
                        offset = at + bytes.len() as i64;
                        progress.set(offset);
                    }
                    (metadata, content)
                }
            });
            glommio::executor().yield_task_queue_now().await;

            for chunk in ["foobarbaz", "bing", "!", "ignored"] {
                spool
                    .write(&Bytes::from_static(chunk.as_bytes()))
                    .await
                    .unwrap();
                spool.commit(LabelSet::default()).await.unwrap();
                index.borrow_mut().add_local(LocalFragment {
                    fragment: spool.fragment().clone(),
                    file: spool.file(),
                });
                let end = spool.fragment().end;
                while end <= 14 && progress.get() < end {
                    glommio::executor().yield_task_queue_now().await;
                }
            }
            let (metadata, content) = reader.await;
            assert_eq!(content, b"foobarbazbing!");
            assert_eq!(
                metadata,
                [
                    (0, 9, 9, Some(sum_of_bytes(b"foobarbaz"))),
                    (9, 13, 13, Some(sum_of_bytes(b"foobarbazbing"))),
                    (13, 14, 14, Some(sum_of_bytes(b"foobarbazbing!"))),
                ]
            );

            // Scenario 18: a non-blocking read from the middle, then the head.
            let q = index.borrow().query(3, 0, T);
            let Query::Found {
                offset,
                fragment,
                file,
            } = q
            else {
                panic!("{q:?}")
            };
            assert_eq!((offset, fragment.end), (3, 21));
            let bytes = file
                .unwrap()
                .read_at(3, (fragment.end - 3) as usize)
                .await
                .unwrap();
            assert_eq!(&bytes[..], b"barbazbing!ignored");
            assert_eq!(not_found(index.borrow().query(21, 0, T)), Some((21, 21)));

            // close() wakes blocked readers.
            let changed = index.borrow().changed();
            index.borrow_mut().close();
            changed.await;
            assert!(index.borrow().is_closed());
        });
    }

    /// A change between creating `changed()` and awaiting it is not lost.
    #[test]
    fn change_before_await_is_not_lost() {
        run(|| async {
            let mut index = Index::new();
            let changed = index.changed();
            index.add_local(local(0, 10));
            changed.await;
            let changed = index.changed();
            index.replace_remote(vec![]);
            changed.await;
        });
    }
}
