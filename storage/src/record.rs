//! The `.commits` log of a spool: its encoding and its recovery scan.
//!
//! A commit log is a fixed header followed by one record per commit. Records
//! are only ever appended, each by a single write issued after the previous
//! one completed, so damage from a crash can only be a torn tail: recovery
//! keeps the longest prefix of records that decode and pass their checks.
//!
//! ```text
//! header (16 bytes):
//!   [0..8)   magic "CRNTCMT2" (or "CRNTCMT1": records without a sum)
//!   [8..12)  i32 LE compression codec of the fragment
//!   [12..16) u32 LE crc32c of bytes [0..12)
//! record (44 + n bytes; 24 + n without the sum):
//!   [0..4)    u32 LE n = length of the registers, or UNCHANGED (0xffff_ffff):
//!             the registers are those of the previous record
//!   [4..12)   i64 LE committed end offset of the fragment (exclusive)
//!   [12..20)  i64 LE wall-clock time of the commit, Unix milliseconds
//!   [20..40)  SHA-1 of the fragment's content [begin, end) (the zero sum when
//!             empty); absent in a "CRNTCMT1" log
//!   then n bytes of protocol::LabelSet, prost-encoded (absent if UNCHANGED),
//!   then u32 LE crc32c of every byte of the record before it
//! ```
//!
//! The sum lets recovery check the content a record commits: a log whose records reached
//! the disk before the content they cover (a power loss without `fdatasync`, where the
//! content file's blocks were reserved ahead and read as zeros) is cut back to the last
//! record whose sum the content matches. Logs written before sums (`CRNTCMT1`) are read
//! as they were, and a spool recovered from one keeps writing records without sums.
//!
//! Decoders never panic on their input: every malformed byte sequence is a
//! torn or corrupt tail, and ends the scan.

use prost::Message;
use protocol::LabelSet;

pub const HEADER_LEN: usize = 16;
const MAGIC_V1: &[u8; 8] = b"CRNTCMT1";
const MAGIC: &[u8; 8] = b"CRNTCMT2";
const SUM_LEN: usize = 20;
const UNCHANGED: u32 = u32::MAX;
const RECORD_FIXED_LEN: usize = 24;

/// Encodes the commit-log header of a fragment with `codec`, for records with sums.
pub fn encode_header(codec: i32, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&codec.to_le_bytes());
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(out.len() - start, HEADER_LEN);
}

/// Decodes a commit-log header, returning the fragment's codec and whether its records
/// carry sums.
pub fn decode_header(buf: &[u8]) -> Option<(i32, bool)> {
    let header = buf.get(..HEADER_LEN)?;
    let sums = match &header[0..8] {
        m if m == MAGIC => true,
        m if m == MAGIC_V1 => false,
        _ => return None,
    };
    if crc32c::crc32c(&header[0..12]) != read_u32(header, 12)? {
        return None;
    }
    Some((i32::from_le_bytes(header[8..12].try_into().ok()?), sums))
}

/// One commit: the fragment's new end, when it happened, and the registers
/// if they changed since the previous record.
#[derive(Clone, Debug, PartialEq)]
pub struct CommitRecord {
    pub end: i64,
    pub time_unix_ms: i64,
    /// SHA-1 of the fragment's content up to `end`: always in a log with sums, never in one
    /// without.
    pub sum: Option<[u8; SUM_LEN]>,
    pub registers: Option<LabelSet>,
}

