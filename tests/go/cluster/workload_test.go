package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
)

// The workload: one writer goroutine per journal appends records
//
//	"<journal>\t<seq>\t<crc32 of payload, hex>\t<payload>\n"
//
// through one AppendService (each StartAppend writes one record; the service
// batches records queued behind an in-flight RPC into the next one), with at
// most |window| unresolved records per journal. A record is acknowledged when
// its AsyncAppend resolves with a nil Err(). One blocking RetryReader per
// journal tails it from offset 0 and keeps every byte it observes, with the
// offset it observed it at. The checker then reads every journal from 0 to its
// write head and verifies the guarantees (see check).

type workloadOpts struct {
	window int           // unresolved records per journal (default 16)
	rate   time.Duration // pause between two records of one writer (default 5ms)
}

type workload struct {
	c       *cluster
	opts    workloadOpts
	rjc     pb.RoutedJournalClient
	svcCtx  context.Context
	svcStop context.CancelFunc
	svc     *client.AppendService
	stop    chan struct{}
	wg      sync.WaitGroup
	js      []*jstate
	fo      *failoverTracker

	readCtx    context.Context
	readCancel context.CancelFunc
	readWG     sync.WaitGroup
}

// jstate is the writer's and the reader's record of one journal.
type jstate struct {
	name pb.Journal

	mu      sync.Mutex
	nextSeq int64
	pending []*pendingAppend // Unresolved, in order.
	acked   []ackedAppend
	failed  []pendingAppend // Resolved with an error.
	maxEnd  int64           // Largest acknowledged commit end.
	ackedAt time.Time       // Write time of the latest acknowledged record.
	failErr error           // First append error.
	errs    []string        // Writer-side violations.

	// Reader state.
	rmu      sync.Mutex
	segs     []segment // Contiguous runs of observed bytes.
	rOffset  int64
	rErr     error
	rJumps   []string
	rStopped bool
}

type pendingAppend struct {
	aa        *client.AsyncAppend
	firstSeq  int64
	lastSeq   int64
	size      int64
	lastWrite time.Time // When the last record was written into aa.
}

type ackedAppend struct {
	begin, end        int64
	firstSeq, lastSeq int64
	processID         pb.ProcessSpec_ID
}

type segment struct {
	start int64
	data  []byte
}

func payloadOf(j pb.Journal, seq int64) []byte {
	// ~100 bytes, different for every record, cheap to regenerate.
	var p = make([]byte, 0, 112)
	var x = crc32.ChecksumIEEE([]byte(fmt.Sprintf("%s/%d", j, seq)))
	for len(p) < 96 {
		p = strconv.AppendUint(p, uint64(x), 36)
		x = x*1664525 + 1013904223
	}
	return p
}

func recordOf(j pb.Journal, seq int64) []byte {
	var p = payloadOf(j, seq)
	return []byte(fmt.Sprintf("%s\t%d\t%08x\t%s\n", j, seq, crc32.ChecksumIEEE(p), p))
}

func newWorkload(c *cluster, rjc pb.RoutedJournalClient, names []pb.Journal, opts workloadOpts) *workload {
	if opts.window == 0 {
		opts.window = 16
	}
	if opts.rate == 0 {
		opts.rate = 5 * time.Millisecond
	}
	var w = &workload{c: c, opts: opts, rjc: rjc, stop: make(chan struct{}), fo: &failoverTracker{c: c}}
	w.svcCtx, w.svcStop = context.WithCancel(c.ctx)
	w.svc = client.NewAppendService(w.svcCtx, rjc)
	w.readCtx, w.readCancel = context.WithCancel(c.ctx)
	for _, j := range names {
		w.js = append(w.js, &jstate{name: j})
	}
	return w
}

func (w *workload) start() {
	for _, js := range w.js {
		w.wg.Add(1)
		go w.write(js)
		w.readWG.Add(1)
		go w.read(js)
	}
	w.c.event("workload started: %d journals, window %d, one record per %v per journal",
		len(w.js), w.opts.window, w.opts.rate)
}

