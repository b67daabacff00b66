//! Fragment compression codecs, byte-compatible with Gazette's
//! (`broker/codecs/codecs.go`).
//!
//! | Codec | Written as | Read as |
//! |---|---|---|
//! | NONE | the bytes | the bytes |
//! | GZIP | one gzip member | any number of concatenated members (Gazette writes one per ≥ 1 MiB batch) |
//! | ZSTANDARD | one zstd frame | concatenated frames |
//! | SNAPPY | Snappy *framing* format (stream identifier, then CRC-checked chunks), as Go's `snappy.NewBufferedWriter` | the same |
//! | GZIP_OFFLOAD_DECOMPRESSION | one gzip stream, uploaded with `Content-Encoding: gzip` | gzip if the store hands back the encoded bytes, else the bytes |
//!
//! Compression ([`compress_stream`]) is a blocking `Read` → `Write` copy,
//! run by the broker's persister on a blocking thread, never on an executor.
//! Decompression ([`Decompressor`]) is push-based, so that a read can feed it
//! chunks as they arrive from a store and hand out content as it goes: no
//! thread, no whole-object buffer. Input is fed to the inner decoders in
//! small pieces, which bounds the output of one `push` even for a
//! maliciously compressible object. Corrupt or truncated input is an error,
//! never a panic.
//!
//! Lives on: any thread (no shared state).

use std::io::{self, Read, Write};

use crate::CompressionCodec;

/// A fragment that its codec cannot decode (corrupt, truncated, or an invalid codec).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("decompressing {codec}: {reason}")]
pub struct CodecError {
    /// The codec's protobuf enum name.
    pub codec: &'static str,
    /// What was wrong with the bytes.
    pub reason: String,
}

/// Input is fed to decoders at most this many bytes at a time: a gzip or
/// zstd piece of this size expands to at most a few MiB.
const PUSH_PIECE: usize = 4 << 10;

/// Streams `src` through `codec`'s compressor into `dst`, returning the
/// number of uncompressed bytes read.
pub fn compress_stream(
    codec: CompressionCodec,
    mut src: impl Read,
    dst: impl Write,
) -> io::Result<u64> {
    match codec {
        CompressionCodec::None => {
            let mut dst = dst;
            io::copy(&mut src, &mut dst)
        }
        CompressionCodec::Gzip | CompressionCodec::GzipOffloadDecompression => {
            let mut enc = flate2::write::GzEncoder::new(dst, flate2::Compression::default());
            let n = io::copy(&mut src, &mut enc)?;
            enc.finish()?;
            Ok(n)
        }
        CompressionCodec::Zstandard => {
            let mut enc = zstd::stream::write::Encoder::new(dst, 0)?;
            let n = io::copy(&mut src, &mut enc)?;
            enc.finish()?;
            Ok(n)
        }
        CompressionCodec::Snappy => {
            let mut enc = snap::write::FrameEncoder::new(dst);
            let n = io::copy(&mut src, &mut enc)?;
            enc.into_inner().map_err(|e| e.into_error())?;
            Ok(n)
        }
        CompressionCodec::Invalid => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "invalid compression codec",
        )),
    }
}

/// Compresses `content` in memory (tests and small objects).
pub fn compress(codec: CompressionCodec, content: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    compress_stream(codec, content, &mut out)?;
    Ok(out)
}

/// A push-based decompressor of one stored fragment.
pub struct Decompressor {
    inner: Inner,
    codec: CompressionCodec,
}

enum Inner {
    Identity,
    Gzip(Box<flate2::write::MultiGzDecoder<Vec<u8>>>),
    Zstd(Box<zstd::stream::write::Decoder<'static, Vec<u8>>>),
    Snappy(SnappyFrames),
}

impl Decompressor {
    /// A decompressor for `codec`. `gzip_encoded` says whether an object of
    /// GZIP_OFFLOAD_DECOMPRESSION arrives still gzip-encoded (the store did
    /// not decompress it); other codecs ignore it.
    pub fn new(codec: CompressionCodec, gzip_encoded: bool) -> Result<Self, CodecError> {
        let inner = match codec {
            CompressionCodec::None => Inner::Identity,
            CompressionCodec::GzipOffloadDecompression if !gzip_encoded => Inner::Identity,
            CompressionCodec::Gzip | CompressionCodec::GzipOffloadDecompression => {
                Inner::Gzip(Box::new(flate2::write::MultiGzDecoder::new(Vec::new())))
            }
            CompressionCodec::Zstandard => Inner::Zstd(Box::new(
                zstd::stream::write::Decoder::new(Vec::new())
                    .map_err(|e| codec_err(codec, e.to_string()))?,
            )),
            CompressionCodec::Snappy => Inner::Snappy(SnappyFrames::default()),
            CompressionCodec::Invalid => {
                return Err(codec_err(codec, "invalid compression codec".into()));
            }
        };
        Ok(Decompressor { inner, codec })
    }

