// Package interop drives a running Courant broker with Gazette's own Go client
// (go.gazette.dev/core, pinned in go.mod) to check wire compatibility.
//
// The broker address comes from COURANT_ADDRESS (eg "http://127.0.0.1:18080").
// Every test creates its own uniquely named journals, so the suite may run
// against a broker that already holds other journals.
package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	mbp "go.gazette.dev/core/mainboilerplate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// testTimeout bounds every test: all RPCs of a test run under a context
	// with this deadline.
	testTimeout = 60 * time.Second
	// assignTimeout bounds the wait for a freshly applied journal to be
	// assigned to the broker.
	assignTimeout = 10 * time.Second
)

// runID makes journal names and labels unique to this `go test` run.
var runID = fmt.Sprintf("r%d", time.Now().UnixNano())

func TestMain(m *testing.M) {
	// The dispatcher gRPC balancer must be registered before any Dial, exactly
	// as gazctl and Gazette consumers do at startup.
	pb.RegisterGRPCDispatcher("local")
	os.Exit(m.Run())
}

// brokerAddress returns COURANT_ADDRESS as a Gazette Endpoint, or skips the test.
func brokerAddress(t *testing.T) pb.Endpoint {
	t.Helper()
	var addr = strings.TrimSpace(os.Getenv("COURANT_ADDRESS"))
	if addr == "" {
		t.Skip("COURANT_ADDRESS is not set: start a broker (eg `target/debug/courant serve --broker.port 18080 " +
			"--broker.host 127.0.0.1 --data-dir $(mktemp -d)`) and export COURANT_ADDRESS=http://127.0.0.1:18080")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	var ep = pb.Endpoint(addr)
	if err := ep.Validate(); err != nil {
		t.Fatalf("invalid COURANT_ADDRESS %q: %v", addr, err)
	}
	return ep
}

// setup returns a test-scoped context (cancelled at the end of the test or after
// testTimeout) and a JournalClient dialed exactly as gazctl dials its broker
// (mainboilerplate.AddressConfig: dispatcher balancer, plaintext for http://).
// The returned RoutedJournalClient has no route cache, so every RPC goes to
// COURANT_ADDRESS (gazctl's default, --broker.cache.size=0).
func setup(t *testing.T) (context.Context, pb.RoutedJournalClient) {
	t.Helper()
	var ep = brokerAddress(t)
	var ctx, cancel = context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	setupCount.Add(1)

	var cfg = mbp.AddressConfig{Address: ep}
	var jc = cfg.MustJournalClient(ctx) // Connection is closed when |ctx| ends.
	return ctx, pb.NewRoutedJournalClient(jc, pb.NoopDispatchRouter{})
}

// setupCount distinguishes repeated runs of a test in one process (-count=N).
var setupCount atomic.Int64

// journalName returns a journal name unique to this run and test.
func journalName(t *testing.T, suffix string) pb.Journal {
	var tn = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return pb.Journal(fmt.Sprintf("courant-interop/%s-%d/%s/%s", runID, setupCount.Load(), tn, suffix))
}

// newSpec returns a JournalSpec satisfying the suite's constraints: replication
// 1, fragment length >= 1024, refresh interval 1m, NONE or SNAPPY codec, no stores.
func newSpec(name pb.Journal, codec pb.CompressionCodec, labels ...string) *pb.JournalSpec {
	var all = append([]string{"interop-run", runID}, labels...)
	return &pb.JournalSpec{
		Name:        name,
		Replication: 1,
		LabelSet:    pb.MustLabelSet(all...),
		Fragment: pb.JournalSpec_Fragment{
			Length:           1 << 20,
			CompressionCodec: codec,
			RefreshInterval:  time.Minute,
		},
	}
}

// apply creates the given specs (expect_mod_revision 0 = "must not exist").
func apply(t *testing.T, ctx context.Context, jc pb.JournalClient, specs ...*pb.JournalSpec) *pb.ApplyResponse {
	t.Helper()
	var req = new(pb.ApplyRequest)
	for _, s := range specs {
		req.Changes = append(req.Changes, pb.ApplyRequest_Change{Upsert: s, ExpectModRevision: 0})
	}
	var resp, err = client.ApplyJournals(ctx, jc, req)
	if err != nil {
		t.Fatalf("ApplyJournals(%d specs): %v (response %v)", len(specs), err, resp)
	}
	if resp.Status != pb.Status_OK {
		t.Fatalf("ApplyJournals status %v", resp.Status)
	}
	for _, s := range specs {
		waitAssigned(t, ctx, jc, s.Name)
	}
	return resp
}

// waitAssigned polls List until |name| has a primary, for at most assignTimeout.
// Gazette assigns journals asynchronously (allocator), so a compatible broker may
// too. A journal still unassigned is only logged here: the RPCs that follow
// report the real failure, and TestListAllJournals checks routes strictly.
func waitAssigned(t *testing.T, ctx context.Context, jc pb.JournalClient, name pb.Journal) {
	t.Helper()
	var deadline = time.Now().Add(assignTimeout)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var resp, err = client.ListAllJournals(ctx, jc, pb.ListRequest{
			Selector: pb.LabelSelector{Include: pb.MustLabelSet("name", name.String())},
		})
		if err != nil {
			last = "ListAllJournals error: " + err.Error()
		} else if len(resp.Journals) != 1 {
			last = fmt.Sprintf("ListAllJournals returned %d journals", len(resp.Journals))
		} else if rt := resp.Journals[0].Route; rt.Primary < 0 || len(rt.Members) == 0 {
			last = fmt.Sprintf("route %v has no primary", rt)
		} else {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("WARNING: journal %s not assigned after %v (%s); continuing", name, assignTimeout, last)
}

// appendOK appends |content| with client.Append and checks the commit.
func appendOK(t *testing.T, ctx context.Context, rjc pb.RoutedJournalClient, j pb.Journal,
	content string, wantBegin int64) pb.AppendResponse {
	t.Helper()
	var resp, err = client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader(content))
	if err != nil {
		t.Fatalf("client.Append(%s, %q): %v (response %v)", j, content, err, resp)
	}
	checkCommit(t, resp, j, content, wantBegin)
	return resp
}

func checkCommit(t *testing.T, resp pb.AppendResponse, j pb.Journal, content string, wantBegin int64) {
	t.Helper()
	if resp.Status != pb.Status_OK {
		t.Fatalf("append status %v", resp.Status)
	}
	if resp.Commit == nil {
		t.Fatalf("append response has no commit: %v", resp)
	}
	var c = resp.Commit
	if c.Journal != j {
		t.Errorf("commit journal %q, want %q", c.Journal, j)
	}
	if c.Begin != wantBegin || c.End != wantBegin+int64(len(content)) {
		t.Errorf("commit span [%d,%d), want [%d,%d)", c.Begin, c.End, wantBegin, wantBegin+int64(len(content)))
	}
	if want := pb.SHA1SumOf(content); c.Sum != want {
		t.Errorf("commit sum %v, want SHA1 of appended bytes %v", c.Sum, want)
	}
	if resp.Registers == nil {
		t.Errorf("append response registers must be present (even if empty)")
	}
	if resp.Header.ProcessId.Suffix == "" {
		t.Errorf("append response header has empty process_id: %v", resp.Header)
	}
}

// readAvailable reads with a fresh non-blocking Reader from |offset| until the
// broker reports OFFSET_NOT_YET_AVAILABLE, and returns the bytes read.
func readAvailable(t *testing.T, ctx context.Context, rjc pb.RoutedJournalClient, j pb.Journal, offset int64) []byte {
	t.Helper()
	var r = client.NewReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: offset, Block: false})
	var out, err = readUntilErr(r)
	if !errors.Is(err, client.ErrOffsetNotYetAvailable) {
		t.Fatalf("non-blocking read of %s from %d: got error %v after %d bytes (%q); want %v",
			j, offset, err, len(out), truncate(out), client.ErrOffsetNotYetAvailable)
	}
	return out
}

