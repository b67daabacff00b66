//! Spool recovery's decoder of on-disk bytes (`storage::record`, both formats): a commit log torn or corrupted anywhere must scan to a valid prefix, never panic.
//! `scan` itself asserts that the prefix lies within the buffer and the content file.
#![no_main]

use storage::record;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first 9 bytes pick the fragment's begin and its content length; the rest is the
    // commit log as read from disk.
    let (begin, content_len, log) = match data.split_first_chunk::<9>() {
        Some((head, log)) => {
            let begin = i64::from(i32::from_le_bytes([head[0], head[1], head[2], head[3]]));
            let len = u64::from(u32::from_le_bytes([head[4], head[5], head[6], head[7]]));
            // Sometimes extreme, to reach the overflow checks.
            match head[8] % 8 {
                0 => (i64::MAX - begin.abs(), len, log),
                1 => (begin, u64::MAX, log),
                _ => (begin, len, log),
            }
        }
        None => (0, 0, data),
    };
    let _ = record::decode_header(log);
    let _ = record::decode_record(log, true);
    let _ = record::decode_record(log, false);
    if let Some(rec) = record::scan(log, begin, content_len) {
        assert!(rec.valid_len <= log.len());
        // Re-scanning the valid prefix finds the same commits.
        let again = record::scan(&log[..rec.valid_len], begin, content_len).expect("prefix");
        assert_eq!(again, rec);
        // A scan of the first records (as recovery's cut back to the last record whose sum
        // its content matches) keeps a prefix of them.
        let keep = rec.records / 2;
        let first = record::scan_first(log, begin, content_len, keep).expect("header");
        assert_eq!(first.records, keep);
        assert!(first.valid_len <= rec.valid_len);
        assert_eq!(first.ends[..], rec.ends[..first.ends.len()]);
    }
});