    /// Decompresses `input`, appending what it yields to `out` (which may be
    /// less than `input` holds: decoders keep partial blocks for the next
    /// push).
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let codec = self.codec;
        let err = |e: io::Error| codec_err(codec, e.to_string());
        match &mut self.inner {
            Inner::Identity => out.extend_from_slice(input),
            Inner::Gzip(dec) => {
                for piece in input.chunks(PUSH_PIECE) {
                    dec.write_all(piece).map_err(err)?;
                    out.append(dec.get_mut());
                }
            }
            Inner::Zstd(dec) => {
                for piece in input.chunks(PUSH_PIECE) {
                    dec.write_all(piece).map_err(err)?;
                    dec.flush().map_err(err)?;
                    out.append(dec.get_mut());
                }
            }
            Inner::Snappy(frames) => frames.push(input, out).map_err(|e| codec_err(codec, e))?,
        }
        Ok(())
    }

    /// Ends the stream: flushes what decoders hold, and fails if the input
    /// stopped inside a block or frame.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let codec = self.codec;
        let err = |e: io::Error| codec_err(codec, e.to_string());
        match &mut self.inner {
            Inner::Identity => {}
            Inner::Gzip(dec) => {
                dec.try_finish().map_err(err)?;
                out.append(dec.get_mut());
            }
            Inner::Zstd(dec) => {
                dec.flush().map_err(err)?;
                out.append(dec.get_mut());
            }
            Inner::Snappy(frames) => {
                if !frames.pending.is_empty() {
                    return Err(codec_err(codec, "snappy: truncated chunk".into()));
                }
            }
        }
        Ok(())
    }
}

fn codec_err(codec: CompressionCodec, reason: String) -> CodecError {
    CodecError {
        codec: codec.as_str_name(),
        reason,
    }
}

/// Decompresses all of `content` (tests and small objects).
pub fn decompress(
    codec: CompressionCodec,
    gzip_encoded: bool,
    content: &[u8],
) -> Result<Vec<u8>, CodecError> {
    let mut dec = Decompressor::new(codec, gzip_encoded)?;
    let mut out = Vec::new();
    dec.push(content, &mut out)?;
    dec.finish(&mut out)?;
    Ok(out)
}

/// Snappy framing format: chunks of a 1-byte type, a 3-byte little-endian
/// length and the body. <https://github.com/google/snappy/blob/main/framing_format.txt>
#[derive(Default)]
struct SnappyFrames {
    /// Bytes of an incomplete chunk, carried to the next push.
    pending: Vec<u8>,
    seen_identifier: bool,
}

const SNAPPY_IDENTIFIER: &[u8] = b"sNaPpY";
/// Largest uncompressed block of a chunk.
const SNAPPY_MAX_BLOCK: usize = 65536;

impl SnappyFrames {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(input);
        let mut at = 0;
        let mut result = Ok(());
        while pending.len() - at >= 4 {
            let head = &pending[at..at + 4];
            let kind = head[0];
            let len = u32::from_le_bytes([head[1], head[2], head[3], 0]) as usize;
            if pending.len() - at - 4 < len {
                break;
            }
            result = self.chunk(kind, &pending[at + 4..at + 4 + len], out);
            if result.is_err() {
                break;
            }
            at += 4 + len;
        }
        pending.drain(..at);
        self.pending = pending;
        result
    }

    fn chunk(&mut self, kind: u8, body: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if kind != 0xff && !self.seen_identifier {
            return Err("snappy: missing stream identifier".into());
        }
        match kind {
            0xff => {
                if body != SNAPPY_IDENTIFIER {
                    return Err("snappy: bad stream identifier".into());
                }
                self.seen_identifier = true;
            }
            0x00 | 0x01 => {
                if body.len() < 4 {
                    return Err("snappy: chunk too short for its checksum".into());
                }
                let want = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
                let data = &body[4..];
                let start = out.len();
                if kind == 0x00 {
                    let n = snap::raw::decompress_len(data).map_err(|e| format!("snappy: {e}"))?;
                    if n > SNAPPY_MAX_BLOCK {
                        return Err(format!("snappy: block of {n} bytes is too large"));
                    }
                    out.resize(start + n, 0);
                    let got = snap::raw::Decoder::new()
                        .decompress(data, &mut out[start..])
                        .map_err(|e| format!("snappy: {e}"))?;
                    out.truncate(start + got);
                } else {
                    if data.len() > SNAPPY_MAX_BLOCK {
                        return Err("snappy: uncompressed chunk is too large".into());
                    }
                    out.extend_from_slice(data);
                }
                if masked_crc(&out[start..]) != want {
                    out.truncate(start);
                    return Err("snappy: checksum mismatch".into());
                }
            }
            0x02..=0x7f => return Err(format!("snappy: unskippable chunk type {kind:#x}")),
            // 0x80..=0xfe: padding and other skippable chunks.
            _ => {}
        }
        Ok(())
    }
}

