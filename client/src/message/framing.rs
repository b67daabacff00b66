//! Framing of messages by the journal's `content-type` label (Go's `json_framing.go`,
//! `fixed_framing.go`, `csv_framing.go`): how a [`Message`] becomes bytes of a journal, and how
//! an [`Unframer`] cuts a journal's bytes back into messages, each with its offsets.
//!
//! Gazette itself bounds no message size (its `UnpackLine` grows without limit and a fixed
//! frame may announce 4 GiB); here every unframer refuses a message over
//! [`Limits::max_message_size`], so a hostile journal cannot make the reader allocate freely.
//!
//! Lives on: the task that reads or publishes; an `Unframer` belongs to one reader.

use super::csv;
use super::proto::ProtoUuid;
use super::uuid::Uuid;
use crate::Error;
use bytes::{Buf, Bytes, BytesMut};
use serde_json::Value;
use std::sync::Arc;

/// `application/x-ndjson`: one JSON document per line.
pub const CONTENT_TYPE_JSON_LINES: &str = "application/x-ndjson";
/// `application/x-protobuf-fixed`: a magic word, a u32 little-endian length, a protobuf.
pub const CONTENT_TYPE_PROTO_FIXED: &str = "application/x-protobuf-fixed";
/// `text/csv`: one record per line, the UUID first.
pub const CONTENT_TYPE_CSV: &str = "text/csv";
/// The magic word opening every fixed frame (Go `FixedFrameWord`).
pub const FIXED_FRAME_WORD: [u8; 4] = [0x66, 0x33, 0x93, 0x36];
/// Bytes of a fixed frame's header (Go `FixedFrameHeaderLength`).
pub const FIXED_FRAME_HEADER_LENGTH: usize = 8;
/// Where JSON messages keep their UUID unless told otherwise: a top-level `"UUID"` field, as
/// Go's `encoding/json` names a struct field `UUID message.UUID` (Gazette's examples).
pub const DEFAULT_JSON_UUID_POINTER: &str = "/UUID";

/// A decoded message of any framing.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A JSON document (usually an object).
    Json(Value),
    /// An encoded protobuf message, without its fixed-frame header.
    Proto(Bytes),
    /// A CSV record; field 0 is the UUID.
    Csv(Vec<String>),
}

/// Bounds applied while unframing untrusted bytes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest framed message accepted, in bytes (header and line end included).
    pub max_message_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_size: 64 << 20,
        }
    }
}

/// How messages of one journal are framed.
#[derive(Clone, Debug)]
pub enum Framing {
    /// `application/x-ndjson`; the UUID is a string at this JSON Pointer (RFC 6901).
    JsonLines { uuid_pointer: String },
    /// `application/x-protobuf-fixed`; the caller says where the UUID lives.
    ProtoFixed(Arc<dyn ProtoUuid>),
    /// `text/csv`; the UUID is the first field.
    Csv,
}

/// What the caller knows about its message types, to pick a [`Framing`] by content type.
#[derive(Clone, Debug)]
pub struct FramingOptions {
    /// JSON Pointer of a JSON message's UUID string (default [`DEFAULT_JSON_UUID_POINTER`]).
    pub json_uuid_pointer: String,
    /// Where protobuf messages keep their UUID; required for protobuf journals.
    pub proto_uuid: Option<Arc<dyn ProtoUuid>>,
}

impl Default for FramingOptions {
    fn default() -> Self {
        FramingOptions {
            json_uuid_pointer: DEFAULT_JSON_UUID_POINTER.to_string(),
            proto_uuid: None,
        }
    }
}

