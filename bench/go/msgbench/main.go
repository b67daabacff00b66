// Command msgbench measures Gazette's own Go message layer (go.gazette.dev/core v0.103.0)
// against a broker and prints one JSON object on stdout.
//
// Modes (-mode):
//   - create: applies -journals journals <prefix>part-NNN labelled
//     `content-type: application/x-ndjson` (replication 1, 512 MiB fragments, no stores)
//     and waits until each has a primary.
//   - publish: one message.Publisher over one client.AppendService publishes -messages
//     committed (OUTSIDE_TXN) JSON messages of -size bytes (newline included), round-robin
//     over the journals, as fast as PublishCommitted returns, then waits until every append
//     is acknowledged.
//   - read: per journal in turn, a read-committed reader (message.ReadCommittedIter over a
//     client.RetryReader, as a consumer shard reads its sources) from offset 0 to the write
//     head the journal had when the read started; counts the messages delivered.
//
// Before the measured phase it prints {"event":"start"} (the harness samples the broker's
// CPU there); the result line has messages, seconds and cpuSeconds (this process's user +
// system CPU over the phase, from getrusage). Dialing and journal listing come before the
// start line.
//
// Lives on: main's goroutine; the AppendService appends in its own goroutines.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	mbp "go.gazette.dev/core/mainboilerplate"
	"go.gazette.dev/core/message"
)

// Msg is the benchmark's message: the polyglot shape (tests/go/message/README.md) with a
// padding field that brings each framed line to -size bytes.
type Msg struct {
	UUID  message.UUID `json:"UUID"`
	ID    string       `json:"ID,omitempty"`
	Value int64        `json:"Value,omitempty"`
	Pad   string       `json:"Pad,omitempty"`
}

func (m *Msg) GetUUID() message.UUID                         { return m.UUID }
func (m *Msg) SetUUID(uuid message.UUID)                     { m.UUID = uuid }
func (m *Msg) NewAcknowledgement(pb.Journal) message.Message { return new(Msg) }

func newMsg(*pb.JournalSpec) (message.Message, error) { return new(Msg), nil }

// fixedLen is the framed length of a Msg with a 36-character UUID, a 10-character ID, a
// Value and an empty Pad: {"UUID":"<36>","ID":"<10>","Value":<digits>,"Pad":""}\n.
func fixedLen(value int64) int {
	return len(`{"UUID":"`) + 36 + len(`","ID":"`) + 10 + len(`","Value":`) +
		len(strconv.FormatInt(value, 10)) + len(`,"Pad":""}`) + 1
}

