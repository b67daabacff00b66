//! Gazette's message UUIDs (Go `message/uuid.go`): RFC 4122 version 1 UUIDs whose node is a
//! random [`ProducerId`], whose 60-bit timestamp plus a 4-bit counter form a monotonic
//! [`Clock`], and whose 10 low clock-sequence bits carry transaction [`Flags`].
//!
//! Lives on: any thread; every type here is a plain value.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// 100-nanosecond intervals between 1582-10-15 (RFC 4122's epoch) and 1970-01-01.
pub const G1582_NS100: u64 = 122_192_928_000_000_000;

/// A v1 UUID, 16 bytes in network (big-endian) order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

/// The node part of a v1 UUID: identifies one publisher.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ProducerId(pub [u8; 6]);

/// A v1 timestamp (100 ns units since 1582-10-15) shifted left 4, plus a 4-bit counter.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug)]
pub struct Clock(pub u64);

/// The 10 low bits of the UUID's clock sequence.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// Committed on its own: delivered at once.
    pub const OUTSIDE_TXN: Flags = Flags(0x0);
    /// Part of a transaction: delivered once an ACK_TXN of its producer with a clock at or
    /// above its own is read.
    pub const CONTINUE_TXN: Flags = Flags(0x1);
    /// Acknowledges the producer's CONTINUE_TXN messages up to its clock; a lower clock than
    /// pending messages rolls them back.
    pub const ACK_TXN: Flags = Flags(0x2);
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Flags::OUTSIDE_TXN => f.write_str("OUTSIDE_TXN"),
            Flags::CONTINUE_TXN => f.write_str("CONTINUE_TXN"),
            Flags::ACK_TXN => f.write_str("ACK_TXN"),
            Flags(other) => write!(f, "Flags({other:x})"),
        }
    }
}

impl ProducerId {
    /// A random producer with the multicast bit set (RFC 4122: not a real MAC address).
    pub fn random() -> ProducerId {
        let mut id: [u8; 6] = rand::random();
        id[0] |= 0x01;
        ProducerId(id)
    }
}

impl fmt::Debug for ProducerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProducerId({})", hex::encode(self.0))
    }
}

impl fmt::Display for ProducerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl Clock {
    /// A clock set to the given Unix time in nanoseconds (precise to 100 ns).
    pub fn from_unix_nanos(nanos: u64) -> Clock {
        Clock((nanos / 100 + G1582_NS100) << 4)
    }

    /// A clock set to the wall time now.
    pub fn now() -> Clock {
        Clock::from_unix_nanos(unix_nanos_now())
    }

    /// Moves the clock up to the given Unix time, never down (Go `Clock.Update`). The
    /// sequence counter restarts at zero when the clock moves.
    pub fn update(&mut self, unix_nanos: u64) {
        let next = Clock::from_unix_nanos(unix_nanos);
        if next > *self {
            *self = next;
        }
    }

    /// Advances by one microsecond (160 units: 10 ticks of 100 ns, shifted 4) and returns the
    /// new value, as Go's `Clock.Tick` does in v0.103.0.
    pub fn tick(&mut self) -> Clock {
        self.0 = self.0.wrapping_add(160);
        *self
    }

    /// The Unix time of the clock in nanoseconds, or `None` before 1970.
    pub fn as_unix_nanos(self) -> Option<u64> {
        (self.0 >> 4).checked_sub(G1582_NS100).map(|t| t * 100)
    }
}

fn unix_nanos_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

impl Uuid {
    /// The all-zero UUID: its clock is zero, so readers deliver it at once and untracked.
    pub const NIL: Uuid = Uuid([0; 16]);

    /// Builds a v1 UUID exactly as Go's `BuildUUID`. Flags must fit in 10 bits.
    pub fn build(producer: ProducerId, clock: Clock, flags: Flags) -> Result<Uuid, crate::Error> {
        if flags.0 > 0x3ff {
            return Err(crate::Error::Invalid(format!(
                "UUID flags {:#x} do not fit in 10 bits",
                flags.0
            )));
        }
        let c = clock.0;
        let mut out = [0u8; 16];
        out[0..4].copy_from_slice(&((c >> 4) as u32).to_be_bytes());
        out[4..6].copy_from_slice(&((c >> 36) as u16).to_be_bytes());
        out[6..8].copy_from_slice(&(((c >> 52) as u16) | 0x1000).to_be_bytes());
        let seq = ((c << 10) as u16) & 0x3c00;
        out[8..10].copy_from_slice(&(seq | flags.0 | 0x8000).to_be_bytes());
        out[10..16].copy_from_slice(&producer.0);
        Ok(Uuid(out))
    }

