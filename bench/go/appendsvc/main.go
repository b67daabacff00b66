// Command appendsvc drives a broker with Gazette's own Go client
// (go.gazette.dev/core v0.103.0) and prints one JSON object on stdout.
//
// Modes (-mode):
//   - stream: one client.AppendService (the batching, retrying append pipeline
//     that Gazette consumers and publishers use) and one writer goroutine per
//     journal that writes newline-framed records as fast as the service accepts
//     them. No latency.
//   - record: one AppendService, -writers-per-journal writer goroutines per
//     journal, one record per StartAppend/Release. Closed loop (-rate 0): each
//     writer waits for its record's AsyncAppend to be done before the next, so
//     journals × writers records are outstanding; latency from StartAppend to
//     Done. Open loop (-rate R records/s over all writers): each writer issues
//     its records at fixed intended times and never waits for them; latency
//     from the intended time (no coordinated omission).
//   - single: one writer, one journal, client.Append (a plain Append RPC through
//     the same RoutedJournalClient) of one record at a time; latency per append.
//
// Records are counted as acknowledged when the AsyncAppend (or Append) that
// carried them completes with no error; the rate is records acknowledged inside
// the measurement window (after -warmup, for -duration) divided by the window,
// and latency percentiles are over the same records. appendsPerSecond counts
// distinct AsyncAppends (one Append RPC each) done in the window.
// Journals must exist (courant-bench creates them with courant-loadgen --create).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	mbp "go.gazette.dev/core/mainboilerplate"
)

type pending struct {
	aa      *client.AsyncAppend
	records int64
}

// window is the measurement window and what was acknowledged inside it.
type window struct {
	start, end time.Time
	acked      atomic.Int64
	appends    atomic.Int64
	failed     atomic.Int64
	unacked    atomic.Int64
	firstErr   atomic.Value
}

func (w *window) in(t time.Time) bool { return t.After(w.start) && !t.After(w.end) }

func (w *window) fail(err error, records int64) {
	w.failed.Add(records)
	w.firstErr.CompareAndSwap(nil, err.Error())
}

func main() {
	var (
		address    = flag.String("broker", "http://127.0.0.1:8080", "broker endpoint")
		prefix     = flag.String("prefix", "bench-go/", "journal name prefix: <prefix>0000, <prefix>0001, ...")
		journals   = flag.Int("journals", 1, "journals to write")
		recordSize = flag.Int("record-size", 100, "bytes per record, including the newline")
		warmup     = flag.Duration("warmup", 2*time.Second, "warm-up before the window")
		duration   = flag.Duration("duration", 5*time.Second, "measurement window")
		maxBatchB  = flag.Int64("max-batch-bytes", 8<<20, "stream mode: bytes buffered in one append before the writer waits")
		mode       = flag.String("mode", "stream", "stream, record or single (see the package comment)")
		writers    = flag.Int("writers-per-journal", 1, "record mode: writer goroutines per journal")
		rate       = flag.Float64("rate", 0, "record mode: open loop at this many records/s over all writers (0: closed loop)")
	)
	flag.Parse()
	if *recordSize < 2 {
		fail(fmt.Errorf("-record-size must be at least 2"))
	}
	if *writers < 1 || *journals < 1 {
		fail(fmt.Errorf("-journals and -writers-per-journal must be at least 1"))
	}
	pb.RegisterGRPCDispatcher("local")

	var ctx, cancel = context.WithTimeout(context.Background(), *warmup+*duration+30*time.Second)
	defer cancel()
	var ep = pb.Endpoint(*address)
	if !strings.Contains(*address, "://") {
		ep = pb.Endpoint("http://" + *address)
	}
	var cfg = mbp.AddressConfig{Address: ep}
	var rjc = pb.NewRoutedJournalClient(cfg.MustJournalClient(ctx), pb.NoopDispatchRouter{})

	var record = make([]byte, *recordSize)
	for i := range record {
		record[i] = 'a' + byte(i%26)
	}
	record[len(record)-1] = '\n'

	var start = time.Now()
	var w = &window{start: start.Add(*warmup)}
	w.end = w.start.Add(*duration)
	var hist *histogram
	var out = map[string]any{}

	switch *mode {
	case "stream":
		stream(ctx, client.NewAppendService(ctx, rjc), *prefix, *journals, record, *maxBatchB, w)
		out["client"] = "go.gazette.dev/core/broker/client.AppendService v0.103.0"
	case "record":
		hist = perRecord(ctx, client.NewAppendService(ctx, rjc), *prefix, *journals, *writers, *rate, record, w)
		out["client"] = "go.gazette.dev/core/broker/client.AppendService v0.103.0"
		out["writersPerJournal"] = *writers
		if *rate > 0 {
			out["targetRate"] = *rate
		}
	case "single":
		if *journals != 1 {
			fail(fmt.Errorf("-mode single writes one journal"))
		}
		hist = single(ctx, rjc, *prefix, record, w)
		out["client"] = "go.gazette.dev/core/broker/client.Append v0.103.0"
	default:
		fail(fmt.Errorf("unknown -mode %q", *mode))
	}

	var secs = duration.Seconds()
	out["mode"] = *mode
	out["broker"] = *address
	out["journals"] = *journals
	out["recordSize"] = *recordSize
	out["warmupSeconds"] = warmup.Seconds()
	out["measuredSeconds"] = secs
	out["ackedRecords"] = w.acked.Load()
	out["failedRecords"] = w.failed.Load()
	out["unackedRecords"] = w.unacked.Load()
	out["recordsPerSecond"] = float64(w.acked.Load()) / secs
	out["mbPerSecond"] = float64(w.acked.Load()) * float64(*recordSize) / 1e6 / secs
	if *mode != "stream" {
		out["appendsPerSecond"] = float64(w.appends.Load()) / secs
	}
	if hist != nil && hist.count > 0 {
		out["latencyMs"] = map[string]any{
			"count": hist.count,
			"p50":   hist.quantile(0.5),
			"p99":   hist.quantile(0.99),
			"p999":  hist.quantile(0.999),
			"max":   float64(hist.max) / 1e6,
		}
	}
	if e := w.firstErr.Load(); e != nil {
		out["firstError"] = e
	}
	var enc = json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
	if w.acked.Load() == 0 {
		os.Exit(1)
	}
}

