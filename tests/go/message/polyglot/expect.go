package polyglot

import (
	"encoding/json"
	"fmt"
	"os"
)

// ExpectFormat names the version of the expectation file's layout.
const ExpectFormat = "courant-polyglot-expect/1"

// Expect is what a publisher leaves for the reader: the journals it wrote, every message a
// read-committed reader must deliver exactly once, and every message it must never deliver.
type Expect struct {
	Format     string   `json:"format"`      // ExpectFormat.
	Publisher  string   `json:"publisher"`   // Who wrote the journals ("go", "python").
	Journals   []string `json:"journals"`    // Every journal written, to be read in full.
	Committed  []Item   `json:"committed"`   // Must each be read exactly once.
	RolledBack []Item   `json:"rolled_back"` // Must never be read.
	Count      int      `json:"count"`       // len(Committed).
	Sum        int64    `json:"sum"`         // Sum of Committed values.
}

// Item is one published message: its ID and Value, the journal it was published to, and,
// for a message that must not be read, how it was taken back ("ack-rollback": an ACK_TXN
// with the producer's earlier clock was written after it; "abandoned": no ACK_TXN ever).
type Item struct {
	ID      string `json:"id"`
	Value   int64  `json:"value"`
	Journal string `json:"journal"`
	How     string `json:"how,omitempty"`
}

// Finish fills Format, Count and Sum from Committed.
func (e *Expect) Finish() {
	e.Format, e.Count, e.Sum = ExpectFormat, len(e.Committed), 0
	for _, it := range e.Committed {
		e.Sum += it.Value
	}
}

// Validate checks the file is self-consistent, so that a wrong file is reported as such
// rather than as a failed read: known format, non-empty unique IDs, Count and Sum that
// match Committed, and every message on a listed journal.
func (e *Expect) Validate() error {
	if e.Format != ExpectFormat {
		return fmt.Errorf("format %q, want %q", e.Format, ExpectFormat)
	}
	if len(e.Journals) == 0 {
		return fmt.Errorf("no journals")
	}
	var journals = make(map[string]bool)
	for _, j := range e.Journals {
		journals[j] = true
	}
	var seen = make(map[string]bool)
	var sum int64
	for i, list := range [][]Item{e.Committed, e.RolledBack} {
		for _, it := range list {
			if it.ID == "" || seen[it.ID] {
				return fmt.Errorf("message ID %q is empty or listed twice", it.ID)
			} else if !journals[it.Journal] {
				return fmt.Errorf("message %s names journal %q, which is not in journals", it.ID, it.Journal)
			}
			seen[it.ID] = true
			if i == 0 {
				sum += it.Value
			}
		}
	}
	if e.Count != len(e.Committed) || e.Sum != sum {
		return fmt.Errorf("count %d / sum %d, but committed holds %d messages summing to %d",
			e.Count, e.Sum, len(e.Committed), sum)
	}
	return nil
}

// WriteExpect writes |e| as indented JSON to |path|.
func WriteExpect(path string, e *Expect) error {
	var b, err = json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadExpect reads and validates the expectation file at |path|.
func ReadExpect(path string) (*Expect, error) {
	var b, err = os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e = new(Expect)
	if err = json.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	} else if err = e.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}
