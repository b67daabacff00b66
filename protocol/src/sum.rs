//! Conversions of the wire `SHA1Sum` message.
//!
//! A SHA-1 digest travels as three fixed-width integers: digest bytes `[0, 8)` form
//! `part1`, `[8, 16)` form `part2` and `[16, 20)` form `part3`, each read big-endian.
//! A fragment without content (begin == end) always carries the all-zero sum, never the
//! digest of the empty string.

use crate::Sha1Sum;

/// Length of a SHA-1 digest in bytes.
pub const SHA1_LEN: usize = 20;

/// Splits a 20-byte digest into its wire form.
pub fn sum_from_bytes(d: &[u8; SHA1_LEN]) -> Sha1Sum {
    let (mut p1, mut p2, mut p3) = ([0u8; 8], [0u8; 8], [0u8; 4]);
    p1.copy_from_slice(&d[0..8]);
    p2.copy_from_slice(&d[8..16]);
    p3.copy_from_slice(&d[16..20]);
    Sha1Sum {
        part1: u64::from_be_bytes(p1),
        part2: u64::from_be_bytes(p2),
        part3: u32::from_be_bytes(p3),
    }
}

/// Joins the wire form back into the 20-byte digest.
pub fn sum_to_bytes(s: &Sha1Sum) -> [u8; SHA1_LEN] {
    let mut out = [0u8; SHA1_LEN];
    out[0..8].copy_from_slice(&s.part1.to_be_bytes());
    out[8..16].copy_from_slice(&s.part2.to_be_bytes());
    out[16..20].copy_from_slice(&s.part3.to_be_bytes());
    out
}

/// Builds a sum from a digest slice, which must be exactly 20 bytes long.
pub fn sum_from_slice(d: &[u8]) -> Option<Sha1Sum> {
    let arr: &[u8; SHA1_LEN] = d.try_into().ok()?;
    Some(sum_from_bytes(arr))
}

/// The digest as 40 lowercase hex digits, as used in fragment content names.
pub fn sum_to_hex(s: &Sha1Sum) -> String {
    hex::encode(sum_to_bytes(s))
}

/// Parses 40 hex digits (either case) into a sum. Anything else yields `None`.
pub fn sum_from_hex(h: &str) -> Option<Sha1Sum> {
    if h.len() != SHA1_LEN * 2 {
        return None;
    }
    let mut d = [0u8; SHA1_LEN];
    hex::decode_to_slice(h, &mut d).ok()?;
    Some(sum_from_bytes(&d))
}

/// The all-zero sum carried by fragments without content.
pub fn zero_sum() -> Sha1Sum {
    Sha1Sum {
        part1: 0,
        part2: 0,
        part3: 0,
    }
}

/// Whether `s` is the all-zero sum.
pub fn is_zero_sum(s: &Sha1Sum) -> bool {
    *s == zero_sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (Sha1Sum, [u8; 20], &'static str) {
        let mut d = [0u8; 20];
        for (i, b) in d.iter_mut().enumerate() {
            *b = (i + 1) as u8;
        }
        (
            Sha1Sum {
                part1: 0x0102030405060708,
                part2: 0x090a0b0c0d0e0f10,
                part3: 0x11121314,
            },
            d,
            "0102030405060708090a0b0c0d0e0f1011121314",
        )
    }

    #[test]
    fn round_trips_bytes_and_hex() {
        let (sum, bytes, hex) = fixture();
        assert_eq!(sum_from_bytes(&bytes), sum);
        assert_eq!(sum_to_bytes(&sum), bytes);
        assert_eq!(sum_to_hex(&sum), hex);
        assert_eq!(sum_from_hex(hex), Some(sum));
        assert_eq!(sum_from_hex(&hex.to_uppercase()), Some(sum));
        assert_eq!(sum_from_slice(&bytes), Some(sum));
        assert_eq!(sum_from_slice(&bytes[..19]), None);
    }

    #[test]
    fn sha1_of_empty_string_is_not_zero() {
        let empty = sum_from_hex("da39a3ee5e6b4b0d3255bfef95601890afd80709").unwrap();
        assert!(!is_zero_sum(&empty));
        assert_eq!(empty.part1, 0xda39a3ee5e6b4b0d);
        assert_eq!(empty.part2, 0x3255bfef95601890);
        assert_eq!(empty.part3, 0xafd80709);
    }

    #[test]
    fn zero() {
        assert!(is_zero_sum(&zero_sum()));
        assert_eq!(sum_to_hex(&zero_sum()), "0".repeat(40));
        assert_eq!(sum_from_hex(&"0".repeat(40)), Some(zero_sum()));
    }

    #[test]
    fn rejects_malformed_hex() {
        for bad in [
            "",
            "00",
            "0102030405060708090a0b0c0d0e0f101112131",
            "0102030405060708090a0b0c0d0e0f101112131415",
            "zz02030405060708090a0b0c0d0e0f1011121314",
            "0102030405060708090a0b0c0d0e0f10111213é",
        ] {
            assert_eq!(sum_from_hex(bad), None, "{bad:?}");
        }
    }
}
