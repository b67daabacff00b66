//! Records: how the load generator lays them out, packs them into appends, and finds them
//! again in a read stream.
//!
//! A record is `size` bytes:
//!
//! ```text
//! [0..8)        intended send time, nanoseconds since the process epoch (crate::clock),
//!               56 bits, 7 bits per byte, most significant first, each byte | 0x80
//! [8..size-1)   filler: printable ASCII, never '\n'
//! [size-1]      '\n' with newline framing, filler otherwise
//! ```
//!
//! Setting the high bit of every timestamp byte keeps '\n' (0x0A) out of the timestamp, so
//! newline framing stays unambiguous, and lets a reader tell our records from anyone
//! else's. 56 bits of nanoseconds last 2.2 years, far beyond any run.
//!
//! An append is built as *one* buffer of gRPC frames: the `{journal}` message, content
//! messages of whole records (each at most `chunk_size` bytes unless one record is larger),
//! and the final empty message. The protobuf encoding of a content-only `AppendRequest` is
//! just a tag byte and a length varint, so records are written straight into the frame
//! buffer with no intermediate copy, and the whole append goes to h2 in one call.
//!
//! Lives on: any (plain functions and per-task values).

use bytes::{BufMut, BytesMut};
use memchr::memchr;

/// Bytes at the start of each record that carry its timestamp.
pub const TS_BYTES: usize = 8;
/// The smallest record: timestamp, some filler and the newline.
pub const MIN_RECORD_SIZE: usize = 16;
/// The largest record: one content message must stay under the broker's 4 MiB limit.
pub const MAX_RECORD_SIZE: usize = (4 << 20) - 64;
/// `AppendRequest.content` is field 4, length-delimited: (4 << 3) | 2.
const CONTENT_TAG: u8 = 0x22;

/// How records are delimited in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Framing {
    /// Each record ends with '\n' (Gazette's usual framing for text records).
    Newline,
    /// No delimiter; a reader can split records only when they have a fixed size.
    None,
}

/// Record sizes, inclusive range; `min == max` for fixed-size records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRange {
    pub min: usize,
    pub max: usize,
}

impl SizeRange {
    pub fn fixed(&self) -> Option<usize> {
        (self.min == self.max).then_some(self.min)
    }

    /// Mean record size (sizes are drawn uniformly).
    pub fn mean(&self) -> f64 {
        (self.min + self.max) as f64 / 2.0
    }

    pub fn sample(&self, rng: &mut SplitMix64) -> usize {
        if self.min == self.max {
            return self.min;
        }
        let span = (self.max - self.min + 1) as u64;
        self.min + (rng.next_u64() % span) as usize
    }
}

impl std::fmt::Display for SizeRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fixed() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "{}-{}", self.min, self.max),
        }
    }
}

/// A small, fast, seedable generator for record sizes (quality is ample for that).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Writes `ns` (its low 56 bits) as the 8-byte record timestamp.
pub fn encode_ts(ns: u64) -> [u8; TS_BYTES] {
    let mut out = [0u8; TS_BYTES];
    for (i, b) in out.iter_mut().enumerate() {
        let shift = 7 * (TS_BYTES - 1 - i);
        *b = 0x80 | ((ns >> shift) & 0x7f) as u8;
    }
    out
}

/// Reads a record timestamp; `None` if these bytes are not one of ours.
pub fn decode_ts(bytes: &[u8]) -> Option<u64> {
    let bytes = bytes.get(..TS_BYTES)?;
    let mut ns = 0u64;
    for &b in bytes {
        if b & 0x80 == 0 {
            return None;
        }
        ns = (ns << 7) | u64::from(b & 0x7f);
    }
    Some(ns)
}

/// Printable filler, long enough for the largest record, without any '\n'.
pub fn filler(len: usize) -> Vec<u8> {
    const PATTERN: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
    PATTERN.iter().copied().cycle().take(len).collect()
}

