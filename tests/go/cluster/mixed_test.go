package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
)

// TestMixedCluster: Gazette's broker (v0.103.0) and Courant brokers share one
// etcd prefix; journals are replicated across both implementations and serve
// Gazette's client whichever implementation is primary.
//
// Brokers: zone-a/gaz1 (Gazette, started first, so it is the oldest member and
// leads the allocator), zone-a/cou2 and zone-b/cou3 (Courant). Journals: 3 of
// replication 3 and 4 of replication 2 for the functional checks ("fn"), and
// 3 of replication 3 and 8 of replication 2 under a steady workload ("wl",
// AppendService through a service address, tailing RetryReaders, checked by
// the workload checker of workload_test.go at the end).
//
// Rounds: each round waits until every journal is fully replicated and
// appending, then runs the functional checks on the fn journals (below), then
// kills (-9) one primary, waits for appends on its journals to resume on the
// survivors, and restarts it. The victim is chosen from List routes:
//
//	A: the Courant primary of a replication-2 wl journal whose other member is Gazette;
//	B: the Gazette primary of a replication-2 wl journal whose other member is Courant;
//	otherwise (to arrange A) the Courant primary of a replication-2 journal whose
//	other member is Courant: Courant's survivor is promoted and Gazette, the only
//	broker left, is added, which makes the journal an A.
//
// A is done before B, since B kills the allocator's leader (after it, a Courant
// broker leads). The test fails unless both A and B happened.
//
// Functional checks of one round, per fn journal (route from List):
//   - blocking RetryReaders from the round's start offset on every broker
//     (members with do_not_proxy, so the member itself serves; the non-member
//     proxies) started before the appends;
//   - an append through an AppendService whose RouteCache sends it straight
//     to the primary (response from the primary), and a plain client.Append
//     sent to every other broker, which proxies it to the primary (Gazette
//     proxying to a Courant primary and Courant proxying to a Gazette primary;
//     the primary's response comes back verbatim);
//   - the blocking readers get exactly the round's bytes; then, on every
//     broker, non-blocking RetryReaders (direct; direct with do_not_proxy on
//     members; through a RouteCache naming only that broker) return exactly the
//     round's bytes, served by that broker when it is a member, and end with
//     OFFSET_NOT_YET_AVAILABLE.
//
// The test fails unless both a Courant and a Gazette primary were checked,
// appends were proxied Gazette->Courant and Courant->Gazette, and do_not_proxy
// reads were served by a Gazette replica of a Courant primary and by a
// Courant replica of a Gazette primary. At the end every fn journal is read
// from offset 0 to its write head on every broker.
//
// Environment: GAZETTE_BIN (required: the test skips without it, so the
// suite's other runs leave it out; a path, or a name on PATH) and COURANT_BIN
// (default CLUSTER_BIN when CLUSTER_IMPL is courant, else
// ../../../target/debug/courant); the test skips when either binary is missing
// or etcd is older than 3.5 (Gazette refuses it). See .ci/steps/65-mixed.sh.
func TestMixedCluster(t *testing.T) {
	var gazBin, couBin = mixedBins(t)
	var c = newCluster(t, clusterOpts{brokers: 1, defs: []brokerDef{
		{zone: "zone-a", id: "gaz1", impl: "gazette", bin: gazBin},
		{zone: "zone-a", id: "cou2", impl: "courant", bin: couBin},
		{zone: "zone-b", id: "cou3", impl: "courant", bin: couBin},
	}})
	var gaz1, cou2, cou3 = c.byName("gaz1"), c.byName("cou2"), c.byName("cou3")
	// Persisted fragments are in the shared file root; a do_not_proxy read of
	// a fragment a broker no longer holds locally gets a file:// fragment URL,
	// which the client then reads from that root (as with a shared NAS).
	t.Cleanup(client.InstallFileTransport(c.shared))

	// Gazette first: once it answers List it has announced itself, and is the
	// oldest member, hence the allocator's leader.
	if err := waitList(c, gaz1, 60*time.Second); err != nil {
		t.Fatalf("Gazette broker %v: %v", gaz1, err)
	}
	cou2.start()
	cou3.start()
	for _, b := range []*broker{cou2, cou3} {
		if err := waitList(c, b, 60*time.Second); err != nil {
			t.Fatalf("Courant broker %v: %v", b, err)
		}
	}
	var etcd = newEtcdClient(t)
	if leader, err := allocatorLeader(c, etcd); err != nil {
		t.Fatalf("allocator leader: %v", err)
	} else if leader != gaz1.procID() {
		t.Fatalf("allocator leader (oldest member key) is %v, want the Gazette broker %v", leader, gaz1)
	} else {
		t.Logf("allocator leader: %v (gazette)", leader)
	}

	// Journals.
	var repl = map[pb.Journal]int{}
	var fnNames, wlNames []pb.Journal
	var specs []*pb.JournalSpec
	var add = func(i, r int, fn bool) {
		var j = c.journalName(i)
		repl[j] = r
		specs = append(specs, c.spec(j, int32(r)))
		if fn {
			fnNames = append(fnNames, j)
		} else {
			wlNames = append(wlNames, j)
		}
	}
	for i := 0; i < 7; i++ {
		add(i, map[bool]int{true: 3, false: 2}[i < 3], true)
	}
	for i := 10; i < 21; i++ {
		add(i, map[bool]int{true: 3, false: 2}[i < 13], false)
	}
	c.apply(specs...)
	var all = append(append([]pb.Journal(nil), fnNames...), wlNames...)
	var rts, err = c.waitRoutes(all, 60*time.Second, "readiness", func(j pb.Journal, rt pb.Route) bool {
		return c.fullyReplicated(repl[j])(j, rt)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("initial routes: %s", fmtRoutes(c, rts, all))

	var lbAddr = c.startLB()
	var m = &mixedState{c: c, repl: repl, fnNames: fnNames, content: map[pb.Journal][]byte{}, seen: map[string]int{}}
	m.rjc, m.rc = c.routedClient(lbAddr)
	m.svc = client.NewAppendService(c.ctx, m.rjc)

	var wrjc, _ = c.routedClient(lbAddr)
	var lctx, lcancel = context.WithTimeout(c.ctx, 10*time.Second)
	if _, err := client.ListAllJournals(lctx, wrjc, pb.ListRequest{
		Selector: pb.LabelSelector{Include: pb.MustLabelSet("courant-cluster", c.uid)},
	}); err != nil {
		t.Fatalf("List through the service address: %v", err)
	}
	lcancel()
	var w = newWorkload(c, wrjc, wlNames, workloadOpts{})
	w.start()
	// Stop the writers (before the brokers are killed) also when the test
	// ends early.
	var finishOnce sync.Once
	var finish = func(drain, tail time.Duration) { finishOnce.Do(func() { w.finish(drain, tail) }) }
	t.Cleanup(func() { finish(20*time.Second, 2*time.Second) })

	var doneA, doneB bool
	var scenarioTimes []string
	for round := 1; !doneA || !doneB; round++ {
		if round > 6 {
			t.Fatalf("after %d rounds: scenario A (Courant primary, Gazette replica) done: %v; "+
				"scenario B (Gazette primary, Courant replica) done: %v", round-1, doneA, doneB)
		}
		if err := m.waitHealthy(w, 90*time.Second); err != nil {
			m.diagnose(fmt.Sprintf("round%d-unhealthy", round))
			t.Fatalf("round %d: %v", round, err)
		}
		m.fnRound(round)
		if t.Failed() {
			t.FailNow()
		}
		var rts, err = c.routes()
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if leader, err := allocatorLeader(c, etcd); err == nil {
			t.Logf("round %d: allocator leader %v (%s); wl routes: %s", round, leader, c.byID(leader).impl,
				fmtRoutes(c, rts, wlNames))
		}

		// Pick the fault of this round.
		var kind string
		var sj pb.Journal
		var cands = func(pImpl, oImpl string) []pb.Journal {
			var out []pb.Journal
			for _, j := range wlNames {
				var rt = rts[j]
				if repl[j] != 2 || !c.fullyReplicated(2)(j, rt) {
					continue
				}
				var p, o = c.byID(rt.Members[rt.Primary]), c.byID(otherMember(rt))
				if p.impl == pImpl && o.impl == oImpl {
					out = append(out, j)
				}
			}
			return out
		}
		if js := cands("courant", "gazette"); !doneA && len(js) != 0 {
			kind, sj = "A", js[0]
		} else if js := cands("courant", "courant"); !doneA && len(js) != 0 {
			kind, sj = "arrange-A", js[0]
		} else if js := cands("gazette", "courant"); !doneB && len(js) != 0 {
			kind, sj = "B", js[0]
		} else if js := cands("courant", "courant"); len(js) != 0 {
			kind, sj = "arrange", js[0]
		} else {
			t.Fatalf("round %d: no replication-2 journal to fault (A done %v, B done %v): %s",
				round, doneA, doneB, fmtRoutes(c, rts, wlNames))
		}
		var srt = rts[sj]
		var victim, survivor = c.byID(srt.Members[srt.Primary]), c.byID(otherMember(srt))
		var victimR2 []pb.Journal
		for _, j := range primaries(rts)[victim.procID()] {
			if repl[j] == 2 && containsJournal(wlNames, j) {
				victimR2 = append(victimR2, j)
			}
		}
		sort.Slice(victimR2, func(i, k int) bool { return victimR2[i] < victimR2[k] })
		var what = fmt.Sprintf("kill -9 %s primary %v (%s, %s replica %v)", victim.impl, victim,
			fmtRoute(srt), survivor.impl, survivor)
		t.Logf("round %d: %s: %s; it is primary of %d replication-2 wl journals", round, kind, what, len(victimR2))

		var sjs = w.state(sj)
		var at = time.Now()
		victim.kill()
		w.fo.begin(what, at, victimR2)

		// Appends on the scenario journal resume, acknowledged by the survivor.
		var d, by, ferr = waitAckAfter(c, sjs, at, 60*time.Second)
		if ferr != nil {
			m.diagnose(fmt.Sprintf("round%d-no-failover", round))
			t.Fatalf("round %d, %s: %v", round, what, ferr)
		}
		if by != survivor.procID() {
			t.Errorf("round %d, %s: the first append after the kill on %s was acknowledged by %v, want the survivor %v",
				round, what, sj, by, survivor)
		}
		if after, err := c.waitRoutes([]pb.Journal{sj}, 30*time.Second, "survivor promoted",
			func(_ pb.Journal, rt pb.Route) bool {
				return rt.Primary >= 0 && rt.Members[rt.Primary] == survivor.procID()
			}); err != nil {
			t.Errorf("round %d, %s: %v", round, what, err)
		} else {
			t.Logf("round %d: %s: %s now %s", round, what, sj, fmtRoute(after[sj]))
		}
		var line = fmt.Sprintf("SCENARIO %s ms: %d (%s: first append acknowledged by the %s survivor %v)",
			kind, d.Milliseconds(), what, survivor.impl, by)
		t.Log(line)
		scenarioTimes = append(scenarioTimes, line)
		switch kind {
		case "A":
			doneA = true
		case "B":
			doneB = true
		}
		// Every replication-2 journal the victim led takes appends again
		// before it comes back.
		if err := waitAcked(w, victimR2, at, 60*time.Second); err != nil {
			m.diagnose(fmt.Sprintf("round%d-stalled", round))
			t.Errorf("round %d, %s: %v", round, what, err)
		}
		victim.start()
	}

	// Final round: healthy again (B restarted Gazette's broker last, so a
	// Courant broker leads the allocator now), functional checks, then every
	// fn journal read in full on every broker.
	if err := m.waitHealthy(w, 90*time.Second); err != nil {
		m.diagnose("final-unhealthy")
		t.Fatalf("after the faults: %v", err)
	}
	m.fnRound(0)
	if leader, err := allocatorLeader(c, etcd); err == nil {
		t.Logf("final allocator leader: %v (%s)", leader, c.byID(leader).impl)
	}
	m.readAllEverywhere(45 * time.Second)
	time.Sleep(2 * time.Second)

	finish(2*time.Minute, 2*time.Minute)
	w.fo.summary()
	w.check()
	for _, l := range scenarioTimes {
		t.Log(l)
	}
	w.fo.mu.Lock()
	t.Logf("MIXED FAILOVER ms: %s (gaz1 gazette, cou2 and cou3 courant; every kill -9 of the round, "+
		"to the first acknowledged append on a replication-2 journal the victim led)", durationsSummary(w.fo.closed))
	w.fo.mu.Unlock()
	m.report()
}

// ---------------------------------------------------------------------------

// mixedBins returns the Gazette and Courant broker binaries, or skips.
func mixedBins(t *testing.T) (string, string) {
	var resolve = func(env string, defs ...string) string {
		var cands = defs
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			cands = []string{v}
		}
		for _, p := range cands {
			if !strings.Contains(p, "/") {
				if lp, err := exec.LookPath(p); err == nil {
					return lp
				}
				continue
			}
			if abs, err := filepath.Abs(p); err == nil {
				if st, err := os.Stat(abs); err == nil && !st.IsDir() {
					return abs
				}
			}
		}
		return ""
	}
	if etcdAddr == "" {
		t.Skip("ETCD_ADDRESS is not set (Gazette needs etcd >= 3.5; see .ci/steps/65-mixed.sh)")
	}
	// Asked for explicitly: the suite's other runs (.ci/steps/60-cluster.sh, on
	// Debian's etcd 3.4, which Gazette refuses) leave it out.
	if strings.TrimSpace(os.Getenv("GAZETTE_BIN")) == "" {
		t.Skip("GAZETTE_BIN is not set: the mixed-cluster test runs when given Gazette's broker " +
			"(and etcd >= 3.5), as .ci/steps/65-mixed.sh does")
	}
	var gaz = resolve("GAZETTE_BIN")
	var couDefault = "../../../target/debug/courant"
	if implName == "courant" && brokerBin != "" {
		couDefault = brokerBin
	}
	var cou = resolve("COURANT_BIN", couDefault)
	if gaz == "" {
		t.Skipf("no Gazette broker binary at GAZETTE_BIN=%q (build one: `(cd bench/go && "+
			"GOBIN=$PWD/../../target/go-bin go install go.gazette.dev/core/cmd/gazette)`)", os.Getenv("GAZETTE_BIN"))
	}
	if cou == "" {
		t.Skipf("no Courant broker binary: set COURANT_BIN or CLUSTER_BIN (e.g. target/debug/courant)")
	}
	// Gazette's etcd client refuses servers older than 3.5 ("old cluster version").
	var cli, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	var ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st, serr = cli.Status(ctx, etcdAddr)
	if serr != nil {
		t.Fatalf("etcd status at %s: %v", etcdAddr, serr)
	}
	var major, minor int
	if _, err := fmt.Sscanf(st.Version, "%d.%d", &major, &minor); err == nil && (major < 3 || major == 3 && minor < 5) {
		t.Skipf("etcd at %s is %s; Gazette's broker needs etcd >= 3.5 (.ci/steps/65-mixed.sh fetches 3.5.1)", etcdAddr, st.Version)
	}
	return gaz, cou
}

// waitList waits until |b| answers a List RPC itself.
func waitList(c *cluster, b *broker, timeout time.Duration) error {
	var deadline = time.Now().Add(timeout)
	for {
		var ctx, cancel = context.WithTimeout(c.ctx, 2*time.Second)
		var _, err = client.ListAllJournals(ctx, b.direct, pb.ListRequest{})
		cancel()
		if err == nil {
			c.event("broker %s answers List", b)
			return nil
		}
		if !b.running() {
			return fmt.Errorf("exited: %v (log %s)", b.state, b.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no List answer within %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newEtcdClient(t *testing.T) *clientv3.Client {
	var cli, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// allocatorLeader returns the member whose key has the smallest CreateRevision
// (ties broken by key): Gazette's allocator leader (allocator/doc.go).
func allocatorLeader(c *cluster, etcd *clientv3.Client) (pb.ProcessSpec_ID, error) {
	var ctx, cancel = context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	var resp, err = etcd.Get(ctx, c.prefix+"/members/", clientv3.WithPrefix())
	if err != nil {
		return pb.ProcessSpec_ID{}, err
	}
	var best []byte
	var bestRev int64
	for _, kv := range resp.Kvs {
		if best == nil || kv.CreateRevision < bestRev || (kv.CreateRevision == bestRev && bytes.Compare(kv.Key, best) < 0) {
			best, bestRev = kv.Key, kv.CreateRevision
		}
	}
	if best == nil {
		return pb.ProcessSpec_ID{}, errors.New("no member keys")
	}
	var parts = strings.SplitN(strings.TrimPrefix(string(best), c.prefix+"/members/"), "#", 2)
	if len(parts) != 2 {
		return pb.ProcessSpec_ID{}, fmt.Errorf("member key %q", best)
	}
	return pb.ProcessSpec_ID{Zone: parts[0], Suffix: parts[1]}, nil
}

func containsJournal(js []pb.Journal, j pb.Journal) bool {
	for _, x := range js {
		if x == j {
			return true
		}
	}
	return false
}

func fmtRoutes(c *cluster, rts map[pb.Journal]pb.Route, names []pb.Journal) string {
	var parts []string
	for _, j := range names {
		var rt = rts[j]
		var s = string(j[strings.LastIndexByte(string(j), '/')+1:]) + fmtRoute(rt)
		if rt.Primary >= 0 {
			if b := c.byID(rt.Members[rt.Primary]); b != nil {
				s += map[bool]string{true: "G", false: "C"}[b.isGazette()]
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// state returns the workload's record of journal |j|.
func (w *workload) state(j pb.Journal) *jstate {
	for _, js := range w.js {
		if js.name == j {
			return js
		}
	}
	panic("unknown journal " + j)
}

// waitAckAfter waits until a record written after |at| is acknowledged on
// |js|, and returns the time from |at| and the broker that acknowledged it.
func waitAckAfter(c *cluster, js *jstate, at time.Time, timeout time.Duration) (time.Duration, pb.ProcessSpec_ID, error) {
	var deadline = at.Add(timeout)
	for {
		js.mu.Lock()
		var ok = js.ackedAt.After(at)
		var by pb.ProcessSpec_ID
		if ok {
			by = js.acked[len(js.acked)-1].processID
		}
		var ferr = js.failErr
		js.mu.Unlock()
		if ok {
			return time.Since(at), by, nil
		}
		if time.Now().After(deadline) || c.ctx.Err() != nil {
			return 0, by, fmt.Errorf("no append written after the kill was acknowledged on %s within %v (append error: %v)",
				js.name, timeout, ferr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAcked waits until each of |names| acknowledged a record written after |at|.
func waitAcked(w *workload, names []pb.Journal, at time.Time, timeout time.Duration) error {
	for _, j := range names {
		if _, _, err := waitAckAfter(w.c, w.state(j), at, timeout); err != nil {
			return err
		}
	}
	return nil
}

// diagnose saves, for a failure, the current routes and what every serving
// Gazette broker is doing (its goroutines, and its active and recent RPC
// traces: Gazette serves /debug/pprof and /debug/requests on its port) in
// the test's scratch dir.
func (m *mixedState) diagnose(what string) {
	var c = m.c
	var dir = filepath.Join(c.dir, "diag-"+what)
	_ = os.MkdirAll(dir, 0o755)
	if rts, err := c.routes(); err == nil {
		var names []pb.Journal
		for j := range rts {
			names = append(names, j)
		}
		sort.Slice(names, func(i, k int) bool { return names[i] < names[k] })
		_ = os.WriteFile(filepath.Join(dir, "routes.txt"), []byte(fmtRoutes(c, rts, names)+"\n"), 0o644)
	}
	for _, b := range c.brokers {
		if !b.isGazette() || !b.serving() {
			continue
		}
		for name, path := range map[string]string{
			"goroutines.txt":       "/debug/pprof/goroutine?debug=2",
			"requests-active.html": "/debug/requests?fam=grpc.Recv.protocol.Journal&b=-1&exp=1",
			"requests-all.html":    "/debug/requests?fam=grpc.Recv.protocol.Journal&b=0&exp=1",
			"requests-sent.html":   "/debug/requests?fam=grpc.Sent.protocol.Journal&b=-1&exp=1",
		} {
			var ctx, cancel = context.WithTimeout(c.ctx, 10*time.Second)
			var req, _ = http.NewRequestWithContext(ctx, "GET", "http://"+b.addr()+path, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				var body, _ = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				_ = os.WriteFile(filepath.Join(dir, b.id+"-"+name), body, 0o644)
				if name == "requests-active.html" {
					for _, l := range longReplicates(string(body), 10) {
						c.t.Logf("%s: %s", b, l)
					}
				}
			}
			cancel()
		}
	}
	c.t.Logf("diagnostics (routes, Gazette goroutines and RPC traces) in %s", dir)
}

// longReplicates summarizes the Replicate RPCs of a Gazette /debug/requests
// page (active ones) that have been open for more than |minSec| seconds: their
// journal, age, peer, and whether they hold the journal's spool (a Gazette
// replica holds it until the primary closes the stream).
func longReplicates(page string, minSec float64) []string {
	var text = html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(page, "\n"))
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	var start = regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+$`)
	var journalRe = regexp.MustCompile(`(?:resolve\(|journal:")([^")]+)`)
	var out []string
	for i := 0; i+2 < len(lines); i++ {
		if !start.MatchString(lines[i]) || lines[i+2] != "/protocol.Journal/Replicate" {
			continue
		}
		var age, err = strconv.ParseFloat(lines[i+1], 64)
		if err != nil || age < minSec {
			continue
		}
		var from, journal string
		var holds bool
		for k := i + 3; k < len(lines) && !start.MatchString(lines[k]); k++ {
			if strings.HasPrefix(lines[k], "... RPC: from ") {
				from = strings.Fields(strings.TrimPrefix(lines[k], "... RPC: from "))[0]
			}
			if m := journalRe.FindStringSubmatch(lines[k]); m != nil && journal == "" {
				journal = m[1]
			}
			if strings.Contains(lines[k], "<-replica.spoolCh") || strings.Contains(lines[k], "recv: proposal") {
				holds = true
			}
		}
		out = append(out, fmt.Sprintf("Replicate RPC open for %.0fs since %s: journal %s, from %s, holds the spool: %v",
			age, lines[i], journal, from, holds))
	}
	return out
}

// ---------------------------------------------------------------------------
// Functional checks.

type mixedState struct {
	c       *cluster
	repl    map[pb.Journal]int
	fnNames []pb.Journal
	rjc     pb.RoutedJournalClient
	rc      *client.RouteCache
	svc     *client.AppendService
	content map[pb.Journal][]byte // Everything appended to each fn journal.
	seen    map[string]int        // What the functional checks exercised, counted.
	clients map[*broker]brokerRC
}

type brokerRC struct {
	rjc pb.RoutedJournalClient
	rc  *client.RouteCache
}

// brokerClient returns a client dialed to |b| (as a service address) with a
// RouteCache of its own.
func (m *mixedState) brokerClient(b *broker) (pb.RoutedJournalClient, *client.RouteCache) {
	if m.clients == nil {
		m.clients = map[*broker]brokerRC{}
	}
	if x, ok := m.clients[b]; ok {
		return x.rjc, x.rc
	}
	var rjc, rc = m.c.routedClient(b.addr())
	m.clients[b] = brokerRC{rjc, rc}
	return rjc, rc
}

func (m *mixedState) note(format string, args ...interface{}) { m.seen[fmt.Sprintf(format, args...)]++ }

// waitHealthy waits until every journal is fully replicated by serving
// brokers and every wl journal then acknowledged an append.
func (m *mixedState) waitHealthy(w *workload, timeout time.Duration) error {
	var start = time.Now()
	var names []pb.Journal
	for j := range m.repl {
		names = append(names, j)
	}
	sort.Slice(names, func(i, k int) bool { return names[i] < names[k] })
	if _, err := m.c.waitRoutes(names, timeout, "full replication", func(j pb.Journal, rt pb.Route) bool {
		return m.c.fullyReplicated(m.repl[j])(j, rt)
	}); err != nil {
		return err
	}
	if err := w.waitAcked(time.Now(), timeout-time.Since(start)); err != nil {
		return err
	}
	m.c.event("healthy: every journal fully replicated, wl journals appending (%v)", time.Since(start))
	return nil
}

type readResult struct {
	what string
	got  []byte
	by   pb.ProcessSpec_ID
	err  error
}

// readRange reads [req.Offset, req.Offset+n) with a RetryReader, and records
// the process_id of the first response header (the broker that served it;
// relayed by a proxy). Non-blocking requests then read on until an error.
func readRange(ctx context.Context, rjc pb.RoutedJournalClient, req pb.ReadRequest, n int) readResult {
	var rr = client.NewRetryReader(ctx, rjc, req)
	var res readResult
	var buf = make([]byte, 32*1024)
	for {
		var k, err = rr.Read(buf)
		res.got = append(res.got, buf[:k]...)
		if h := rr.Reader.Response.Header; h != nil && res.by == (pb.ProcessSpec_ID{}) {
			res.by = h.ProcessId
		}
		if err != nil {
			res.err = err
			return res
		}
		if req.Block && len(res.got) >= n {
			rr.Cancel()
			return res
		}
	}
}

// fnRound runs the functional checks on every fn journal (see TestMixedCluster).
func (m *mixedState) fnRound(round int) {
	var c, t = m.c, m.c.t
	var ctx, cancel = context.WithTimeout(c.ctx, 2*time.Minute)
	defer cancel()
	// Refresh the route cache, as a consumer's List would.
	if _, err := client.ListAllJournals(ctx, m.rjc, pb.ListRequest{
		Selector: pb.LabelSelector{Include: pb.MustLabelSet("courant-cluster", c.uid)},
	}); err != nil {
		t.Fatalf("fn round %d: List: %v", round, err)
	}
	var rts, err = c.routes()
	if err != nil {
		t.Fatalf("fn round %d: List: %v", round, err)
	}
	var summary []string
	for _, j := range m.fnNames {
		var rt = rts[j]
		if !c.fullyReplicated(m.repl[j])(j, rt) {
			t.Fatalf("fn round %d: %s route %s is not fully replicated", round, j, fmtRoute(rt))
		}
		var p = c.byID(rt.Members[rt.Primary])
		var start = int64(len(m.content[j]))
		var short = j[strings.LastIndexByte(string(j), '/')+1:]

		// The round's appends: one through the AppendService, then one through
		// every other broker.
		type piece struct {
			via  *broker // nil: AppendService with the RouteCache.
			data []byte
		}
		var pieces []piece
		var mk = func(via string, size int) []byte {
			var b = []byte(fmt.Sprintf("%s round %d via %s ", short, round, via))
			for len(b) < size-1 {
				b = append(b, "0123456789abcdefghijklmnopqrstuvwxyz"[len(b)%36])
			}
			return append(b, '\n')
		}
		pieces = append(pieces, piece{nil, mk("append-service", 40000)}) // Several chunks.
		for _, b := range c.brokers {
			if b != p {
				pieces = append(pieces, piece{b, mk(b.id, 300)})
			}
		}
		var roundBytes []byte
		for _, pc := range pieces {
			roundBytes = append(roundBytes, pc.data...)
		}

		// Blocking readers, started before the appends.
		var results = make(chan readResult, len(c.brokers))
		for _, b := range c.brokers {
			var member = indexOf(rt, b.procID()) >= 0
			var what = fmt.Sprintf("blocking read of %s %s on %s %v (do_not_proxy %v)", short, fmtRoute(rt), b.impl, b, member)
			var req = pb.ReadRequest{Journal: j, Offset: start, Block: true, DoNotProxy: member}
			go func() {
				var rctx, rcancel = context.WithTimeout(ctx, 30*time.Second)
				defer rcancel()
				var res = readRange(rctx, b.direct, req, len(roundBytes))
				res.what = what
				results <- res
			}()
		}
		time.Sleep(300 * time.Millisecond) // Let them reach their brokers and block.

		for _, pc := range pieces {
			var off = int64(len(m.content[j]))
			var resp pb.AppendResponse
			var how string
			if pc.via == nil {
				how = "AppendService (RouteCache)"
				var aa = m.svc.StartAppend(pb.AppendRequest{Journal: j}, nil)
				_, _ = aa.Writer().Write(pc.data)
				if err := aa.Release(); err != nil {
					t.Fatalf("fn round %d: %s: %s: Release: %v", round, short, how, err)
				}
				select {
				case <-aa.Done():
				case <-ctx.Done():
					t.Fatalf("fn round %d: %s: %s: not done: %v", round, short, how, ctx.Err())
				}
				if err := aa.Err(); err != nil {
					t.Fatalf("fn round %d: %s: %s: %v", round, short, how, err)
				}
				resp = aa.Response()
			} else {
				how = fmt.Sprintf("client.Append sent to %s %v", pc.via.impl, pc.via)
				var r, err = client.Append(ctx, pc.via.direct, pb.AppendRequest{Journal: j}, bytes.NewReader(pc.data))
				if err != nil {
					t.Fatalf("fn round %d: %s: %s: %v", round, short, how, err)
				}
				resp = r
				if pc.via.procID() != p.procID() {
					m.note("append proxied by %s to a %s primary", pc.via.impl, p.impl)
				}
			}
			if resp.Header.ProcessId != p.procID() {
				t.Errorf("fn round %d: %s: %s: response from %v, want the primary %v", round, short, how,
					resp.Header.ProcessId, p)
			}
			if resp.Commit == nil || resp.Commit.Begin != off || resp.Commit.End != off+int64(len(pc.data)) ||
				resp.Commit.Sum != pb.SHA1SumOf(string(pc.data)) {
				t.Fatalf("fn round %d: %s: %s: commit %v, want [%d,%d) with the content's SHA1", round, short, how,
					resp.Commit, off, off+int64(len(pc.data)))
			}
			m.content[j] = append(m.content[j], pc.data...)
		}
		m.note("appends to journals with a %s primary (replication %d)", p.impl, m.repl[j])

		for range c.brokers {
			var r = <-results
			if r.err != nil || !bytes.Equal(r.got, roundBytes) {
				t.Errorf("fn round %d: %s: %d bytes (want %d), equal %v, err %v", round, r.what, len(r.got),
					len(roundBytes), bytes.Equal(r.got, roundBytes), r.err)
			}
		}

		// Non-blocking reads of the round's bytes on every broker.
		for _, b := range c.brokers {
			var member = indexOf(rt, b.procID()) >= 0
			var rjc, rc = m.brokerClient(b)
			if member {
				rc.UpdateRoute(j.String(), &pb.Route{Members: []pb.ProcessSpec_ID{b.procID()}, Primary: 0,
					Endpoints: []pb.Endpoint{b.endpoint()}})
			} else {
				rc.UpdateRoute(j.String(), nil) // Nothing cached: dispatched to the dialed broker.
			}
			type variant struct {
				what string
				rjc  pb.RoutedJournalClient
				dnp  bool
			}
			var vs = []variant{{"direct", b.direct, false}}
			if member {
				vs = append(vs, variant{"direct, do_not_proxy", b.direct, true},
					variant{"RouteCache naming only it, do_not_proxy", rjc, true})
			} else {
				vs = append(vs, variant{"RouteCache client dialed to it, no cached route", rjc, false})
			}
			for _, v := range vs {
				var what = fmt.Sprintf("read of %s %s on %s %v (%s)", short, fmtRoute(rt), b.impl, b, v.what)
				var res = readRange(ctx, v.rjc, pb.ReadRequest{Journal: j, Offset: start, DoNotProxy: v.dnp}, 0)
				if !errors.Is(res.err, client.ErrOffsetNotYetAvailable) || !bytes.Equal(res.got, roundBytes) {
					t.Errorf("fn round %d: %s: %d bytes (want %d), equal %v, err %v (want %v)", round, what,
						len(res.got), len(roundBytes), bytes.Equal(res.got, roundBytes), res.err, client.ErrOffsetNotYetAvailable)
					continue
				}
				if member && res.by != b.procID() {
					t.Errorf("fn round %d: %s: served by %v, want %v itself", round, what, res.by, b)
				} else if !member && indexOf(rt, res.by) < 0 {
					t.Errorf("fn round %d: %s: served by %v, not a member", round, what, res.by)
				}
				if member && v.dnp && b != p {
					m.note("do_not_proxy reads served by a %s replica of a %s primary", b.impl, p.impl)
				} else if !member {
					m.note("reads proxied by a %s non-member to a %s member", b.impl, c.byID(res.by).impl)
				}
			}
		}
		summary = append(summary, fmt.Sprintf("%s%s:%d", short, fmtRoute(rt),
			map[bool]int{true: 1, false: 0}[p.isGazette()]))
	}
	t.Logf("fn round %d: appended and read back on every broker: %s (:1 = Gazette primary)", round, strings.Join(summary, " "))
}

// readAllEverywhere reads every fn journal from 0 to its end on every broker
// (direct; and with do_not_proxy on members), retrying transient failures
// (offset jumps on a member that joined after the bytes were written and
// before they were persisted) for up to |timeout| in all.
func (m *mixedState) readAllEverywhere(timeout time.Duration) {
	var c, t = m.c, m.c.t
	var deadline = time.Now().Add(timeout)
	var rts, err = c.routes()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var retries []string
	for _, j := range m.fnNames {
		var want = m.content[j]
		for _, b := range c.brokers {
			var member = indexOf(rts[j], b.procID()) >= 0
			for _, dnp := range []bool{false, true} {
				if dnp && !member {
					continue
				}
				var what = fmt.Sprintf("full read of %s on %s %v (member %v, do_not_proxy %v)", j, b.impl, b, member, dnp)
				for attempt := 0; ; attempt++ {
					var ctx, cancel = context.WithTimeout(c.ctx, 30*time.Second)
					var res = readRange(ctx, b.direct, pb.ReadRequest{Journal: j, Offset: 0, DoNotProxy: dnp}, 0)
					cancel()
					if errors.Is(res.err, client.ErrOffsetNotYetAvailable) && bytes.Equal(res.got, want) {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("%s: %d bytes (want %d), equal prefix %v, err %v", what, len(res.got), len(want),
							bytes.HasPrefix(want, res.got), res.err)
						break
					}
					retries = append(retries, fmt.Sprintf("%s: attempt %d: %d bytes, %v", what, attempt, len(res.got), res.err))
					time.Sleep(time.Second)
				}
			}
		}
	}
	if len(retries) != 0 {
		t.Logf("full reads retried %d times: %s", len(retries), strings.Join(retries, "; "))
	}
	var total int
	for _, j := range m.fnNames {
		total += len(m.content[j])
	}
	t.Logf("fn journals read in full (%d bytes in all) on every broker", total)
}

// report logs what the functional checks exercised and fails unless both
// directions of every cross-implementation exchange were seen.
func (m *mixedState) report() {
	var t = m.c.t
	var keys []string
	for k := range m.seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("MIXED %s: %d", k, m.seen[k])
	}
	var has = func(prefix string) bool {
		for k := range m.seen {
			if strings.HasPrefix(k, prefix) {
				return true
			}
		}
		return false
	}
	for _, want := range []string{
		"appends to journals with a courant primary",
		"appends to journals with a gazette primary",
		"append proxied by gazette to a courant primary",
		"append proxied by courant to a gazette primary",
		"do_not_proxy reads served by a gazette replica of a courant primary",
		"do_not_proxy reads served by a courant replica of a gazette primary",
	} {
		if !has(want) {
			t.Errorf("never exercised: %s", want)
		}
	}
}