/// Appends the encoding of `record` to `out`, with its sum if it has one (as the log's
/// header says its records do).
pub fn encode_record(record: &CommitRecord, out: &mut Vec<u8>) {
    let start = out.len();
    let registers_len = match &record.registers {
        Some(registers) => {
            let n = registers.encoded_len();
            assert!(n < UNCHANGED as usize, "registers too large to log");
            n as u32
        }
        None => UNCHANGED,
    };
    out.extend_from_slice(&registers_len.to_le_bytes());
    out.extend_from_slice(&record.end.to_le_bytes());
    out.extend_from_slice(&record.time_unix_ms.to_le_bytes());
    if let Some(sum) = &record.sum {
        out.extend_from_slice(sum);
    }
    if let Some(registers) = &record.registers {
        registers
            .encode(out)
            .expect("a Vec grows to fit any message");
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Decodes the record at the start of `buf` (of a log whose records carry sums, or not),
/// returning it and its length, or None if the bytes are not a complete and intact record.
pub fn decode_record(buf: &[u8], sums: bool) -> Option<(CommitRecord, usize)> {
    let registers_len = read_u32(buf, 0)?;
    let body_len = if registers_len == UNCHANGED {
        0
    } else {
        registers_len as usize
    };
    let sum_len = if sums { SUM_LEN } else { 0 };
    let len = RECORD_FIXED_LEN
        .checked_add(sum_len)?
        .checked_add(body_len)?;
    let record = buf.get(..len)?;
    let crc_at = len - 4;
    if crc32c::crc32c(&record[..crc_at]) != read_u32(record, crc_at)? {
        return None;
    }
    let end = read_i64(record, 4)?;
    let time_unix_ms = read_i64(record, 12)?;
    let sum = if sums {
        Some(record.get(20..20 + SUM_LEN)?.try_into().ok()?)
    } else {
        None
    };
    let registers = if registers_len == UNCHANGED {
        None
    } else {
        Some(LabelSet::decode(&record[20 + sum_len..crc_at]).ok()?)
    };
    Some((
        CommitRecord {
            end,
            time_unix_ms,
            sum,
            registers,
        },
        len,
    ))
}

/// What a commit log says about its fragment.
#[derive(Clone, Debug, PartialEq)]
pub struct Recovered {
    /// Codec of the fragment, from the header.
    pub codec: i32,
    /// End offset of the last valid commit.
    pub end: i64,
    /// Registers as of the last valid commit.
    pub registers: LabelSet,
    /// Time of the first commit that added content, if any did.
    pub first_append_unix_ms: Option<i64>,
    /// Length of the header and valid records: the log is cut to this.
    pub valid_len: usize,
    /// Number of valid records.
    pub records: usize,
    /// Whether the records carry sums (the log's header says so).
    pub sums: bool,
    /// Each valid record's end and sum, in order (empty without sums).
    pub ends: Vec<(i64, [u8; SUM_LEN])>,
}

/// Scans the commit log `buf` of the fragment beginning at `begin` whose
/// content file holds `content_len` bytes. Returns None when not even the
/// header is intact. A record is valid when it decodes, its end is at least
/// `begin` and the previous record's end, its end lies within the content
/// file, and it has a registers base (the first record must carry them).
/// The first invalid record ends the scan: later bytes are never trusted.
pub fn scan(buf: &[u8], begin: i64, content_len: u64) -> Option<Recovered> {
    scan_first(buf, begin, content_len, usize::MAX)
}

/// [`scan`], keeping at most the first `max_records` valid records.
pub fn scan_first(
    buf: &[u8],
    begin: i64,
    content_len: u64,
    max_records: usize,
) -> Option<Recovered> {
    let (codec, sums) = decode_header(buf)?;
    let mut out = Recovered {
        codec,
        end: begin,
        registers: LabelSet::default(),
        first_append_unix_ms: None,
        valid_len: HEADER_LEN,
        records: 0,
        sums,
        ends: Vec::new(),
    };
    let max_end = begin.checked_add(i64::try_from(content_len).ok()?)?;

    while out.records < max_records
        && let Some((record, len)) = decode_record(&buf[out.valid_len..], sums)
    {
        if record.end < out.end || record.end > max_end {
            break;
        }
        match record.registers {
            Some(registers) => out.registers = registers,
            None if out.records == 0 => break,
            None => {}
        }
        // Only a record the scan keeps: `ends` has one entry per valid record.
        if let Some(sum) = record.sum {
            out.ends.push((record.end, sum));
        }
        if record.end > out.end && out.first_append_unix_ms.is_none() {
            out.first_append_unix_ms = Some(record.time_unix_ms);
        }
        out.end = record.end;
        out.valid_len += len;
        out.records += 1;
    }
    assert!(out.valid_len <= buf.len());
    assert!(out.end >= begin && out.end <= max_end);
    Some(out)
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn read_i64(buf: &[u8], at: usize) -> Option<i64> {
    let bytes = buf.get(at..at.checked_add(8)?)?;
    Some(i64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Label;

    fn regs(name: &str, value: &str) -> LabelSet {
        LabelSet {
            labels: vec![Label {
                name: name.into(),
                value: value.into(),
                prefix: false,
            }],
        }
    }

    fn log(records: &[CommitRecord]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_header(4, &mut buf);
        for record in records {
            encode_record(record, &mut buf);
        }
        buf
    }

    fn record(end: i64, time: i64, registers: Option<LabelSet>) -> CommitRecord {
        CommitRecord {
            end,
            time_unix_ms: time,
            sum: Some([end as u8; SUM_LEN]),
            registers,
        }
    }

    #[test]
    fn round_trip() {
        for r in [record(10, 5, Some(regs("a", "1"))), record(-3, 0, None)] {
            let mut buf = Vec::new();
            encode_record(&r, &mut buf);
            assert_eq!(
                buf.len(),
                RECORD_FIXED_LEN + SUM_LEN + r.registers.as_ref().map_or(0, |r| r.encoded_len())
            );
            assert_eq!(decode_record(&buf, true), Some((r.clone(), buf.len())));
            // Read as a record without a sum, its bytes do not check.
            assert_eq!(decode_record(&buf, false), None);
            let old = CommitRecord { sum: None, ..r };
            let mut buf = Vec::new();
            encode_record(&old, &mut buf);
            assert_eq!(decode_record(&buf, false), Some((old, buf.len())));
        }
        let mut header = Vec::new();
        encode_header(2, &mut header);
        assert_eq!(decode_header(&header), Some((2, true)));
        header[3] ^= 1;
        assert_eq!(decode_header(&header), None);
    }

    /// The fuzz step's seed log of format 2 (`.ci/steps/40-fuzz.sh`, after its 9-byte
    /// prefix): the layout in the module docs, byte for byte.
    #[test]
    fn a_format_2_log_decodes_as_documented() {
        let mut buf = Vec::new();
        buf.extend_from_slice(b"CRNTCMT2\x01\x00\x00\x00\x62\x6e\xb7\xd5");
        buf.extend_from_slice(&8u32.to_le_bytes());
        buf.extend_from_slice(&10i64.to_le_bytes());
        buf.extend_from_slice(&1_700_000_000_000i64.to_le_bytes());
        buf.extend((1..=20).map(|b| b as u8));
        buf.extend_from_slice(&[0x0a, 0x06, 0x0a, 0x01, 0x61, 0x12, 0x01, 0x62]);
        buf.extend_from_slice(&[0xc2, 0xdd, 0x1c, 0x55]);
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        buf.extend_from_slice(&25i64.to_le_bytes());
        buf.extend_from_slice(&1_700_000_000_001i64.to_le_bytes());
        buf.extend((21..=40).map(|b| b as u8));
        buf.extend_from_slice(&[0xe1, 0xc3, 0x12, 0x89]);
        let got = scan(&buf, 0, 25).unwrap();
        assert_eq!(
            (got.codec, got.sums, got.end, got.records),
            (1, true, 25, 2)
        );
        assert_eq!(got.valid_len, buf.len());
        assert_eq!(got.registers, regs("a", "b"));
        let second: [u8; SUM_LEN] = std::array::from_fn(|i| 21 + i as u8);
        assert_eq!(got.ends.last(), Some(&(25, second)));
    }

    #[test]
    fn logs_without_sums_are_read_as_before() {
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC_V1);
        buf.extend_from_slice(&4i32.to_le_bytes());
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        for r in [record(100, 7, Some(regs("a", "1"))), record(110, 8, None)] {
            encode_record(&CommitRecord { sum: None, ..r }, &mut buf);
        }
        let got = scan(&buf, 100, 10).unwrap();
        assert_eq!(
            (got.codec, got.sums, got.end, got.records),
            (4, false, 110, 2)
        );
        assert_eq!(got.registers, regs("a", "1"));
        assert!(got.ends.is_empty());
        assert_eq!(got.valid_len, buf.len());
    }

    #[test]
    fn scan_first_keeps_a_prefix_of_the_records() {
        let buf = log(&[
            record(100, 7, Some(regs("a", "1"))),
            record(110, 8, Some(regs("a", "2"))),
            record(120, 9, None),
        ]);
        let all = scan(&buf, 100, 20).unwrap();
        assert_eq!(
            all.ends.iter().map(|e| e.0).collect::<Vec<_>>(),
            [100, 110, 120]
        );
        let two = scan_first(&buf, 100, 20, 2).unwrap();
        assert_eq!((two.end, two.records), (110, 2));
        assert_eq!(two.registers, regs("a", "2"));
        assert_eq!(two.ends, all.ends[..2]);
        assert!(two.valid_len < all.valid_len);
    }

    #[test]
    fn scan_takes_last_valid_record() {
        let buf = log(&[
            record(100, 7, Some(LabelSet::default())),
            record(110, 8, Some(regs("a", "1"))),
            record(120, 9, None),
        ]);
        let got = scan(&buf, 100, 20).unwrap();
        assert_eq!(got.ends.len(), got.records);
        assert_eq!(got.codec, 4);
        assert_eq!(got.end, 120);
        assert_eq!(got.registers, regs("a", "1"));
        // The first record did not add content; the second did.
        assert_eq!(got.first_append_unix_ms, Some(8));
        assert_eq!(got.valid_len, buf.len());
        assert_eq!(got.records, 3);

        // Every cut inside the last record recovers the previous commit.
        let last_start = buf.len() - RECORD_FIXED_LEN - SUM_LEN;
        for cut in last_start..buf.len() {
            let got = scan(&buf[..cut], 100, 20).unwrap();
            assert_eq!((got.end, got.valid_len, got.records), (110, last_start, 2));
        }
        // A cut header leaves nothing.
        assert_eq!(scan(&buf[..HEADER_LEN - 1], 100, 20), None);
    }

    #[test]
    fn scan_rejects_inconsistent_records() {
        // An end past the content file: the content write never completed.
        let buf = log(&[
            record(105, 1, Some(LabelSet::default())),
            record(130, 2, None),
        ]);
        assert_eq!(scan(&buf, 100, 20).unwrap().end, 105);
        // An end that goes backwards.
        let buf = log(&[
            record(115, 1, Some(LabelSet::default())),
            record(110, 2, None),
        ]);
        assert_eq!(scan(&buf, 100, 20).unwrap().end, 115);
        // A first record without registers has no base.
        let buf = log(&[record(115, 1, None)]);
        let got = scan(&buf, 100, 20).unwrap();
        assert_eq!((got.records, got.ends.len()), (0, 0));
        // A flipped byte in a record's body fails its crc.
        let mut buf = log(&[
            record(105, 1, Some(LabelSet::default())),
            record(110, 2, None),
        ]);
        let n = buf.len();
        buf[n - 10] ^= 0x40;
        assert_eq!(scan(&buf, 100, 20).unwrap().end, 105);
        // Garbage never panics.
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let mut buf = log(&[]);
            buf.extend_from_slice(&junk);
            let _ = scan(&buf, 0, 1 << 20);
            let _ = decode_record(&junk, true);
            let _ = decode_record(&junk, false);
        }
    }
}
