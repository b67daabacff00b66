//! A consumer's [`Checkpoint`] (Go's `consumer.Checkpoint`, `consumer/protocol/protocol.proto`):
//! per source journal the offset read through and, per producer, its last acknowledged clock
//! and the begin offset of its pending span; plus the ACK intents of the consumer's own
//! transaction. Stored atomically with the consumer's state, it resumes reading exactly once.
//!
//! Two encodings: Gazette's protobuf `Checkpoint` message, byte for byte
//! ([`Checkpoint::to_proto`]), and its proto3 JSON mapping ([`Checkpoint::to_json`]):
//!
//! ```json
//! {"sources": {"a/journal": {"readThrough": "1234",
//!    "producers": [{"id": "AQIDBAUG", "state": {"lastAck": "2459", "begin": "-1"}}]}},
//!  "ackIntents": {"b/journal": "eyJVVUlEIjoi...Cg=="}}
//! ```
//!
//! Lives on: any thread; a plain value.

use super::publisher::AckIntent;
use super::sequencer::{JournalProducer, ProducerState, Sequencer};
use super::uuid::{Clock, ProducerId};
use crate::Error;
use prost::Message as _;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A consumer checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Per source journal, what was read.
    pub sources: BTreeMap<String, Source>,
    /// Per journal, framed ACK_TXN messages to write (again) when resuming: they commit, or
    /// roll back, the transaction this checkpoint ended.
    pub ack_intents: BTreeMap<String, Vec<u8>>,
}

/// What was read of one journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    /// The offset through which messages were sequenced.
    pub read_through: i64,
    /// The producers seen in the journal.
    pub producers: Vec<ProducerEntry>,
}

/// One producer of a journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerEntry {
    pub id: ProducerId,
    /// Clock of its last acknowledged and processed message.
    pub last_ack: Clock,
    /// Begin offset of its pending span, or -1.
    pub begin: i64,
}

impl Checkpoint {
    /// The checkpoint of a sequencer's state (Go's `Sequencer.Checkpoint` folded into a
    /// `consumer.Checkpoint`).
    pub fn from_states(offsets: &BTreeMap<String, i64>, states: &[ProducerState]) -> Checkpoint {
        let mut sources: BTreeMap<String, Source> = offsets
            .iter()
            .map(|(j, &o)| {
                (
                    j.clone(),
                    Source {
                        read_through: o,
                        producers: Vec::new(),
                    },
                )
            })
            .collect();
        for state in states {
            let source = sources.entry(state.jp.journal.clone()).or_default();
            source.producers.push(ProducerEntry {
                id: state.jp.producer,
                last_ack: state.last_ack,
                begin: state.begin,
            });
        }
        Checkpoint {
            sources,
            ack_intents: BTreeMap::new(),
        }
    }

    /// Read-through offsets and producer states, to restore a [`Sequencer`].
    pub fn states(&self) -> (BTreeMap<String, i64>, Vec<ProducerState>) {
        let offsets = self
            .sources
            .iter()
            .map(|(j, s)| (j.clone(), s.read_through))
            .collect();
        let states = self
            .sources
            .iter()
            .flat_map(|(journal, source)| {
                source.producers.iter().map(move |p| ProducerState {
                    jp: JournalProducer {
                        journal: journal.clone(),
                        producer: p.id,
                    },
                    last_ack: p.last_ack,
                    begin: p.begin,
                })
            })
            .collect();
        (offsets, states)
    }

    /// A sequencer resuming from this checkpoint.
    pub fn sequencer(&self) -> Sequencer {
        let (offsets, states) = self.states();
        Sequencer::new(offsets, states)
    }

    /// Where to start reading `journal` to resume: the read-through offset, or the begin of
    /// the earliest pending span if earlier (its messages must be read again), or 0 for a
    /// journal the checkpoint does not know.
    pub fn start_offset(&self, journal: &str) -> i64 {
        let Some(source) = self.sources.get(journal) else {
            return 0;
        };
        source
            .producers
            .iter()
            .filter(|p| p.begin >= 0)
            .map(|p| p.begin)
            .fold(source.read_through, i64::min)
    }

