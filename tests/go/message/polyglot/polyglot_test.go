package polyglot

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.gazette.dev/core/message"
)

func testWorkload() Workload {
	return Workload{Prefix: "go", Journals: []string{"a/p0", "a/p1", "a/p2", "a/p3"},
		Committed: 50, Txns: 12, Pubs: 2, Abandon: true}
}

// observeAll delivers every committed message of |e| once, from its journal.
func observeAll(e *Expect) []Observed {
	var out []Observed
	for i, it := range e.Committed {
		out = append(out, Observed{ID: it.ID, Value: it.Value, Journal: it.Journal, Offset: int64(i * 10)})
	}
	return out
}

func TestPlanShape(t *testing.T) {
	var w = testWorkload()
	var steps, e = w.Plan()
	if err := e.Validate(); err != nil {
		t.Fatalf("plan's Expect does not validate: %v", err)
	}
	var kinds = make(map[Kind]int)
	var hows = make(map[string]int)
	for _, s := range steps {
		kinds[s.Kind]++
	}
	for _, it := range e.RolledBack {
		hows[it.How]++
	}
	// Transactions 2, 5, 8, 11 are rolled back; the others (8) commit.
	if kinds[Commit] != 8 || kinds[Rollback] != 4 || kinds[PublishCommitted] != 50 {
		t.Errorf("step kinds %v, want 8 commits, 4 rollbacks, 50 committed publishes", kinds)
	}
	// Duplicates re-send only messages already published and committed.
	var committed = make(map[string]bool)
	for _, it := range e.Committed {
		committed[it.ID] = true
	}
	var published = make(map[string]bool)
	for _, s := range steps {
		switch s.Kind {
		case PublishCommitted, PublishUncommitted:
			published[s.Msg.ID] = true
		case Duplicate:
			if !published[s.Msg.ID] || !committed[s.Msg.ID] {
				t.Errorf("duplicate of %q, which is not an earlier committed message", s.Msg.ID)
			}
		}
	}
	if kinds[Duplicate] < 5 {
		t.Errorf("%d duplicates, want at least 5", kinds[Duplicate])
	}
	if hows["ack-rollback"] == 0 || hows["abandoned"] == 0 {
		t.Errorf("rolled-back kinds %v, want both ack-rollback and abandoned", hows)
	}
	// Every transaction of a Publisher that is rolled back touches only journals its first
	// (committed) transaction touched: there is an earlier ACK to re-send everywhere.
	var first = make(map[int]map[string]bool)
	var open = make(map[int][]string)
	for _, s := range steps {
		switch s.Kind {
		case PublishUncommitted:
			open[s.Pub] = append(open[s.Pub], s.Msg.Journal)
		case Commit:
			if first[s.Pub] == nil {
				first[s.Pub] = make(map[string]bool)
				for _, j := range open[s.Pub] {
					first[s.Pub][j] = true
				}
			}
			open[s.Pub] = nil
		case Rollback:
			for _, j := range open[s.Pub] {
				if !first[s.Pub][j] {
					t.Errorf("publisher %d rolls back in %s with no earlier commit there", s.Pub, j)
				}
			}
			open[s.Pub] = nil
		}
	}
	var steps2, e2 = w.Plan()
	if len(steps2) != len(steps) || e2.Sum != e.Sum || e2.Count != e.Count {
		t.Errorf("Plan is not deterministic")
	}
}

func TestCheckExactlyOnce(t *testing.T) {
	var _, e = testWorkload().Plan()
	var r = Check(e, observeAll(e))
	if !r.OK() {
		var b bytes.Buffer
		r.Write(&b, 0)
		t.Fatalf("exact deliveries not OK:\n%s", b.String())
	}
}

func TestCheckFindsEachDifference(t *testing.T) {
	var _, e = testWorkload().Plan()
	var rb = e.RolledBack[0]
	var cases = []struct {
		name   string
		mutate func([]Observed) []Observed
		want   string
	}{
		{"drop", func(o []Observed) []Observed { return o[1:] }, "missing: \"go-"},
		{"dup", func(o []Observed) []Observed { return append(o, o[3]) }, "read 2 times"},
		{"rolled-back", func(o []Observed) []Observed {
			return append(o, Observed{ID: rb.ID, Value: rb.Value, Journal: rb.Journal})
		}, "rolled back but read: \"" + rb.ID},
		{"unknown", func(o []Observed) []Observed { return append(o, Observed{ID: "zz", Value: 0}) }, "unknown: \"zz\""},
		{"value", func(o []Observed) []Observed { o[0].Value, o[1].Value = o[0].Value+1, o[1].Value-1; return o },
			"wrong value"},
		{"journal", func(o []Observed) []Observed { o[2].Journal = "elsewhere"; return o }, "wrong journal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r = Check(e, tc.mutate(observeAll(e)))
			var b bytes.Buffer
			r.Write(&b, 0)
			if r.OK() || !strings.HasPrefix(b.String(), "FAILED:") || !strings.Contains(b.String(), tc.want) {
				t.Errorf("report does not fail with %q:\n%s", tc.want, b.String())
			}
		})
	}
}

