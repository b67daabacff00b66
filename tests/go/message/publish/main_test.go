package main

import (
	"strings"
	"testing"

	"courant.dev/tests/go/message/polyglot"
)

// TestStateErrors: the publishing state refuses steps that make no sense, before any
// append (so no broker is needed).
func TestStateErrors(t *testing.T) {
	var st = newState(nil, 2, false)
	var cases = []struct {
		step polyglot.Step
		want string
	}{
		{polyglot.Step{Kind: polyglot.Commit, Pub: 1}, "no open transaction"},
		{polyglot.Step{Kind: polyglot.Rollback, Pub: 0}, "no open transaction"},
		{polyglot.Step{Kind: polyglot.Duplicate, Msg: polyglot.Item{ID: "x", Journal: "j"}}, "no published message"},
		{polyglot.Step{Kind: polyglot.Kind(99)}, "unknown step kind"},
	}
	for _, tc := range cases {
		if err := st.apply(tc.step); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.step, err, tc.want)
		}
	}
}

func TestRunRejectsBadSizes(t *testing.T) {
	if err := run(t.Context(), "", "p", 0, false, false, "x", polyglot.Workload{Pubs: 1, Txns: 1}); err == nil {
		t.Errorf("0 journals accepted")
	}
	if err := run(t.Context(), "", "p", 2, false, false, "x", polyglot.Workload{Pubs: 2, Txns: 1}); err == nil ||
		!strings.Contains(err.Error(), "at least one transaction per publisher") {
		t.Errorf("fewer transactions than publishers: %v", err)
	}
	if err := run(t.Context(), "", "p", 2, false, false, "x", polyglot.Workload{Pubs: 1, Txns: 1}); err == nil ||
		!strings.Contains(err.Error(), "no broker address") {
		t.Errorf("no broker: %v", err)
	}
}