// stream: one writer per journal writing as fast as the service accepts records.
//
// The AppendService chains appends per journal and grows the tail append while
// the previous one is in flight (its buffers spill to temporary files). To keep
// that buffer bounded, a writer waits for the in-flight append once its current
// one holds -max-batch-bytes.
func stream(ctx context.Context, svc *client.AppendService, prefix string, journals int,
	record []byte, maxBatchB int64, w *window) {
	var maxBatch = max(maxBatchB/int64(len(record)), 1)
	var wg sync.WaitGroup
	for j := 0; j < journals; j++ {
		var journal = pb.Journal(fmt.Sprintf("%s%04d", prefix, j))
		var queue = make(chan pending, 1024)
		wg.Add(2)

		// Acknowledger: AsyncAppends of one journal complete in order.
		go func() {
			defer wg.Done()
			for p := range queue {
				<-p.aa.Done()
				var now = time.Now()
				if err := p.aa.Err(); err != nil {
					w.fail(err, p.records)
				} else if w.in(now) {
					w.acked.Add(p.records)
				}
			}
		}()

		// Writer: one record per StartAppend/Release, as a publisher does.
		go func() {
			defer wg.Done()
			defer close(queue)
			var cur, prev *client.AsyncAppend
			var count int64
			for time.Now().Before(w.end) && ctx.Err() == nil {
				var aa = svc.StartAppend(pb.AppendRequest{Journal: journal}, nil)
				if aa != cur {
					if cur != nil {
						queue <- pending{aa: cur, records: count}
					}
					prev, cur, count = cur, aa, 0
				}
				_, _ = aa.Writer().Write(record)
				if err := aa.Release(); err != nil {
					w.firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				count++
				if count >= maxBatch && prev != nil {
					<-prev.Done()
				}
			}
			if cur != nil {
				queue <- pending{aa: cur, records: count}
			}
		}()
	}
	wg.Wait()
}

// issued is one record of an open-loop writer: its AsyncAppend and intended time.
type issued struct {
	aa       *client.AsyncAppend
	intended time.Time
	first    bool // the first record of this AsyncAppend seen by any writer
}

// perRecord: writers per journal, one record per StartAppend/Release; closed
// loop (rate 0) or open loop at rate records/s over all writers. Returns the
// latency histogram of the records acknowledged in the window.
func perRecord(ctx context.Context, svc *client.AppendService, prefix string, journals, writers int,
	rate float64, record []byte, w *window) *histogram {
	var total = journals * writers
	var hists = make([]*histogram, total)
	var wg sync.WaitGroup
	for j := 0; j < journals; j++ {
		var journal = pb.Journal(fmt.Sprintf("%s%04d", prefix, j))
		// The newest AsyncAppend a writer of this journal saw: a different one
		// is a new Append RPC (the service sends one AsyncAppend per RPC).
		var last atomic.Pointer[client.AsyncAppend]
		var start = func() (*client.AsyncAppend, bool, error) {
			var aa = svc.StartAppend(pb.AppendRequest{Journal: journal}, nil)
			_, _ = aa.Writer().Write(record)
			var first = last.Swap(aa) != aa
			return aa, first, aa.Release()
		}
		for k := 0; k < writers; k++ {
			var idx = j*writers + k
			var h = new(histogram)
			hists[idx] = h
			var done = func(aa *client.AsyncAppend, first bool, from time.Time) {
				<-aa.Done()
				var now = time.Now()
				if err := aa.Err(); err != nil {
					w.fail(err, 1)
				} else if w.in(now) {
					w.acked.Add(1)
					if first {
						w.appends.Add(1)
					}
					h.record(now.Sub(from))
				} else if !from.After(w.end) && now.After(w.end) {
					w.unacked.Add(1)
				}
			}
			if rate <= 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(w.end) && ctx.Err() == nil {
						var t0 = time.Now()
						var aa, first, err = start()
						if err != nil {
							w.fail(err, 1)
							return
						}
						done(aa, first, t0)
					}
				}()
				continue
			}
			// Open loop: this writer's records at phase + i*period, never waiting
			// for one to be done before the next is due.
			var period = time.Duration(float64(time.Second) * float64(total) / rate)
			var phase = time.Duration(int64(period) * int64(idx) / int64(total))
			var queue = make(chan issued, 1<<16)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for r := range queue {
					done(r.aa, r.first, r.intended)
				}
			}()
			go func() {
				defer wg.Done()
				defer close(queue)
				var base = time.Now().Add(phase)
				for i := int64(0); ctx.Err() == nil; i++ {
					var at = base.Add(time.Duration(i) * period)
					if at.After(w.end) {
						return
					}
					if d := time.Until(at); d > 0 {
						time.Sleep(d)
					}
					var aa, first, err = start()
					if err != nil {
						w.fail(err, 1)
						return
					}
					queue <- issued{aa: aa, intended: at, first: first}
				}
			}()
		}
	}
	wg.Wait()
	var h = new(histogram)
	for _, x := range hists {
		h.merge(x)
	}
	return h
}

