package polyglot

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Observed is one message a read-committed reader delivered (ACK_TXN messages excluded):
// its ID and Value, and the journal and offset it was read at. It is also the line format
// of an observation file (JSON lines: `{"id":..,"value":..,"journal":..,"offset":..}`),
// which lets a reader in another language be checked by this same code.
type Observed struct {
	ID      string `json:"id"`
	Value   int64  `json:"value"`
	Journal string `json:"journal"`
	Offset  int64  `json:"offset"`
}

func (o Observed) String() string {
	return fmt.Sprintf("%q (value %d) at %s:%d", o.ID, o.Value, o.Journal, o.Offset)
}

// Report is the outcome of Check: empty lists and equal sums mean exactly-once.
type Report struct {
	Read           int                   // Messages delivered.
	Missing        []Item                // Committed, never delivered.
	Duplicated     map[string][]Observed // Committed, delivered more than once (every delivery).
	RolledBackRead []Observed            // Rolled back (or abandoned), yet delivered.
	Unknown        []Observed            // Delivered, but in neither list.
	WrongValue     []Observed            // Committed ID delivered with another value.
	WrongJournal   []Observed            // Committed ID delivered from another journal.
	WantSum        int64                 // Expect.Sum.
	GotSum         int64                 // Sum over every delivery.
}

// OK is true when every committed message was delivered exactly once, as published, and
// nothing else was delivered.
func (r *Report) OK() bool {
	return len(r.Missing) == 0 && len(r.Duplicated) == 0 && len(r.RolledBackRead) == 0 &&
		len(r.Unknown) == 0 && len(r.WrongValue) == 0 && len(r.WrongJournal) == 0 &&
		r.WantSum == r.GotSum
}

// Check compares the deliveries of a read-committed reader with the publisher's Expect.
func Check(e *Expect, got []Observed) *Report {
	var committed = make(map[string]Item, len(e.Committed))
	for _, it := range e.Committed {
		committed[it.ID] = it
	}
	var rolledBack = make(map[string]bool, len(e.RolledBack))
	for _, it := range e.RolledBack {
		rolledBack[it.ID] = true
	}
	var r = &Report{Read: len(got), Duplicated: make(map[string][]Observed), WantSum: e.Sum}
	var byID = make(map[string][]Observed)
	for _, o := range got {
		r.GotSum += o.Value
		var want, ok = committed[o.ID]
		switch {
		case rolledBack[o.ID]:
			r.RolledBackRead = append(r.RolledBackRead, o)
		case !ok:
			r.Unknown = append(r.Unknown, o)
		default:
			byID[o.ID] = append(byID[o.ID], o)
			if o.Value != want.Value {
				r.WrongValue = append(r.WrongValue, o)
			}
			if o.Journal != want.Journal {
				r.WrongJournal = append(r.WrongJournal, o)
			}
		}
	}
	for _, it := range e.Committed {
		if n := len(byID[it.ID]); n == 0 {
			r.Missing = append(r.Missing, it)
		} else if n > 1 {
			r.Duplicated[it.ID] = byID[it.ID]
		}
	}
	return r
}

// Write prints the report: one summary line, then at most |limit| lines per kind of
// difference (all of them when limit <= 0).
func (r *Report) Write(w io.Writer, limit int) {
	if r.OK() {
		_, _ = fmt.Fprintf(w, "OK: %d committed messages read exactly once, sum %d, no rolled-back message\n",
			r.Read, r.GotSum)
		return
	}
	_, _ = fmt.Fprintf(w, "FAILED: read %d messages; missing %d, duplicated %d, rolled back but read %d, "+
		"unknown %d, wrong value %d, wrong journal %d; sum %d, want %d\n",
		r.Read, len(r.Missing), len(r.Duplicated), len(r.RolledBackRead), len(r.Unknown),
		len(r.WrongValue), len(r.WrongJournal), r.GotSum, r.WantSum)
	var lines = func(kind string, items []string) {
		for i, s := range items {
			if limit > 0 && i == limit {
				_, _ = fmt.Fprintf(w, "  %s: ... and %d more\n", kind, len(items)-limit)
				return
			}
			_, _ = fmt.Fprintf(w, "  %s: %s\n", kind, s)
		}
	}
	var missing []string
	for _, it := range r.Missing {
		missing = append(missing, fmt.Sprintf("%q (value %d, published to %s)", it.ID, it.Value, it.Journal))
	}
	lines("missing", missing)
	var dups []string
	for id, obs := range r.Duplicated {
		var at []string
		for _, o := range obs {
			at = append(at, fmt.Sprintf("%s:%d", o.Journal, o.Offset))
		}
		dups = append(dups, fmt.Sprintf("%q read %d times, at %s", id, len(obs), strings.Join(at, ", ")))
	}
	sort.Strings(dups)
	lines("duplicated", dups)
	lines("rolled back but read", strs(r.RolledBackRead))
	lines("unknown", strs(r.Unknown))
	lines("wrong value", strs(r.WrongValue))
	lines("wrong journal", strs(r.WrongJournal))
}

func strs(obs []Observed) []string {
	var out []string
	for _, o := range obs {
		out = append(out, o.String())
	}
	return out
}

// ReadObserved reads an observation file (JSON lines of Observed; blank lines skipped).
func ReadObserved(path string) ([]Observed, error) {
	var f, err = os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Observed
	var sc = bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var line = strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var o Observed
		var dec = json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err = dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, o)
	}
	if err = sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// WriteObserved writes |got| as an observation file.
func WriteObserved(path string, got []Observed) error {
	var f, err = os.Create(path)
	if err != nil {
		return err
	}
	var bw = bufio.NewWriter(f)
	var enc = json.NewEncoder(bw)
	for _, o := range got {
		if err = enc.Encode(o); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err = bw.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
