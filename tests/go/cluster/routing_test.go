package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
)

const rpcTimeout = 30 * time.Second

func testCtx(t *testing.T, c *cluster, d time.Duration) context.Context {
	var ctx, cancel = context.WithTimeout(c.ctx, d)
	t.Cleanup(cancel)
	return ctx
}

// rawAppend runs one Append RPC (no retries) dispatched with |dctx|: the
// request, one content chunk, the empty commit chunk, EOF.
func rawAppend(dctx context.Context, rjc pb.RoutedJournalClient, req pb.AppendRequest, content string) (*pb.AppendResponse, error) {
	var stream, err = rjc.Append(dctx)
	if err != nil {
		return nil, err
	}
	// Send errors are ignored: a broker may respond (and close) before
	// reading every chunk; the response then tells.
	_ = stream.Send(&req)
	if content != "" {
		_ = stream.Send(&pb.AppendRequest{Content: []byte(content)})
	}
	_ = stream.Send(&pb.AppendRequest{})
	return stream.CloseAndRecv()
}

// rawRead runs one Read RPC dispatched with |dctx| and collects every
// response until the stream ends; the error is nil on a clean EOF.
func rawRead(dctx context.Context, rjc pb.RoutedJournalClient, req pb.ReadRequest) ([]pb.ReadResponse, error) {
	var stream, err = rjc.Read(dctx, &req)
	if err != nil {
		return nil, err
	}
	var out []pb.ReadResponse
	for {
		var resp = new(pb.ReadResponse)
		if err = stream.RecvMsg(resp); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, *resp)
	}
}

func contentOf(resps []pb.ReadResponse) string {
	var b strings.Builder
	for _, r := range resps {
		b.Write(r.Content)
	}
	return b.String()
}

func otherMember(rt pb.Route) pb.ProcessSpec_ID {
	for i, m := range rt.Members {
		if int32(i) != rt.Primary {
			return m
		}
	}
	return pb.ProcessSpec_ID{}
}

func indexOf(rt pb.Route, id pb.ProcessSpec_ID) int32 {
	for i, m := range rt.Members {
		if m == id {
			return int32(i)
		}
	}
	return -1
}

