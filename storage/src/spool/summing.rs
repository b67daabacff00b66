//! The SHA-1 sums of a core's spool writes, computed together.
//!
//! Every spool write adds its content to the fragment's running sum, and on a primary also
//! to the append's own sum (`Spool::write_summing`). One SHA-1 stream is bound by the latency
//! of its rounds, so streams computed side by side cost much less than one after another
//! (`Summer::update_lanes`; on an AMD EPYC VM four lanes hash at 0.208 ns per byte each
//! against 0.535 for one). The streams of one spool are at most two, but a core writes many
//! spools: a write of at least [`MIN_BATCHED`] bytes queues its sums on its core, yields
//! once so that the other writes made ready in the same turn of the executor queue theirs,
//! and then the first of them to run again sums every queued write in one pass.
//!
//! Nothing is shared between threads: the queue is the thread's own, and a summing pass
//! never awaits. A write whose future is dropped while it yields leaves its job queued; the
//! next pass sums it for nobody, and the spool it came from adopted nothing.
//!
//! Lives on: the thread (core) of the spools whose writes it sums.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;

use crate::summer::Summer;

/// Content at least this long is summed in its core's batch; shorter content is summed at
/// once, since the yield costs about what hashing a few hundred bytes does.
pub const MIN_BATCHED: usize = 8 << 10;

/// One write's sums: what they were before `content` on entry, what they are after it once
/// `done`.
struct Job {
    content: Bytes,
    sums: RefCell<(Summer, Option<Summer>)>,
    done: Cell<bool>,
}

thread_local! {
    static QUEUE: RefCell<Vec<Rc<Job>>> = const { RefCell::new(Vec::new()) };
    static PASSES: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Adds `content` to `spool` and `also` (when given), summed in a batch with the other
/// writes of this thread made ready in the same executor turn (content of at least
/// [`MIN_BATCHED`] bytes), or at once. Both are updated only when it returns: a caller
/// dropped while it yields leaves them as they were.
pub async fn sum(spool: &mut Summer, also: Option<&mut Summer>, content: &Bytes) {
    if content.len() < MIN_BATCHED {
        match also {
            Some(also) => Summer::update_pair(spool, also, content),
            None => spool.update(content),
        }
        return;
    }
    let job = Rc::new(Job {
        content: content.clone(),
        sums: RefCell::new((spool.clone(), also.as_deref().cloned())),
        done: Cell::new(false),
    });
    QUEUE.with(|q| q.borrow_mut().push(Rc::clone(&job)));
    glommio::executor().yield_now().await;
    if !job.done.get() {
        sum_queued();
    }
    debug_assert!(job.done.get(), "a summing pass took every queued job");
    let (a, b) = job.sums.take();
    *spool = a;
    if let (Some(also), Some(b)) = (also, b) {
        *also = b;
    }
}

/// Sums every queued job in one pass, in groups of `Summer::update_lanes`'s interleaved streams.
fn sum_queued() {
    let jobs = QUEUE.with(|q| std::mem::take(&mut *q.borrow_mut()));
    {
        let mut held: Vec<_> = jobs.iter().map(|job| job.sums.borrow_mut()).collect();
        let mut lanes: Vec<(&mut Summer, &[u8])> = Vec::with_capacity(2 * jobs.len());
        for (job, sums) in jobs.iter().zip(held.iter_mut()) {
            let (a, b) = &mut **sums;
            lanes.push((a, &job.content));
            if let Some(b) = b {
                lanes.push((b, &job.content));
            }
        }
        Summer::update_lanes(&mut lanes);
    }
    for job in &jobs {
        job.done.set(true);
    }
    PASSES.with(|p| {
        let (passes, summed) = p.get();
        p.set((passes + 1, summed + jobs.len() as u64));
    });
}

/// This thread's summing passes and the writes they summed (batched writes only): their
/// ratio is how many writes a pass summed together on average.
pub fn passes() -> (u64, u64) {
    PASSES.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha1::{Digest, Sha1};

    fn content(n: usize, seed: u8) -> Bytes {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect::<Vec<u8>>()
            .into()
    }

    /// Writes made ready together are summed in one pass, each to the same result as alone.
    #[test]
    fn ready_writes_share_a_pass() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let (before, before_summed) = passes();
                let bodies: Vec<Bytes> = (0..5)
                    .map(|k| content(MIN_BATCHED + 977 * k, k as u8))
                    .collect();
                let mut tasks = Vec::new();
                for (k, body) in bodies.iter().cloned().enumerate() {
                    tasks.push(glommio::spawn_local(async move {
                        let mut spool = Summer::new();
                        spool.update(&[k as u8; 13][..k]);
                        let mut also = (k % 2 == 0).then(Summer::new);
                        sum(&mut spool, also.as_mut(), &body).await;
                        (spool, also)
                    }));
                }
                for (k, task) in tasks.into_iter().enumerate() {
                    let (spool, also) = task.await;
                    let mut whole = vec![k as u8; k];
                    whole.extend_from_slice(&bodies[k]);
                    assert_eq!(spool.digest(), <[u8; 20]>::from(Sha1::digest(&whole)));
                    match also {
                        Some(also) => {
                            assert_eq!(also.digest(), <[u8; 20]>::from(Sha1::digest(&bodies[k])))
                        }
                        None => assert_eq!(k % 2, 1),
                    }
                }
                let (after, summed) = passes();
                assert_eq!(after - before, 1, "one pass summed the five writes");
                assert_eq!(summed - before_summed, 5);
                // Short content is summed at once, outside any pass.
                let short = content(100, 7);
                let mut s = Summer::new();
                sum(&mut s, None, &short).await;
                assert_eq!(s.digest(), <[u8; 20]>::from(Sha1::digest(&short)));
                assert_eq!(passes().0, after);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A write dropped while it yields leaves its job to the next pass, which sums it for
    /// nobody; the next write is unaffected.
    #[test]
    fn a_dropped_write_is_summed_for_nobody() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let body = content(MIN_BATCHED, 1);
                let dropped = glommio::spawn_local({
                    let body = body.clone();
                    async move { sum(&mut Summer::new(), None, &body).await }
                });
                // Let it queue its job and yield, then drop it.
                glommio::executor().yield_now().await;
                drop(dropped);
                let mut s = Summer::new();
                sum(&mut s, None, &body).await;
                assert_eq!(s.digest(), <[u8; 20]>::from(Sha1::digest(&body)));
                assert!(QUEUE.with(|q| q.borrow().is_empty()));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
