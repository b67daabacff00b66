//! Checksummed records and content helpers (restart and durability tests).

#[allow(unused_imports)]
use super::*;

/// A self-describing record: `REC!` writer:u32 seq:u32 len:u32 payload sha1(prefix)[..8].
pub fn make_record(writer: u32, seq: u32, payload_len: usize) -> Vec<u8> {
    use sha1::Digest;
    let mut r = Vec::with_capacity(16 + payload_len + 8);
    r.extend_from_slice(b"REC!");
    r.extend_from_slice(&writer.to_be_bytes());
    r.extend_from_slice(&seq.to_be_bytes());
    r.extend_from_slice(&(payload_len as u32).to_be_bytes());
    let mut x = (writer as u64) << 32 | seq as u64;
    for _ in 0..payload_len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        r.push((x >> 56) as u8);
    }
    let d = sha1::Sha1::digest(&r);
    r.extend_from_slice(&d.as_slice()[..8]);
    r
}

/// A parsed record's (offset, writer, seq, total length).
pub type RecordAt = (u64, u32, u32, usize);

/// Parses consecutive records; Err(offset, why) at the first byte that isn't a valid record.
pub fn parse_records(data: &[u8]) -> Result<Vec<RecordAt>, (usize, String)> {
    let mut out = vec![];
    let mut at = 0usize;
    while at < data.len() {
        let rest = &data[at..];
        if rest.len() < 16 || &rest[..4] != b"REC!" {
            return Err((at, "no record header".into()));
        }
        let writer = u32::from_be_bytes(rest[4..8].try_into().unwrap());
        let seq = u32::from_be_bytes(rest[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(rest[12..16].try_into().unwrap()) as usize;
        let total = 16 + len + 8;
        if rest.len() < total {
            return Err((at, format!("truncated record (w{writer} s{seq})")));
        }
        if rest[..total] != make_record(writer, seq, len)[..] {
            return Err((at, format!("corrupt record (w{writer} s{seq})")));
        }
        out.push((at as u64, writer, seq, total));
        at += total;
    }
    Ok(out)
}

/// Pseudo-random, somewhat compressible data (a quarter random bytes, the rest from a small
/// alphabet), so that every codec has work to do.
pub fn compressible_data(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if i % 4 == 0 {
                x as u8
            } else {
                b'a' + (x % 7) as u8
            }
        })
        .collect()
}

/// Every message of a Read, and how the call ended.
pub async fn read_msgs(
    ch: &Channel,
    req: ReadRequest,
) -> (Vec<ReadResponse>, Result<(), RpcError>) {
    let mut call = read_stream(ch, &req).await.expect("Read call");
    collect::<ReadResponse>(&mut call).await
}

/// The content of Read responses, concatenated.
pub fn content_of(msgs: &[ReadResponse]) -> Vec<u8> {
    msgs.iter()
        .flat_map(|m| m.content.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_sum_splits_big_endian() {
        // SHA1("foobar") = 8843d7f92416211de9ebb963ff4ce28125932878
        let s = sha1_sum(b"foobar");
        assert_eq!(s.part1, 0x8843d7f92416211d);
        assert_eq!(s.part2, 0xe9ebb963ff4ce281);
        assert_eq!(s.part3, 0x25932878);
    }

    #[test]
    fn records_round_trip_and_corruption_is_detected() {
        let mut data = make_record(1, 2, 100);
        data.extend_from_slice(&make_record(3, 4, 0));
        let recs = parse_records(&data).unwrap();
        assert_eq!(recs, vec![(0, 1, 2, 124), (124, 3, 4, 24)]);
        let mut bad = data.clone();
        bad[50] ^= 1;
        assert_eq!(parse_records(&bad).unwrap_err().0, 0);
        assert_eq!(parse_records(&data[..130]).unwrap_err().0, 124);
        let mut junk = data.clone();
        junk.push(0);
        assert!(parse_records(&junk).is_err());
    }

    #[test]
    #[should_panic(expected = "must carry only offset and content")]
    fn content_chunk_with_write_head_is_rejected() {
        check_read_response(
            &ReadResponse {
                offset: 3,
                write_head: 9,
                content: Bytes::from_static(b"x"),
                ..Default::default()
            },
            "test",
        );
    }

    #[test]
    #[should_panic(expected = "outside fragment")]
    fn metadata_offset_outside_fragment_is_rejected() {
        check_read_response(
            &ReadResponse {
                offset: 9,
                write_head: 9,
                fragment: Some(Fragment {
                    journal: "a/journal".into(),
                    begin: 0,
                    end: 9,
                    compression_codec: 1,
                    ..Default::default()
                }),
                ..Default::default()
            },
            "test",
        );
    }

    #[test]
    #[should_panic(expected = "must carry (possibly empty) registers")]
    fn ok_append_response_without_registers_is_rejected() {
        let header = Header {
            etcd: Some(protocol::header::Etcd {
                cluster_id: 1,
                member_id: 1,
                revision: 1,
                raft_term: 1,
            }),
            route: Some(protocol::Route {
                primary: -1,
                ..Default::default()
            }),
            ..Default::default()
        };
        check_append_response(
            &AppendResponse {
                header: Some(header),
                commit: Some(Fragment {
                    journal: "a/journal".into(),
                    compression_codec: 1,
                    ..Default::default()
                }),
                ..Default::default()
            },
            "test",
        );
    }

    #[test]
    #[should_panic(expected = "etcd fields must be non-zero")]
    fn zeroed_header_is_rejected() {
        check_header(&Header::default(), "test");
    }

    #[test]
    fn label_sets_are_sorted_and_prefix_labels_parsed() {
        let s = label_set(&[("b", "1"), ("a", "2"), ("name:prefix", "x/")]);
        let names: Vec<(&str, &str, bool)> = s
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str(), l.prefix))
            .collect();
        assert_eq!(
            names,
            vec![("a", "2", false), ("b", "1", false), ("name", "x/", true)]
        );
    }
}
