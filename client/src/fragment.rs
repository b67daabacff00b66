//! Reading a persisted fragment directly from its store, as Go's `OpenFragmentURL` and
//! `FragmentReader`: `file://` URLs from the local root the client was given (never
//! outside it), `http(s)://` signed URLs (S3, GCS, Azure presigned) with reqwest. The
//! object is decompressed as it arrives and the bytes before the requested offset are
//! skipped; it must end exactly at the fragment's end.
//!
//! Lives on: the [`crate::RetryReader`] that opened it.

use crate::Error;
use crate::client::Client;
use crate::codec::Decompressor;
use bytes::{Bytes, BytesMut};
use protocol::{CompressionCodec, Fragment};
use std::path::{Component, Path, PathBuf};
use tokio::io::AsyncReadExt;

/// Raw bytes fed to the decompressor at once: bounds what one step may expand to.
const RAW_PIECE: usize = 16 << 10;

/// An opened fragment object, positioned at the requested offset.
pub(crate) struct FragmentReader {
    journal: String,
    fragment: Fragment,
    location: String,
    body: Body,
    dec: Decompressor,
    /// Raw bytes received but not yet decompressed.
    raw: Bytes,
    /// Journal offset of the next decompressed byte.
    pos: i64,
    /// Bytes before this offset are discarded.
    want: i64,
    done: bool,
}

enum Body {
    File(tokio::fs::File),
    Http(reqwest::Response),
}

/// What opening a fragment URL gave.
pub(crate) enum Opened {
    Reader(Box<FragmentReader>),
    /// A `file://` URL, and the client has no file root: read through the broker.
    NoFileRoot,
}

/// A failure to open or read a fragment, and whether another attempt may succeed.
pub(crate) struct FetchError {
    pub(crate) error: Error,
    pub(crate) retry: bool,
}

/// Opens `url` (the fragment's signed URL) positioned at `offset`.
pub(crate) async fn open(
    client: &Client,
    journal: &str,
    fragment: &Fragment,
    url: &str,
    offset: i64,
) -> Result<Opened, FetchError> {
    let location = url.split(['?', '#']).next().unwrap_or_default().to_string();
    let fail = |detail: String, retry: bool| FetchError {
        error: Error::Fragment {
            journal: journal.to_string(),
            offset,
            location: location.clone(),
            detail,
        },
        retry,
    };
    let codec = CompressionCodec::try_from(fragment.compression_codec).map_err(|_| {
        fail(
            format!("unknown codec {}", fragment.compression_codec),
            false,
        )
    })?;
    let (body, gzip_encoded) = if let Some(path) = url.strip_prefix("file://") {
        let Some(root) = client.file_root() else {
            return Ok(Opened::NoFileRoot);
        };
        let file = open_file(root, path).await.map_err(|(d, r)| fail(d, r))?;
        (Body::File(file), true)
    } else if url.starts_with("http://") || url.starts_with("https://") {
        let (resp, encoded) = get(client, url, codec).await.map_err(|(d, r)| fail(d, r))?;
        (Body::Http(resp), encoded)
    } else {
        return Err(fail("unsupported URL scheme".into(), false));
    };
    let dec = Decompressor::new(codec, gzip_encoded).map_err(|d| fail(d, false))?;
    Ok(Opened::Reader(Box::new(FragmentReader {
        journal: journal.to_string(),
        fragment: fragment.clone(),
        location,
        body,
        dec,
        raw: Bytes::new(),
        pos: fragment.begin,
        want: offset,
        done: false,
    })))
}

