// Command read is a read-committed reader of polyglot journals (../README.md) built from
// Gazette's own pieces, as a Gazette consumer shard reads its sources: per journal, a
// message.ReadCommittedIter (a ReadUncommittedIter feeding a message.Sequencer, replaying
// from the journal when an ACK commits messages no longer in the Sequencer's ring) over a
// client.RetryReader from offset 0 to the journal's write head. It skips ACK_TXN messages
// (a consumer application does the same) and checks every other delivered message against
// the publisher's expectation file: each committed message exactly once, with its value
// and journal, no rolled-back or unknown message, and the expected sum.
//
// With --observed it reads nothing and checks an observation file instead (JSON lines of
// {"id","value","journal","offset"}), which is how a reader in another language is checked
// by this same code. --plant corrupts the deliveries on purpose, to prove the check fails.
//
// Exit status: 0 exactly-once, 1 the check failed, 2 any other error.
//
// Lives on: main's goroutine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"courant.dev/tests/go/message/polyglot"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/message"
)

// options are the command line.
type options struct {
	broker, expect, observed, observedOut, plant string
	ring, limit                                  int
	require                                      []message.QueueOutcome
}

func main() {
	var o options
	var require string
	flag.StringVar(&o.broker, "broker", os.Getenv("BROKER_ADDRESS"), "broker address, http://host:port (default $BROKER_ADDRESS)")
	flag.StringVar(&o.expect, "expect", "expect.json", "the publisher's expectation file")
	flag.StringVar(&o.observed, "observed", "", "check this observation file instead of reading the journals")
	flag.StringVar(&o.observedOut, "observed-out", "", "also write what was read here, as an observation file")
	flag.IntVar(&o.ring, "ring", 1024, "Sequencer ring buffer size (small values force replays)")
	flag.StringVar(&o.plant, "plant", "", "corrupt the deliveries before checking: drop, dup or rolled-back")
	flag.StringVar(&require, "require-outcomes", "", "comma-separated Sequencer outcomes (eg ackRollback,ackCommitReplay) "+
		"that must each occur at least once, else the check fails")
	flag.IntVar(&o.limit, "limit", 20, "most lines printed per kind of difference (0: all)")
	var timeout = flag.Duration("timeout", 60*time.Second, "bound on the whole run")
	flag.Parse()

	var ok bool
	var err error
	if o.require, err = parseOutcomes(require); err == nil {
		var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
		ok, err = run(ctx, o)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "read: %v\n", err)
		os.Exit(2)
	} else if !ok {
		os.Exit(1)
	}
}

// parseOutcomes parses --require-outcomes, by QueueOutcome.String names.
func parseOutcomes(list string) ([]message.QueueOutcome, error) {
	var out []message.QueueOutcome
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		var found bool
		for o := message.QueueOutsideAlreadyAcked; o <= message.QueueAckCommitReplay; o++ {
			if o.String() == name {
				out, found = append(out, o), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown sequencer outcome %q in --require-outcomes", name)
		}
	}
	return out, nil
}

func run(ctx context.Context, o options) (bool, error) {
	var e, err = polyglot.ReadExpect(o.expect)
	if err != nil {
		return false, err
	}
	var got []polyglot.Observed
	var seen = make(counts)
	if o.observed != "" {
		if len(o.require) != 0 {
			return false, fmt.Errorf("--require-outcomes needs a read of the journals, not --observed")
		} else if got, err = polyglot.ReadObserved(o.observed); err != nil {
			return false, err
		}
		fmt.Printf("checking %d deliveries from %s against %s\n", len(got), o.observed, o.expect)
	} else if got, err = readAll(ctx, o.broker, e.Journals, o.ring, seen); err != nil {
		return false, err
	}
	if o.observedOut != "" {
		if err = polyglot.WriteObserved(o.observedOut, got); err != nil {
			return false, err
		}
	}
	if got, err = doPlant(o.plant, got, e); err != nil {
		return false, err
	}
	var r = polyglot.Check(e, got)
	r.Write(os.Stdout, o.limit)
	var ok = r.OK()
	for _, want := range o.require {
		if seen[want] == 0 {
			fmt.Printf("FAILED: the sequencer never saw outcome %s (all: %s)\n", want, seen)
			ok = false
		}
	}
	if o.observed == "" {
		fmt.Printf("sequencer outcomes over all journals: %s\n", seen)
	}
	return ok, nil
}

