// Command publish writes a deterministic workload of polyglot messages (../README.md) with
// Gazette's own message.Publisher over a client.AppendService: committed (OUTSIDE_TXN)
// messages from one Publisher, and transactions (CONTINUE_TXN, then ACK_TXN intents to
// every journal touched) from others, a known subset of which is rolled back the way a
// recovering Gazette consumer rolls back: by re-appending the ACK intents of the last
// committed transaction, whose clock is earlier than the rolled-back messages'. It creates
// the journals (unless --create=false) and writes what a read-committed reader must
// deliver to --expect-out, for `read` to check.
//
// Lives on: main's goroutine; Gazette's AppendService appends in the background.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"courant.dev/tests/go/message/polyglot"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	"go.gazette.dev/core/message"
)

func main() {
	var (
		broker    = flag.String("broker", os.Getenv("BROKER_ADDRESS"), "broker address, http://host:port (default $BROKER_ADDRESS)")
		prefix    = flag.String("prefix", fmt.Sprintf("polyglot/go-%d", time.Now().UnixNano()), "journal name prefix: journals are <prefix>/part-NNN")
		journals  = flag.Int("journals", 4, "number of journals")
		committed = flag.Int("committed", 120, "committed (OUTSIDE_TXN) messages")
		txns      = flag.Int("txns", 24, "transactions (every third one after the first of each publisher is rolled back)")
		pubs      = flag.Int("txn-publishers", 2, "transactional Publishers (producers), whose transactions interleave")
		abandon   = flag.Bool("abandon", true, "end with a transaction that is never acknowledged")
		create    = flag.Bool("create", true, "create the journals (they must not exist)")
		idPrefix  = flag.String("id-prefix", "go", "message ID prefix")
		out       = flag.String("expect-out", "expect.json", "where to write the expectation file")
		timeout   = flag.Duration("timeout", 60*time.Second, "bound on the whole run")
		skipAcks  = flag.Bool("skip-rollback-acks", false, "planted fault: roll back without re-sending the earlier "+
			"ACKs, so a later commit of the same Publisher commits the rolled-back messages (a reader must fail)")
	)
	flag.Parse()

	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *broker, *prefix, *journals, *create, *skipAcks, *out, polyglot.Workload{
		Prefix: *idPrefix, Committed: *committed, Txns: *txns, Pubs: *pubs, Abandon: *abandon,
	}); err != nil {
		fmt.Fprintf(os.Stderr, "publish: %v\n", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, broker, prefix string, n int, create, skipAcks bool, out string, w polyglot.Workload) error {
	if n < 1 {
		return fmt.Errorf("--journals must be at least 1, got %d", n)
	}
	var names []pb.Journal
	for i := 0; i < n; i++ {
		var j = pb.Journal(fmt.Sprintf("%s/part-%03d", strings.TrimSuffix(prefix, "/"), i))
		if err := j.Validate(); err != nil {
			return fmt.Errorf("journal name %q: %w", j, err)
		}
		names = append(names, j)
		w.Journals = append(w.Journals, j.String())
	}
	if err := w.Validate(); err != nil {
		return err
	}
	var rjc, err = polyglot.Dial(ctx, broker)
	if err != nil {
		return err
	}
	if create {
		if err = polyglot.CreateJournals(ctx, rjc, names, 20*time.Second); err != nil {
			return err
		}
	}
	var steps, expect = w.Plan()
	var ajc = client.NewAppendService(ctx, rjc)
	var st = newState(ajc, w.Pubs, skipAcks)
	for i, s := range steps {
		if err = st.apply(s); err != nil {
			return fmt.Errorf("step %d (%s, publisher %d, message %q): %w", i, s.Kind, s.Pub, s.Msg.ID, err)
		}
	}
	if err = waitAll(ajc.PendingExcept("")); err != nil {
		return fmt.Errorf("appends did not all commit: %w", err)
	}
	expect.Publisher = "go"
	if err = polyglot.WriteExpect(out, expect); err != nil {
		return err
	}
	if skipAcks {
		fmt.Println("PLANTED: rollbacks wrote no ACK: later commits of the same publishers commit the rolled-back messages")
	}
	fmt.Printf("published to %d journals (%s/part-*): %d committed messages (sum %d) and %d that must not be read "+
		"(%d transactions, %d rolled back, abandoned: %v; %d messages appended twice); expectations in %s\n",
		n, prefix, expect.Count, expect.Sum, len(expect.RolledBack), w.Txns, st.rollbacks, w.Abandon,
		st.duplicates, out)
	return nil
}

// state is the publishing side of a workload: Gazette Publishers, the appends of each
// open transaction, and, per transactional Publisher and journal, the ACK intent of its
// last commit there (what a consumer's checkpoint holds, to re-send on recovery).
type state struct {
	ajc        *client.AppendService
	committed  *message.Publisher
	txn        []*message.Publisher
	open       [][]*client.AsyncAppend
	touched    []map[pb.Journal]bool
	lastIntent []map[pb.Journal][]byte
	sent       map[string][]byte // Framed bytes of every published message, by ID.
	rollbacks  int
	duplicates int
	skipAcks   bool // --skip-rollback-acks: rollbacks write no ACK (a planted fault).
}

func newState(ajc *client.AppendService, pubs int, skipAcks bool) *state {
	var st = &state{ajc: ajc, committed: message.NewPublisher(ajc, nil), sent: make(map[string][]byte),
		skipAcks: skipAcks}
	for i := 0; i < pubs; i++ {
		st.txn = append(st.txn, message.NewPublisher(ajc, nil))
		st.open = append(st.open, nil)
		st.touched = append(st.touched, make(map[pb.Journal]bool))
		st.lastIntent = append(st.lastIntent, make(map[pb.Journal][]byte))
	}
	return st
}

// mapTo is a MappingFunc sending every message to |journal|.
func mapTo(journal string) message.MappingFunc {
	return func(message.Mappable) (pb.Journal, string, error) {
		return pb.Journal(journal), labels.ContentType_JSONLines, nil
	}
}

func (st *state) apply(s polyglot.Step) error {
	var msg = &polyglot.Msg{ID: s.Msg.ID, Value: s.Msg.Value}
	switch s.Kind {
	case polyglot.PublishCommitted:
		if _, err := st.committed.PublishCommitted(mapTo(s.Msg.Journal), msg); err != nil {
			return err
		}
		return st.keep(msg)
	case polyglot.PublishUncommitted:
		var aa, err = st.txn[s.Pub].PublishUncommitted(mapTo(s.Msg.Journal), msg)
		if err != nil {
			return err
		}
		st.open[s.Pub] = append(st.open[s.Pub], aa)
		st.touched[s.Pub][pb.Journal(s.Msg.Journal)] = true
		return st.keep(msg)
	case polyglot.Commit:
		return st.commit(s.Pub)
	case polyglot.Rollback:
		return st.rollback(s.Pub)
	case polyglot.Duplicate:
		var b, ok = st.sent[s.Msg.ID]
		if !ok {
			return fmt.Errorf("no published message %q to duplicate", s.Msg.ID)
		}
		st.write(pb.Journal(s.Msg.Journal), b)
		st.duplicates++
		return nil
	}
	return fmt.Errorf("unknown step kind %d", s.Kind)
}

// keep frames |msg| again, with the UUID the Publisher gave it, for a later Duplicate.
func (st *state) keep(msg *polyglot.Msg) error {
	var framing, err = message.FramingByContentType(labels.ContentType_JSONLines)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	var bw = bufio.NewWriter(&b)
	if err = framing.Marshal(msg, bw); err != nil {
		return err
	} else if err = bw.Flush(); err != nil {
		return err
	}
	st.sent[msg.ID] = b.Bytes()
	return nil
}

// commit waits until the transaction's messages are written (as a consumer's commit
// barrier does), then appends its ACK intents and keeps them as the Publisher's last.
func (st *state) commit(pub int) error {
	if err := st.waitOpen(pub); err != nil {
		return err
	}
	var intents, err = st.txn[pub].BuildAckIntents()
	if err != nil {
		return err
	}
	for _, ack := range intents {
		st.lastIntent[pub][ack.Journal] = bytes.Clone(ack.Intent)
		st.write(ack.Journal, ack.Intent)
	}
	st.touched[pub] = make(map[pb.Journal]bool)
	return nil
}

// rollback waits until the transaction's messages are written (so they really are in
// the journals), drops its ACK intents (a consumer that failed before its checkpoint
// committed never stored them), then re-appends to every journal it touched the intent of
// the Publisher's last commit there: an ACK_TXN whose clock equals the producer's last
// acknowledged clock, which a Sequencer takes as a rollback (QueueAckRollback).
func (st *state) rollback(pub int) error {
	if err := st.waitOpen(pub); err != nil {
		return err
	}
	if _, err := st.txn[pub].BuildAckIntents(); err != nil {
		return err
	}
	var journals []pb.Journal
	for j := range st.touched[pub] {
		journals = append(journals, j)
	}
	sort.Slice(journals, func(a, b int) bool { return journals[a] < journals[b] })
	for _, j := range journals {
		var ack, ok = st.lastIntent[pub][j]
		if !ok {
			return fmt.Errorf("no earlier commit of publisher %d to journal %s to roll back to", pub, j)
		} else if !st.skipAcks {
			st.write(j, ack)
		}
	}
	st.touched[pub] = make(map[pb.Journal]bool)
	st.rollbacks++
	return nil
}

// waitOpen waits for the appends of |pub|'s open transaction and forgets them.
func (st *state) waitOpen(pub int) error {
	var ops = make(client.OpFutures)
	for _, aa := range st.open[pub] {
		ops[aa] = struct{}{}
	}
	st.open[pub] = nil
	if len(ops) == 0 {
		return fmt.Errorf("publisher %d has no open transaction", pub)
	}
	return waitAll(ops)
}

// write appends |content| to |journal| through the AppendService, which orders it after
// every earlier append to that journal.
func (st *state) write(journal pb.Journal, content []byte) {
	var aa = st.ajc.StartAppend(pb.AppendRequest{Journal: journal}, nil)
	_, _ = aa.Writer().Write(content)
	_ = aa.Release() // Release fails only after Require(err) with an error; none here.
}

func waitAll(ops client.OpFutures) error {
	for op := range ops {
		<-op.Done()
		if err := op.Err(); err != nil {
			return err
		}
	}
	return nil
}
