//! Conversions between SHA-1 digests and Gazette's `SHA1Sum` message.
//!
//! Gazette splits the 20-byte digest big-endian into `part1` (bytes 0..8),
//! `part2` (bytes 8..16) and `part3` (bytes 16..20). An empty fragment carries
//! the all-zero sum, not SHA1(""). (`protocol::sum` will carry shared helpers;
//! these stay private to storage until then.)

use crate::summer::Summer;
use protocol::Sha1Sum;
#[cfg(test)]
use sha1::{Digest, Sha1};

/// The sum carried by empty fragments.
pub(crate) fn zero_sum() -> Sha1Sum {
    Sha1Sum::default()
}

/// Splits a 20-byte SHA-1 digest into a `Sha1Sum`.
pub(crate) fn sum_from_digest(digest: &[u8; 20]) -> Sha1Sum {
    let mut part1 = [0u8; 8];
    let mut part2 = [0u8; 8];
    let mut part3 = [0u8; 4];
    part1.copy_from_slice(&digest[0..8]);
    part2.copy_from_slice(&digest[8..16]);
    part3.copy_from_slice(&digest[16..20]);
    Sha1Sum {
        part1: u64::from_be_bytes(part1),
        part2: u64::from_be_bytes(part2),
        part3: u32::from_be_bytes(part3),
    }
}

/// The 20 digest bytes of a `Sha1Sum`.
#[cfg(test)]
pub(crate) fn sum_to_digest(sum: &Sha1Sum) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[0..8].copy_from_slice(&sum.part1.to_be_bytes());
    out[8..16].copy_from_slice(&sum.part2.to_be_bytes());
    out[16..20].copy_from_slice(&sum.part3.to_be_bytes());
    out
}

/// The sum of a running hasher's content so far, leaving the hasher as it is.
pub(crate) fn sum_of(summer: &Summer) -> Sha1Sum {
    sum_from_digest(&summer.digest())
}

/// The sum of `content`, with the empty-content special case.
#[cfg(test)]
pub(crate) fn sum_of_bytes(content: &[u8]) -> Sha1Sum {
    if content.is_empty() {
        return zero_sum();
    }
    let digest: [u8; 20] = Sha1::digest(content).into();
    sum_from_digest(&digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_big_endian() {
        let digest: [u8; 20] = std::array::from_fn(|i| i as u8 + 1);
        let sum = sum_from_digest(&digest);
        assert_eq!(sum.part1, 0x0102030405060708);
        assert_eq!(sum.part2, 0x090a0b0c0d0e0f10);
        assert_eq!(sum.part3, 0x11121314);
        assert_eq!(sum_to_digest(&sum), digest);
    }

    #[test]
    fn known_digest() {
        // SHA1("foobar") = 8843d7f92416211de9ebb963ff4ce28125932878.
        let sum = sum_of_bytes(b"foobar");
        assert_eq!(
            hex::encode(sum_to_digest(&sum)),
            "8843d7f92416211de9ebb963ff4ce28125932878"
        );
        assert_eq!(sum_of_bytes(b""), zero_sum());

        let mut running = Summer::new();
        running.update(b"foo");
        running.update(b"bar");
        assert_eq!(sum_of(&running), sum);
    }
}