// readUntilErr reads |r| until it returns an error.
func readUntilErr(r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	var buf = make([]byte, 32*1024)
	for {
		var n, err = r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.Bytes(), err
		}
	}
}

// readN reads exactly |n| bytes from |r|. Offset jumps are returned as errors.
func readN(r io.Reader, n int) ([]byte, error) {
	var buf = make([]byte, n)
	var got, err = io.ReadFull(r, buf)
	return buf[:got], err
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// TestAppendThenRead: client.Append twice, then read back with Reader and
// RetryReader (non-blocking, offset 0), for NONE and SNAPPY journals.
func TestAppendThenRead(t *testing.T) {
	for _, codec := range []pb.CompressionCodec{pb.CompressionCodec_NONE, pb.CompressionCodec_SNAPPY} {
		t.Run(codec.String(), func(t *testing.T) {
			var ctx, rjc = setup(t)
			var j = journalName(t, "j")
			apply(t, ctx, rjc, newSpec(j, codec))

			var first, second = "hello, courant\n", "second append\n"
			var r1 = appendOK(t, ctx, rjc, j, first, 0)
			if r1.Commit.CompressionCodec != codec {
				t.Errorf("commit compression_codec %v, want the journal's codec %v", r1.Commit.CompressionCodec, codec)
			}
			if rt := r1.Header.Route; rt.Primary < 0 || int(rt.Primary) >= len(rt.Members) {
				t.Errorf("append header route %v has no valid primary", rt)
			} else if rt.Members[rt.Primary] != r1.Header.ProcessId {
				t.Errorf("append header process_id %v is not the route primary %v", r1.Header.ProcessId, rt.Members[rt.Primary])
			} else if len(rt.Endpoints) != len(rt.Members) {
				t.Errorf("append header route %v: endpoints not aligned with members", rt)
			}
			appendOK(t, ctx, rjc, j, second, int64(len(first)))

			if got := readAvailable(t, ctx, rjc, j, 0); string(got) != first+second {
				t.Errorf("Reader from 0 read %q, want %q", got, first+second)
			}
			if got := readAvailable(t, ctx, rjc, j, int64(len(first))); string(got) != second {
				t.Errorf("Reader from %d read %q, want %q", len(first), got, second)
			}

			var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: 0})
			var got, err = readUntilErr(rr)
			if !errors.Is(err, client.ErrOffsetNotYetAvailable) {
				t.Errorf("RetryReader (non-blocking) ended with %v, want %v", err, client.ErrOffsetNotYetAvailable)
			}
			if string(got) != first+second {
				t.Errorf("RetryReader from 0 read %q, want %q", got, first+second)
			}
			if rr.Offset() != int64(len(first+second)) {
				t.Errorf("RetryReader offset %d, want %d", rr.Offset(), len(first+second))
			}
		})
	}
}

