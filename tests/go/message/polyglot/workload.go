package polyglot

import (
	"fmt"
)

// Kind is what one step of a workload does.
type Kind int

const (
	// PublishCommitted publishes Msg as OUTSIDE_TXN (committed on its own), from the
	// workload's one committed-only Publisher.
	PublishCommitted Kind = iota
	// PublishUncommitted publishes Msg as CONTINUE_TXN from transactional Publisher Pub.
	PublishUncommitted
	// Commit writes the ACK_TXN intents of Pub's open transaction (BuildAckIntents).
	Commit
	// Rollback discards Pub's open transaction: its intents are built and dropped, and
	// the ACK intents of Pub's last commit to each journal the transaction touched are
	// written again, which carry a clock earlier than the transaction's messages.
	Rollback
	// Duplicate appends the bytes of the already published, committed message Msg again,
	// UUID and all, as an AppendService retry of an append whose outcome was unknown, or a
	// consumer re-publishing after recovery, does. A reader must deliver it only once.
	Duplicate
)

func (k Kind) String() string {
	return [...]string{"publish-committed", "publish-uncommitted", "commit", "rollback", "duplicate"}[k]
}

// Step is one step of a workload.
type Step struct {
	Kind Kind
	Pub  int  // Transactional Publisher (PublishUncommitted, Commit, Rollback).
	Msg  Item // Message (PublishCommitted, PublishUncommitted).
}

// Workload sizes a deterministic workload.
type Workload struct {
	Prefix    string // Message ID prefix ("go").
	Journals  []string
	Committed int  // OUTSIDE_TXN messages.
	Txns      int  // Transactions, spread over Pubs Publishers.
	Pubs      int  // Transactional Publishers (producers).
	Abandon   bool // End with a transaction that is never committed nor rolled back.
}

// Validate rejects sizes the plan cannot honour.
func (w Workload) Validate() error {
	switch {
	case len(w.Journals) == 0:
		return fmt.Errorf("no journals")
	case w.Pubs < 1:
		return fmt.Errorf("need at least one transactional publisher, got %d", w.Pubs)
	case w.Txns < w.Pubs:
		return fmt.Errorf("need at least one transaction per publisher (%d), got %d", w.Pubs, w.Txns)
	case w.Committed < 0:
		return fmt.Errorf("negative committed count %d", w.Committed)
	}
	return nil
}

// RolledBack says whether transaction |t| is rolled back: every third one, except the
// first transaction of each Publisher, which must commit so that a later rollback has an
// earlier ACK to re-send in every journal.
func (w Workload) RolledBack(t int) bool { return t >= w.Pubs && t%3 == 2 }

// txnMsgs returns the messages of transaction |t|: the first transaction of each
// Publisher touches every journal once; others publish 1 to 6 messages, so with few
// journals some put several messages in one journal.
func (w Workload) txnMsgs(t int) []Item {
	var n = 1 + (t*7)%6
	if t < w.Pubs {
		n = len(w.Journals)
	}
	var out []Item
	for m := 0; m < n; m++ {
		var j = (t + 3*m) % len(w.Journals)
		if t < w.Pubs {
			j = m
		}
		out = append(out, Item{
			ID:      fmt.Sprintf("%s-t%03d-%d", w.Prefix, t, m),
			Value:   int64(1 + (t*101+m*13)%1000),
			Journal: w.Journals[j],
		})
	}
	return out
}

// Plan returns the steps of the workload and the Expect they produce. Transactions run in
// groups of Pubs (one per Publisher), their messages interleaved, then each ended in
// turn, so transactions of different producers are open at once in the same journals;
// committed messages are spread between the transactional ones. Every tenth committed
// message, and the first message of every fourth transaction once it is committed, is
// appended twice.
func (w Workload) Plan() ([]Step, *Expect) {
	var steps []Step
	var e = &Expect{Journals: w.Journals}
	var nextC int
	var committed = func(k int) {
		for ; k > 0 && nextC < w.Committed; k-- {
			var it = Item{
				ID:      fmt.Sprintf("%s-c%05d", w.Prefix, nextC),
				Value:   int64(1 + (nextC*37)%1000),
				Journal: w.Journals[nextC%len(w.Journals)],
			}
			steps = append(steps, Step{Kind: PublishCommitted, Msg: it})
			if nextC%10 == 3 {
				steps = append(steps, Step{Kind: Duplicate, Msg: it})
			}
			e.Committed = append(e.Committed, it)
			nextC++
		}
	}
	var perSlot = 1 + w.Committed/(4*w.Txns+1)

	for g := 0; g < w.Txns; g += w.Pubs {
		var group = make([][]Item, 0, w.Pubs)
		for t := g; t < g+w.Pubs && t < w.Txns; t++ {
			group = append(group, w.txnMsgs(t))
		}
		for m, more := 0, true; more; m++ {
			more = false
			for i, msgs := range group {
				if m < len(msgs) {
					steps = append(steps, Step{Kind: PublishUncommitted, Pub: (g + i) % w.Pubs, Msg: msgs[m]})
					committed(perSlot)
					more = true
				}
			}
		}
		for i, msgs := range group {
			var t = g + i
			if w.RolledBack(t) {
				steps = append(steps, Step{Kind: Rollback, Pub: t % w.Pubs})
				e.RolledBack = append(e.RolledBack, withHow(msgs, "ack-rollback")...)
			} else {
				steps = append(steps, Step{Kind: Commit, Pub: t % w.Pubs})
				if t%4 == 1 {
					steps = append(steps, Step{Kind: Duplicate, Pub: t % w.Pubs, Msg: msgs[0]})
				}
				e.Committed = append(e.Committed, msgs...)
			}
		}
	}
	if w.Abandon {
		var msgs = w.txnMsgs(w.Txns)
		for _, it := range msgs {
			steps = append(steps, Step{Kind: PublishUncommitted, Pub: w.Txns % w.Pubs, Msg: it})
		}
		e.RolledBack = append(e.RolledBack, withHow(msgs, "abandoned")...)
	}
	committed(w.Committed)
	e.Finish()
	return steps, e
}

func withHow(items []Item, how string) []Item {
	var out = make([]Item, len(items))
	for i, it := range items {
		it.How = how
		out[i] = it
	}
	return out
}