// single: one writer, client.Append of one record at a time.
func single(ctx context.Context, rjc pb.RoutedJournalClient, prefix string, record []byte,
	w *window) *histogram {
	var journal = pb.Journal(fmt.Sprintf("%s%04d", prefix, 0))
	var h = new(histogram)
	for time.Now().Before(w.end) && ctx.Err() == nil {
		var t0 = time.Now()
		var _, err = client.Append(ctx, rjc, pb.AppendRequest{Journal: journal}, bytes.NewReader(record))
		var now = time.Now()
		if err != nil {
			w.fail(err, 1)
			return h
		} else if w.in(now) {
			w.acked.Add(1)
			w.appends.Add(1)
			h.record(now.Sub(t0))
		}
	}
	return h
}

// histogram of latencies, log-linear: values below 2^subBits ns exactly, above
// that 2^subBits buckets per power of two (under 1% error).
type histogram struct {
	counts [64 << subBits]int64
	count  int64
	max    int64
}

const subBits = 7

func bucket(ns int64) int {
	if ns < 1<<subBits {
		return int(max(ns, 0))
	}
	var shift = bits.Len64(uint64(ns)) - subBits - 1
	return (shift+1)<<subBits + int(ns>>shift) - 1<<subBits
}

// lowest value of bucket b, and its width.
func bucketRange(b int) (int64, int64) {
	if b < 1<<subBits {
		return int64(b), 1
	}
	var shift = b>>subBits - 1
	var sub = int64(b&(1<<subBits-1)) + 1<<subBits
	return sub << shift, 1 << shift
}

func (h *histogram) record(d time.Duration) {
	var ns = int64(d)
	h.counts[bucket(ns)]++
	h.count++
	h.max = max(h.max, ns)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.count += o.count
	h.max = max(h.max, o.max)
}

// quantile q in milliseconds: the middle of the bucket holding the ceil(q*n)-th value.
func (h *histogram) quantile(q float64) float64 {
	var rank = int64(math.Ceil(q * float64(h.count)))
	rank = min(max(rank, 1), h.count)
	if rank == h.count {
		return float64(h.max) / 1e6
	}
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			var lo, width = bucketRange(b)
			return math.Min(float64(lo)+float64(width-1)/2, float64(h.max)) / 1e6
		}
	}
	return float64(h.max) / 1e6
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "appendsvc:", err)
	os.Exit(2)
}