// TestAppenderAbort: content written to an Appender that is then Aborted (EOF
// without the empty commit chunk) must leave no bytes behind.
func TestAppenderAbort(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "j")
	apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))

	var committed = "committed-1\n"
	appendOK(t, ctx, rjc, j, committed, 0)

	var a = client.NewAppender(ctx, rjc, pb.AppendRequest{Journal: j})
	if _, err := a.Write([]byte("ABORTED-CONTENT-MUST-NOT-APPEAR\n")); err != nil {
		t.Fatalf("Appender.Write: %v", err)
	}
	a.Abort()

	if got := readAvailable(t, ctx, rjc, j, 0); string(got) != committed {
		t.Errorf("after Abort, journal holds %q, want only %q", got, committed)
	}
	// The next append must begin exactly where the committed content ends.
	var next = "committed-2\n"
	appendOK(t, ctx, rjc, j, next, int64(len(committed)))
	if got := readAvailable(t, ctx, rjc, j, 0); string(got) != committed+next {
		t.Errorf("journal holds %q, want %q", got, committed+next)
	}
}

// TestAppendStreamEOFWithoutCommit: the raw form of Abort. A stream of
// {journal}, {content}, EOF (no empty chunk) must fail, not commit.
func TestAppendStreamEOFWithoutCommit(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "j")
	apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))
	var committed = "before\n"
	appendOK(t, ctx, rjc, j, committed, 0)

	// Claims as client.Appender attaches them (the AuthJournalClient requires them).
	var claimsCtx = pb.WithClaims(ctx, pb.Claims{
		Capability: pb.Capability_APPEND,
		Selector:   pb.LabelSelector{Include: pb.MustLabelSet("name", j.String())},
	})
	var stream, err = rjc.Append(pb.WithDispatchDefault(claimsCtx))
	if err != nil {
		t.Fatalf("Append RPC: %v", err)
	}
	if err = stream.Send(&pb.AppendRequest{Journal: j}); err != nil {
		t.Fatalf("Send(journal): %v", err)
	}
	if err = stream.Send(&pb.AppendRequest{Content: []byte("uncommitted\n")}); err != nil {
		t.Fatalf("Send(content): %v", err)
	}
	resp, err := stream.CloseAndRecv()
	if err == nil {
		t.Errorf("EOF without the empty commit chunk returned no error (response %v); want an RPC error "+
			"(Gazette: \"append stream: unexpected EOF\")", resp)
	} else {
		t.Logf("broker error (expected): %v", err)
	}
	if got := readAvailable(t, ctx, rjc, j, 0); string(got) != committed {
		t.Errorf("journal holds %q, want only %q", got, committed)
	}
	appendOK(t, ctx, rjc, j, "after\n", int64(len(committed)))
}