// TestRouting: with a RouteCache, appends are served by the journal's primary
// and reads by a member (of the client's zone, by dispatcher preference). With
// a stale route naming a replica as primary, an Append with do_not_proxy gets
// NOT_JOURNAL_PRIMARY_BROKER and the current route, and client.Append retries
// to success at the real primary; without do_not_proxy the replica proxies.
func TestRouting(t *testing.T) {
	var c = newCluster(t, clusterOpts{})
	var j = c.journalName(0)
	c.apply(c.spec(j, 3))
	c.waitReady([]pb.Journal{j}, 3, 60*time.Second)
	var ctx = testCtx(t, c, 2*time.Minute)

	// The service address is the zone-b broker; the client is in zone-a.
	var rjc, rc = c.routedClient(c.byName("brk3").addr())
	if _, err := client.ListAllJournals(ctx, rjc, pb.ListRequest{
		Selector: pb.LabelSelector{Include: pb.MustLabelSet("name", j.String())}}); err != nil {
		t.Fatalf("List: %v", err)
	}
	var rt = rc.Route(ctx, j.String())
	if len(rt.Members) != 3 || rt.Primary < 0 || len(rt.Endpoints) != 3 {
		t.Fatalf("cached route %v: want 3 members with endpoints and a primary", rt)
	}
	var primary = rt.Members[rt.Primary]
	t.Logf("route %s, primary %v", fmtRoute(rt), primary)

	var want strings.Builder
	var appendOK = func(what string, req pb.AppendRequest, content string) pb.AppendResponse {
		t.Helper()
		var resp, err = client.Append(ctx, rjc, req, strings.NewReader(content))
		if err != nil {
			t.Fatalf("%s: client.Append: %v", what, err)
		}
		if resp.Header.ProcessId != primary {
			t.Errorf("%s: served by %v, want the primary %v", what, resp.Header.ProcessId, primary)
		}
		if !resp.Header.Route.Equivalent(&rt) {
			t.Errorf("%s: response route %s, want %s", what, fmtRoute(resp.Header.Route), fmtRoute(rt))
		}
		if resp.Commit == nil || resp.Commit.Begin != int64(want.Len()) || resp.Commit.End != int64(want.Len()+len(content)) {
			t.Errorf("%s: commit %v, want [%d,%d)", what, resp.Commit, want.Len(), want.Len()+len(content))
		}
		want.WriteString(content)
		return resp
	}
	appendOK("append through the route cache", pb.AppendRequest{Journal: j}, "first\n")

	// A read goes to a member, preferring the client's zone.
	var resps, err = rawRead(pb.WithDispatchItemRoute(ctx, rjc, j.String(), false), rjc,
		pb.ReadRequest{Journal: j, Offset: 0, Block: false})
	if err != nil || len(resps) == 0 {
		t.Fatalf("read through the route cache: %v (%d responses)", err, len(resps))
	}
	if by := resps[0].Header.ProcessId; indexOf(rt, by) < 0 {
		t.Errorf("read served by %v, which is not a member of %s", by, fmtRoute(rt))
	} else if by.Zone != clientZone {
		t.Errorf("read served by %v; the dispatcher prefers a member of the client's zone %s", by, clientZone)
	} else {
		t.Logf("read served by %v", by)
	}
	if got := contentOf(resps); got != want.String() {
		t.Errorf("read %q, want %q", got, want.String())
	}

	// Stale route: a replica named as primary.
	var replica = otherMember(rt)
	var stale = rt.Copy()
	stale.Primary = indexOf(rt, replica)

	resp, err := rawAppend(pb.WithDispatchRoute(ctx, stale, replica), rjc,
		pb.AppendRequest{Journal: j, DoNotProxy: true}, "NOT-COMMITTED\n")
	if err != nil {
		t.Fatalf("do_not_proxy append at replica %v: %v", replica, err)
	}
	if resp.Status != pb.Status_NOT_JOURNAL_PRIMARY_BROKER {
		t.Errorf("do_not_proxy append at replica %v: status %v, want NOT_JOURNAL_PRIMARY_BROKER", replica, resp.Status)
	}
	if resp.Header.ProcessId != replica {
		t.Errorf("NOT_JOURNAL_PRIMARY_BROKER header process_id %v, want the replica %v", resp.Header.ProcessId, replica)
	}
	if !resp.Header.Route.Equivalent(&rt) || len(resp.Header.Route.Endpoints) != 3 {
		t.Errorf("NOT_JOURNAL_PRIMARY_BROKER header route %v, want %s with endpoints", resp.Header.Route, fmtRoute(rt))
	}
	if resp.Commit != nil {
		t.Errorf("NOT_JOURNAL_PRIMARY_BROKER response has a commit %v", resp.Commit)
	}

	// An Appender through the stale cache fails once and refreshes the cache.
	rc.UpdateRoute(j.String(), &stale)
	var a = client.NewAppender(ctx, rjc, pb.AppendRequest{Journal: j, DoNotProxy: true})
	_, _ = a.Write([]byte("NOT-COMMITTED\n"))
	if err = a.Close(); !errors.Is(err, client.ErrNotJournalPrimaryBroker) {
		t.Errorf("Appender at a stale primary: %v, want %v", err, client.ErrNotJournalPrimaryBroker)
	}
	if got := rc.Route(ctx, j.String()); got.Primary != rt.Primary {
		t.Errorf("route cache after NOT_JOURNAL_PRIMARY_BROKER: %s, want %s", fmtRoute(got), fmtRoute(rt))
	}
	// client.Append retries to success.
	rc.UpdateRoute(j.String(), &stale)
	appendOK("client.Append with do_not_proxy from a stale route", pb.AppendRequest{Journal: j, DoNotProxy: true}, "second\n")
	// Without do_not_proxy, the replica proxies to the primary.
	rc.UpdateRoute(j.String(), &stale)
	appendOK("append proxied by a replica", pb.AppendRequest{Journal: j}, "third\n")

	var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: 0})
	if got, err := readUntilErr(rr); !errors.Is(err, client.ErrOffsetNotYetAvailable) || string(got) != want.String() {
		t.Errorf("final read: %q, %v; want %q", got, err, want.String())
	}
}