/// The gRPC frame of the first message of an append: `AppendRequest{journal}`.
pub fn journal_frame(journal: &str) -> bytes::Bytes {
    protocol::grpc::encode_frame(&protocol::AppendRequest {
        journal: journal.to_string(),
        ..Default::default()
    })
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// The frames of one append, ready to send, and what they carry.
#[derive(Debug)]
pub struct EncodedAppend {
    pub frames: bytes::Bytes,
    /// Record bytes (what the journal grows by).
    pub payload_bytes: u64,
}

/// Parameters shared by every append a writer builds.
#[derive(Debug, Clone, Copy)]
pub struct AppendLayout {
    pub chunk_size: usize,
    pub framing: Framing,
}

/// Encodes an append of records with the given `sizes` into `buf` (cleared first; pass a
/// recycled buffer to avoid fresh pages per append); record `i` carries timestamp `ts(i)`.
/// `filler` must be at least as long as the largest record.
pub fn encode_append(
    mut buf: BytesMut,
    journal_frame: &[u8],
    sizes: &[usize],
    ts: impl Fn(usize) -> u64,
    layout: AppendLayout,
    filler: &[u8],
) -> EncodedAppend {
    let payload: usize = sizes.iter().sum();
    // Generous bound on the framing overhead: 5 + 1 + 10 bytes per chunk.
    let est_chunks = payload / layout.chunk_size.max(1) + 2;
    buf.clear();
    buf.reserve(journal_frame.len() + payload + 16 * est_chunks + 5);
    buf.extend_from_slice(journal_frame);

    let mut i = 0;
    while i < sizes.len() {
        // Take whole records while they fit the chunk; a chunk always holds at least one.
        let mut end = i + 1;
        let mut chunk_len = sizes[i];
        while end < sizes.len() && chunk_len + sizes[end] <= layout.chunk_size {
            chunk_len += sizes[end];
            end += 1;
        }
        let msg_len = 1 + varint_len(chunk_len as u64) + chunk_len;
        buf.put_u8(0);
        buf.put_u32(msg_len as u32);
        buf.put_u8(CONTENT_TAG);
        put_varint(&mut buf, chunk_len as u64);
        for (k, &size) in sizes[i..end].iter().enumerate() {
            write_record(&mut buf, size, ts(i + k), layout.framing, filler);
        }
        i = end;
    }
    // The final empty message asks the broker to commit.
    buf.put_slice(&[0, 0, 0, 0, 0]);
    EncodedAppend {
        frames: buf.freeze(),
        payload_bytes: payload as u64,
    }
}

fn write_record(buf: &mut BytesMut, size: usize, ts_ns: u64, framing: Framing, filler: &[u8]) {
    debug_assert!(size >= MIN_RECORD_SIZE);
    buf.put_slice(&encode_ts(ts_ns));
    match framing {
        Framing::Newline => {
            buf.put_slice(&filler[..size - TS_BYTES - 1]);
            buf.put_u8(b'\n');
        }
        Framing::None => buf.put_slice(&filler[..size - TS_BYTES]),
    }
}

/// Splits a read stream back into records, across chunk boundaries and offset jumps.
///
/// Lives on: one tailing reader task.
#[derive(Debug)]
pub struct RecordParser {
    framing: Framing,
    /// Record size for `Framing::None` (required there).
    fixed: Option<usize>,
    /// The start of a record whose end has not arrived yet.
    partial: Vec<u8>,
    /// After a gap (newline framing): drop bytes through the next '\n' to realign.
    resync: bool,
}

/// A partial record longer than this cannot be ours; drop it and realign.
const MAX_PARTIAL: usize = 2 * MAX_RECORD_SIZE;

impl RecordParser {
    pub fn new(framing: Framing, fixed: Option<usize>) -> Self {
        assert!(
            framing == Framing::Newline || fixed.is_some(),
            "unframed records need a fixed size to be parsed"
        );
        RecordParser {
            framing,
            fixed,
            partial: Vec::new(),
            resync: false,
        }
    }

    /// Forgets any partial record. With `realign`, the next bytes may start mid-record (a
    /// gap in the stream): newline framing skips to the next '\n'; fixed-size framing can
    /// only assume the gap ended on a record boundary (appends hold whole records).
    pub fn reset(&mut self, realign: bool) {
        self.partial.clear();
        self.resync = realign && self.framing == Framing::Newline;
    }

    /// Feeds stream bytes; calls `on_record` with each complete record.
    pub fn push(&mut self, mut data: &[u8], mut on_record: impl FnMut(&[u8])) {
        match self.framing {
            Framing::Newline => {
                if self.resync {
                    match memchr(b'\n', data) {
                        Some(pos) => {
                            data = &data[pos + 1..];
                            self.resync = false;
                        }
                        None => return,
                    }
                }
                if !self.partial.is_empty() {
                    match memchr(b'\n', data) {
                        Some(pos) => {
                            self.partial.extend_from_slice(&data[..=pos]);
                            on_record(&self.partial);
                            self.partial.clear();
                            data = &data[pos + 1..];
                        }
                        None => {
                            self.partial.extend_from_slice(data);
                            if self.partial.len() > MAX_PARTIAL {
                                self.reset(true);
                            }
                            return;
                        }
                    }
                }
                let mut start = 0;
                for pos in memchr::memchr_iter(b'\n', data) {
                    on_record(&data[start..=pos]);
                    start = pos + 1;
                }
                self.partial.extend_from_slice(&data[start..]);
            }
            Framing::None => {
                let size = self.fixed.expect("checked in new");
                if !self.partial.is_empty() {
                    let need = size - self.partial.len();
                    if data.len() < need {
                        self.partial.extend_from_slice(data);
                        return;
                    }
                    self.partial.extend_from_slice(&data[..need]);
                    on_record(&self.partial);
                    self.partial.clear();
                    data = &data[need..];
                }
                let mut records = data.chunks_exact(size);
                for record in &mut records {
                    on_record(record);
                }
                self.partial.extend_from_slice(records.remainder());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use protocol::AppendRequest;
    use protocol::grpc::{FrameDecoder, decode_message};

    #[test]
    fn timestamps_round_trip_and_never_contain_a_newline() {
        for ns in [0, 1, 0x7f, 0x80, 10, 123_456_789_012, (1 << 56) - 1] {
            let enc = encode_ts(ns);
            assert!(enc.iter().all(|&b| b & 0x80 != 0 && b != b'\n'));
            assert_eq!(decode_ts(&enc), Some(ns));
        }
        // Only the low 56 bits survive.
        assert_eq!(decode_ts(&encode_ts(1 << 56)), Some(0));
        assert_eq!(decode_ts(b"abcdefgh"), None);
        assert_eq!(decode_ts(&[0x80; 7]), None);
    }

    fn decode_append(frames: Bytes) -> Vec<AppendRequest> {
        let mut d = FrameDecoder::new(8 << 20);
        d.push(frames);
        let mut out = vec![];
        while let Some(body) = d.next_frame().unwrap() {
            out.push(decode_message::<AppendRequest>(body).unwrap());
        }
        assert_eq!(d.buffered(), 0);
        out
    }

    #[test]
    fn append_is_journal_then_chunks_of_whole_records_then_empty() {
        let fill = filler(1000);
        let sizes: Vec<usize> = (0..50).map(|i| 16 + i * 7).collect();
        let layout = AppendLayout {
            chunk_size: 1024,
            framing: Framing::Newline,
        };
        let enc = encode_append(
            BytesMut::new(),
            &journal_frame("a/journal"),
            &sizes,
            |i| 1_000 + i as u64,
            layout,
            &fill,
        );
        let msgs = decode_append(enc.frames);
        assert_eq!(msgs.first().unwrap().journal, "a/journal");
        assert!(msgs.first().unwrap().content.is_empty());
        assert_eq!(msgs.last().unwrap(), &AppendRequest::default());
        let chunks = &msgs[1..msgs.len() - 1];
        assert!(chunks.len() > 1);
        assert!(chunks.iter().all(|c| c.journal.is_empty()));
        // Chunks hold whole records and respect the chunk size (no record here exceeds it).
        let mut parser = RecordParser::new(Framing::Newline, None);
        let mut got = vec![];
        for c in chunks {
            assert!(c.content.len() <= 1024);
            assert_eq!(*c.content.last().unwrap(), b'\n');
            parser.push(&c.content, |r| got.push((r.len(), decode_ts(r).unwrap())));
        }
        let want: Vec<(usize, u64)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| (s, 1_000 + i as u64))
            .collect();
        assert_eq!(got, want);
        assert_eq!(enc.payload_bytes, sizes.iter().sum::<usize>() as u64);
    }

    #[test]
    fn a_record_larger_than_the_chunk_size_gets_a_chunk_of_its_own() {
        let fill = filler(5000);
        let layout = AppendLayout {
            chunk_size: 100,
            framing: Framing::None,
        };
        let sizes = [40, 40, 3000, 40];
        // A recycled buffer with old contents is cleared first.
        let old = BytesMut::from(&b"stale bytes"[..]);
        let enc = encode_append(old, &journal_frame("j/1x"), &sizes, |_| 7, layout, &fill);
        let msgs = decode_append(enc.frames);
        let lens: Vec<usize> = msgs.iter().map(|m| m.content.len()).collect();
        assert_eq!(lens, vec![0, 80, 3000, 40, 0]);
    }

    #[test]
    fn parser_handles_any_split_of_the_stream() {
        let fill = filler(100);
        let mut stream = BytesMut::new();
        for i in 0..20u64 {
            write_record(
                &mut stream,
                16 + (i as usize * 5) % 60,
                i,
                Framing::Newline,
                &fill,
            );
        }
        for split in 0..stream.len() {
            let mut p = RecordParser::new(Framing::Newline, None);
            let mut ts = vec![];
            p.push(&stream[..split], |r| ts.push(decode_ts(r).unwrap()));
            p.push(&stream[split..], |r| ts.push(decode_ts(r).unwrap()));
            assert_eq!(ts, (0..20).collect::<Vec<_>>(), "split at {split}");
        }
    }

    #[test]
    fn parser_realigns_after_a_gap() {
        let fill = filler(100);
        let mut stream = BytesMut::new();
        for i in 0..4u64 {
            write_record(&mut stream, 20, i, Framing::Newline, &fill);
        }
        let mut p = RecordParser::new(Framing::Newline, None);
        let mut ts = vec![];
        p.push(&stream[..30], |r| ts.push(decode_ts(r)));
        p.reset(true); // bytes 30..45 were skipped by an offset jump
        p.push(&stream[45..], |r| ts.push(decode_ts(r)));
        assert_eq!(ts, vec![Some(0), Some(3)]);
    }

    #[test]
    fn fixed_size_unframed_records_parse_across_splits() {
        let fill = filler(100);
        let mut stream = BytesMut::new();
        for i in 0..10u64 {
            write_record(&mut stream, 24, i, Framing::None, &fill);
        }
        for split in [0, 1, 23, 24, 25, 100, 239, 240] {
            let mut p = RecordParser::new(Framing::None, Some(24));
            let mut ts = vec![];
            p.push(&stream[..split], |r| ts.push(decode_ts(r).unwrap()));
            p.push(&stream[split..], |r| ts.push(decode_ts(r).unwrap()));
            assert_eq!(ts, (0..10).collect::<Vec<_>>(), "split at {split}");
        }
    }

    #[test]
    fn sizes_stay_in_range() {
        let r = SizeRange { min: 16, max: 20 };
        let mut rng = SplitMix64::new(1);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let s = r.sample(&mut rng);
            assert!((16..=20).contains(&s));
            seen[s - 16] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(r.to_string(), "16-20");
        assert_eq!(SizeRange { min: 100, max: 100 }.to_string(), "100");
    }
}