// TestAppenderContextCancelled: an Appender whose context is cancelled after a
// Write (and which never sends the commit chunk) must leave no bytes behind.
//
// Close is called only after the check: calling it right after cancel() races
// gRPC's asynchronous stream teardown, and may still send the empty commit chunk
// and EOF ahead of the RST_STREAM; the broker then rightly commits (observed with
// Gazette's own broker too; Appender documents that an in-flight Close "may or may
// not commit").
func TestAppenderContextCancelled(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "j")
	apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))
	var committed = "committed-1\n"
	appendOK(t, ctx, rjc, j, committed, 0)

	var appCtx, cancel = context.WithCancel(ctx)
	var a = client.NewAppender(appCtx, rjc, pb.AppendRequest{Journal: j})
	if _, err := a.Write([]byte("CANCELLED-CONTENT-MUST-NOT-APPEAR\n")); err != nil {
		t.Fatalf("Appender.Write: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // Let the content reach the broker.
	cancel()

	// The broker must roll back; the next append begins at the committed end.
	var next = "committed-2\n"
	appendOK(t, ctx, rjc, j, next, int64(len(committed)))
	if got := readAvailable(t, ctx, rjc, j, 0); string(got) != committed+next {
		t.Errorf("journal holds %q, want %q", got, committed+next)
	}
	if err := a.Close(); err == nil {
		t.Errorf("Appender.Close after context cancellation succeeded (response %v); want an error", a.Response)
	} else if !errors.Is(err, context.Canceled) {
		t.Logf("Close error (not context.Canceled, still a failure as expected): %v", err)
	}
}

// TestAppendStreamCancelled: the raw form. {journal}, {content}, then the call
// is cancelled: Recv reports Canceled and nothing is committed.
func TestAppendStreamCancelled(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "j")
	apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))
	var committed = "before\n"
	appendOK(t, ctx, rjc, j, committed, 0)

	var callCtx, cancel = context.WithCancel(pb.WithClaims(ctx, pb.Claims{
		Capability: pb.Capability_APPEND,
		Selector:   pb.LabelSelector{Include: pb.MustLabelSet("name", j.String())},
	}))
	defer cancel()
	var stream, err = rjc.Append(pb.WithDispatchDefault(callCtx))
	if err != nil {
		t.Fatalf("Append RPC: %v", err)
	}
	if err = stream.Send(&pb.AppendRequest{Journal: j}); err != nil {
		t.Fatalf("Send(journal): %v", err)
	}
	if err = stream.Send(&pb.AppendRequest{Content: []byte("cancelled\n")}); err != nil {
		t.Fatalf("Send(content): %v", err)
	}
	time.Sleep(100 * time.Millisecond) // Let the content reach the broker.
	cancel()
	var resp = new(pb.AppendResponse)
	if err := stream.RecvMsg(resp); err == nil {
		t.Errorf("cancelled Append returned a response %v; want Canceled", resp)
	} else if status.Code(err) != codes.Canceled {
		t.Errorf("cancelled Append: %v; want gRPC code Canceled", err)
	}

	appendOK(t, ctx, rjc, j, "after\n", int64(len(committed)))
	if got := readAvailable(t, ctx, rjc, j, 0); string(got) != committed+"after\n" {
		t.Errorf("journal holds %q, want %q", got, committed+"after\n")
	}
}

// TestBlockingReadersFromZero: blocking Reader and RetryReader from offset 0
// read committed content, then content appended while they wait.
func TestBlockingReadersFromZero(t *testing.T) {
	for _, kind := range []string{"Reader", "RetryReader"} {
		t.Run(kind, func(t *testing.T) {
			var ctx, rjc = setup(t)
			var j = journalName(t, "j")
			apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_SNAPPY))
			var old = "existing content\n"
			appendOK(t, ctx, rjc, j, old, 0)

			var rctx, rcancel = context.WithTimeout(ctx, 20*time.Second)
			defer rcancel()
			var req = pb.ReadRequest{Journal: j, Offset: 0, Block: true}
			var r io.Reader
			if kind == "Reader" {
				r = client.NewReader(rctx, rjc, req)
			} else {
				r = client.NewRetryReader(rctx, rjc, req)
			}

			if got, err := readN(r, len(old)); err != nil || string(got) != old {
				t.Fatalf("first read: got %q, err %v; want %q", got, err, old)
			}
			var added = "appended while the reader waits\n"
			var done = make(chan struct{})
			go func() {
				defer close(done)
				time.Sleep(200 * time.Millisecond) // Let the reader block at the write head.
				if _, err := client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader(added)); err != nil {
					t.Errorf("concurrent append: %v", err)
				}
			}()
			if got, err := readN(r, len(added)); err != nil || string(got) != added {
				t.Errorf("blocking read after concurrent append: got %q, err %v; want %q", got, err, added)
			}
			<-done
		})
	}
}