impl Framing {
    /// The framing of a journal with the given `content-type` label (Go's
    /// `FramingByContentType`).
    pub fn for_content_type(
        journal: &str,
        content_type: &str,
        options: &FramingOptions,
    ) -> Result<Framing, Error> {
        let framing_error = |detail: String| Error::Framing {
            journal: journal.to_string(),
            offset: -1,
            detail,
        };
        match content_type {
            CONTENT_TYPE_JSON_LINES => {
                check_pointer(&options.json_uuid_pointer).map_err(framing_error)?;
                Ok(Framing::JsonLines {
                    uuid_pointer: options.json_uuid_pointer.clone(),
                })
            }
            CONTENT_TYPE_PROTO_FIXED => match &options.proto_uuid {
                Some(proto) => Ok(Framing::ProtoFixed(proto.clone())),
                None => Err(framing_error(
                    "a protobuf journal needs FramingOptions::proto_uuid to find message UUIDs"
                        .to_string(),
                )),
            },
            CONTENT_TYPE_CSV => Ok(Framing::Csv),
            other => Err(framing_error(format!(
                "unrecognized content-type label ({other:?}); expected one of {CONTENT_TYPE_JSON_LINES}, {CONTENT_TYPE_PROTO_FIXED}, {CONTENT_TYPE_CSV}"
            ))),
        }
    }

    /// The content type this framing reads and writes.
    pub fn content_type(&self) -> &'static str {
        match self {
            Framing::JsonLines { .. } => CONTENT_TYPE_JSON_LINES,
            Framing::ProtoFixed(_) => CONTENT_TYPE_PROTO_FIXED,
            Framing::Csv => CONTENT_TYPE_CSV,
        }
    }

    /// Appends the framed message to `out`.
    pub fn marshal(&self, message: &Message, out: &mut Vec<u8>) -> Result<(), String> {
        match (self, message) {
            (Framing::JsonLines { .. }, Message::Json(value)) => {
                serde_json::to_writer(&mut *out, value).map_err(|e| e.to_string())?;
                out.push(b'\n');
            }
            (Framing::ProtoFixed(_), Message::Proto(bytes)) => {
                let len = u32::try_from(bytes.len()).map_err(|_| {
                    format!("protobuf message of {} bytes is too large", bytes.len())
                })?;
                out.extend_from_slice(&FIXED_FRAME_WORD);
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(bytes);
            }
            (Framing::Csv, Message::Csv(fields)) => csv::write_record(fields, out),
            (framing, _) => {
                return Err(format!(
                    "message does not match framing {}",
                    framing.content_type()
                ));
            }
        }
        Ok(())
    }

    /// The message's UUID ([`Uuid::NIL`] where it has none, as a zero-valued Go field).
    pub fn uuid(&self, message: &Message) -> Result<Uuid, String> {
        match (self, message) {
            (Framing::JsonLines { uuid_pointer }, Message::Json(value)) => {
                match lookup(value, uuid_pointer) {
                    None | Some(Value::Null) => Ok(Uuid::NIL),
                    Some(Value::String(text)) => Uuid::parse(text),
                    Some(other) => Err(format!("UUID at {uuid_pointer} is not a string: {other}")),
                }
            }
            (Framing::ProtoFixed(proto), Message::Proto(bytes)) => proto.get_uuid(bytes),
            (Framing::Csv, Message::Csv(fields)) => match fields.first() {
                Some(first) => Uuid::parse(first),
                None => Err("CSV record has no fields".to_string()),
            },
            (framing, _) => Err(format!(
                "message does not match framing {}",
                framing.content_type()
            )),
        }
    }

    /// Sets the message's UUID (Go's `SetUUID`).
    pub fn set_uuid(&self, message: &mut Message, uuid: Uuid) -> Result<(), String> {
        match (self, message) {
            (Framing::JsonLines { uuid_pointer }, Message::Json(value)) => {
                set_pointer(value, uuid_pointer, Value::String(uuid.to_string()))
            }
            (Framing::ProtoFixed(proto), Message::Proto(bytes)) => {
                *bytes = Bytes::from(proto.set_uuid(bytes, uuid)?);
                Ok(())
            }
            (Framing::Csv, Message::Csv(fields)) if !fields.is_empty() => {
                fields[0] = uuid.to_string();
                Ok(())
            }
            (framing, _) => Err(format!(
                "message does not fit framing {}",
                framing.content_type()
            )),
        }
    }

    /// An acknowledgement of this journal's type with only its UUID set (Go's
    /// `NewAcknowledgement`). A CSV acknowledgement keeps the field count of `template`, all
    /// fields empty but the UUID, as Go's `CSVRecord.NewAcknowledgement`.
    pub fn new_acknowledgement(&self, template: &Message, uuid: Uuid) -> Result<Message, String> {
        let mut ack = match (self, template) {
            (Framing::JsonLines { .. }, _) => Message::Json(Value::Object(Default::default())),
            (Framing::ProtoFixed(proto), _) => {
                return Ok(Message::Proto(Bytes::from(proto.new_acknowledgement(uuid))));
            }
            (Framing::Csv, Message::Csv(fields)) => {
                Message::Csv(vec![String::new(); fields.len().max(1)])
            }
            (Framing::Csv, _) => Message::Csv(vec![String::new()]),
        };
        self.set_uuid(&mut ack, uuid)?;
        Ok(ack)
    }
}

