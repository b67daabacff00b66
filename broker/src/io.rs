//! Adapts a glommio stream (futures-io traits) to the tokio traits `h2` needs.
//!
//! `tokio_util::compat` zeroes the whole unfilled read buffer on every read (futures-io
//! reads need an initialised slice), which profiles at ~7% of broker CPU under load because
//! h2 offers large buffers. This adapter initialises at most [`READ_CHUNK`] bytes per read.
//!
//! Lives on: the core that owns the connection (a per-connection adapter, `!Send`).

use futures_lite::{AsyncRead, AsyncWrite};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::ReadBuf;

/// Largest read handed to the socket at once.
const READ_CHUNK: usize = 64 << 10;

pub struct Io<T>(pub T);

impl<T: AsyncRead + Unpin> tokio::io::AsyncRead for Io<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = buf.remaining().min(READ_CHUNK);
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