// TestReadFromWriteHead: offset -1. Non-blocking: OFFSET_NOT_YET_AVAILABLE with
// the request offset moved to the write head. Blocking, with a concurrent
// append: the reader first reports ErrOffsetJump to the new bytes' offset,
// then returns exactly the new bytes.
func TestReadFromWriteHead(t *testing.T) {
	t.Run("NonBlocking", func(t *testing.T) {
		var ctx, rjc = setup(t)
		var j = journalName(t, "j")
		apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))
		var old = "0123456789"
		appendOK(t, ctx, rjc, j, old, 0)

		var r = client.NewReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: -1})
		var got, err = readUntilErr(r)
		if !errors.Is(err, client.ErrOffsetNotYetAvailable) || len(got) != 0 {
			t.Errorf("non-blocking read at -1: got %q, err %v; want no bytes and %v",
				got, err, client.ErrOffsetNotYetAvailable)
		}
		if r.Request.Offset != int64(len(old)) {
			t.Errorf("reader offset after -1 read = %d, want the write head %d", r.Request.Offset, len(old))
		}
		if r.Response.WriteHead != int64(len(old)) {
			t.Errorf("response write_head %d, want %d", r.Response.WriteHead, len(old))
		}
	})

	for _, kind := range []string{"Reader", "RetryReader"} {
		t.Run("Blocking"+kind, func(t *testing.T) {
			var ctx, rjc = setup(t)
			var j = journalName(t, "j")
			apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))
			var old = "old content that a tail must not see\n"
			appendOK(t, ctx, rjc, j, old, 0)

			var rctx, rcancel = context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			var req = pb.ReadRequest{Journal: j, Offset: -1, Block: true}
			var r io.Reader
			var offset func() int64
			if kind == "Reader" {
				var rd = client.NewReader(rctx, rjc, req)
				r, offset = rd, func() int64 { return rd.Request.Offset }
			} else {
				var rr = client.NewRetryReader(rctx, rjc, req)
				r, offset = rr, rr.Offset
			}

			// The first Read blocks until the broker has content at the head.
			// Append (repeatedly, in case the first append races the reader's
			// RPC reaching the broker) until the reader reports the jump.
			type jump struct {
				n   int
				err error
			}
			var jumpCh = make(chan jump, 1)
			go func() {
				var n, err = r.Read(make([]byte, 1024))
				jumpCh <- jump{n, err}
			}()

			var begins = map[int64]string{}
			var jumped jump
		Loop:
			for i := 0; ; i++ {
				select {
				case jumped = <-jumpCh:
					break Loop
				case <-time.After(300 * time.Millisecond):
				}
				if i >= 20 {
					t.Fatalf("blocking read at -1 returned nothing after %d appends", i)
				}
				var content = fmt.Sprintf("new-%02d\n", i)
				var resp, err = client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader(content))
				if err != nil {
					t.Fatalf("append: %v", err)
				}
				begins[resp.Commit.Begin] = content
			}
			if !errors.Is(jumped.err, client.ErrOffsetJump) || jumped.n != 0 {
				t.Fatalf("first read at -1: n=%d err=%v; want n=0 and %v", jumped.n, jumped.err, client.ErrOffsetJump)
			}
			var content, ok = begins[offset()]
			if !ok {
				t.Fatalf("reader jumped to offset %d, want the begin of a concurrent append (%v); old content ends at %d",
					offset(), begins, len(old))
			}
			if got, err := readN(r, len(content)); err != nil || string(got) != content {
				t.Errorf("read after jump: got %q, err %v; want %q", got, err, content)
			}
		})
	}
}

