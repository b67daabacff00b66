package cluster

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	pb "go.gazette.dev/core/broker/protocol"
)

// TestRebalance: two brokers (one per zone) hold 16 journals at replication 2
// under a steady append load; two more brokers join (one per zone). The
// allocator must move assignments until every broker holds within one of the
// mean (8), never dropping a journal below two members, and every
// acknowledged append must read back at its acknowledged offset. Reports the
// assignments moved (every (journal, broker) pair that appeared in a route
// after the join) and the time from the join to the balanced spread.
func TestRebalance(t *testing.T) {
	var c = newCluster(t, clusterOpts{
		brokers: 2,
		defs: []brokerDef{
			{zone: "zone-a", id: "brk1"}, {zone: "zone-b", id: "brk3"},
			{zone: "zone-a", id: "brk2"}, {zone: "zone-b", id: "brk4"},
		},
	})
	const n, r = 16, 2
	var w, names = setupWorkload(t, c, n, r, workloadOpts{})
	w.start()
	time.Sleep(3 * time.Second)

	var before, err = c.routes()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var seen = make(map[string]bool)
	var note = func(rts map[pb.Journal]pb.Route) (minMembers int) {
		minMembers = math.MaxInt
		for j, rt := range rts {
			for _, m := range rt.Members {
				seen[string(j)+"|"+m.Suffix] = true
			}
			if len(rt.Members) < minMembers {
				minMembers = len(rt.Members)
			}
		}
		return minMembers
	}
	note(before)
	var initial = len(seen)
	t.Logf("before the join: %s", spread(before))

	var joined = time.Now()
	c.brokers[2].start()
	c.brokers[3].start()
	c.event("two brokers joined")

	var balanced time.Duration
	var last string
	var deadline = joined.Add(120 * time.Second)
	for time.Now().Before(deadline) {
		var rts, err = c.routes()
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		// A route is the assignments' view; a journal listed with fewer than R
		// members means the allocator removed before it added.
		if m := note(rts); m < r && len(rts) == n {
			t.Errorf("a journal dropped to %d members during the rebalance: %s", m, spread(rts))
		}
		last = spread(rts)
		if withinOne(rts, c.brokers, r) && len(rts) == n {
			if _, err := c.waitRoutes(names, time.Second, "replication", c.fullyReplicated(r)); err == nil {
				balanced = time.Since(joined)
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if balanced == 0 {
		t.Fatalf("not balanced within 120s of the join: %s", last)
	}
	// Settle: no further moves (a moving journal briefly lists R+1 members).
	time.Sleep(3 * time.Second)
	var after, _ = c.routes()
	note(after)
	if !withinOne(after, c.brokers, r) {
		t.Errorf("spread changed after balancing: %s", spread(after))
	}
	var moved = len(seen) - initial
	t.Logf("RESULT rebalance: %d assignments moved (minimum %d), balanced %v after the join: %s",
		moved, n*r/2, balanced.Round(time.Millisecond), spread(after))
	if moved < n*r/2 {
		t.Errorf("moved %d assignments, fewer than the %d needed", moved, n*r/2)
	}

	if err := w.waitHealthy(names, r, 60*time.Second); err != nil {
		t.Errorf("not healthy after the rebalance: %v", err)
	}
	w.finish(time.Minute, time.Minute)
	var res = w.check()
	if res.acked == 0 {
		t.Errorf("no append was acknowledged")
	}
}

// withinOne: every broker holds within one of the mean assignment count.
func withinOne(rts map[pb.Journal]pb.Route, brokers []*broker, r int) bool {
	var counts = make(map[string]int)
	for _, rt := range rts {
		if len(rt.Members) != r {
			return false
		}
		for _, m := range rt.Members {
			counts[m.Suffix]++
		}
	}
	var mean = float64(len(rts)*r) / float64(len(brokers))
	for _, b := range brokers {
		if math.Abs(float64(counts[b.id])-mean) > 1 {
			return false
		}
	}
	return true
}

// spread formats the assignments per broker, e.g. "brk1=8 brk2=8 ...".
func spread(rts map[pb.Journal]pb.Route) string {
	var counts = make(map[string]int)
	for _, rt := range rts {
		for _, m := range rt.Members {
			counts[m.Suffix]++
		}
	}
	var out []string
	for k, v := range counts {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
