//! Precise sleeps for the open-loop schedule.
//!
//! tokio's timer wheel has a resolution of one millisecond and rounds deadlines up, so a
//! writer that sleeps until a record's intended send time with `tokio::time::sleep_until`
//! would send up to a millisecond late. In open-loop mode that lateness counts in the
//! measured latency (which is right: the record really waited), but it is the load
//! generator's fault, not the broker's, and on a fast broker it would dominate the median.
//!
//! So the schedule sleeps on a dedicated pacer thread instead: a heap of (deadline, waker)
//! pairs and a condition variable waited on with the earliest deadline as timeout. With the
//! thread's timer slack set to 1 µs the wake-up lands tens of microseconds after the
//! deadline rather than up to a millisecond. How late sends really were is measured anyway
//! (the "send lag" histogram, OMB's `publishDelayLatency`).
//!
//! Lives on: the pacer thread (the heap); [`SleepUntil`] futures run on any tokio worker.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

struct Entry {
    deadline: Instant,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

#[derive(Default)]
struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
}

#[derive(Default)]
struct Shared {
    timers: Mutex<Timers>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Timers> {
        // A panic while holding this lock cannot leave the heap inconsistent (push and pop
        // are the only operations), so a poisoned lock is still usable.
        self.timers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self, deadline: Instant, waker: Waker) {
        let mut timers = self.lock();
        let earliest = timers.heap.peek().map(|Reverse(e)| e.deadline);
        let seq = timers.next_seq;
        timers.next_seq += 1;
        timers.heap.push(Reverse(Entry {
            deadline,
            seq,
            waker,
        }));
        drop(timers);
        // Only a new earliest deadline changes how long the pacer thread should wait.
        if earliest.is_none_or(|e| deadline < e) {
            self.cv.notify_one();
        }
    }

    fn run(&self) {
        set_fine_timer_slack();
        let mut due: Vec<Waker> = Vec::new();
        let mut timers = self.lock();
        loop {
            let now = Instant::now();
            while let Some(Reverse(top)) = timers.heap.peek() {
                if top.deadline > now {
                    break;
                }
                let Reverse(entry) = timers.heap.pop().expect("peeked above");
                due.push(entry.waker);
            }
            if !due.is_empty() {
                // Wake outside the lock: a woken task may register its next deadline at once.
                drop(timers);
                due.drain(..).for_each(Waker::wake);
                timers = self.lock();
                continue;
            }
            timers = match timers.heap.peek() {
                None => self.cv.wait(timers).unwrap_or_else(|e| e.into_inner()),
                Some(Reverse(top)) => {
                    let wait = top.deadline.saturating_duration_since(now);
                    self.cv
                        .wait_timeout(timers, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// Asks the kernel to fire this thread's timers within 1 µs of their deadline (the default
/// slack is 50 µs). Failure only costs precision, so it is ignored.
fn set_fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

fn shared() -> &'static Arc<Shared> {
    static PACER: OnceLock<Arc<Shared>> = OnceLock::new();
    PACER.get_or_init(|| {
        let shared = Arc::new(Shared::default());
        let for_thread = shared.clone();
        std::thread::Builder::new()
            .name("loadgen-pacer".into())
            .spawn(move || for_thread.run())
            .expect("spawning the pacer thread");
        shared
    })
}

/// A future that completes at (or just after) `deadline`, woken by the pacer thread.
pub fn sleep_until(deadline: Instant) -> SleepUntil {
    SleepUntil {
        deadline,
        registered: None,
    }
}

/// See [`sleep_until`]. Dropping it early leaves a stale entry that causes one harmless
/// spurious wake-up.
pub struct SleepUntil {
    deadline: Instant,
    registered: Option<Waker>,
}

impl Future for SleepUntil {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let stale = match &self.registered {
            Some(w) => !w.will_wake(cx.waker()),
            None => true,
        };
        if stale {
            shared().register(self.deadline, cx.waker().clone());
            self.registered = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn sleeps_wake_in_order_and_never_early() {
        // Precision is not asserted: on a loaded machine any thread can be descheduled for
        // tens of milliseconds. Runs report the real figure as "send lag". What must hold
        // is that every sleep ends (no lost wake-up) and none ends early.
        let run = async {
            let start = Instant::now();
            let mut woke = Vec::new();
            for i in 1..=20u64 {
                let deadline = start + Duration::from_micros(300 * i);
                sleep_until(deadline).await;
                let now = Instant::now();
                assert!(now >= deadline, "woke before the deadline");
                woke.push(now);
            }
            assert!(woke.windows(2).all(|w| w[0] <= w[1]));
        };
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("a sleep was never woken");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_tasks_with_interleaved_deadlines_all_wake() {
        let start = Instant::now();
        let tasks: Vec<_> = (0..50u64)
            .map(|i| {
                tokio::spawn(async move {
                    // Later-spawned tasks often have earlier deadlines: exercises re-arming.
                    let deadline = start + Duration::from_micros(5_000 - 97 * i);
                    sleep_until(deadline).await;
                    assert!(Instant::now() >= deadline);
                })
            })
            .collect();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("a sleep was never woken")
                .unwrap();
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn past_deadline_is_ready_at_once() {
        sleep_until(Instant::now() - Duration::from_millis(5)).await;
    }
}