/// The framing format's masked CRC-32C.
fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [CompressionCodec; 5] = [
        CompressionCodec::None,
        CompressionCodec::Gzip,
        CompressionCodec::Zstandard,
        CompressionCodec::Snappy,
        CompressionCodec::GzipOffloadDecompression,
    ];

    /// Compressible but not trivial content.
    fn content(n: usize) -> Vec<u8> {
        let mut x: u32 = 7;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if i % 3 == 0 {
                    (x >> 24) as u8
                } else {
                    b'a' + (i % 26) as u8
                }
            })
            .collect()
    }

    /// Decompresses by pushing `piece`-sized chunks.
    fn pushed(codec: CompressionCodec, data: &[u8], piece: usize) -> Result<Vec<u8>, CodecError> {
        let mut dec = Decompressor::new(codec, true)?;
        let mut out = Vec::new();
        for chunk in data.chunks(piece.max(1)) {
            dec.push(chunk, &mut out)?;
        }
        dec.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn round_trips_every_codec_in_any_piece_size() {
        for n in [0usize, 1, 100, 70_000, 300_000] {
            let data = content(n);
            for codec in ALL {
                let packed = compress(codec, &data).unwrap();
                for piece in [1usize, 7, 4096, 1 << 20] {
                    if piece == 1 && n > 100 {
                        continue; // Slow, and 7 covers the same splits.
                    }
                    assert_eq!(
                        pushed(codec, &packed, piece).unwrap(),
                        data,
                        "{codec:?} n={n} piece={piece}"
                    );
                }
            }
        }
    }

    #[test]
    fn gzip_reads_concatenated_members() {
        let mut packed = compress(CompressionCodec::Gzip, b"hello, ").unwrap();
        packed.extend(compress(CompressionCodec::Gzip, b"world").unwrap());
        assert_eq!(
            pushed(CompressionCodec::Gzip, &packed, 5).unwrap(),
            b"hello, world"
        );
    }

    #[test]
    fn zstd_reads_concatenated_frames() {
        let mut packed = compress(CompressionCodec::Zstandard, b"hello, ").unwrap();
        packed.extend(compress(CompressionCodec::Zstandard, b"world").unwrap());
        assert_eq!(
            pushed(CompressionCodec::Zstandard, &packed, 5).unwrap(),
            b"hello, world"
        );
    }

    #[test]
    fn snappy_is_the_framing_format() {
        let packed = compress(CompressionCodec::Snappy, b"abc").unwrap();
        // Stream identifier chunk first, as Go's snappy.NewBufferedWriter writes.
        assert_eq!(&packed[..10], b"\xff\x06\x00\x00sNaPpY");
        // A hand-built uncompressed chunk decodes too.
        let mut hand = packed[..10].to_vec();
        hand.push(0x01);
        hand.extend_from_slice(&[7, 0, 0]);
        hand.extend_from_slice(&masked_crc(b"xyz").to_le_bytes());
        hand.extend_from_slice(b"xyz");
        // A skippable padding chunk is ignored.
        hand.extend_from_slice(&[0xfe, 2, 0, 0, 0, 0]);
        assert_eq!(
            decompress(CompressionCodec::Snappy, false, &hand).unwrap(),
            b"xyz"
        );
    }

    #[test]
    fn offload_gzip_is_decoded_only_when_still_encoded() {
        let packed = compress(CompressionCodec::GzipOffloadDecompression, b"offload").unwrap();
        assert_eq!(
            decompress(CompressionCodec::GzipOffloadDecompression, true, &packed).unwrap(),
            b"offload"
        );
        assert_eq!(
            decompress(CompressionCodec::GzipOffloadDecompression, false, b"plain").unwrap(),
            b"plain"
        );
    }

    #[test]
    fn corrupt_and_truncated_input_is_an_error_not_a_panic() {
        let data = content(200_000);
        for codec in [
            CompressionCodec::Gzip,
            CompressionCodec::Zstandard,
            CompressionCodec::Snappy,
        ] {
            let packed = compress(codec, &data).unwrap();
            // Truncated: an error, or (where a decoder cannot tell) fewer bytes.
            let cut = &packed[..packed.len() / 2];
            match pushed(codec, cut, 4096) {
                Err(_) => {}
                Ok(out) => assert!(out.len() < data.len(), "{codec:?}"),
            }
            // Flipped bytes throughout: must not panic; usually an error.
            for stride in [3usize, 17, 1000] {
                let mut bad = packed.clone();
                for i in (stride..bad.len()).step_by(stride) {
                    bad[i] ^= 0x5a;
                }
                let _ = pushed(codec, &bad, 4096);
            }
            // Garbage.
            let garbage: Vec<u8> = (0..10_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            assert!(pushed(codec, &garbage, 999).is_err() || codec == CompressionCodec::None);
        }
        // A corrupted snappy checksum is always caught.
        let mut packed = compress(CompressionCodec::Snappy, b"checksummed").unwrap();
        let last = packed.len() - 1;
        packed[last] ^= 1;
        assert!(decompress(CompressionCodec::Snappy, false, &packed).is_err());
    }
}