    /// The producer (node) of the UUID.
    pub fn producer(&self) -> ProducerId {
        let mut id = [0u8; 6];
        id.copy_from_slice(&self.0[10..16]);
        ProducerId(id)
    }

    /// The clock (timestamp and sequence counter) of the UUID, as Go's `GetClock`.
    pub fn clock(&self) -> Clock {
        let b = &self.0;
        let mut t = u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])) << 4;
        t |= u64::from(u16::from_be_bytes([b[4], b[5]])) << 36;
        t |= u64::from(u16::from_be_bytes([b[6], b[7]])) << 52;
        t |= u64::from(b[8] >> 2) & 0xf;
        Clock(t)
    }

    /// The 10 flag bits of the UUID, as Go's `GetFlags`.
    pub fn flags(&self) -> Flags {
        Flags(u16::from_be_bytes([self.0[8], self.0[9]]) & 0x3ff)
    }

    /// Parses the forms Go's `uuid.Parse` accepts: canonical (36 characters), with a
    /// `urn:uuid:` prefix, in braces, or 32 bare hex digits.
    pub fn parse(text: &str) -> Result<Uuid, String> {
        let s = text.as_bytes();
        let body: &[u8] = match s.len() {
            36 => s,
            45 if s[..9].eq_ignore_ascii_case(b"urn:uuid:") => &s[9..],
            38 if s[0] == b'{' && s[37] == b'}' => &s[1..37],
            32 => return parse_hex32(s).ok_or_else(|| format!("invalid UUID {text:?}")),
            n => return Err(format!("invalid UUID length {n}: {text:?}")),
        };
        let dashed = [8, 13, 18, 23].iter().all(|&i| body[i] == b'-');
        let hex: Vec<u8> = body.iter().copied().filter(|&c| c != b'-').collect();
        if !dashed || hex.len() != 32 {
            return Err(format!("invalid UUID format: {text:?}"));
        }
        parse_hex32(&hex).ok_or_else(|| format!("invalid UUID {text:?}"))
    }
}

fn parse_hex32(hex_digits: &[u8]) -> Option<Uuid> {
    let mut out = [0u8; 16];
    hex::decode_to_slice(hex_digits, &mut out).ok()?;
    Some(Uuid(out))
}

impl Uuid {
    /// The canonical lower-case form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, built without
    /// allocating (a publisher stamps every message with it).
    pub fn encode(&self) -> [u8; 36] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'-'; 36];
        let mut at = 0;
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            out[at] = HEX[usize::from(byte >> 4)];
            out[at + 1] = HEX[usize::from(byte & 0x0f)];
            at += 2;
        }
        out
    }
}