// TestAppendService10k: 10,000 small AsyncAppends through one AppendService
// must be committed byte-exact and in order.
func TestAppendService10k(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "j")
	apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_SNAPPY))

	const count = 10000
	var as = client.NewAppendService(ctx, rjc)
	var want bytes.Buffer
	var ops = make([]*client.AsyncAppend, 0, count)

	for i := 0; i != count; i++ {
		var rec = fmt.Sprintf("rec-%05d-abcdefghi\n", i) // 20 bytes.
		want.WriteString(rec)

		var aa = as.StartAppend(pb.AppendRequest{Journal: j}, nil)
		if _, err := aa.Writer().Write([]byte(rec)); err != nil {
			t.Fatalf("AsyncAppend write %d: %v", i, err)
		}
		if err := aa.Release(); err != nil {
			t.Fatalf("AsyncAppend release %d: %v", i, err)
		}
		ops = append(ops, aa)
	}
	var lastEnd int64
	for i, aa := range ops {
		select {
		case <-aa.Done():
		case <-ctx.Done():
			t.Fatalf("AsyncAppend %d not done before the test deadline (AppendService retries failures: "+
				"see the client's 'append failure (will retry)' log lines)", i)
		}
		if err := aa.Err(); err != nil {
			t.Fatalf("AsyncAppend %d failed: %v", i, err)
		}
		if end := aa.Response().Commit.End; end < lastEnd {
			t.Fatalf("AsyncAppend %d commit end %d < previous %d", i, end, lastEnd)
		} else {
			lastEnd = end
		}
	}
	if lastEnd != int64(want.Len()) {
		t.Errorf("last commit end %d, want %d", lastEnd, want.Len())
	}

	var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: 0})
	var got, err = readUntilErr(rr)
	if !errors.Is(err, client.ErrOffsetNotYetAvailable) {
		t.Errorf("read back ended with %v, want %v", err, client.ErrOffsetNotYetAvailable)
	}
	if !bytes.Equal(got, want.Bytes()) {
		var i = 0
		for i < len(got) && i < want.Len() && got[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("read back %d bytes, want %d; first difference at byte %d: got %q, want %q",
			len(got), want.Len(), i, truncate(got[i:]), truncate(want.Bytes()[i:]))
	}
}

// TestListAllJournals: label selectors (labels, exclusion, name, name:prefix).
func TestListAllJournals(t *testing.T) {
	var ctx, rjc = setup(t)
	var base = journalName(t, "")
	var listID = fmt.Sprintf("%s-%d", runID, setupCount.Load())
	var a1, a2, b1 = base + "a-1", base + "a-2", base + "b-1"
	var specs = []*pb.JournalSpec{
		newSpec(b1, pb.CompressionCodec_NONE, "group", "b", "interop-list", listID),
		newSpec(a2, pb.CompressionCodec_SNAPPY, "group", "a", "interop-list", listID),
		newSpec(a1, pb.CompressionCodec_NONE, "group", "a", "interop-list", listID),
	}
	var applied = apply(t, ctx, rjc, specs...)

	var list = func(sel string) *pb.ListResponse {
		t.Helper()
		var s, err = pb.ParseLabelSelector(sel)
		if err != nil {
			t.Fatalf("ParseLabelSelector(%q): %v", sel, err)
		}
		resp, err := client.ListAllJournals(ctx, rjc, pb.ListRequest{Selector: s})
		if err != nil {
			t.Fatalf("ListAllJournals(%q): %v", sel, err)
		}
		return resp
	}
	var names = func(resp *pb.ListResponse) []pb.Journal {
		var out []pb.Journal
		for _, j := range resp.Journals {
			out = append(out, j.Spec.Name)
		}
		return out
	}
	var expect = func(sel string, want ...pb.Journal) *pb.ListResponse {
		t.Helper()
		var resp = list(sel)
		if got := names(resp); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("List %q = %v, want %v (in name order)", sel, got, want)
		}
		return resp
	}

	var run = "interop-list=" + listID // Only this test's journals carry it.
	var resp = expect(run+",group=a", a1, a2)
	if resp.Header.ProcessId.Suffix == "" {
		t.Errorf("List header has empty process_id: %v", resp.Header)
	}
	if resp.Header.Etcd.Revision < applied.Header.Etcd.Revision {
		t.Errorf("List header revision %d < Apply revision %d", resp.Header.Etcd.Revision, applied.Header.Etcd.Revision)
	}
	var bySpec = map[pb.Journal]*pb.JournalSpec{}
	for _, s := range specs {
		bySpec[s.Name] = s
	}
	for _, j := range resp.Journals {
		if want := bySpec[j.Spec.Name]; !j.Spec.Equal(want) {
			t.Errorf("listed spec differs from applied:\n got %v\nwant %v", &j.Spec, want)
		}
		if j.ModRevision <= 0 || j.CreateRevision <= 0 || j.CreateRevision > j.ModRevision {
			t.Errorf("journal %s: mod_revision %d, create_revision %d", j.Spec.Name, j.ModRevision, j.CreateRevision)
		}
		if j.ModRevision != applied.Header.Etcd.Revision {
			t.Errorf("journal %s: mod_revision %d, want the Apply revision %d", j.Spec.Name, j.ModRevision, applied.Header.Etcd.Revision)
		}
		if len(j.Route.Members) != 1 || j.Route.Primary != 0 || len(j.Route.Endpoints) != 1 {
			t.Errorf("journal %s: route %v, want one member, primary 0, one endpoint", j.Spec.Name, j.Route)
		}
	}
	expect(run+",group in (a, b)", a1, a2, b1)
	expect(run+",group!=a", b1)
	expect(run+",group notin (b)", a1, a2)
	expect(run + ",!group") // All three carry label "group".
	expect(run + ",group=c")
	expect("name="+b1.String(), b1)
	expect("name:prefix="+base.String(), a1, a2, b1)
	expect("name:prefix="+base.String()+"a-", a1, a2)
}

