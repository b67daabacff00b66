//! Where a protobuf message keeps its UUID, for `application/x-protobuf-fixed` journals.
//!
//! The message layer never decodes a caller's protobuf schema: a [`ProtoUuid`] reads and
//! writes only the UUID of an encoded message. [`ProtoUuidField`] does so for the common
//! case of a top-level field (Gazette's word-count example keeps `bytes uuid = 1`), by walking
//! the protobuf wire format; every length is checked, so hostile bytes give an error.
//!
//! Lives on: any thread; a `ProtoUuid` is shared read-only.

use super::uuid::Uuid;

/// Reads and writes the UUID of an encoded protobuf message.
pub trait ProtoUuid: Send + Sync + std::fmt::Debug {
    /// The message's UUID; [`Uuid::NIL`] if it has none (as a Go message with an unset field).
    fn get_uuid(&self, message: &[u8]) -> Result<Uuid, String>;
    /// The message re-encoded with its UUID set to `uuid`.
    fn set_uuid(&self, message: &[u8], uuid: Uuid) -> Result<Vec<u8>, String>;
    /// An acknowledgement: a message of this type with only its UUID set (Go's
    /// `NewAcknowledgement` followed by `SetUUID`).
    fn new_acknowledgement(&self, uuid: Uuid) -> Vec<u8> {
        self.set_uuid(&[], uuid).unwrap_or_default()
    }
}

/// How a UUID field is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UuidEncoding {
    /// A `bytes` field holding the 16 raw bytes.
    Bytes,
    /// A `string` field holding the canonical text form.
    String,
}

/// A UUID kept in a top-level length-delimited field of the given number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoUuidField {
    /// The protobuf field number (1 in Gazette's word-count `NGramCount`).
    pub field: u32,
    /// How the field encodes the UUID.
    pub encoding: UuidEncoding,
}

/// One top-level field of an encoded message: its number, wire type, and byte span.
struct Field {
    number: u64,
    wire_type: u8,
    span: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
}

impl ProtoUuid for ProtoUuidField {
    fn get_uuid(&self, message: &[u8]) -> Result<Uuid, String> {
        let mut found = None;
        for field in fields(message)? {
            if field.number == u64::from(self.field) {
                if field.wire_type != 2 {
                    return Err(format!(
                        "UUID field {} has wire type {}, expected 2 (length-delimited)",
                        self.field, field.wire_type
                    ));
                }
                // Protobuf's rule: the last occurrence of a field wins.
                found = Some(field.value);
            }
        }
        match found {
            None => Ok(Uuid::NIL),
            Some(value) => self.decode(&message[value]),
        }
    }

    fn set_uuid(&self, message: &[u8], uuid: Uuid) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(message.len() + 40);
        for field in fields(message)? {
            if field.number != u64::from(self.field) {
                out.extend_from_slice(&message[field.span]);
            }
        }
        let value: Vec<u8> = match self.encoding {
            UuidEncoding::Bytes => uuid.0.to_vec(),
            UuidEncoding::String => uuid.to_string().into_bytes(),
        };
        put_varint(&mut out, (u64::from(self.field) << 3) | 2);
        put_varint(&mut out, value.len() as u64);
        out.extend_from_slice(&value);
        Ok(out)
    }
}

impl ProtoUuidField {
    fn decode(&self, value: &[u8]) -> Result<Uuid, String> {
        match self.encoding {
            UuidEncoding::Bytes if value.is_empty() => Ok(Uuid::NIL),
            UuidEncoding::Bytes => <[u8; 16]>::try_from(value).map(Uuid).map_err(|_| {
                format!(
                    "UUID field {} holds {} bytes, expected 16",
                    self.field,
                    value.len()
                )
            }),
            UuidEncoding::String if value.is_empty() => Ok(Uuid::NIL),
            UuidEncoding::String => std::str::from_utf8(value)
                .map_err(|_| format!("UUID field {} is not UTF-8", self.field))
                .and_then(Uuid::parse),
        }
    }
}