/// Checks that a JSON Pointer is usable: empty (the whole document) is not.
fn check_pointer(pointer: &str) -> Result<(), String> {
    if pointer.starts_with('/') && pointer.len() > 1 {
        Ok(())
    } else {
        Err(format!(
            "JSON UUID pointer {pointer:?} must look like \"/UUID\" or \"/_meta/uuid\""
        ))
    }
}

/// The tokens of a JSON Pointer, unescaped.
fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .get(1..)
        .unwrap_or("")
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// The key of `map` that Go's `encoding/json` would decode into a field named `token`: the
/// exact key if present, else one equal but for ASCII case.
fn matching_key(map: &serde_json::Map<String, Value>, token: &str) -> Option<String> {
    if map.contains_key(token) {
        return Some(token.to_string());
    }
    map.keys().find(|k| k.eq_ignore_ascii_case(token)).cloned()
}

/// The value at `pointer`, matching keys as Go's decoder does.
fn lookup<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    let mut at = root;
    for token in tokens(pointer) {
        let Value::Object(map) = at else { return None };
        at = &map[&matching_key(map, &token)?];
    }
    Some(at)
}

/// Sets `value` at `pointer`, creating objects along the way, and reusing a key that
/// differs only in case (which Go's decoder would read).
fn set_pointer(root: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    check_pointer(pointer)?;
    let tokens = tokens(pointer);
    let mut at = root;
    for (i, token) in tokens.iter().enumerate() {
        let Value::Object(map) = at else {
            return Err(format!(
                "cannot set {pointer}: a parent is not a JSON object"
            ));
        };
        let key = matching_key(map, token).unwrap_or_else(|| token.clone());
        if i + 1 == tokens.len() {
            map.insert(key, value);
            return Ok(());
        }
        at = map
            .entry(key)
            .or_insert_with(|| Value::Object(Default::default()));
    }
    Ok(())
}

/// The length of the next whole message, and the range of its body within it (`None`:
/// bytes to skip, such as a blank CSV line).
type Cut = (usize, Option<std::ops::Range<usize>>);

/// One message cut from a journal, with its `[begin, end)` offsets.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub begin: i64,
    pub end: i64,
    pub uuid: Uuid,
    pub message: Message,
}

/// Cuts a journal's bytes into messages. Bytes arrive with [`Unframer::push`]; complete
/// messages leave with [`Unframer::next_frame`].
#[derive(Debug)]
pub struct Unframer {
    journal: String,
    framing: Framing,
    limits: Limits,
    buf: BytesMut,
    /// Journal offset of `buf[0]`.
    offset: i64,
    /// Go's CSV reader requires every record to have as many fields as the first.
    csv_fields: Option<usize>,
    /// Bytes of `buf` known to hold no line end (JSON), so that a long message arriving in
    /// many chunks is scanned once.
    json_scanned: usize,
    csv_scanner: csv::RecordScanner,
}

impl Unframer {
    /// An unframer whose first byte will be at `offset`.
    pub fn new(journal: &str, framing: Framing, limits: Limits, offset: i64) -> Unframer {
        Unframer {
            journal: journal.to_string(),
            framing,
            limits,
            buf: BytesMut::new(),
            offset,
            csv_fields: None,
            json_scanned: 0,
            csv_scanner: csv::RecordScanner::default(),
        }
    }

    /// The limits this unframer applies.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The framing this unframer reads.
    pub fn framing(&self) -> &Framing {
        &self.framing
    }

