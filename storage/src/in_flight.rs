//! Disk operations of spools (and their fragment files) in flight on this thread. With the
//! `sim` feature, the broker's simulator waits until there are none before its next event,
//! so that a run does not depend on how fast the kernel completes I/O; without it, every
//! function here is empty.
//!
//! Lives on: a thread-local counter per thread (only with the `sim` feature).

#[cfg(feature = "sim")]
thread_local! {
    static COUNT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Held for the length of one operation.
pub struct Op(());

#[inline(always)]
pub fn op() -> Op {
    #[cfg(feature = "sim")]
    COUNT.with(|c| c.set(c.get() + 1));
    Op(())
}

impl Drop for Op {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "sim")]
        COUNT.with(|c| c.set(c.get() - 1));
    }
}

/// Operations in flight on this thread (always 0 without the `sim` feature).
pub fn count() -> usize {
    #[cfg(feature = "sim")]
    return COUNT.with(|c| c.get());
    #[cfg(not(feature = "sim"))]
    0
}
