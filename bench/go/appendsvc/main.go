// Command appendsvc drives a broker with Gazette's own Go client: one
// client.AppendService (go.gazette.dev/core v0.103.0, the batching, retrying
// append pipeline that Gazette consumers and publishers use) and one writer
// goroutine per journal that writes newline-framed records as fast as the
// service accepts them. It prints one JSON object on stdout.
//
// Records are counted as acknowledged when the AsyncAppend that carried them
// completes with no error; the rate is records acknowledged inside the
// measurement window (after -warmup, for -duration) divided by the window.
// Journals must exist (courant-bench creates them with courant-loadgen --create).
//
// The AppendService chains appends per journal and grows the tail append
// while the previous one is in flight (its buffers spill to temporary files).
// To keep that buffer bounded, a writer waits for the in-flight append once
// its current one holds -max-batch-bytes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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

func main() {
	var (
		address    = flag.String("broker", "http://127.0.0.1:8080", "broker endpoint")
		prefix     = flag.String("prefix", "bench-go/", "journal name prefix: <prefix>0000, <prefix>0001, ...")
		journals   = flag.Int("journals", 1, "journals to write")
		recordSize = flag.Int("record-size", 100, "bytes per record, including the newline")
		warmup     = flag.Duration("warmup", 2*time.Second, "warm-up before the window")
		duration   = flag.Duration("duration", 5*time.Second, "measurement window")
		maxBatchB  = flag.Int64("max-batch-bytes", 8<<20, "bytes buffered in one append before the writer waits")
	)
	flag.Parse()
	if *recordSize < 2 {
		fail(fmt.Errorf("-record-size must be at least 2"))
	}
	var maxBatch = max(*maxBatchB/int64(*recordSize), 1)
	pb.RegisterGRPCDispatcher("local")

	var ctx, cancel = context.WithTimeout(context.Background(), *warmup+*duration+30*time.Second)
	defer cancel()
	var ep = pb.Endpoint(*address)
	if !strings.Contains(*address, "://") {
		ep = pb.Endpoint("http://" + *address)
	}
	var cfg = mbp.AddressConfig{Address: ep}
	var rjc = pb.NewRoutedJournalClient(cfg.MustJournalClient(ctx), pb.NoopDispatchRouter{})
	var svc = client.NewAppendService(ctx, rjc)

	var record = make([]byte, *recordSize)
	for i := range record {
		record[i] = 'a' + byte(i%26)
	}
	record[len(record)-1] = '\n'

	var start = time.Now()
	var windowStart = start.Add(*warmup)
	var windowEnd = windowStart.Add(*duration)
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup

	for j := 0; j < *journals; j++ {
		var journal = pb.Journal(fmt.Sprintf("%s%04d", *prefix, j))
		var queue = make(chan pending, 1024)
		wg.Add(2)

		// Acknowledger: AsyncAppends of one journal complete in order.
		go func() {
			defer wg.Done()
			for p := range queue {
				<-p.aa.Done()
				var now = time.Now()
				if err := p.aa.Err(); err != nil {
					failed.Add(p.records)
					firstErr.CompareAndSwap(nil, err.Error())
				} else if now.After(windowStart) && !now.After(windowEnd) {
					acked.Add(p.records)
				}
			}
		}()

		// Writer: one record per StartAppend/Release, as a publisher does.
		go func() {
			defer wg.Done()
			defer close(queue)
			var cur, prev *client.AsyncAppend
			var count int64
			for time.Now().Before(windowEnd) && ctx.Err() == nil {
				var aa = svc.StartAppend(pb.AppendRequest{Journal: journal}, nil)
				if aa != cur {
					if cur != nil {
						queue <- pending{aa: cur, records: count}
					}
					prev, cur, count = cur, aa, 0
				}
				_, _ = aa.Writer().Write(record)
				if err := aa.Release(); err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
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

	var window = duration.Seconds()
	var out = map[string]any{
		"client":           "go.gazette.dev/core/broker/client.AppendService v0.103.0",
		"broker":           *address,
		"journals":         *journals,
		"recordSize":       *recordSize,
		"warmupSeconds":    warmup.Seconds(),
		"measuredSeconds":  window,
		"ackedRecords":     acked.Load(),
		"failedRecords":    failed.Load(),
		"recordsPerSecond": float64(acked.Load()) / window,
		"mbPerSecond":      float64(acked.Load()) * float64(*recordSize) / 1e6 / window,
	}
	if e := firstErr.Load(); e != nil {
		out["firstError"] = e
	}
	var enc = json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
	if acked.Load() == 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "appendsvc:", err)
	os.Exit(2)
}