    /// The offset the next pushed byte must have.
    pub fn next_offset(&self) -> i64 {
        self.offset + self.buf.len() as i64
    }

    /// Offset of the first byte not yet returned as part of a message.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// Bytes held that do not yet form a whole message.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Adds the next bytes of the journal.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Drops held bytes and continues at `offset`: the journal's content jumped forward.
    pub fn reset(&mut self, offset: i64) {
        self.buf.clear();
        self.offset = offset;
        self.json_scanned = 0;
        self.csv_scanner = csv::RecordScanner::default();
    }

    /// An error if bytes remain that never completed a message (end of a bounded read).
    pub fn finish(&self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.error(format!(
                "unexpected end of content: {} bytes of an incomplete message",
                self.buf.len()
            )))
        }
    }

    fn error(&self, detail: String) -> Error {
        Error::Framing {
            journal: self.journal.clone(),
            offset: self.offset,
            detail,
        }
    }

    /// The next complete message, `None` if more bytes are needed, or an error for a
    /// malformed or oversized message (the unframer then stays at the bad message).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        loop {
            let Some((len, body)) = self.cut()? else {
                return Ok(None);
            };
            if len > self.limits.max_message_size {
                return Err(self.oversized(len));
            }
            let decoded = match body {
                Some(range) => self.decode(&self.buf[range]).map(Some),
                None => Ok(None),
            };
            let message = decoded.map_err(|detail| self.error(detail))?;
            let uuid = match &message {
                Some(message) => Some(self.framing.uuid(message).map_err(|d| self.error(d))?),
                None => None,
            };
            if let Some(Message::Csv(fields)) = &message {
                self.csv_fields.get_or_insert(fields.len());
            }
            let begin = self.offset;
            self.buf.advance(len);
            self.offset += len as i64;
            if let (Some(message), Some(uuid)) = (message, uuid) {
                return Ok(Some(Frame {
                    begin,
                    end: self.offset,
                    uuid,
                    message,
                }));
            }
        }
    }

    fn oversized(&self, len: usize) -> Error {
        self.error(format!(
            "message of {len} bytes exceeds the limit of {} bytes",
            self.limits.max_message_size
        ))
    }

    /// The length of the next whole message and the range of its body, `Some((len, None))`
    /// for bytes to skip (a blank CSV line), or `None` when more bytes are needed.
    fn cut(&mut self) -> Result<Option<Cut>, Error> {
        let found = match &self.framing {
            Framing::JsonLines { .. } => {
                let from = self.json_scanned;
                let found = self.buf[from..].iter().position(|&b| b == b'\n');
                self.json_scanned = if found.is_some() { 0 } else { self.buf.len() };
                found.map(|i| (from + i + 1, Some(0..from + i + 1)))
            }
            Framing::Csv => self.csv_scanner.scan(&self.buf).map(|n| {
                let blank = csv::is_blank(&self.buf[..n]);
                (n, (!blank).then_some(0..n))
            }),
            Framing::ProtoFixed(_) => return self.cut_fixed(),
        };
        if found.is_none() && self.buf.len() > self.limits.max_message_size {
            return Err(self.oversized(self.buf.len()));
        }
        Ok(found)
    }

    fn cut_fixed(&self) -> Result<Option<Cut>, Error> {
        if self.buf.len() < FIXED_FRAME_HEADER_LENGTH {
            return Ok(None);
        }
        if self.buf[..4] != FIXED_FRAME_WORD {
            return Err(self.error(format!(
                "detected de-synchronization: expected fixed frame word 66339336, found {}",
                hex::encode(&self.buf[..4])
            )));
        }
        let size = u32::from_le_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
        let len = FIXED_FRAME_HEADER_LENGTH + size as usize;
        if len > self.limits.max_message_size {
            return Err(self.oversized(len));
        }
        Ok((self.buf.len() >= len).then_some((len, Some(FIXED_FRAME_HEADER_LENGTH..len))))
    }

    fn decode(&self, body: &[u8]) -> Result<Message, String> {
        match &self.framing {
            Framing::JsonLines { .. } => match serde_json::from_slice::<Value>(body) {
                Ok(value @ Value::Object(_)) => Ok(Message::Json(value)),
                Ok(other) => Err(format!("JSON message is not an object: {other}")),
                Err(e) => Err(format!("invalid JSON message: {e}")),
            },
            Framing::ProtoFixed(_) => Ok(Message::Proto(Bytes::copy_from_slice(body))),
            Framing::Csv => {
                let fields = csv::parse_record(body)?;
                self.check_csv_fields(fields.len())?;
                Ok(Message::Csv(fields))
            }
        }
    }

    fn check_csv_fields(&self, count: usize) -> Result<(), String> {
        match self.csv_fields {
            Some(expect) if expect != count => Err(format!(
                "wrong number of CSV fields: {count}, expected {expect}"
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::proto::{ProtoUuidField, UuidEncoding};
    use crate::message::uuid::{Clock, Flags, ProducerId};

    fn id(clock: u64) -> Uuid {
        Uuid::build(
            ProducerId([1, 2, 3, 4, 5, 6]),
            Clock(clock),
            Flags::CONTINUE_TXN,
        )
        .unwrap()
    }

    fn json() -> Framing {
        Framing::for_content_type("j", CONTENT_TYPE_JSON_LINES, &FramingOptions::default()).unwrap()
    }

    fn proto() -> Framing {
        let field = ProtoUuidField {
            field: 1,
            encoding: UuidEncoding::Bytes,
        };
        let options = FramingOptions {
            proto_uuid: Some(Arc::new(field)),
            ..Default::default()
        };
        Framing::for_content_type("j", CONTENT_TYPE_PROTO_FIXED, &options).unwrap()
    }

    fn framed(framing: &Framing, messages: &[Message]) -> Vec<u8> {
        let mut out = Vec::new();
        for message in messages {
            framing.marshal(message, &mut out).unwrap();
        }
        out
    }

    /// Feeds `bytes` one at a time and collects every frame, as a slow network would.
    fn unframe(framing: &Framing, limits: Limits, bytes: &[u8]) -> Result<Vec<Frame>, Error> {
        let mut unframer = Unframer::new("j", framing.clone(), limits, 100);
        let mut frames = Vec::new();
        for byte in bytes {
            unframer.push(std::slice::from_ref(byte));
            while let Some(frame) = unframer.next_frame()? {
                frames.push(frame);
            }
        }
        unframer.finish()?;
        Ok(frames)
    }

    fn round_trip(framing: Framing, mut messages: Vec<Message>) {
        for (i, message) in messages.iter_mut().enumerate() {
            framing.set_uuid(message, id(i as u64 + 1)).unwrap();
        }
        let bytes = framed(&framing, &messages);
        let frames = unframe(&framing, Limits::default(), &bytes).unwrap();
        assert_eq!(frames.len(), messages.len());
        let mut at = 100;
        for (i, (frame, message)) in frames.iter().zip(&messages).enumerate() {
            assert_eq!(&frame.message, message);
            assert_eq!(frame.uuid, id(i as u64 + 1));
            assert_eq!(frame.begin, at);
            at = frame.end;
        }
        assert_eq!(at, 100 + bytes.len() as i64);
    }

    #[test]
    fn framing_examples_of_the_protocol_doc() {
        // docs/message-protocol.md, section 2.
        let ack = Uuid::parse("b4cc801e-a838-11ee-8002-010203040506").unwrap();
        let msg = Uuid::parse("b4cc800a-a838-11ee-8001-010203040506").unwrap();
        let frame = |framing: &Framing, message: &Message| {
            let mut out = Vec::new();
            framing.marshal(message, &mut out).unwrap();
            out
        };
        let json_ack = json()
            .new_acknowledgement(&Message::Json(Value::Null), ack)
            .unwrap();
        let expect = b"{\"UUID\":\"b4cc801e-a838-11ee-8002-010203040506\"}\n";
        assert_eq!(frame(&json(), &json_ack), expect);
        let proto_ack = proto()
            .new_acknowledgement(&Message::Proto(Bytes::new()), ack)
            .unwrap();
        let mut expect = hex::decode("6633933612000000").unwrap();
        expect.extend_from_slice(&[0x0a, 0x10]);
        expect.extend_from_slice(&ack.0);
        assert_eq!(frame(&proto(), &proto_ack), expect);
        let mut record = Message::Csv(vec![String::new(), "hello, world".into(), "42".into()]);
        Framing::Csv.set_uuid(&mut record, msg).unwrap();
        let csv_ack = Framing::Csv.new_acknowledgement(&record, ack).unwrap();
        let lines = [
            frame(&Framing::Csv, &record),
            frame(&Framing::Csv, &csv_ack),
        ]
        .concat();
        let expect = "b4cc800a-a838-11ee-8001-010203040506,\"hello, world\",42\n\
                      b4cc801e-a838-11ee-8002-010203040506,,\n";
        assert_eq!(String::from_utf8(lines).unwrap(), expect);
    }

    #[test]
    fn json_lines_round_trip() {
        let messages = vec![
            Message::Json(serde_json::json!({"Key": "a", "Data": [1, 2]})),
            Message::Json(serde_json::json!({"Key": "b\nwith a newline"})),
        ];
        round_trip(json(), messages);
    }

    #[test]
    fn json_uuid_pointer_is_configurable_and_acks_carry_only_the_uuid() {
        let options = FramingOptions {
            json_uuid_pointer: "/_meta/uuid".to_string(),
            ..Default::default()
        };
        let framing = Framing::for_content_type("j", CONTENT_TYPE_JSON_LINES, &options).unwrap();
        let ack = framing
            .new_acknowledgement(&Message::Json(Value::Null), id(7))
            .unwrap();
        let mut out = Vec::new();
        framing.marshal(&ack, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{{\"_meta\":{{\"uuid\":\"{}\"}}}}\n", id(7))
        );
        let default_ack = json()
            .new_acknowledgement(&Message::Json(Value::Null), id(7))
            .unwrap();
        assert_eq!(
            default_ack,
            Message::Json(serde_json::json!({"UUID": id(7).to_string()}))
        );
        assert!(
            Framing::for_content_type(
                "j",
                CONTENT_TYPE_JSON_LINES,
                &FramingOptions {
                    json_uuid_pointer: String::new(),
                    ..Default::default()
                }
            )
            .is_err()
        );
    }

    #[test]
    fn json_uuid_keys_match_as_gos_decoder_does() {
        let exact = Message::Json(serde_json::json!({"uuid": "x", "UUID": id(1).to_string()}));
        assert_eq!(json().uuid(&exact).unwrap(), id(1));
        let mut folded = Message::Json(serde_json::json!({"uuid": id(2).to_string()}));
        assert_eq!(json().uuid(&folded).unwrap(), id(2));
        json().set_uuid(&mut folded, id(3)).unwrap();
        assert_eq!(
            folded,
            Message::Json(serde_json::json!({"uuid": id(3).to_string()}))
        );
    }

    #[test]
    fn json_without_uuid_is_the_nil_uuid() {
        let frames = unframe(&json(), Limits::default(), b"{\"a\":1}\n").unwrap();
        assert_eq!(frames[0].uuid, Uuid::NIL);
    }

    #[test]
    fn proto_fixed_round_trip_and_header_bytes() {
        let messages = vec![
            Message::Proto(Bytes::from_static(&[0x12, 0x02, b'h', b'i'])),
            Message::Proto(Bytes::new()),
        ];
        round_trip(proto(), messages);
        let mut out = Vec::new();
        proto()
            .marshal(&Message::Proto(Bytes::from_static(&[0x12, 0])), &mut out)
            .unwrap();
        assert_eq!(out, [0x66, 0x33, 0x93, 0x36, 2, 0, 0, 0, 0x12, 0]);
    }

    #[test]
    fn csv_round_trip_and_blank_lines() {
        let messages = vec![
            Message::Csv(vec![String::new(), "a,b".into(), "q\"uote".into()]),
            Message::Csv(vec![String::new(), "multi\nline".into(), String::new()]),
        ];
        round_trip(Framing::Csv, messages);
        let text = format!("\n{},x\n\r\n", id(1));
        let frames = unframe(&Framing::Csv, Limits::default(), text.as_bytes()).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!((frames[0].begin, frames[0].end), (101, 101 + 39));
    }

    #[test]
    fn csv_acknowledgement_keeps_the_field_count() {
        let template = Message::Csv(vec!["x".into(), "y".into(), "z".into()]);
        let ack = Framing::Csv.new_acknowledgement(&template, id(3)).unwrap();
        assert_eq!(
            ack,
            Message::Csv(vec![id(3).to_string(), String::new(), String::new()])
        );
    }

    fn framing_error(result: Result<Vec<Frame>, Error>) -> (i64, String) {
        match result {
            Err(Error::Framing {
                journal,
                offset,
                detail,
            }) => {
                assert_eq!(journal, "j");
                (offset, detail)
            }
            other => panic!("expected a framing error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_messages_name_their_offset() {
        let good = format!("{{\"UUID\":\"{}\"}}\n", id(1));
        let cases: Vec<(Framing, Vec<u8>, &str)> = vec![
            (
                json(),
                format!("{good}{{not json\n").into_bytes(),
                "invalid JSON",
            ),
            (json(), format!("{good}[1]\n").into_bytes(), "not an object"),
            (
                json(),
                format!("{good}{{\"UUID\":\"nope\"}}\n").into_bytes(),
                "UUID",
            ),
            (
                json(),
                format!("{good}{{\"UUID\":1}}\n").into_bytes(),
                "not a string",
            ),
            (
                json(),
                format!("{good}{{\"a\":1}}").into_bytes(),
                "unexpected end",
            ),
            (
                proto(),
                [&b"xx"[..], &FIXED_FRAME_WORD, &[0; 4]].concat(),
                "de-synchronization",
            ),
            (
                proto(),
                [&FIXED_FRAME_WORD[..], &[3, 0, 0, 0, 0x0a, 1, 9]].concat(),
                "16",
            ),
            (
                Framing::Csv,
                format!("{},a\n{},b,c\n", id(1), id(2)).into_bytes(),
                "fields",
            ),
            (Framing::Csv, b"not-a-uuid,a\n".to_vec(), "UUID"),
            (Framing::Csv, b"a\"b\n".to_vec(), "bare"),
        ];
        for (framing, bytes, expect) in cases {
            let (offset, detail) = framing_error(unframe(&framing, Limits::default(), &bytes));
            assert!(detail.contains(expect), "{detail:?} lacks {expect:?}");
            assert!(offset == 100 || offset == 100 + good.len() as i64 || offset > 100);
        }
    }

    #[test]
    fn oversized_messages_are_refused_before_they_are_buffered() {
        let limits = Limits {
            max_message_size: 64,
        };
        let long = format!("{{\"a\":\"{}\"}}\n", "x".repeat(100));
        let (offset, detail) = framing_error(unframe(&json(), limits, long.as_bytes()));
        assert_eq!(offset, 100);
        assert!(detail.contains("exceeds the limit of 64"), "{detail}");
        // A fixed frame announcing 4 GiB is refused from its header alone.
        let mut unframer = Unframer::new("j", proto(), limits, 0);
        unframer.push(&[0x66, 0x33, 0x93, 0x36, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(unframer.next_frame(), Err(Error::Framing { .. })));
        let csv = format!("\"{}\n", "x".repeat(100));
        framing_error(unframe(&Framing::Csv, limits, csv.as_bytes()));
    }

    #[test]
    fn unknown_content_type_and_missing_proto_uuid_are_errors() {
        let options = FramingOptions::default();
        for content_type in ["application/json", "", CONTENT_TYPE_PROTO_FIXED] {
            let err = Framing::for_content_type("a/journal", content_type, &options).unwrap_err();
            assert!(err.to_string().contains("a/journal"), "{err}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for framing in [json(), proto(), Framing::Csv] {
            for _ in 0..200 {
                let mut unframer = Unframer::new(
                    "j",
                    framing.clone(),
                    Limits {
                        max_message_size: 300,
                    },
                    0,
                );
                let bytes: Vec<u8> = (0..257)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        [b'"', b',', b'\n', b'{', 0x66, 0x33, 0x93, 0x36, state as u8]
                            [state as usize % 9]
                    })
                    .collect();
                unframer.push(&bytes);
                while let Ok(Some(_)) = unframer.next_frame() {}
            }
        }
    }
}