impl fmt::Display for Uuid {
    /// The canonical lower-case form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let encoded = self.encode();
        // Hex digits and dashes only: always UTF-8.
        f.write_str(std::str::from_utf8(&encoded).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn clock_ticks_and_updates_as_go() {
        // Go TestUUIDClock.
        let mut clock = Clock::default();
        assert_eq!(clock.tick(), Clock(160));
        assert_eq!(clock.tick(), Clock(320));
        clock.update(12 * SEC + 300);
        assert_eq!(clock, Clock::from_unix_nanos(12 * SEC + 399));
        assert_eq!(clock.as_unix_nanos(), Some(12 * SEC + 300));
        assert!(clock < Clock::from_unix_nanos(12 * SEC + 400));
        assert!(clock > Clock::from_unix_nanos(12 * SEC + 299));
        clock.tick();
        assert_eq!(clock.as_unix_nanos(), Some(12 * SEC + 1300));
        // Update never moves the clock down.
        clock.update(11 * SEC + 100);
        assert_eq!(clock.as_unix_nanos(), Some(12 * SEC + 1300));
        clock.update(12 * SEC + 5000);
        assert_eq!(clock, Clock::from_unix_nanos(12 * SEC + 5000));
    }

    #[test]
    fn uuid_round_trips_clock_producer_flags() {
        // Go TestUUIDBuilding: a clock using the full bit range, after two ticks.
        let producer = ProducerId([0x8b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60]);
        let mut clock = Clock::default();
        clock.update(1_567_304_621 * SEC + 981_273_734);
        clock.tick();
        clock.tick();
        let id = Uuid::build(producer, clock, Flags(682)).unwrap();
        assert_eq!(id.clock(), clock);
        assert_eq!(id.producer(), producer);
        assert_eq!(id.flags(), Flags(682));
        assert_eq!(id.0[6] >> 4, 1, "version 1");
        assert_eq!(id.0[8] >> 6, 0b10, "RFC 4122 variant");
        assert_eq!(
            clock.as_unix_nanos(),
            Some(1_567_304_621 * SEC + 981_275_700)
        );
    }

    #[test]
    fn uuid_bytes_match_a_known_vector() {
        // Clock 0x0123456789abcdef: timestamp 0x0123456789abcde, sequence 0xf. Worked by
        // hand from Go's BuildUUID and repeated in docs/message-protocol.md.
        let producer = ProducerId([0x01, 0x02, 0x03, 0x04, 0x05, 0x06]);
        let id = Uuid::build(producer, Clock(0x0123_4567_89ab_cdef), Flags::ACK_TXN).unwrap();
        assert_eq!(
            hex::encode(id.0),
            "789abcde3456101 2bc02010203040506".replace(' ', "")
        );
        assert_eq!(id.to_string(), "789abcde-3456-1012-bc02-010203040506");
        assert_eq!(id.clock(), Clock(0x0123_4567_89ab_cdef));
        assert_eq!(id.flags(), Flags::ACK_TXN);
    }

    #[test]
    fn uuid_vectors_of_the_protocol_doc() {
        // docs/message-protocol.md: producer 01:02:03:04:05:06, clock at 2024-01-01T00:00:00Z,
        // ticked. Cross-checked with Python's uuid module (version 1, same v1 timestamp).
        let producer = ProducerId([1, 2, 3, 4, 5, 6]);
        let mut clock = Clock::from_unix_nanos(1_704_067_200 * SEC);
        assert_eq!(clock, Clock(0x1eea_838b_4cc8_0000));
        let vectors = [
            (Flags::CONTINUE_TXN, "b4cc800a-a838-11ee-8001-010203040506"),
            (Flags::CONTINUE_TXN, "b4cc8014-a838-11ee-8001-010203040506"),
            (Flags::ACK_TXN, "b4cc801e-a838-11ee-8002-010203040506"),
        ];
        for (flags, expect) in vectors {
            let id = Uuid::build(producer, clock.tick(), flags).unwrap();
            assert_eq!(id.to_string(), expect);
            assert_eq!((id.clock(), id.flags()), (clock, flags));
        }
        // A sequence counter of 5 lands in bits 2..6 of byte 8.
        let id = Uuid::build(producer, Clock(0x1eea_838b_4cc8_00a5), Flags::OUTSIDE_TXN).unwrap();
        assert_eq!(id.to_string(), "b4cc800a-a838-11ee-9400-010203040506");
        assert_eq!(id.clock(), Clock(0x1eea_838b_4cc8_00a5));
    }

    #[test]
    fn flags_over_ten_bits_are_refused() {
        let err = Uuid::build(ProducerId::default(), Clock(1), Flags(0x400)).unwrap_err();
        assert!(err.to_string().contains("10 bits"), "{err}");
    }

    #[test]
    fn producer_ids_are_random_and_multicast() {
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| ProducerId::random()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.0[0] & 1 == 1));
    }

    #[test]
    fn parse_accepts_go_forms_and_refuses_others() {
        let canon = "789abcde-3456-1012-bc02-010203040506";
        let id = Uuid::parse(canon).unwrap();
        assert_eq!(id.to_string(), canon);
        assert_eq!(Uuid::parse(&canon.to_uppercase()).unwrap(), id);
        assert_eq!(Uuid::parse(&format!("urn:uuid:{canon}")).unwrap(), id);
        assert_eq!(Uuid::parse(&format!("{{{canon}}}")).unwrap(), id);
        assert_eq!(Uuid::parse(&canon.replace('-', "")).unwrap(), id);
        for bad in [
            "",
            "xyz",
            &canon.replace('-', "_"),
            &canon.replace('7', "g"),
        ] {
            assert!(Uuid::parse(bad).is_err(), "{bad:?}");
        }
    }
}