    /// Records the ACK intents of the transaction this checkpoint ends (from
    /// [`Publisher::build_ack_intents`](super::publisher::Publisher::build_ack_intents)).
    pub fn set_ack_intents(&mut self, intents: &[AckIntent]) {
        self.ack_intents = intents
            .iter()
            .map(|i| (i.journal.clone(), i.intent.to_vec()))
            .collect();
    }

    /// The ACK intents to write again when resuming, before anything else (with
    /// [`Publisher::write_intents`](super::publisher::Publisher::write_intents)).
    pub fn intents(&self) -> Vec<AckIntent> {
        self.ack_intents
            .iter()
            .map(|(journal, intent)| AckIntent {
                journal: journal.clone(),
                intent: bytes::Bytes::from(intent.clone()),
            })
            .collect()
    }

    /// Adds the sources and intents of `other` (a checkpoint of other journals).
    pub fn merge(&mut self, other: Checkpoint) {
        self.sources.extend(other.sources);
        self.ack_intents.extend(other.ack_intents);
    }

    /// Gazette's protobuf `consumer.Checkpoint` encoding.
    pub fn to_proto(&self) -> Vec<u8> {
        let pb = pb::Checkpoint {
            sources: self
                .sources
                .iter()
                .map(|(j, s)| (j.clone(), pb::Source::from(s)))
                .collect(),
            ack_intents: self.ack_intents.clone(),
        };
        pb.encode_to_vec()
    }

    /// Decodes Gazette's protobuf `consumer.Checkpoint`.
    pub fn from_proto(bytes: &[u8]) -> Result<Checkpoint, Error> {
        let pb = pb::Checkpoint::decode(bytes)
            .map_err(|e| Error::Invalid(format!("checkpoint is not a protobuf Checkpoint: {e}")))?;
        let mut sources = BTreeMap::new();
        for (journal, source) in pb.sources {
            let mut producers = Vec::with_capacity(source.producers.len());
            for entry in source.producers {
                let id = producer_id(&entry.id, &journal)?;
                let state = entry.state.unwrap_or_default();
                producers.push(ProducerEntry {
                    id,
                    last_ack: Clock(state.last_ack),
                    begin: state.begin,
                });
            }
            sources.insert(
                journal,
                Source {
                    read_through: source.read_through,
                    producers,
                },
            );
        }
        Ok(Checkpoint {
            sources,
            ack_intents: pb.ack_intents,
        })
    }

    /// The proto3 JSON form (field names in lowerCamelCase, 64-bit integers as strings,
    /// bytes as standard base64), as Go's `jsonpb` writes a `consumer.Checkpoint`.
    pub fn to_json(&self) -> Vec<u8> {
        let sources: Map<String, Value> = self
            .sources
            .iter()
            .map(|(journal, source)| (journal.clone(), source_json(source)))
            .collect();
        let intents: Map<String, Value> = self
            .ack_intents
            .iter()
            .map(|(j, b)| (j.clone(), Value::String(base64::encode(b))))
            .collect();
        let value = json!({"sources": sources, "ackIntents": intents});
        serde_json::to_vec(&value).expect("a JSON value always serializes")
    }

    /// Parses [`Checkpoint::to_json`]'s form (integers as strings or numbers).
    pub fn from_json(bytes: &[u8]) -> Result<Checkpoint, Error> {
        let bad = |detail: String| Error::Invalid(format!("checkpoint JSON: {detail}"));
        let value: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let mut checkpoint = Checkpoint::default();
        for (journal, source) in object(&value, "sources").map_err(bad)? {
            let parsed = parse_source(journal, source).map_err(bad)?;
            checkpoint.sources.insert(journal.clone(), parsed);
        }
        for (journal, intent) in object(&value, "ackIntents").map_err(bad)? {
            let text = intent
                .as_str()
                .ok_or_else(|| bad(format!("ackIntents.{journal} is not a string")))?;
            let bytes =
                base64::decode(text).map_err(|e| bad(format!("ackIntents.{journal}: {e}")))?;
            checkpoint.ack_intents.insert(journal.clone(), bytes);
        }
        Ok(checkpoint)
    }
}