// TestProxying (scenarios 15, 21, 36, 40): a broker that is not a member of a
// journal proxies Append (to the primary), Read and ListFragments (to a
// member) and returns the peer's responses, header included; with
// do_not_proxy it answers NOT_JOURNAL_PRIMARY_BROKER / NOT_JOURNAL_BROKER with
// the route. Then two journals of replication 2 with different primaries:
// appends through one broker (one of them proxied) reach blocking readers on
// every broker (served by the primary, a replica, or by proxy) byte-exactly.
func TestProxying(t *testing.T) {
	var c = newCluster(t, clusterOpts{})
	var j = c.journalName(0)
	var names = []pb.Journal{c.journalName(1), c.journalName(2), c.journalName(3), c.journalName(4), c.journalName(5), c.journalName(6)}
	var specs = []*pb.JournalSpec{c.spec(j, 1)}
	for _, n := range names {
		specs = append(specs, c.spec(n, 2))
	}
	c.apply(specs...)
	c.waitReady([]pb.Journal{j}, 1, 60*time.Second)
	var rts = c.waitReady(names, 2, 60*time.Second)
	var ctx = testCtx(t, c, 2*time.Minute)

	var rt = c.route(j)
	var owner = c.byID(rt.Members[0])
	var proxy *broker
	for _, b := range c.brokers {
		if b != owner {
			proxy = b
			break
		}
	}
	var cli = proxy.direct // Every RPC goes to |proxy|.
	t.Logf("journal %s on %v; RPCs sent to %v", fmtRoute(rt), owner, proxy)

	// Append, proxied to the primary: its response comes back verbatim.
	var content = "appended through a proxy\n"
	var resp, err = client.Append(ctx, cli, pb.AppendRequest{Journal: j}, strings.NewReader(content))
	if err != nil {
		t.Fatalf("proxied append: %v", err)
	}
	if resp.Header.ProcessId != owner.procID() {
		t.Errorf("proxied append: header process_id %v, want the primary %v (its response verbatim)", resp.Header.ProcessId, owner)
	}
	if resp.Commit == nil || resp.Commit.Begin != 0 || resp.Commit.End != int64(len(content)) || resp.Commit.Sum != pb.SHA1SumOf(content) {
		t.Errorf("proxied append: commit %v, want [0,%d) with the SHA1 of the content", resp.Commit, len(content))
	}

	// Read, proxied to the member.
	resps, err := rawRead(pb.WithDispatchDefault(ctx), cli, pb.ReadRequest{Journal: j, Offset: 0, Block: false})
	if err != nil || len(resps) < 2 {
		t.Fatalf("proxied read: %v (%d responses)", err, len(resps))
	}
	if by := resps[0].Header; by == nil || by.ProcessId != owner.procID() {
		t.Errorf("proxied read: first header %v, want process_id %v (the member's header, relayed)", by, owner)
	}
	if got := contentOf(resps); got != content {
		t.Errorf("proxied read: %q, want %q", got, content)
	}
	if last := resps[len(resps)-1]; last.Status != pb.Status_OFFSET_NOT_YET_AVAILABLE || last.Offset != int64(len(content)) {
		t.Errorf("proxied read: last response %v, want OFFSET_NOT_YET_AVAILABLE at %d", &last, len(content))
	}

	// ListFragments, proxied.
	fr, err := cli.ListFragments(pb.WithDispatchDefault(ctx), &pb.FragmentsRequest{Journal: j})
	if err != nil {
		t.Fatalf("proxied ListFragments: %v", err)
	}
	if fr.Status != pb.Status_OK || fr.Header.ProcessId != owner.procID() {
		t.Errorf("proxied ListFragments: status %v, header process_id %v; want OK from %v", fr.Status, fr.Header.ProcessId, owner)
	}
	if n := len(fr.Fragments); n == 0 || fr.Fragments[n-1].Spec.End != int64(len(content)) {
		t.Errorf("proxied ListFragments: %v, want fragments ending at %d", fr.Fragments, len(content))
	}

	// do_not_proxy: the proxy answers with the route instead.
	resp2, err := rawAppend(pb.WithDispatchDefault(ctx), cli, pb.AppendRequest{Journal: j, DoNotProxy: true}, "NOT-COMMITTED\n")
	if err != nil {
		t.Fatalf("do_not_proxy append: %v", err)
	}
	if resp2.Status != pb.Status_NOT_JOURNAL_PRIMARY_BROKER || resp2.Header.ProcessId != proxy.procID() ||
		!resp2.Header.Route.Equivalent(&rt) || len(resp2.Header.Route.Endpoints) != 1 {
		t.Errorf("do_not_proxy append: status %v, header %v; want NOT_JOURNAL_PRIMARY_BROKER from %v with route %s and its endpoint",
			resp2.Status, &resp2.Header, proxy, fmtRoute(rt))
	}
	resps, err = rawRead(pb.WithDispatchDefault(ctx), cli, pb.ReadRequest{Journal: j, Offset: 0, DoNotProxy: true})
	if err != nil || len(resps) != 1 {
		t.Errorf("do_not_proxy read: %v, %d responses %v; want one response then EOF", err, len(resps), resps)
	} else if r := resps[0]; r.Status != pb.Status_NOT_JOURNAL_BROKER || r.Header == nil ||
		r.Header.ProcessId != proxy.procID() || !r.Header.Route.Equivalent(&rt) {
		t.Errorf("do_not_proxy read: %v; want NOT_JOURNAL_BROKER from %v with route %s", &r, proxy, fmtRoute(rt))
	}
	fr, err = cli.ListFragments(pb.WithDispatchDefault(ctx), &pb.FragmentsRequest{Journal: j, DoNotProxy: true})
	if err != nil {
		t.Errorf("do_not_proxy ListFragments: %v", err)
	} else if fr.Status != pb.Status_NOT_JOURNAL_BROKER || fr.Header.ProcessId != proxy.procID() || !fr.Header.Route.Equivalent(&rt) {
		t.Errorf("do_not_proxy ListFragments: status %v header %v; want NOT_JOURNAL_BROKER from %v with route %s",
			fr.Status, &fr.Header, proxy, fmtRoute(rt))
	}
	if got, _ := readUntilErr(client.NewReader(ctx, cli, pb.ReadRequest{Journal: j})); string(got) != content {
		t.Errorf("journal holds %q after the do_not_proxy append, want %q", got, content)
	}

	// Two journals of replication 2 with different primaries.
	var j1, j2 pb.Journal
	for _, a := range names {
		for _, b := range names {
			var ra, rb = rts[a], rts[b]
			if ra.Members[ra.Primary] != rb.Members[rb.Primary] && j1 == "" {
				j1, j2 = a, b
			}
		}
	}
	if j1 == "" {
		t.Fatalf("all of %d journals have one primary: %v", len(names), rts)
	}
	var r1, r2 = rts[j1], rts[j2]
	var entry = c.byID(r1.Members[r1.Primary]) // J1's primary; J2's appends through it are proxied.
	t.Logf("J1 %s, J2 %s, appends sent to %v", fmtRoute(r1), fmtRoute(r2), entry)

	var chunks = []string{"alpha\n", "beta beta\n", strings.Repeat("gamma", 4000) + "\n", "delta\n"}
	var total = strings.Join(chunks, "")
	type result struct {
		what string
		got  []byte
		err  error
	}
	var results = make(chan result, 6)
	var wg sync.WaitGroup
	for _, jn := range []pb.Journal{j1, j2} {
		for _, b := range c.brokers {
			var what = fmt.Sprintf("blocking read of %s %s via %v", jn[len(jn)-3:], fmtRoute(rts[jn]), b)
			var r = client.NewReader(ctx, b.direct, pb.ReadRequest{Journal: jn, Offset: 0, Block: true})
			wg.Add(1)
			go func() {
				defer wg.Done()
				var buf = make([]byte, len(total))
				var n, err = io.ReadFull(r, buf)
				results <- result{what, buf[:n], err}
			}()
		}
	}
	time.Sleep(500 * time.Millisecond) // Let the reads reach their brokers and block.
	for _, ch := range chunks {
		for _, jn := range []pb.Journal{j1, j2} {
			var resp, err = client.Append(ctx, entry.direct, pb.AppendRequest{Journal: jn}, strings.NewReader(ch))
			if err != nil {
				t.Fatalf("append to %s via %v: %v", jn, entry, err)
			}
			var rt = rts[jn]
			if resp.Header.ProcessId != rt.Members[rt.Primary] {
				t.Errorf("append to %s via %v served by %v, want its primary %v", jn, entry, resp.Header.ProcessId, rt.Members[rt.Primary])
			}
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil || string(r.got) != total {
			t.Errorf("%s: %d bytes, err %v; want exactly the %d appended bytes", r.what, len(r.got), r.err, len(total))
		}
	}
}

// TestInsufficientBrokers stands in for scenarios 9 and 10, which a real
// allocator can't arrange exactly. Gazette's behaviour (append_fsm.go
// onAwaitDesiredReplicas; DesiredReplication = min(replication, 9)): with
// fewer live brokers than a journal's replication, the allocator still assigns
// every live broker and a primary, but appends fail with
// INSUFFICIENT_JOURNAL_BROKERS (also when sent to the non-primary, which
// answers itself rather than proxy, with the resolved header: process_id is
// the primary's); reads are served. Once a third broker
// joins, appends succeed.
func TestInsufficientBrokers(t *testing.T) {
	var c = newCluster(t, clusterOpts{brokers: 2})
	var j = c.journalName(0)
	c.apply(c.spec(j, 3))
	var ctx = testCtx(t, c, 2*time.Minute)

	var rts, err = c.waitRoutes([]pb.Journal{j}, 60*time.Second, "two members and a primary",
		func(_ pb.Journal, rt pb.Route) bool { return len(rt.Members) == 2 && rt.Primary >= 0 })
	if err != nil {
		t.Fatal(err)
	}
	var rt = rts[j]
	t.Logf("replication 3 on 2 brokers: route %s", fmtRoute(rt))

	for _, id := range rt.Members {
		var b = c.byID(id)
		// The allocator's route may not be in every broker's view yet; retry briefly.
		var resp *pb.AppendResponse
		for i := 0; i < 50; i++ {
			if resp, err = rawAppend(pb.WithDispatchDefault(ctx), b.direct, pb.AppendRequest{Journal: j}, "x\n"); err != nil ||
				resp.Status == pb.Status_INSUFFICIENT_JOURNAL_BROKERS {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("append via %v: %v", b, err)
		} else if resp.Status != pb.Status_INSUFFICIENT_JOURNAL_BROKERS {
			t.Errorf("append via %v: status %v (commit %v), want INSUFFICIENT_JOURNAL_BROKERS", b, resp.Status, resp.Commit)
		} else if resp.Header.ProcessId != rt.Members[rt.Primary] || !resp.Header.Route.Equivalent(&rt) {
			// Gazette: the status comes from the append FSM after resolution
			// (not from the resolver), so the header is the resolved one:
			// process_id = the primary, even when a replica answers.
			t.Errorf("append via %v: header %v; want process_id = the primary %v and route %s",
				b, &resp.Header, rt.Members[rt.Primary], fmtRoute(rt))
		}
	}
	var r = client.NewReader(ctx, c.brokers[0].direct, pb.ReadRequest{Journal: j, Offset: 0})
	if got, err := readUntilErr(r); !errors.Is(err, client.ErrOffsetNotYetAvailable) || len(got) != 0 {
		t.Errorf("read of the under-replicated journal: %q, %v; want nothing and %v", got, err, client.ErrOffsetNotYetAvailable)
	}

	var third = c.brokers[2]
	third.start()
	c.waitReady([]pb.Journal{j}, 3, 60*time.Second)
	var start = time.Now()
	resp, err := client.Append(ctx, c.brokers[0].direct, pb.AppendRequest{Journal: j}, strings.NewReader("now replicated\n"))
	if err != nil || resp.Commit == nil || resp.Commit.Begin != 0 {
		t.Fatalf("append once a third broker joined: %v, %v", err, resp.Commit)
	}
	t.Logf("append succeeded %v after the route reached 3 members", time.Since(start))
}

// TestGracefulExit (scenarios 39, 40): journal J (replication 2) on three
// brokers; SIGTERM its primary. It must exit 0 within 30 s, after the route
// became the two other brokers with a primary; a blocking read it served (and
// one it proxied) ends with a clean EOF, and a RetryReader continues elsewhere
// and sees every byte appended before and after.
func TestGracefulExit(t *testing.T) {
	var c = newCluster(t, clusterOpts{})
	var j = c.journalName(0)
	var others = []pb.Journal{c.journalName(1), c.journalName(2), c.journalName(3)}
	c.apply(c.spec(j, 2), c.spec(others[0], 1), c.spec(others[1], 1), c.spec(others[2], 1))
	var rts = c.waitReady([]pb.Journal{j}, 2, 60*time.Second)
	for jn, rt := range c.waitReady(others, 1, 60*time.Second) {
		rts[jn] = rt
	}
	var ctx = testCtx(t, c, 3*time.Minute)
	var rt = rts[j]
	var exiting = c.byID(rt.Members[rt.Primary])
	var service *broker
	for _, b := range c.brokers {
		if indexOf(rt, b.procID()) < 0 {
			service = b // The non-member is the service address.
		}
	}
	t.Logf("J %s; SIGTERM to %v; service address %v", fmtRoute(rt), exiting, service)

	var rjc, rc = c.routedClient(service.addr())
	var before = "before the exit\n"
	if _, err := client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader(before)); err != nil {
		t.Fatal(err)
	}

	type ended struct {
		what string
		got  []byte
		err  error
		at   time.Time
	}
	var endCh = make(chan ended, 2)
	var startBlocking = func(what string, cli pb.RoutedJournalClient, jn pb.Journal) {
		var r = client.NewReader(ctx, cli, pb.ReadRequest{Journal: jn, Offset: 0, Block: true})
		go func() {
			var got, err = readUntilErr(r)
			endCh <- ended{what, got, err, time.Now()}
		}()
	}
	startBlocking("blocking read of J served by the exiting broker", exiting.direct, j)
	var proxied = 1
	var pj pb.Journal
	for _, o := range others {
		if rts[o].Members[0] != exiting.procID() {
			pj = o
		}
	}
	if pj != "" {
		startBlocking("blocking read proxied by the exiting broker", exiting.direct, pj)
	} else {
		proxied = 0
		t.Logf("every replication-1 journal is on the exiting broker: no proxied read")
	}

	// A RetryReader that starts on the exiting broker.
	rc.UpdateRoute(j.String(), &pb.Route{Members: []pb.ProcessSpec_ID{exiting.procID()}, Primary: 0,
		Endpoints: []pb.Endpoint{exiting.endpoint()}})
	var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: 0, Block: true})
	var rrGot = make([]byte, len(before))
	if _, err := io.ReadFull(rr, rrGot); err != nil || string(rrGot) != before {
		t.Fatalf("RetryReader: %q, %v", rrGot, err)
	}
	time.Sleep(500 * time.Millisecond)

	var termAt = time.Now()
	exiting.signal(syscall.SIGTERM)
	var st, exited = exiting.waitExit(30 * time.Second)
	if !exited {
		t.Errorf("%v did not exit within 30 s of SIGTERM", exiting)
		exiting.kill()
	} else if st.ExitCode() != 0 {
		t.Errorf("%v exited with %v after SIGTERM, want 0", exiting, st)
	} else {
		t.Logf("%v exited 0 after %v", exiting, time.Since(termAt))
	}

	for i := 0; i < 1+proxied; i++ {
		select {
		case e := <-endCh:
			if e.err != io.EOF {
				t.Errorf("%s ended with %v, want a clean EOF", e.what, e.err)
			} else {
				t.Logf("%s ended with EOF %v after SIGTERM", e.what, e.at.Sub(termAt))
			}
		case <-time.After(10 * time.Second):
			t.Errorf("a blocking read through the exiting broker did not end")
		}
	}

	var after, err = c.waitRoutes([]pb.Journal{j}, 30*time.Second, "route without the exited broker",
		func(_ pb.Journal, rt pb.Route) bool {
			return len(rt.Members) == 2 && rt.Primary >= 0 && indexOf(rt, exiting.procID()) < 0
		})
	if err != nil {
		t.Error(err)
	} else {
		t.Logf("route after the exit: %s", fmtRoute(after[j]))
	}

	var afterContent = "after the exit\n"
	resp, err := client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader(afterContent))
	if err != nil || resp.Commit == nil || resp.Commit.Begin != int64(len(before)) {
		t.Fatalf("append after the exit: %v, commit %v", err, resp.Commit)
	}
	var rest = make([]byte, len(afterContent))
	var rctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { <-rctx.Done(); rr.Cancel() }()
	if n, err := io.ReadFull(rr, rest); err != nil || string(rest) != afterContent {
		t.Errorf("RetryReader after the exit: %q, %v; want %q", rest[:n], err, afterContent)
	}
}
