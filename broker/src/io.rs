//! Adapts a glommio stream (futures-io traits) to the tokio traits `h2` needs.
//!
//! `tokio_util::compat` zeroes the whole unfilled read buffer on every read (futures-io
//! reads need an initialised slice), which profiles at ~7% of broker CPU under load because
//! h2 offers large buffers. This adapter initialises at most [`READ_CHUNK`] bytes per read,
//! and none at all on a plain TCP connection ([`RawRead`]): there it receives straight into
//! the buffer's uninitialised tail (the kernel writes it; nothing reads it before). After a
//! short receive (the socket is empty) it arms glommio's readiness poll, and the next read
//! waits on that poll instead of receiving nothing; a receive that finds the socket empty
//! arms one too (both through a Courant patch of glommio, `vendor/README.md`). So a
//! wake-up costs one receive, not a receive plus one or two empty ones. (At max rate the
//! zeroing was still 5% of broker CPU with the 64 KiB bound.)
//!
//! Reads also yield the core ([`poll_read`]): a connection whose socket never runs dry would
//! otherwise be served by one task that never returns `Pending`, and glommio, being
//! cooperative, would poll the core's rings (completions, timers, wake-ups from other cores)
//! only when its 100 ms preemption timer fires. After [`READ_STREAK`] of reads that all found
//! data, a read asks the executor to poll its rings (`request_preempt`, a Courant patch of
//! glommio) and yields. Measured with `courant-loadgen --journals 1000 --records-per-append
//! 100 --in-flight 1 --connections 1` (all journals on one core): 2.13-2.15 M rec/s, append
//! p99 61-64 ms, against 1.64-1.68 M and 188-194 ms before.
//!
//! [`poll_read`]: tokio::io::AsyncRead::poll_read
//!
//! Lives on: the core that owns the connection (a per-connection adapter, `!Send`).

use futures_lite::{AsyncRead, AsyncWrite};
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::ReadBuf;

/// Largest read handed to the socket at once.
const READ_CHUNK: usize = 64 << 10;

/// A stream whose bytes may be received straight from a socket: plain TCP with nothing
/// buffered in front of it. Others (TLS, a replayed prefix) answer `None`, and are read
/// through their own `poll_read`.
pub trait RawRead {
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }

    /// After a receive that did not fill its buffer or found nothing: arms a readiness
    /// poll (one already pending is kept), so that the next read waits for it
    /// ([`RawRead::wait_armed`]) instead of receiving nothing. A stream with a `raw_fd`
    /// must implement both.
    fn arm_readable(&mut self) {}

    /// Whether a readiness poll armed by [`RawRead::arm_readable`] is still pending (then
    /// the socket had nothing new, and the task is registered to be woken by the poll).
    fn wait_armed(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }
}

/// A plain glommio socket: received from directly, and waited on through glommio's
/// readiness poll without its own receive first (a Courant patch of glommio: that receive
/// would always find the socket empty, one wasted system call per wake-up).
impl RawRead for glommio::net::TcpStream {
    fn raw_fd(&self) -> Option<RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }

    fn arm_readable(&mut self) {
        glommio::net::TcpStream::arm_readable(self)
    }

    fn wait_armed(&mut self, cx: &mut Context<'_>) -> bool {
        glommio::net::TcpStream::wait_armed(self, cx)
    }
}

/// TLS streams are read through rustls.
impl<S> RawRead for futures_rustls::server::TlsStream<S> {}
impl<S> RawRead for futures_rustls::client::TlsStream<S> {}

pub struct Io<T>(pub T);