func (w *workload) write(js *jstate) {
	defer w.wg.Done()
	var tick = time.NewTicker(w.opts.rate)
	defer tick.Stop()

	for {
		w.reap(js, false)
		js.mu.Lock()
		var outstanding = 0
		for _, p := range js.pending {
			outstanding += int(p.lastSeq - p.firstSeq + 1)
		}
		var head *pendingAppend
		if len(js.pending) != 0 {
			head = js.pending[0]
		}
		js.mu.Unlock()

		if outstanding >= w.opts.window {
			select {
			case <-head.aa.Done():
				continue
			case <-w.stop:
				w.reap(js, true)
				return
			}
		}
		select {
		case <-w.stop:
			w.reap(js, true)
			return
		case <-tick.C:
		}

		js.mu.Lock()
		var seq = js.nextSeq
		js.nextSeq++
		js.mu.Unlock()

		var rec = recordOf(js.name, seq)
		var aa = w.svc.StartAppend(pb.AppendRequest{Journal: js.name}, nil)
		_, _ = aa.Writer().Write(rec)
		if err := aa.Release(); err != nil {
			js.mu.Lock()
			js.errs = append(js.errs, fmt.Sprintf("seq %d: AsyncAppend.Release: %v", seq, err))
			js.mu.Unlock()
			continue
		}
		var now = time.Now()
		js.mu.Lock()
		if n := len(js.pending); n != 0 && js.pending[n-1].aa == aa {
			var p = js.pending[n-1]
			if p.lastSeq != seq-1 {
				js.errs = append(js.errs, fmt.Sprintf("seq %d joined an AsyncAppend ending at seq %d", seq, p.lastSeq))
			}
			p.lastSeq, p.size, p.lastWrite = seq, p.size+int64(len(rec)), now
		} else {
			js.pending = append(js.pending, &pendingAppend{aa: aa, firstSeq: seq, lastSeq: seq,
				size: int64(len(rec)), lastWrite: now})
		}
		js.mu.Unlock()
	}
}

// reap resolves finished AsyncAppends in order; with |all| it waits for every one.
func (w *workload) reap(js *jstate, all bool) {
	for {
		js.mu.Lock()
		if len(js.pending) == 0 {
			js.mu.Unlock()
			return
		}
		var p = js.pending[0]
		js.mu.Unlock()

		if all {
			<-p.aa.Done()
		} else {
			select {
			case <-p.aa.Done():
			default:
				return
			}
		}
		var err = p.aa.Err()
		var now = time.Now()

		js.mu.Lock()
		js.pending = js.pending[1:]
		if err != nil {
			js.failed = append(js.failed, *p)
			if js.failErr == nil {
				js.failErr = err
				w.c.event("%s: append of seqs %d-%d failed: %v", js.name, p.firstSeq, p.lastSeq, err)
			}
		} else {
			if p.lastWrite.After(js.ackedAt) {
				js.ackedAt = p.lastWrite
			}
			var resp = p.aa.Response()
			if resp.Commit == nil {
				js.errs = append(js.errs, fmt.Sprintf("seqs %d-%d: OK response without commit", p.firstSeq, p.lastSeq))
			} else {
				var a = ackedAppend{begin: resp.Commit.Begin, end: resp.Commit.End,
					firstSeq: p.firstSeq, lastSeq: p.lastSeq, processID: resp.Header.ProcessId}
				if a.end-a.begin != p.size {
					js.errs = append(js.errs, fmt.Sprintf("seqs %d-%d: commit [%d,%d) spans %d bytes, but %d were appended",
						p.firstSeq, p.lastSeq, a.begin, a.end, a.end-a.begin, p.size))
				}
				if n := len(js.acked); n != 0 && a.begin < js.acked[n-1].end {
					js.errs = append(js.errs, fmt.Sprintf("seqs %d-%d: commit [%d,%d) begins before the previous commit's end %d",
						p.firstSeq, p.lastSeq, a.begin, a.end, js.acked[n-1].end))
				}
				js.acked = append(js.acked, a)
				if a.end > js.maxEnd {
					js.maxEnd = a.end
				}
			}
		}
		js.mu.Unlock()
		if err == nil {
			w.fo.onAck(js.name, p.lastWrite, now)
		}
	}
}