fn source_json(source: &Source) -> Value {
    let producers: Vec<Value> = source
        .producers
        .iter()
        .map(|p| {
            json!({"id": base64::encode(&p.id.0), "state": {
                "lastAck": p.last_ack.0.to_string(), "begin": p.begin.to_string()}})
        })
        .collect();
    json!({"readThrough": source.read_through.to_string(), "producers": producers})
}

fn parse_source(journal: &str, source: &Value) -> Result<Source, String> {
    let read_through = integer(source.get("readThrough"))
        .ok_or_else(|| format!("sources.{journal}.readThrough is not an integer"))?;
    let mut producers = Vec::new();
    let empty = Vec::new();
    let entries = match source.get("producers") {
        None | Some(Value::Null) => &empty,
        Some(Value::Array(entries)) => entries,
        Some(_) => return Err(format!("sources.{journal}.producers is not an array")),
    };
    for entry in entries {
        let id = entry.get("id").and_then(Value::as_str).unwrap_or("");
        let id = base64::decode(id).map_err(|e| format!("producer id: {e}"))?;
        let id = producer_id(&id, journal).map_err(|e| e.to_string())?;
        let state = entry.get("state").cloned().unwrap_or(Value::Null);
        let last_ack = integer(state.get("lastAck")).unwrap_or(0);
        let begin = integer(state.get("begin")).unwrap_or(0);
        producers.push(ProducerEntry {
            id,
            last_ack: Clock(last_ack as u64),
            begin: begin as i64,
        });
    }
    Ok(Source {
        read_through: read_through as i64,
        producers,
    })
}

/// A proto3 JSON integer: a string or a number; absent is zero.
fn integer(value: Option<&Value>) -> Option<i128> {
    match value {
        None | Some(Value::Null) => Some(0),
        Some(Value::String(s)) => s.parse().ok(),
        Some(Value::Number(n)) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
        Some(_) => None,
    }
}

fn object<'a>(value: &'a Value, key: &str) -> Result<Vec<(&'a String, &'a Value)>, String> {
    match value.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => Ok(map.iter().collect()),
        Some(_) => Err(format!("{key} is not an object")),
    }
}

fn producer_id(bytes: &[u8], journal: &str) -> Result<ProducerId, Error> {
    <[u8; 6]>::try_from(bytes).map(ProducerId).map_err(|_| {
        Error::Invalid(format!(
            "checkpoint of journal {journal}: producer id of {} bytes, expected 6",
            bytes.len()
        ))
    })
}

