package main

import (
	"testing"

	"courant.dev/tests/go/message/polyglot"
	"go.gazette.dev/core/message"
)

func TestParseOutcomes(t *testing.T) {
	var got, err = parseOutcomes(" ackRollback, ,ackCommitReplay,outsideAlreadyAcked")
	if err != nil || len(got) != 3 || got[0] != message.QueueAckRollback ||
		got[1] != message.QueueAckCommitReplay || got[2] != message.QueueOutsideAlreadyAcked {
		t.Errorf("parseOutcomes: %v, %v", got, err)
	}
	if got, err = parseOutcomes(""); err != nil || len(got) != 0 {
		t.Errorf("empty list: %v, %v", got, err)
	}
	if _, err = parseOutcomes("ackRollback,ackRolback"); err == nil {
		t.Errorf("a misspelt outcome was accepted")
	}
}

func TestDoPlant(t *testing.T) {
	var e = &polyglot.Expect{RolledBack: []polyglot.Item{{ID: "rb", Value: 7, Journal: "j"}}}
	var got = []polyglot.Observed{{ID: "a", Value: 1}, {ID: "b", Value: 2}}
	if out, err := doPlant("drop", got, e); err != nil || len(out) != 1 || out[0].ID != "b" {
		t.Errorf("drop: %v, %v", out, err)
	}
	if out, err := doPlant("dup", got, e); err != nil || len(out) != 3 || out[2].ID != "a" {
		t.Errorf("dup: %v, %v", out, err)
	}
	if out, err := doPlant("rolled-back", got, e); err != nil || len(out) != 3 || out[2].ID != "rb" {
		t.Errorf("rolled-back: %v, %v", out, err)
	}
	if out, err := doPlant("", got, e); err != nil || len(out) != 2 {
		t.Errorf("no plant: %v, %v", out, err)
	}
	if _, err := doPlant("drop", nil, e); err == nil {
		t.Errorf("drop of nothing was accepted")
	}
	if _, err := doPlant("rolled-back", got, &polyglot.Expect{}); err == nil {
		t.Errorf("rolled-back without a rolled-back message was accepted")
	}
	if _, err := doPlant("swap", got, e); err == nil {
		t.Errorf("an unknown plant was accepted")
	}
}