func (w *workload) read(js *jstate) {
	defer w.readWG.Done()
	var rr = client.NewRetryReader(w.readCtx, w.rjc, pb.ReadRequest{Journal: js.name, Offset: 0, Block: true})
	var buf = make([]byte, 32*1024)
	js.rmu.Lock()
	js.segs = []segment{{start: 0}}
	js.rmu.Unlock()

	for {
		var n, err = rr.Read(buf)
		js.rmu.Lock()
		if n != 0 {
			var s = &js.segs[len(js.segs)-1]
			s.data = append(s.data, buf[:n]...)
		}
		if errors.Is(err, client.ErrOffsetJump) {
			var s = js.segs[len(js.segs)-1]
			js.rJumps = append(js.rJumps, fmt.Sprintf("offset jump from %d to %d", s.start+int64(len(s.data)), rr.Offset()))
			js.segs = append(js.segs, segment{start: rr.Offset()})
			err = nil
		}
		js.rOffset = rr.Offset()
		if err != nil {
			if w.readCtx.Err() == nil {
				js.rErr = err
			}
			js.rStopped = true
			js.rmu.Unlock()
			return
		}
		js.rmu.Unlock()
	}
}

// ackedRecords counts the records acknowledged so far.
func (w *workload) ackedRecords() int {
	var n = 0
	for _, js := range w.js {
		js.mu.Lock()
		for _, a := range js.acked {
			n += int(a.lastSeq - a.firstSeq + 1)
		}
		js.mu.Unlock()
	}
	return n
}

