//! Decompression of fragments fetched from their stores, for every codec Courant and
//! Gazette write (the same decoders as `storage::codec`, without the broker's I/O stack):
//!
//! | Codec | Read as |
//! |---|---|
//! | NONE | the bytes |
//! | GZIP | any number of concatenated gzip members |
//! | ZSTANDARD | concatenated zstd frames |
//! | SNAPPY | the Snappy framing format (stream identifier, CRC-checked chunks) |
//! | GZIP_OFFLOAD_DECOMPRESSION | gzip if the store hands back the encoded bytes, else the bytes |
//!
//! Push-based: a read feeds chunks as they arrive and hands out content as it goes.
//! Input is fed to the inner decoders in small pieces, which bounds the output of one
//! `push` even for a maliciously compressible object. Corrupt or truncated input is an
//! error, never a panic.
//!
//! Lives on: the reader that owns it (no shared state).

use std::io::{self, Write};

use protocol::CompressionCodec;

/// Input is fed to decoders at most this many bytes at a time: a gzip or zstd piece of
/// this size expands to at most a few MiB.
const PUSH_PIECE: usize = 4 << 10;

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
    pub fn new(codec: CompressionCodec, gzip_encoded: bool) -> Result<Self, String> {
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
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
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
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
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

fn codec_err(codec: CompressionCodec, reason: String) -> String {
    format!("{} decoding: {reason}", codec.as_str_name())
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

    fn content(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| {
                if i % 7 == 0 {
                    (i % 251) as u8
                } else {
                    b'a' + (i % 26) as u8
                }
            })
            .collect()
    }

    fn compress(codec: CompressionCodec, data: &[u8]) -> Vec<u8> {
        match codec {
            CompressionCodec::None => data.to_vec(),
            CompressionCodec::Gzip | CompressionCodec::GzipOffloadDecompression => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            CompressionCodec::Zstandard => zstd::encode_all(data, 0).unwrap(),
            CompressionCodec::Snappy => {
                let mut e = snap::write::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.into_inner().unwrap()
            }
            CompressionCodec::Invalid => unreachable!(),
        }
    }

    fn decode(
        codec: CompressionCodec,
        encoded: bool,
        input: &[u8],
        step: usize,
    ) -> Result<Vec<u8>, String> {
        let mut d = Decompressor::new(codec, encoded)?;
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            d.push(piece, &mut out)?;
        }
        d.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn every_codec_round_trips_in_any_pieces() {
        let data = content(300_000);
        for codec in [
            CompressionCodec::None,
            CompressionCodec::Gzip,
            CompressionCodec::Zstandard,
            CompressionCodec::Snappy,
            CompressionCodec::GzipOffloadDecompression,
        ] {
            let packed = compress(codec, &data);
            for step in [1000, 65_536, packed.len()] {
                assert_eq!(
                    decode(codec, true, &packed, step).unwrap(),
                    data,
                    "{codec:?} {step}"
                );
            }
        }
        // Offload content the store already decompressed arrives as plain bytes.
        let plain = decode(
            CompressionCodec::GzipOffloadDecompression,
            false,
            &data,
            4096,
        )
        .unwrap();
        assert_eq!(plain, data);
        // Concatenated gzip members, as Gazette writes them.
        let mut two = compress(CompressionCodec::Gzip, &data[..1000]);
        two.extend(compress(CompressionCodec::Gzip, &data[1000..]));
        assert_eq!(
            decode(CompressionCodec::Gzip, true, &two, 777).unwrap(),
            data
        );
    }

    #[test]
    fn corrupt_and_truncated_input_are_errors() {
        let data = content(50_000);
        for codec in [
            CompressionCodec::Gzip,
            CompressionCodec::Zstandard,
            CompressionCodec::Snappy,
        ] {
            let packed = compress(codec, &data);
            let cut = &packed[..packed.len() / 2];
            let got = decode(codec, true, cut, 4096);
            assert!(
                got.is_err() || got.unwrap().len() < data.len(),
                "{codec:?} truncated"
            );
            let mut bad = packed.clone();
            for b in bad.iter_mut().skip(20).step_by(97) {
                *b ^= 0x5a;
            }
            assert!(
                decode(codec, true, &bad, 4096).is_err(),
                "{codec:?} corrupt"
            );
        }
        assert!(Decompressor::new(CompressionCodec::Invalid, false).is_err());
    }
}