/// Gazette's `consumer.Checkpoint` protobuf messages.
mod pb {
    use std::collections::BTreeMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Checkpoint {
        #[prost(btree_map = "string, message", tag = "1")]
        pub sources: BTreeMap<String, Source>,
        #[prost(btree_map = "string, bytes", tag = "2")]
        pub ack_intents: BTreeMap<String, Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Source {
        #[prost(int64, tag = "1")]
        pub read_through: i64,
        #[prost(message, repeated, tag = "2")]
        pub producers: Vec<ProducerEntry>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProducerEntry {
        #[prost(bytes = "vec", tag = "1")]
        pub id: Vec<u8>,
        #[prost(message, optional, tag = "2")]
        pub state: Option<ProducerState>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProducerState {
        #[prost(fixed64, tag = "1")]
        pub last_ack: u64,
        #[prost(int64, tag = "2")]
        pub begin: i64,
    }

    impl From<&super::Source> for Source {
        fn from(source: &super::Source) -> Source {
            let producers = source
                .producers
                .iter()
                .map(|p| ProducerEntry {
                    id: p.id.0.to_vec(),
                    state: Some(ProducerState {
                        last_ack: p.last_ack.0,
                        begin: p.begin,
                    }),
                })
                .collect();
            Source {
                read_through: source.read_through,
                producers,
            }
        }
    }
}

/// Standard base64 with padding (RFC 4648), as proto3 JSON writes bytes.
mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    pub fn decode(text: &str) -> Result<Vec<u8>, String> {
        let text = text.trim_end_matches('=');
        let mut out = Vec::with_capacity(text.len() * 3 / 4);
        let (mut n, mut bits) = (0u32, 0);
        for c in text.bytes() {
            let v = ALPHABET
                .iter()
                .position(|&a| a == c)
                .ok_or_else(|| format!("invalid base64 character {:?}", c as char))?;
            n = (n << 6) | v as u32;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((n >> bits) as u8);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Checkpoint {
        let mut checkpoint = Checkpoint::default();
        checkpoint.sources.insert(
            "a/journal".into(),
            Source {
                read_through: 1234,
                producers: vec![
                    ProducerEntry {
                        id: ProducerId([1, 2, 3, 4, 5, 6]),
                        last_ack: Clock(2459),
                        begin: -1,
                    },
                    ProducerEntry {
                        id: ProducerId([7, 7, 7, 7, 7, 7]),
                        last_ack: Clock(u64::MAX),
                        begin: 1000,
                    },
                ],
            },
        );
        checkpoint
            .ack_intents
            .insert("b/journal".into(), b"{\"UUID\":\"x\"}\n".to_vec());
        checkpoint
    }

    #[test]
    fn json_and_proto_round_trip() {
        let checkpoint = fixture();
        assert_eq!(
            Checkpoint::from_json(&checkpoint.to_json()).unwrap(),
            checkpoint
        );
        assert_eq!(
            Checkpoint::from_proto(&checkpoint.to_proto()).unwrap(),
            checkpoint
        );
        let text = String::from_utf8(checkpoint.to_json()).unwrap();
        assert!(text.contains(r#""id":"AQIDBAUG""#), "{text}");
        assert!(
            text.contains(r#""lastAck":"18446744073709551615""#),
            "{text}"
        );
    }

    #[test]
    fn proto_bytes_are_gazettes() {
        // A source with one producer: the bytes Go's consumer/protocol Checkpoint.Marshal
        // writes for it (observed with go.gazette.dev/core v0.103.0).
        let mut checkpoint = Checkpoint::default();
        checkpoint.sources.insert(
            "j".into(),
            Source {
                read_through: 5,
                producers: vec![ProducerEntry {
                    id: ProducerId([1; 6]),
                    last_ack: Clock(2),
                    begin: -1,
                }],
            },
        );
        let mut expect = vec![
            0x0a, 0x27, 0x0a, 0x01, b'j', 0x12, 0x22, 0x08, 0x05, 0x12, 0x1e,
        ];
        expect.extend_from_slice(&[
            0x0a, 0x06, 1, 1, 1, 1, 1, 1, 0x12, 0x14, 0x09, 2, 0, 0, 0, 0, 0, 0, 0,
        ]);
        expect.extend_from_slice(&[
            0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]);
        assert_eq!(checkpoint.to_proto(), expect);
    }

    #[test]
    fn ack_intents_round_trip() {
        let mut checkpoint = fixture();
        let intents = vec![
            AckIntent {
                journal: "x".into(),
                intent: bytes::Bytes::from_static(b"1\n"),
            },
            AckIntent {
                journal: "y".into(),
                intent: bytes::Bytes::from_static(b"2\n"),
            },
        ];
        checkpoint.set_ack_intents(&intents);
        let restored = Checkpoint::from_proto(&checkpoint.to_proto()).unwrap();
        assert_eq!(restored.intents(), intents);
    }

    #[test]
    fn start_offset_is_the_earliest_pending_begin() {
        let checkpoint = fixture();
        assert_eq!(checkpoint.start_offset("a/journal"), 1000);
        assert_eq!(checkpoint.start_offset("unknown"), 0);
        let (offsets, states) = checkpoint.states();
        assert_eq!(
            Checkpoint::from_states(&offsets, &states).sources,
            checkpoint.sources
        );
    }

    #[test]
    fn malformed_checkpoints_are_errors() {
        let cases: [&[u8]; 5] = [
            b"not json",
            br#"{"sources": []}"#,
            br#"{"sources": {"j": {"readThrough": "x"}}}"#,
            br#"{"sources": {"j": {"readThrough": "1", "producers": [{"id": "AQI="}]}}}"#,
            br#"{"ackIntents": {"j": "!!"}}"#,
        ];
        for bytes in cases {
            assert!(
                Checkpoint::from_json(bytes).is_err(),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert!(Checkpoint::from_proto(&[0x0a, 0x05]).is_err());
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64::encode(plain.as_bytes()), encoded);
            assert_eq!(base64::decode(encoded).unwrap(), plain.as_bytes());
        }
    }
}