// readAll reads every journal in full, read-committed, and returns the deliveries.
func readAll(ctx context.Context, broker string, journals []string, ring int, seen counts) ([]polyglot.Observed, error) {
	var rjc, err = polyglot.Dial(ctx, broker)
	if err != nil {
		return nil, err
	}
	var all []polyglot.Observed
	for _, j := range journals {
		var c = make(counts)
		var got, head, err = readCommitted(ctx, rjc, pb.Journal(j), ring, c)
		if err != nil {
			return nil, err
		}
		fmt.Printf("read %s [0, %d): %d messages delivered; sequencer: %s\n", j, head, len(got), c)
		all = append(all, got...)
		for o, n := range c {
			seen[o] += n
		}
	}
	return all, nil
}

// counts tallies the Sequencer's QueueOutcome of every read-uncommitted message.
type counts map[message.QueueOutcome]int

func (c counts) String() string {
	var parts []string
	for o := message.QueueOutsideAlreadyAcked; o <= message.QueueAckCommitReplay; o++ {
		if c[o] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", o, c[o]))
		}
	}
	return strings.Join(parts, " ")
}

// readCommitted reads |journal| from 0 to its write head, read-committed, with a fresh
// Sequencer (no checkpoint), and returns the non-ACK deliveries and the write head. The
// loop is message.ReadCommittedIter.Next's, written out to tally the Sequencer's outcomes
// into |seen|: a ReadUncommittedIter feeds QueueUncommitted, Step dequeues what an ACK
// (or an OUTSIDE_TXN message) committed, and an ACK whose messages left the ring starts
// a replay read of ReplayRange.
func readCommitted(ctx context.Context, rjc pb.RoutedJournalClient, journal pb.Journal, ring int, seen counts) (
	[]polyglot.Observed, int64, error) {
	var head, err = polyglot.WriteHead(ctx, rjc, journal)
	if err != nil || head == 0 {
		return nil, head, err
	}
	var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: journal, Offset: 0, EndOffset: head, Block: true})
	var rui = message.NewReadUncommittedIter(rr, polyglot.NewMsg)
	var seq = message.NewSequencer(nil, nil, ring)
	var out []polyglot.Observed
	for {
		if err = seq.Step(); err == nil {
			var env = seq.Dequeued
			if message.GetFlags(env.GetUUID()) != message.Flag_ACK_TXN {
				var m = env.Message.(*polyglot.Msg)
				out = append(out, polyglot.Observed{ID: m.ID, Value: m.Value, Journal: journal.String(), Offset: env.Begin})
			}
			continue
		} else if !errors.Is(err, io.EOF) {
			return nil, head, fmt.Errorf("reading %s: sequencer step: %w", journal, err)
		}
		var env, err = rui.Next()
		if errors.Is(err, io.EOF) {
			return out, head, nil
		} else if err != nil {
			return nil, head, fmt.Errorf("reading %s read-uncommitted (write head %d): %w", journal, head, err)
		}
		var outcome = seq.QueueUncommitted(env)
		seen[outcome]++
		if outcome == message.QueueAckCommitReplay {
			var j, begin, end = seq.ReplayRange()
			var replay = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: begin, EndOffset: end, Block: true})
			seq.StartReplay(message.NewReadUncommittedIter(replay, polyglot.NewMsg))
		}
	}
}

// doPlant corrupts |got| as |plant| says: "drop" removes the first delivery, "dup"
// delivers it twice, "rolled-back" adds a delivery of the first rolled-back message.
func doPlant(plant string, got []polyglot.Observed, e *polyglot.Expect) ([]polyglot.Observed, error) {
	switch plant {
	case "":
		return got, nil
	case "drop", "dup":
		if len(got) == 0 {
			return nil, fmt.Errorf("--plant %s: nothing was delivered", plant)
		}
		fmt.Printf("PLANTED: %s of %s\n", plant, got[0])
		if plant == "drop" {
			return got[1:], nil
		}
		return append(got, got[0]), nil
	case "rolled-back":
		if len(e.RolledBack) == 0 {
			return nil, fmt.Errorf("--plant rolled-back: the expectation lists no rolled-back message")
		}
		var it = e.RolledBack[0]
		var o = polyglot.Observed{ID: it.ID, Value: it.Value, Journal: it.Journal, Offset: -1}
		fmt.Printf("PLANTED: delivery of rolled-back %s\n", o)
		return append(got, o), nil
	}
	return nil, fmt.Errorf("unknown --plant %q (want drop, dup or rolled-back)", plant)
}