// TestApplyStaleRevision: Apply with a stale expect_mod_revision is reported as
// status ETCD_TRANSACTION_FAILED, which client.ApplyJournals maps to an error.
func TestApplyStaleRevision(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "j")
	var spec = newSpec(j, pb.CompressionCodec_NONE, "version", "1")
	var created = apply(t, ctx, rjc, spec)
	var rev0 = created.Header.Etcd.Revision

	var modRevision = func() int64 {
		t.Helper()
		var resp, err = client.ListAllJournals(ctx, rjc, pb.ListRequest{
			Selector: pb.LabelSelector{Include: pb.MustLabelSet("name", j.String())}})
		if err != nil || len(resp.Journals) != 1 {
			t.Fatalf("listing %s: %v, %v", j, err, resp)
		}
		return resp.Journals[0].ModRevision
	}
	var applyOne = func(change pb.ApplyRequest_Change) (*pb.ApplyResponse, error) {
		return client.ApplyJournals(ctx, rjc, &pb.ApplyRequest{Changes: []pb.ApplyRequest_Change{change}})
	}
	var expectTxnFailed = func(what string, change pb.ApplyRequest_Change) {
		t.Helper()
		var resp, err = applyOne(change)
		if err == nil {
			t.Errorf("%s: ApplyJournals succeeded (%v); want ETCD_TRANSACTION_FAILED", what, resp)
			return
		}
		if resp == nil {
			t.Errorf("%s: got a gRPC error %v; want a response with status ETCD_TRANSACTION_FAILED", what, err)
			return
		}
		if resp.Status != pb.Status_ETCD_TRANSACTION_FAILED || err.Error() != pb.Status_ETCD_TRANSACTION_FAILED.String() {
			t.Errorf("%s: status %v, error %q; want status and error ETCD_TRANSACTION_FAILED", what, resp.Status, err)
		}
	}

	var mr = modRevision()
	if mr != rev0 {
		t.Errorf("mod_revision %d after create, want the Apply header revision %d", mr, rev0)
	}

	// Create again with "must not exist".
	expectTxnFailed("re-create with expect 0", pb.ApplyRequest_Change{Upsert: spec, ExpectModRevision: 0})

	// Update with the current revision succeeds.
	var v2 = newSpec(j, pb.CompressionCodec_NONE, "version", "2")
	var resp, err = applyOne(pb.ApplyRequest_Change{Upsert: v2, ExpectModRevision: mr})
	if err != nil {
		t.Fatalf("update with current mod_revision %d: %v", mr, err)
	}
	if resp.Header.Etcd.Revision <= mr {
		t.Errorf("update revision %d, want > %d", resp.Header.Etcd.Revision, mr)
	}
	var mr2 = modRevision()
	if mr2 != resp.Header.Etcd.Revision {
		t.Errorf("mod_revision after update %d, want %d", mr2, resp.Header.Etcd.Revision)
	}

	// The old revision is now stale, for upserts and deletes alike.
	var v3 = newSpec(j, pb.CompressionCodec_NONE, "version", "3")
	expectTxnFailed("update with stale revision", pb.ApplyRequest_Change{Upsert: v3, ExpectModRevision: mr})
	expectTxnFailed("delete with stale revision", pb.ApplyRequest_Change{Delete: j, ExpectModRevision: mr})
	if got := modRevision(); got != mr2 {
		t.Errorf("a failed transaction changed mod_revision %d -> %d", mr2, got)
	}

	// expect -1 applies regardless.
	if _, err = applyOne(pb.ApplyRequest_Change{Upsert: v3, ExpectModRevision: -1}); err != nil {
		t.Errorf("update with expect -1: %v", err)
	}
	// Delete with the current revision succeeds, and the journal is gone.
	if _, err = applyOne(pb.ApplyRequest_Change{Delete: j, ExpectModRevision: modRevision()}); err != nil {
		t.Fatalf("delete with current revision: %v", err)
	}
	lr, err := client.ListAllJournals(ctx, rjc, pb.ListRequest{
		Selector: pb.LabelSelector{Include: pb.MustLabelSet("name", j.String())}})
	if err != nil || len(lr.Journals) != 0 {
		t.Errorf("after delete, List name=%s: %v, %d journals; want none", j, err, len(lr.Journals))
	}
}