/// Opens `url_path` under `root`: percent-decoded, relative components only, and (after
/// resolving symbolic links) still inside `root`.
async fn open_file(root: &Path, url_path: &str) -> Result<tokio::fs::File, (String, bool)> {
    let decoded = percent_decode(url_path).ok_or(("bad percent-encoding".to_string(), false))?;
    let mut rel = PathBuf::new();
    for part in Path::new(&decoded).components() {
        match part {
            Component::Normal(p) => rel.push(p),
            Component::RootDir | Component::CurDir => {}
            _ => return Err(("the path leaves the file root".into(), false)),
        }
    }
    let path = root.join(&rel);
    let real = tokio::fs::canonicalize(&path).await.map_err(|e| {
        (
            format!("{} under file root {}: {e}", rel.display(), root.display()),
            true,
        )
    })?;
    let real_root = tokio::fs::canonicalize(root)
        .await
        .map_err(|e| (format!("file root {}: {e}", root.display()), false))?;
    if !real.starts_with(&real_root) {
        return Err((
            "the path leaves the file root (through a link)".into(),
            false,
        ));
    }
    tokio::fs::File::open(&real)
        .await
        .map_err(|e| (format!("opening {}: {e}", real.display()), true))
}

/// Decodes `%XX` escapes; `None` for a bad escape, a NUL byte or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}

/// GETs a signed URL, asking for the encoding Gazette asks for; returns the response and
/// whether its body is still gzip-encoded (for GZIP_OFFLOAD_DECOMPRESSION).
async fn get(
    client: &Client,
    url: &str,
    codec: CompressionCodec,
) -> Result<(reqwest::Response, bool), (String, bool)> {
    let http = client.http().map_err(|e| (e, false))?;
    let mut req = http.get(url);
    match codec {
        // The store decompresses, unless it does not honour the header (then we do).
        CompressionCodec::GzipOffloadDecompression => {
            req = req.header("accept-encoding", "identity")
        }
        // The stored gzip bytes as they are, not decoded in transit.
        CompressionCodec::Gzip => req = req.header("accept-encoding", "gzip"),
        _ => {}
    }
    let resp = req
        .send()
        .await
        .map_err(|e| (format!("GET failed: {e}"), true))?;
    let status = resp.status();
    if status.as_u16() == 403 {
        return Err((
            "403 Forbidden: the store refused the signed URL (it expired, or the broker's \
             credentials cannot read this object)"
                .into(),
            false,
        ));
    }
    if !status.is_success() {
        // Missing objects, throttling and server errors may pass; other refusals will not.
        let retry = status.is_server_error() || [404, 408, 429].contains(&status.as_u16());
        return Err((format!("GET answered {status}"), retry));
    }
    let encoded = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    Ok((
        resp,
        codec != CompressionCodec::GzipOffloadDecompression || encoded,
    ))
}

impl FragmentReader {
    /// The fragment being read.
    pub(crate) fn fragment(&self) -> &Fragment {
        &self.fragment
    }

    /// The next decompressed chunk at or after the requested offset, with its offset;
    /// `None` once the object ended exactly at the fragment's end.
    pub(crate) async fn next_chunk(&mut self) -> Result<Option<(i64, Bytes)>, FetchError> {
        let mut out = Vec::new();
        while !self.done {
            if self.raw.is_empty() && !self.fill().await? {
                self.dec.finish(&mut out).map_err(|d| self.fail(d, true))?;
                self.done = true;
            } else {
                let piece = self.raw.split_to(self.raw.len().min(RAW_PIECE));
                self.dec
                    .push(&piece, &mut out)
                    .map_err(|d| self.fail(d, true))?;
            }
            if let Some(chunk) = self.take(&mut out)? {
                return Ok(Some(chunk));
            }
        }
        if self.pos != self.fragment.end {
            let detail = format!(
                "the object ended at offset {} before the fragment's end {}",
                self.pos, self.fragment.end
            );
            return Err(self.fail(detail, true));
        }
        Ok(None)
    }

    /// Accounts for decompressed `out`: the part at or after `want`, if any.
    fn take(&mut self, out: &mut Vec<u8>) -> Result<Option<(i64, Bytes)>, FetchError> {
        if out.is_empty() {
            return Ok(None);
        }
        let start = self.pos;
        self.pos += out.len() as i64;
        if self.pos > self.fragment.end {
            let detail = format!(
                "the object holds more than the fragment's {} bytes",
                self.fragment.end - self.fragment.begin
            );
            return Err(self.fail(detail, false));
        }
        let skip = (self.want - start).clamp(0, out.len() as i64) as usize;
        let mut bytes = BytesMut::from(&std::mem::take(out)[..]);
        let _ = bytes.split_to(skip);
        if bytes.is_empty() {
            return Ok(None);
        }
        Ok(Some((start + skip as i64, bytes.freeze())))
    }