/// Splits an encoded message into its top-level fields.
fn fields(message: &[u8]) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let start = at;
        let key = get_varint(message, &mut at)?;
        let (number, wire_type) = (key >> 3, (key & 7) as u8);
        if number == 0 {
            return Err(format!("protobuf field number 0 at byte {start}"));
        }
        let value_start = at;
        let value_end = match wire_type {
            0 => get_varint(message, &mut at).map(|_| at)?,
            1 => value_start.checked_add(8).ok_or("overflow")?,
            5 => value_start.checked_add(4).ok_or("overflow")?,
            2 => {
                let len = get_varint(message, &mut at)?;
                let len = usize::try_from(len).map_err(|_| "length overflow")?;
                at.checked_add(len).ok_or("length overflow")?
            }
            other => {
                return Err(format!(
                    "unsupported protobuf wire type {other} at byte {start}"
                ));
            }
        };
        if value_end > message.len() {
            return Err(format!(
                "protobuf field at byte {start} runs past the message end"
            ));
        }
        let value = if wire_type == 2 {
            at..value_end
        } else {
            value_start..value_end
        };
        at = value_end;
        out.push(Field {
            number,
            wire_type,
            span: start..at,
            value,
        });
    }
    Ok(out)
}

fn get_varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *buf
            .get(*at)
            .ok_or_else(|| format!("truncated protobuf varint at byte {at}"))?;
        *at += 1;
        if shift == 63 && byte > 1 {
            return Err(format!("protobuf varint overflows 64 bits at byte {at}"));
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(format!("protobuf varint longer than 10 bytes at byte {at}"))
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Uuid = Uuid([
        0x78, 0x9a, 0xbc, 0xde, 0x34, 0x56, 0x10, 0x12, 0xbc, 0x02, 1, 2, 3, 4, 5, 6,
    ]);

    #[test]
    fn bytes_field_round_trips_and_keeps_other_fields() {
        // word-count's NGramCount: uuid = 1 (bytes), ngram = 2 (string), count = 3 (uint64).
        let uuid_field = ProtoUuidField {
            field: 1,
            encoding: UuidEncoding::Bytes,
        };
        let mut msg = vec![0x12, 0x02, b'h', b'i', 0x18, 0x96, 0x01];
        assert_eq!(uuid_field.get_uuid(&msg).unwrap(), Uuid::NIL);
        msg = uuid_field.set_uuid(&msg, ID).unwrap();
        let mut expect = vec![0x12, 0x02, b'h', b'i', 0x18, 0x96, 0x01, 0x0a, 0x10];
        expect.extend_from_slice(&ID.0);
        assert_eq!(msg, expect);
        assert_eq!(uuid_field.get_uuid(&msg).unwrap(), ID);
        // Setting again replaces rather than repeats the field.
        let again = uuid_field.set_uuid(&msg, Uuid::NIL).unwrap();
        assert_eq!(again.len(), msg.len());
        assert_eq!(uuid_field.get_uuid(&again).unwrap(), Uuid::NIL);
    }

    #[test]
    fn string_field_and_acknowledgement() {
        let uuid_field = ProtoUuidField {
            field: 4,
            encoding: UuidEncoding::String,
        };
        let ack = uuid_field.new_acknowledgement(ID);
        assert_eq!(&ack[..2], &[0x22, 36]);
        assert_eq!(uuid_field.get_uuid(&ack).unwrap(), ID);
    }

    #[test]
    fn hostile_bytes_give_errors() {
        let uuid_field = ProtoUuidField {
            field: 1,
            encoding: UuidEncoding::Bytes,
        };
        let cases: [&[u8]; 6] = [
            &[0x0a, 0x05, 1, 2],    // Length past the end.
            &[0x0a],                // Truncated length.
            &[0x0a, 0x03, 1, 2, 3], // Wrong UUID length.
            &[0x08, 0x01],          // UUID field as a varint.
            &[0x0b],                // Group wire type.
            &[
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ];
        for bytes in cases {
            assert!(uuid_field.get_uuid(bytes).is_err(), "{bytes:x?}");
        }
    }
}