func TestExpectValidateRejects(t *testing.T) {
	var _, good = testWorkload().Plan()
	var cases = map[string]func(e *Expect){
		"format":       func(e *Expect) { e.Format = "x" },
		"sum":          func(e *Expect) { e.Sum++ },
		"count":        func(e *Expect) { e.Count-- },
		"duplicate id": func(e *Expect) { e.RolledBack[0].ID = e.Committed[0].ID },
		"empty id":     func(e *Expect) { e.Committed[0].ID = "" },
		"journal":      func(e *Expect) { e.Committed[0].Journal = "nope" },
		"no journals":  func(e *Expect) { e.Journals = nil },
	}
	for name, mutate := range cases {
		var b, _ = json.Marshal(good)
		var e = new(Expect)
		_ = json.Unmarshal(b, e)
		mutate(e)
		if err := e.Validate(); err == nil {
			t.Errorf("%s: Validate accepted a broken file", name)
		}
	}
}

func TestObservedFileRoundTrip(t *testing.T) {
	var _, e = testWorkload().Plan()
	var path = filepath.Join(t.TempDir(), "obs.jsonl")
	var want = observeAll(e)
	if err := WriteObserved(path, want); err != nil {
		t.Fatal(err)
	}
	var got, err = ReadObserved(path)
	if err != nil || len(got) != len(want) || got[7] != want[7] {
		t.Fatalf("round trip: %v, %d of %d", err, len(got), len(want))
	}
	if err = WriteExpect(filepath.Join(t.TempDir(), "x"), e); err != nil {
		t.Fatal(err)
	}
}

func TestReadObservedRejects(t *testing.T) {
	var dir = t.TempDir()
	for name, content := range map[string]string{
		"garbage":       "{\"id\":\"a\",\"value\":1}\nnot json\n",
		"unknown field": "{\"id\":\"a\",\"value\":1,\"extra\":2}\n",
	} {
		var path = filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadObserved(path); err == nil || !strings.Contains(err.Error(), path+":") {
			t.Errorf("%s: error %v, want one naming %s:<line>", name, err, path)
		}
	}
	if _, err := ReadObserved(filepath.Join(dir, "absent")); err == nil {
		t.Errorf("a missing file was accepted")
	}
}

func TestWorkloadValidate(t *testing.T) {
	for name, w := range map[string]Workload{
		"no journals":  {Pubs: 1, Txns: 1},
		"no publisher": {Journals: []string{"j"}, Txns: 1},
		"few txns":     {Journals: []string{"j"}, Pubs: 3, Txns: 2},
		"negative":     {Journals: []string{"j"}, Pubs: 1, Txns: 1, Committed: -1},
	} {
		if err := w.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestMsgJSON pins the JSON shape other languages follow (README.md).
func TestMsgJSON(t *testing.T) {
	var uuid = message.BuildUUID(message.ProducerID{0x01, 2, 3, 4, 5, 6}, message.Clock(0x1234567890abcdef), message.Flag_CONTINUE_TXN)
	var b, _ = json.Marshal(&Msg{UUID: uuid, ID: "py-c00001", Value: 42})
	var want = `{"UUID":"` + uuid.String() + `","ID":"py-c00001","Value":42}`
	if string(b) != want {
		t.Errorf("message JSON %s, want %s", b, want)
	}
	b, _ = json.Marshal((&Msg{}).NewAcknowledgement(""))
	if string(b) != `{"UUID":"00000000-0000-0000-0000-000000000000"}` {
		t.Errorf("acknowledgement JSON %s", b)
	}
	var m Msg
	if err := json.Unmarshal([]byte(`{"UUID":"`+uuid.String()+`","ID":"x","Value":-3}`), &m); err != nil ||
		m.UUID != uuid || message.GetFlags(m.UUID) != message.Flag_CONTINUE_TXN || m.Value != -3 {
		t.Errorf("decoding: %v %+v", err, m)
	}
}