// TestRouteCacheDirectDispatch: with a route cache (gazctl --broker.cache.size>0,
// and every Gazette consumer) the client dials the endpoint the broker
// advertises in its route, and reads with do_not_proxy.
func TestRouteCacheDirectDispatch(t *testing.T) {
	var ep = brokerAddress(t)
	var ctx, cancel = context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	setupCount.Add(1)
	var cfg = mbp.AddressConfig{Address: ep}
	var rjc = pb.NewRoutedJournalClient(cfg.MustJournalClient(ctx), client.NewRouteCache(16, time.Minute))

	var j = journalName(t, "j")
	apply(t, ctx, rjc, newSpec(j, pb.CompressionCodec_NONE))

	var first = appendOK(t, ctx, rjc, j, "via service address\n", 0)
	var rt = first.Header.Route
	if len(rt.Endpoints) != 1 || rt.Endpoints[0].Validate() != nil {
		t.Fatalf("append header route %v must carry one valid endpoint", rt)
	}
	t.Logf("broker advertises endpoint %s", rt.Endpoints[0])

	// This append is dispatched to the advertised endpoint.
	var dctx, dcancel = context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	var second = "via advertised endpoint\n"
	var resp, err = client.Append(dctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader(second))
	if err != nil {
		t.Fatalf("append dispatched to advertised endpoint %s: %v", rt.Endpoints[0], err)
	}
	checkCommit(t, resp, j, second, first.Commit.End)

	// The second append rolled the first fragment, which the broker may already have
	// persisted to its file:// store and dropped locally (more likely on a loaded
	// machine). A do_not_proxy read of it then gets a file:// fragment URL, which the Go
	// client reads only with a file transport installed, as Gazette documents for
	// clients sharing a NAS store (client.InstallFileTransport).
	if root := os.Getenv("COURANT_FILE_ROOT"); root != "" {
		defer client.InstallFileTransport(root)()
	}
	var rr = client.NewRetryReader(dctx, rjc, pb.ReadRequest{Journal: j, Offset: 0, DoNotProxy: true})
	got, err := readUntilErr(rr)
	if !errors.Is(err, client.ErrOffsetNotYetAvailable) || string(got) != "via service address\n"+second {
		t.Errorf("do_not_proxy read via route cache: got %q, err %v", got, err)
	}
}

// TestJournalNotFound: Append and Read of a journal that was never applied
// surface ErrJournalNotFound (Append does not retry it; RetryReader gives up
// after a few attempts).
func TestJournalNotFound(t *testing.T) {
	var ctx, rjc = setup(t)
	var j = journalName(t, "never-applied")

	var resp, err = client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, strings.NewReader("x"))
	if !errors.Is(err, client.ErrJournalNotFound) {
		t.Errorf("append to missing journal: err %v (response %v); want %v", err, resp, client.ErrJournalNotFound)
	} else if resp.Header.ProcessId.Suffix == "" || resp.Header.Route.Primary != -1 {
		t.Errorf("JOURNAL_NOT_FOUND header %v: want process_id set and route primary -1", resp.Header)
	}

	var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: j, Offset: 0, Block: true})
	got, err := readUntilErr(rr)
	if !errors.Is(err, client.ErrJournalNotFound) || len(got) != 0 {
		t.Errorf("read of missing journal: got %q, err %v; want %v", got, err, client.ErrJournalNotFound)
	}
}