// waitAcked waits until every journal acknowledged a record written after |t0|.
func (w *workload) waitAcked(t0 time.Time, timeout time.Duration) error {
	var deadline = time.Now().Add(timeout)
	for {
		var waiting []string
		for _, js := range w.js {
			js.mu.Lock()
			if !js.ackedAt.After(t0) {
				waiting = append(waiting, string(js.name[len(js.name)-3:]))
				if js.failErr != nil {
					waiting[len(waiting)-1] += fmt.Sprintf(" (append failed: %v)", js.failErr)
				}
			}
			js.mu.Unlock()
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) || w.c.ctx.Err() != nil {
			return fmt.Errorf("journals without an acknowledged append in %v: %v", timeout, waiting)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHealthy waits until every journal is fully replicated (|r| serving
// members and a primary) and has then acknowledged an append: only an append
// proves that a restarted member was brought in sync (a member listed in a
// route may still be catching up, and is no replica of the data yet).
func (w *workload) waitHealthy(names []pb.Journal, r int, timeout time.Duration) error {
	var start = time.Now()
	if _, err := w.c.waitRoutes(names, timeout, "full replication", w.c.fullyReplicated(r)); err != nil {
		return err
	}
	var t0 = time.Now()
	if err := w.waitAcked(t0, timeout-time.Since(start)); err != nil {
		return err
	}
	w.c.event("healthy: %d journals fully replicated and appending (%v)", len(names), time.Since(start))
	return nil
}

// finish stops the writers, waits (at most |drain|) for every outstanding
// append to resolve (cancelling the AppendService after that), then waits (at
// most |tail|) for the tailing readers to reach the write heads.
func (w *workload) finish(drain, tail time.Duration) {
	var t = w.c.t
	close(w.stop)
	var done = make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drain):
		t.Errorf("appends still unresolved %v after the writers stopped; cancelling the AppendService", drain)
		w.svcStop()
		<-done
	}
	w.c.event("writers stopped; all appends resolved")

	var deadline = time.Now().Add(tail)
	for _, js := range w.js {
		for {
			js.mu.Lock()
			var head = js.maxEnd
			js.mu.Unlock()
			js.rmu.Lock()
			var off, stopped = js.rOffset, js.rStopped
			js.rmu.Unlock()
			if off >= head || stopped || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	w.readCancel()
	w.readWG.Wait()
	w.svcStop()
}

type checkResult struct {
	records, acked, unacked, dups, unackedPresent int
	bytes                                         int64
}

// check verifies every journal (see the package comment of TestNoAckedAppendLost):
//   - the final content, read from 0 to the write head, consists of whole,
//     well-formed records whose crc matches (no torn or corrupted bytes);
//   - every acknowledged append's bytes are in the final content at exactly the
//     commit offsets the broker acknowledged (so nothing acknowledged is lost,
//     and no two different contents were acknowledged at one offset);
//   - first occurrences of the records' seqs are in increasing order, and no
//     acknowledged seq is missing;
//   - everything a tailing reader observed is in the final content at exactly
//     the offset where it observed it.
//
// Duplicates (records appended again by AppendService's retries of an append
// whose outcome it didn't learn) are counted and logged, not failed.
func (w *workload) check() checkResult {
	var t = w.c.t
	var total checkResult
	var heads = w.writeHeads()
	var dupJournals []string
	var deadline = time.Now().Add(3 * time.Minute)

	for _, js := range w.js {
		// Each journal's read gets at least 10 s, and all of them 3 min.
		var timeout = time.Until(deadline)
		if timeout < 10*time.Second {
			timeout = 10 * time.Second
		}
		var res = w.checkJournal(js, heads[js.name], timeout)
		total.records += res.records
		total.acked += res.acked
		total.unacked += res.unacked
		total.dups += res.dups
		if res.dups != 0 {
			dupJournals = append(dupJournals, fmt.Sprintf("%s:%d", js.name[len(js.name)-3:], res.dups))
		}
		total.unackedPresent += res.unackedPresent
		total.bytes += res.bytes
	}
	if len(dupJournals) != 0 {
		t.Logf("duplicate records (appends retried by AppendService after an unknown outcome), per journal: %v", dupJournals)
	}
	t.Logf("RESULT journals=%d records=%d acked=%d unacked=%d (of which present %d) duplicates=%d bytes=%d",
		len(w.js), total.records, total.acked, total.unacked, total.unackedPresent, total.dups, total.bytes)
	return total
}

// writeHeads returns per journal the largest write head any serving broker
// reports (at least the largest acknowledged commit end).
func (w *workload) writeHeads() map[pb.Journal]int64 {
	var out = make(map[pb.Journal]int64)
	for _, js := range w.js {
		js.mu.Lock()
		out[js.name] = js.maxEnd
		js.mu.Unlock()
		for _, b := range w.c.brokers {
			if !b.serving() {
				continue
			}
			var ctx, cancel = context.WithTimeout(w.c.ctx, 10*time.Second)
			var h, err = writeHead(ctx, b.direct, js.name)
			cancel()
			if err != nil {
				w.c.event("write head of %s at %s: %v", js.name, b, err)
			} else if h > out[js.name] {
				w.c.event("write head of %s at %s is %d, beyond the last acknowledged end %d", js.name, b, h, out[js.name])
				out[js.name] = h
			}
		}
	}
	return out
}

// readAll reads [0, head) of a journal through the routed client.
func (w *workload) readAll(j pb.Journal, head int64, timeout time.Duration) ([]byte, error) {
	if head == 0 {
		return nil, nil
	}
	var ctx, cancel = context.WithTimeout(w.c.ctx, timeout)
	defer cancel()
	var rr = client.NewRetryReader(ctx, w.rjc, pb.ReadRequest{Journal: j, Offset: 0, EndOffset: head, Block: true})
	var out = make([]byte, 0, head)
	var buf = make([]byte, 64*1024)
	for int64(len(out)) < head {
		var n, err = rr.Read(buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, client.ErrOffsetJump) {
			return out, fmt.Errorf("offset jump from %d to %d: bytes are missing", len(out), rr.Offset())
		} else if err == io.EOF && int64(len(out)) >= head {
			break
		} else if err != nil {
			return out, fmt.Errorf("after %d of %d bytes: %w", len(out), head, err)
		}
	}
	if int64(len(out)) != head {
		return out, fmt.Errorf("read %d bytes, want %d", len(out), head)
	}
	return out, nil
}

func (w *workload) checkJournal(js *jstate, head int64, timeout time.Duration) checkResult {
	var t = w.c.t
	var res checkResult
	js.mu.Lock()
	defer js.mu.Unlock()
	js.rmu.Lock()
	defer js.rmu.Unlock()

	for _, e := range js.errs {
		t.Errorf("%s: %s", js.name, e)
	}
	res.records = int(js.nextSeq)
	for _, a := range js.acked {
		res.acked += int(a.lastSeq - a.firstSeq + 1)
	}
	var unacked = map[int64]bool{}
	for _, f := range js.failed {
		for s := f.firstSeq; s <= f.lastSeq; s++ {
			unacked[s] = true
		}
	}
	res.unacked = len(unacked)
	if len(js.failed) != 0 {
		t.Errorf("%s: %d records were not acknowledged: first %d-%d: %v", js.name, res.unacked,
			js.failed[0].firstSeq, js.failed[0].lastSeq, js.failed[0].aa.Err())
	}

	var content, err = w.readAll(js.name, head, timeout)
	if err != nil {
		t.Errorf("%s: reading [0,%d): %v", js.name, head, err)
		return res
	}
	res.bytes = int64(len(content))

	// Whole, well-formed records.
	var firstAt = map[int64]int64{} // seq -> offset of its first occurrence.
	var lastSeq int64 = -1
	var badLines, orderErrs int
	for off := int64(0); off < int64(len(content)); {
		var nl = bytes.IndexByte(content[off:], '\n')
		if nl < 0 {
			t.Errorf("%s: torn record at offset %d (no newline before the write head %d): %q",
				js.name, off, head, trunc(content[off:]))
			break
		}
		var line = content[off : off+int64(nl)]
		var seq, perr = parseRecord(js.name, line)
		if perr != nil {
			if badLines++; badLines <= 5 {
				t.Errorf("%s: bad record at offset %d: %v: %q", js.name, off, perr, trunc(line))
			}
		} else if _, dup := firstAt[seq]; dup {
			res.dups++
		} else {
			firstAt[seq] = off
			if seq <= lastSeq {
				if orderErrs++; orderErrs <= 5 {
					t.Errorf("%s: seq %d first appears at offset %d, after seq %d", js.name, seq, off, lastSeq)
				}
			}
			if seq > lastSeq {
				lastSeq = seq
			}
			if unacked[seq] {
				res.unackedPresent++
			}
		}
		off += int64(nl) + 1
	}
	if badLines > 5 {
		t.Errorf("%s: %d bad records in all", js.name, badLines)
	}

	// Every acknowledged append is at exactly its acknowledged offsets.
	var missing, moved int
	for _, a := range js.acked {
		var want []byte
		for s := a.firstSeq; s <= a.lastSeq; s++ {
			want = append(want, recordOf(js.name, s)...)
			if _, ok := firstAt[s]; !ok {
				if missing++; missing <= 5 {
					t.Errorf("%s: acknowledged seq %d (commit [%d,%d) by %v) is missing", js.name, s, a.begin, a.end, a.processID)
				}
			}
		}
		if a.end > int64(len(content)) || !bytes.Equal(content[a.begin:a.end], want) {
			if moved++; moved <= 5 {
				var got []byte
				if a.begin < int64(len(content)) {
					got = content[a.begin:min(a.end, int64(len(content)))]
				}
				t.Errorf("%s: acknowledged seqs %d-%d, commit [%d,%d) by %v, differ from the journal's bytes there: %q",
					js.name, a.firstSeq, a.lastSeq, a.begin, a.end, a.processID, trunc(got))
			}
		}
	}
	if missing > 5 || moved > 5 {
		t.Errorf("%s: %d acknowledged records missing, %d acknowledged appends not at their offsets", js.name, missing, moved)
	}

	// Tailing readers saw only bytes that stayed where they saw them.
	for _, j := range js.rJumps {
		t.Errorf("%s: tailing reader: %s", js.name, j)
	}
	if js.rErr != nil {
		t.Errorf("%s: tailing reader failed at offset %d: %v", js.name, js.rOffset, js.rErr)
	}
	for _, s := range js.segs {
		var end = s.start + int64(len(s.data))
		if end > int64(len(content)) {
			t.Errorf("%s: tailing reader observed [%d,%d), beyond the final write head %d", js.name, s.start, end, len(content))
			continue
		}
		if !bytes.Equal(content[s.start:end], s.data) {
			var i = 0
			for i < len(s.data) && s.data[i] == content[s.start+int64(i)] {
				i++
			}
			t.Errorf("%s: tailing reader observed bytes at offset %d that differ from the final content: observed %q, final %q",
				js.name, s.start+int64(i), trunc(s.data[i:]), trunc(content[s.start+int64(i):end]))
		}
	}
	return res
}

func parseRecord(j pb.Journal, line []byte) (int64, error) {
	var parts = bytes.SplitN(line, []byte("\t"), 4)
	if len(parts) != 4 {
		return 0, errors.New("not 4 tab-separated fields")
	}
	if string(parts[0]) != string(j) {
		return 0, fmt.Errorf("record of journal %q", parts[0])
	}
	var seq, err = strconv.ParseInt(string(parts[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("seq: %v", err)
	}
	sum, err := strconv.ParseUint(string(parts[2]), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("crc: %v", err)
	}
	if uint32(sum) != crc32.ChecksumIEEE(parts[3]) {
		return 0, errors.New("crc mismatch")
	}
	return seq, nil
}

func trunc(b []byte) string {
	if len(b) > 160 {
		return string(b[:160]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Failover: the time from a fault to the first acknowledged append, started
// after the fault, to a journal the faulted broker was primary of.

type failoverTracker struct {
	c      *cluster
	label  string // Prefix of the log lines ("FAILOVER" unless set).
	mu     sync.Mutex
	open   []*failoverEvent
	closed []time.Duration
}

type failoverEvent struct {
	what     string
	at       time.Time
	journals map[pb.Journal]bool
}

func (f *failoverTracker) begin(what string, at time.Time, journals []pb.Journal) {
	var ev = &failoverEvent{what: what, at: at, journals: map[pb.Journal]bool{}}
	for _, j := range journals {
		ev.journals[j] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open = append(f.open, ev)
}

func (f *failoverTracker) onAck(j pb.Journal, written, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < len(f.open); i++ {
		var ev = f.open[i]
		if ev.journals[j] && written.After(ev.at) {
			var d = now.Sub(ev.at)
			f.closed = append(f.closed, d)
			f.open = append(f.open[:i], f.open[i+1:]...)
			i--
			f.c.t.Logf("%s ms: %d (%s, %d journals; first acknowledged append on %s)",
				f.name(), d.Milliseconds(), ev.what, len(ev.journals), j[len(j)-3:])
			f.c.event("failover %s: %v", ev.what, d)
		}
	}
}

func (f *failoverTracker) summary() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.open {
		f.c.t.Errorf("no acknowledged append on the %d journals of %s after it", len(ev.journals), ev.what)
	}
	var sorted = append([]time.Duration(nil), f.closed...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	f.c.t.Logf("%s ms: %s (impl %s)", f.name(), durationsSummary(sorted), implName)
}

func (f *failoverTracker) name() string {
	if f.label == "" {
		return "FAILOVER"
	}
	return f.label
}
