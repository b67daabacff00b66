package polyglot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	mbp "go.gazette.dev/core/mainboilerplate"
)

func init() {
	// The dispatcher gRPC balancer must be registered before any Dial, exactly as gazctl
	// and Gazette consumers do at startup.
	pb.RegisterGRPCDispatcher("local")
}

// Dial returns a RoutedJournalClient of the broker at |address| ("http://host:port", or
// "host:port"), dialed as gazctl dials (dispatcher balancer, plaintext for http://), with
// no route cache: every RPC goes to |address|. The connection closes when |ctx| ends.
func Dial(ctx context.Context, address string) (pb.RoutedJournalClient, error) {
	address = strings.TrimSpace(address)
	if address == "" {
		return nil, errors.New("no broker address: pass --broker or set BROKER_ADDRESS")
	}
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	var ep = pb.Endpoint(address)
	if err := ep.Validate(); err != nil {
		return nil, fmt.Errorf("invalid broker address %q: %w", address, err)
	}
	var cfg = mbp.AddressConfig{Address: ep}
	return pb.NewRoutedJournalClient(cfg.MustJournalClient(ctx), pb.NoopDispatchRouter{}), nil
}

// JournalSpec is the spec of a polyglot journal: `application/x-ndjson` messages,
// replication 1, 1 MiB fragments, no stores (so any single broker serves it).
func JournalSpec(name pb.Journal) *pb.JournalSpec {
	return &pb.JournalSpec{
		Name:        name,
		Replication: 1,
		LabelSet:    pb.MustLabelSet(labels.ContentType, labels.ContentType_JSONLines),
		Fragment: pb.JournalSpec_Fragment{
			Length:           1 << 20,
			CompressionCodec: pb.CompressionCodec_NONE,
			RefreshInterval:  time.Minute,
		},
	}
}

// CreateJournals applies JournalSpec for every name (each must not exist yet), then waits
// at most |wait| until List shows each with a primary: brokers assign journals
// asynchronously, and an append before that fails.
func CreateJournals(ctx context.Context, jc pb.JournalClient, names []pb.Journal, wait time.Duration) error {
	var req = new(pb.ApplyRequest)
	for _, n := range names {
		req.Changes = append(req.Changes, pb.ApplyRequest_Change{Upsert: JournalSpec(n), ExpectModRevision: 0})
	}
	if resp, err := client.ApplyJournals(ctx, jc, req); err != nil {
		return fmt.Errorf("applying %d journals (%s, ...): %w (response %v)", len(names), names[0], err, resp)
	}
	var deadline = time.Now().Add(wait)
	for _, n := range names {
		for {
			var resp, err = client.ListAllJournals(ctx, jc, pb.ListRequest{
				Selector: pb.LabelSelector{Include: pb.MustLabelSet("name", n.String())},
			})
			if err == nil && len(resp.Journals) == 1 && resp.Journals[0].Route.Primary >= 0 {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("journal %s has no primary %v after it was applied (last List: %v, err %v)",
					n, wait, resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// WriteHead returns the offset one past the last byte written to |journal|, from a
// non-blocking read at offset -1 (the write head), which ends in ErrOffsetNotYetAvailable.
func WriteHead(ctx context.Context, rjc pb.RoutedJournalClient, journal pb.Journal) (int64, error) {
	var r = client.NewReader(ctx, rjc, pb.ReadRequest{Journal: journal, Offset: -1, Block: false})
	var _, err = r.Read(make([]byte, 1))
	if !errors.Is(err, client.ErrOffsetNotYetAvailable) {
		return 0, fmt.Errorf("reading the write head of %s: got %v, want ErrOffsetNotYetAvailable", journal, err)
	}
	return r.Response.WriteHead, nil
}
