// Package polyglot is the shared part of the polyglot message programs (publish, read): the
// JSON message every publisher writes (Go or not), the expectation file a publisher leaves
// for the reader, the exactly-once check of what a read-committed reader delivered, and the
// broker plumbing (dial, journal creation) both programs use.
//
// Lives on: the caller's goroutine; nothing here is shared or global except the message
// shape, which README.md (one directory up) documents for publishers in other languages.
package polyglot

import (
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/message"
)

// Msg is the message of the polyglot journals, framed as `application/x-ndjson`: one JSON
// document per line, `{"UUID":"<canonical v1 UUID>","ID":"<unique id>","Value":<int64>}`.
// Field names follow Gazette's convention (its examples use an untagged `UUID message.UUID`
// field, so the JSON key is "UUID"); message.UUID is github.com/google/uuid's UUID, which
// encodes as its canonical lowercase 8-4-4-4-12 string. An acknowledgement is a Msg with
// only its UUID set, so it encodes as `{"UUID":"..."}`: ID and Value are omitted when empty.
type Msg struct {
	UUID  message.UUID `json:"UUID"`
	ID    string       `json:"ID,omitempty"`
	Value int64        `json:"Value,omitempty"`
}

// GetUUID implements message.Message.
func (m *Msg) GetUUID() message.UUID { return m.UUID }

// SetUUID implements message.Message: the Publisher sets the UUID it sequenced.
func (m *Msg) SetUUID(uuid message.UUID) { m.UUID = uuid }

// NewAcknowledgement implements message.Message: an ACK is a Msg with only a UUID.
func (m *Msg) NewAcknowledgement(pb.Journal) message.Message { return new(Msg) }

// NewMsg is the message.NewMessageFunc of every polyglot journal.
func NewMsg(*pb.JournalSpec) (message.Message, error) { return new(Msg), nil }