/// A non-blocking receive into `dst`: `None` when the socket has nothing yet.
fn recv_uninit(fd: RawFd, dst: &mut [std::mem::MaybeUninit<u8>]) -> Option<io::Result<usize>> {
    loop {
        // SAFETY: `dst` is valid for writes of `dst.len()` bytes; recv(2) only writes them.
        let n = unsafe {
            libc::recv(
                fd,
                dst.as_mut_ptr().cast::<libc::c_void>(),
                dst.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Some(Ok(n as usize));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return None,
            _ => return Some(Err(err)),
        }
    }
}

/// How long reads that all find data may run before one yields the core.
const READ_STREAK: std::time::Duration = std::time::Duration::from_millis(1);

thread_local! {
    /// When the current streak of reads that found data began on this core.
    static STREAK: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// Whether a read should let the core poll its rings and run its other tasks first: its
/// time slice is over, or reads have found data for [`READ_STREAK`]. Then the next read
/// starts a new streak.
fn yield_now_due() -> bool {
    let executor = glommio::executor();
    if executor.need_preempt() {
        STREAK.set(None);
        return true;
    }
    let now = std::time::Instant::now();
    match STREAK.get() {
        Some(start) if now.duration_since(start) >= READ_STREAK => {
            STREAK.set(None);
            executor.request_preempt();
            true
        }
        Some(_) => false,
        None => {
            STREAK.set(Some(now));
            false
        }
    }
}

/// A read found the socket empty: the task will wait, and the core polls its rings.
fn streak_ended() {
    STREAK.set(None);
}

impl<T: AsyncRead + RawRead + Unpin> tokio::io::AsyncRead for Io<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if yield_now_due() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = buf.remaining().min(READ_CHUNK);
        if let Some(fd) = self.0.raw_fd() {
            // SAFETY: the bytes handed out are only written (by the kernel), and only the
            // `read` bytes it wrote are then marked initialised and filled.
            let unfilled = unsafe { buf.unfilled_mut() };
            let len = unfilled.len().min(n);
            if self.0.wait_armed(cx) {
                // The last receive emptied the socket, and nothing came since.
                streak_ended();
                return Poll::Pending;
            }
            loop {
                match recv_uninit(fd, &mut unfilled[..len]) {
                    Some(Ok(read)) => {
                        if read < len && read > 0 {
                            // The socket is empty now: the next read waits for readiness.
                            self.0.arm_readable();
                        }
                        // SAFETY: recv(2) wrote `read` bytes at the start of the unfilled
                        // part.
                        unsafe { buf.assume_init(read) };
                        buf.advance(read);
                        return Poll::Ready(Ok(()));
                    }
                    Some(Err(err)) => return Poll::Ready(Err(err)),
                    None => {
                        streak_ended();
                        // Wait for readiness. A poll armed now completes at once if data
                        // came since the receive (the kernel checks when it is
                        // submitted); one found completed already is received again.
                        self.0.arm_readable();
                        if self.0.wait_armed(cx) {
                            return Poll::Pending;
                        }
                    }
                }
            }
        }
        let dst = buf.initialize_unfilled_to(n);
        match Pin::new(&mut self.0).poll_read(cx, dst) {
            Poll::Ready(Ok(read)) => {
                buf.advance(read);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> tokio::io::AsyncWrite for Io<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_streak_of_reads_asks_the_core_to_poll_its_rings() {
        glommio::LocalExecutorBuilder::default()
            .make()
            .expect("executor")
            .run(async {
                let executor = glommio::executor();
                super::streak_ended();
                assert!(!super::yield_now_due(), "a streak starts");
                assert!(!super::yield_now_due());
                std::thread::sleep(super::READ_STREAK * 2);
                assert!(super::yield_now_due(), "the streak ran its time");
                assert!(
                    executor.need_preempt(),
                    "the core is asked to poll its rings"
                );
                // The executor polls them before it runs this task again.
                executor.yield_now().await;
                assert!(!executor.need_preempt());
                assert!(!super::yield_now_due(), "a new streak starts");
            });
    }

    /// A core with a runnable task must not park (`vendor/README.md`, glommio patch 5):
    /// glommio parked whenever its task queues ran nothing, also when a preemption came
    /// due between its rings' poll and its first task, and then slept until some other
    /// event. Here a task waits on short timers over and over under a short preemption
    /// slice, so the slice's timer, kept armed across loop turns, fires at every point of
    /// the loop, the parking point included. A task woken by its timer has no other timer
    /// armed, so a core parked then would sleep forever: the watchdog fails the test.
    #[test]
    fn a_core_with_a_runnable_task_does_not_park() {
        use std::time::Duration;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            glommio::LocalExecutorBuilder::default()
                .preempt_timer(Duration::from_micros(20))
                .make()
                .expect("executor")
                .run(async {
                    for _ in 0..200_000 {
                        glommio::timer::sleep(Duration::from_micros(1)).await;
                    }
                });
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the core parked with a runnable task and never woke up");
    }

    #[test]
    fn raw_reads_wait_for_readiness_without_losing_a_wake_up() {
        use tokio::io::AsyncReadExt;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The writer sends in pieces with pauses, so that reads find the socket empty
        // (and wait on an armed readiness poll) between them, short reads included.
        let writer = std::thread::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            for i in 0..200u32 {
                let piece = vec![(i % 251) as u8; 1 + (i as usize * 37) % 3000];
                peer.write_all(&piece).unwrap();
                if i % 3 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(300));
                }
            }
        });
        glommio::LocalExecutorBuilder::default()
            .make()
            .expect("executor")
            .run(async move {
                let stream = glommio::net::TcpStream::connect(addr).await.unwrap();
                let mut io = super::Io(stream);
                let mut got = Vec::new();
                let read_all = async {
                    let mut buf = vec![0u8; 1500];
                    loop {
                        let n = io.read(&mut buf).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        got.extend_from_slice(&buf[..n]);
                    }
                };
                let timeout = async {
                    glommio::timer::sleep(std::time::Duration::from_secs(20)).await;
                    panic!("a read never woke up");
                };
                futures_lite::future::or(read_all, timeout).await;
                let want: Vec<u8> = (0..200u32)
                    .flat_map(|i| vec![(i % 251) as u8; 1 + (i as usize * 37) % 3000])
                    .collect();
                assert_eq!(got.len(), want.len());
                assert!(got == want, "the bytes arrive in order, none lost");
            });
        writer.join().unwrap();
    }

    use super::recv_uninit;
    use std::io::Write;
    use std::mem::MaybeUninit;
    use std::os::fd::AsRawFd;

    #[test]
    fn raw_receives_fill_uninitialised_memory_and_report_empty_and_closed_sockets() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut buf = [MaybeUninit::<u8>::uninit(); 16];

        // Nothing sent yet: the socket would block, which is not an error.
        assert!(recv_uninit(server.as_raw_fd(), &mut buf).is_none());

        client.write_all(b"hello").unwrap();
        let n = loop {
            match recv_uninit(server.as_raw_fd(), &mut buf) {
                Some(r) => break r.unwrap(),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        };
        assert_eq!(n, 5);
        // SAFETY: recv(2) wrote the first `n` bytes.
        let got: Vec<u8> = buf[..n]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        assert_eq!(got, b"hello");

        // The peer closed: end of stream.
        drop(client);
        let end = loop {
            match recv_uninit(server.as_raw_fd(), &mut buf) {
                Some(r) => break r.unwrap(),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        };
        assert_eq!(end, 0);

        // A descriptor that is not a socket is an error, not a panic.
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(matches!(
            recv_uninit(file.as_raw_fd(), &mut buf),
            Some(Err(_))
        ));
    }
}