func main() {
	var (
		address  = flag.String("broker", "http://127.0.0.1:8080", "broker endpoint")
		prefix   = flag.String("prefix", "msgbench/", "journal name prefix: <prefix>part-000, ...")
		journals = flag.Int("journals", 4, "journals")
		messages = flag.Int("messages", 100000, "publish mode: messages to publish")
		size     = flag.Int("size", 100, "publish mode: framed bytes per message, newline included")
		mode     = flag.String("mode", "publish", "create, publish or read")
		timeout  = flag.Duration("timeout", 5*time.Minute, "bound on the whole run")
	)
	flag.Parse()
	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *address, *prefix, *journals, *messages, *size, *mode); err != nil {
		fmt.Fprintf(os.Stderr, "msgbench: %v\n", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, address, prefix string, n, messages, size int, mode string) error {
	if n < 1 || messages < 1 || messages >= 1e9 {
		return fmt.Errorf("-journals must be ≥ 1 and -messages in [1, 1e9), got %d and %d", n, messages)
	}
	if fixedLen(int64(messages)) > size {
		return fmt.Errorf("-size %d is below the smallest message (%d bytes)", size, fixedLen(int64(messages)))
	}
	var names []pb.Journal
	for i := 0; i < n; i++ {
		names = append(names, pb.Journal(fmt.Sprintf("%spart-%03d", prefix, i)))
	}
	pb.RegisterGRPCDispatcher("local")
	var cfg = mbp.AddressConfig{Address: pb.Endpoint(address)}
	var rjc = pb.NewRoutedJournalClient(cfg.MustJournalClient(ctx), pb.NoopDispatchRouter{})
	switch mode {
	case "create":
		return create(ctx, rjc, names)
	case "publish":
		return publish(ctx, rjc, names, messages, size)
	case "read":
		return read(ctx, rjc, names)
	}
	return fmt.Errorf("unknown -mode %q (want create, publish or read)", mode)
}

func create(ctx context.Context, jc pb.JournalClient, names []pb.Journal) error {
	var req = new(pb.ApplyRequest)
	for _, n := range names {
		req.Changes = append(req.Changes, pb.ApplyRequest_Change{Upsert: &pb.JournalSpec{
			Name:        n,
			Replication: 1,
			LabelSet:    pb.MustLabelSet(labels.ContentType, labels.ContentType_JSONLines),
			Fragment: pb.JournalSpec_Fragment{
				Length:           512 << 20,
				CompressionCodec: pb.CompressionCodec_NONE,
				RefreshInterval:  time.Minute,
			},
		}})
	}
	if _, err := client.ApplyJournals(ctx, jc, req); err != nil {
		return fmt.Errorf("applying %d journals (%s, ...): %w", len(names), names[0], err)
	}
	var deadline = time.Now().Add(20 * time.Second)
	for _, n := range names {
		for {
			var resp, err = client.ListAllJournals(ctx, jc, pb.ListRequest{
				Selector: pb.LabelSelector{Include: pb.MustLabelSet("name", n.String())},
			})
			if err == nil && len(resp.Journals) == 1 && resp.Journals[0].Route.Primary >= 0 {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("journal %s has no primary 20s after it was applied (err %v)", n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Printf("{\"created\":%d}\n", len(names))
	return nil
}

func publish(ctx context.Context, rjc pb.RoutedJournalClient, names []pb.Journal, messages, size int) error {
	var ajc = client.NewAppendService(ctx, rjc)
	var pub = message.NewPublisher(ajc, nil)
	var mappings = make([]message.MappingFunc, len(names))
	for i, n := range names {
		var n = n
		mappings[i] = func(message.Mappable) (pb.Journal, string, error) {
			return n, labels.ContentType_JSONLines, nil
		}
	}
	var pad = strings.Repeat("x", size)
	var start, cpu0 = begin()
	for i := 0; i < messages; i++ {
		var m = &Msg{ID: fmt.Sprintf("m-%08d", i), Value: int64(i + 1)}
		m.Pad = pad[:size-fixedLen(m.Value)]
		if _, err := pub.PublishCommitted(mappings[i%len(names)], m); err != nil {
			return fmt.Errorf("publishing message %d: %w", i, err)
		}
	}
	for op := range ajc.PendingExcept("") {
		if err := op.Err(); err != nil {
			return fmt.Errorf("an append failed: %w", err)
		}
	}
	return finish(start, cpu0, messages, nil)
}

func read(ctx context.Context, rjc pb.RoutedJournalClient, names []pb.Journal) error {
	var heads = make([]int64, len(names))
	for i, n := range names {
		var h, err = writeHead(ctx, rjc, n)
		if err != nil {
			return err
		}
		heads[i] = h
	}
	var start, cpu0 = begin()
	var count int
	for i, n := range names {
		if heads[i] == 0 {
			continue
		}
		var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: n, Offset: 0, EndOffset: heads[i], Block: true})
		var it = message.NewReadCommittedIter(rr, newMsg, message.NewSequencer(nil, nil, 1024))
		for {
			var env, err = it.Next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("reading %s (write head %d): %w", n, heads[i], err)
			}
			if message.GetFlags(env.GetUUID()) != message.Flag_ACK_TXN {
				count++
			}
		}
	}
	return finish(start, cpu0, count, heads)
}

// writeHead is the offset one past the last byte of |journal|, from a non-blocking read at
// the write head (-1), which ends in ErrOffsetNotYetAvailable.
func writeHead(ctx context.Context, rjc pb.RoutedJournalClient, journal pb.Journal) (int64, error) {
	var r = client.NewReader(ctx, rjc, pb.ReadRequest{Journal: journal, Offset: -1, Block: false})
	var _, err = r.Read(make([]byte, 1))
	if !errors.Is(err, client.ErrOffsetNotYetAvailable) {
		return 0, fmt.Errorf("reading the write head of %s: got %v, want ErrOffsetNotYetAvailable", journal, err)
	}
	return r.Response.WriteHead, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func begin() (time.Time, float64) {
	fmt.Println(`{"event":"start"}`)
	return time.Now(), cpuSeconds()
}

func finish(start time.Time, cpu0 float64, messages int, heads []int64) error {
	var out = map[string]any{
		"messages":   messages,
		"seconds":    time.Since(start).Seconds(),
		"cpuSeconds": cpuSeconds() - cpu0,
	}
	if heads != nil {
		var sum int64
		for _, h := range heads {
			sum += h
		}
		out["bytes"] = sum
	}
	var b, err = json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