    /// Reads more raw bytes; `false` at the end of the object.
    async fn fill(&mut self) -> Result<bool, FetchError> {
        match &mut self.body {
            Body::File(f) => {
                let mut buf = vec![0u8; 64 << 10];
                let n = f
                    .read(&mut buf)
                    .await
                    .map_err(|e| self.fail(format!("reading: {e}"), true))?;
                buf.truncate(n);
                self.raw = Bytes::from(buf);
                Ok(n > 0)
            }
            Body::Http(resp) => match resp.chunk().await {
                Ok(Some(b)) => {
                    self.raw = b;
                    Ok(true)
                }
                Ok(None) => Ok(false),
                Err(e) => Err(self.fail(format!("reading the response: {e}"), true)),
            },
        }
    }

    fn fail(&self, detail: String, retry: bool) -> FetchError {
        FetchError {
            error: Error::Fragment {
                journal: self.journal.clone(),
                offset: self.pos.max(self.want),
                location: self.location.clone(),
                detail,
            },
            retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_refuses_bad_escapes_and_nul() {
        assert_eq!(percent_decode("/a%2Fb%20c").unwrap(), "/a/b c");
        assert!(percent_decode("/a%2").is_none());
        assert!(percent_decode("/a%zz").is_none());
        assert!(percent_decode("/a%00b").is_none());
    }

    #[tokio::test]
    async fn file_urls_never_leave_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("j")).unwrap();
        std::fs::write(root.join("j/frag"), b"x").unwrap();
        std::fs::write(dir.path().join("secret"), b"s").unwrap();
        assert!(open_file(&root, "/j/frag").await.is_ok());
        for bad in ["/../secret", "/j/../../secret", "/j/%2e%2e/%2e%2e/secret"] {
            let (detail, retry) = open_file(&root, bad).await.unwrap_err();
            assert!(detail.contains("leaves the file root"), "{bad}: {detail}");
            assert!(!retry);
        }
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("j/link")).unwrap();
        let (detail, _) = open_file(&root, "/j/link").await.unwrap_err();
        assert!(detail.contains("through a link"), "{detail}");
        let (detail, retry) = open_file(&root, "/j/missing").await.unwrap_err();
        assert!(detail.contains("j/missing") && retry, "{detail}");
    }

    use std::io::Write;
    use tokio::io::AsyncWriteExt;

    /// Serves one HTTP/1.1 response on a loopback port; the task returns the request head.
    async fn serve_once(
        status: &str,
        headers: &str,
        body: Vec<u8>,
    ) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/bucket/a/jj/frag?X-Amz-Signature=secret",
            listener.local_addr().unwrap()
        );
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n",
            body.len()
        );
        let task = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.ends_with(b"\r\n\r\n") {
                let n = tcp.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before its request ended");
                req.extend_from_slice(&buf[..n]);
            }
            tcp.write_all(head.as_bytes()).await.unwrap();
            tcp.write_all(&body).await.unwrap();
            String::from_utf8_lossy(&req).to_lowercase()
        });
        (url, task)
    }

    fn fragment(codec: CompressionCodec, begin: i64, len: usize) -> Fragment {
        Fragment {
            journal: "a/jj".into(),
            begin,
            end: begin + len as i64,
            compression_codec: codec as i32,
            ..Default::default()
        }
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn test_client() -> Client {
        Client::new(&["http://127.0.0.1:1"]).unwrap()
    }

    async fn drain(opened: Opened) -> Result<Vec<(i64, Bytes)>, FetchError> {
        let Opened::Reader(mut r) = opened else {
            panic!("an http URL opens a reader");
        };
        let mut out = Vec::new();
        while let Some(chunk) = r.next_chunk().await? {
            out.push(chunk);
        }
        Ok(out)
    }

    fn joined(chunks: &[(i64, Bytes)]) -> Vec<u8> {
        chunks.iter().flat_map(|(_, b)| b.to_vec()).collect()
    }

    #[tokio::test]
    async fn a_refused_signed_url_names_the_journal_and_offset() {
        let (url, server) =
            serve_once("403 Forbidden", "", b"<Error>AccessDenied</Error>".to_vec()).await;
        let f = fragment(CompressionCodec::None, 0, 10);
        let Err(e) = open(&test_client(), "a/jj", &f, &url, 5).await else {
            panic!("a 403 is an error");
        };
        server.await.unwrap();
        assert!(!e.retry, "a refused URL is not retried");
        let text = e.error.to_string();
        assert!(
            text.starts_with("journal a/jj at offset 5: fragment http://"),
            "{text}"
        );
        assert!(text.contains("403 Forbidden"), "{text}");
        assert!(
            !text.contains("secret"),
            "signed URLs' queries stay out of messages: {text}"
        );
    }

    #[tokio::test]
    async fn gzip_fragments_are_asked_for_encoded_and_skipped_to_the_offset() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let (url, server) = serve_once("200 OK", "", gzip(&data)).await;
        let f = fragment(CompressionCodec::Gzip, 100, data.len());
        let opened = open(&test_client(), "a/jj", &f, &url, 137)
            .await
            .ok()
            .unwrap();
        let chunks = drain(opened).await.ok().unwrap();
        assert!(server.await.unwrap().contains("accept-encoding: gzip"));
        assert_eq!(chunks[0].0, 137);
        assert!(joined(&chunks) == data[37..]);
    }

    #[tokio::test]
    async fn offload_fragments_are_decoded_only_if_the_store_did_not() {
        let data = b"offloaded content".repeat(100);
        // The store decompressed, as asked.
        let (url, server) = serve_once("200 OK", "", data.clone()).await;
        let f = fragment(CompressionCodec::GzipOffloadDecompression, 0, data.len());
        let chunks = drain(
            open(&test_client(), "a/jj", &f, &url, 0)
                .await
                .ok()
                .unwrap(),
        )
        .await
        .ok()
        .unwrap();
        assert!(server.await.unwrap().contains("accept-encoding: identity"));
        assert_eq!(joined(&chunks), data);
        // The store ignored the header and sent the gzip bytes.
        let (url, server) = serve_once("200 OK", "content-encoding: gzip\r\n", gzip(&data)).await;
        let chunks = drain(
            open(&test_client(), "a/jj", &f, &url, 0)
                .await
                .ok()
                .unwrap(),
        )
        .await
        .ok()
        .unwrap();
        server.await.unwrap();
        assert_eq!(joined(&chunks), data);
    }

    #[tokio::test]
    async fn objects_shorter_or_longer_than_their_fragment_are_errors() {
        let (url, server) = serve_once("200 OK", "", vec![7; 90]).await;
        let f = fragment(CompressionCodec::None, 0, 100);
        let Err(e) = drain(
            open(&test_client(), "a/jj", &f, &url, 0)
                .await
                .ok()
                .unwrap(),
        )
        .await
        else {
            panic!("a short object is an error");
        };
        server.await.unwrap();
        assert!(
            e.error
                .to_string()
                .contains("ended at offset 90 before the fragment's end 100"),
            "{}",
            e.error
        );
        let (url, server) = serve_once("200 OK", "", vec![7; 110]).await;
        let Err(e) = drain(
            open(&test_client(), "a/jj", &f, &url, 0)
                .await
                .ok()
                .unwrap(),
        )
        .await
        else {
            panic!("a long object is an error");
        };
        server.await.unwrap();
        assert!(
            e.error
                .to_string()
                .contains("holds more than the fragment's 100 bytes"),
            "{}",
            e.error
        );
    }
}
