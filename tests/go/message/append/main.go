// Command append writes content prepared by a publisher that has no broker client of its
// own (reference_publisher.py): it reads DIR/expect.json, creates its journals (unless
// --create=false), and appends DIR/part-NNN.ndjson to the journal at index NNN of the
// file's journal list, in one client.Append each. Only the order within a journal matters
// to a read-committed reader, so one append per journal keeps every transaction's meaning.
//
// Lives on: main's goroutine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"courant.dev/tests/go/message/polyglot"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
)

func main() {
	var (
		broker  = flag.String("broker", os.Getenv("BROKER_ADDRESS"), "broker address, http://host:port (default $BROKER_ADDRESS)")
		dir     = flag.String("dir", "", "directory holding expect.json and part-NNN.ndjson")
		create  = flag.Bool("create", true, "create the journals (they must not exist)")
		timeout = flag.Duration("timeout", 60*time.Second, "bound on the whole run")
	)
	flag.Parse()
	var ctx, cancel = context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *broker, *dir, *create); err != nil {
		fmt.Fprintf(os.Stderr, "append: %v\n", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, broker, dir string, create bool) error {
	if dir == "" {
		return fmt.Errorf("--dir is required")
	}
	var e, err = polyglot.ReadExpect(filepath.Join(dir, "expect.json"))
	if err != nil {
		return err
	}
	var rjc pb.RoutedJournalClient
	if rjc, err = polyglot.Dial(ctx, broker); err != nil {
		return err
	}
	var names []pb.Journal
	for _, j := range e.Journals {
		names = append(names, pb.Journal(j))
	}
	if create {
		if err = polyglot.CreateJournals(ctx, rjc, names, 20*time.Second); err != nil {
			return err
		}
	}
	for i, j := range names {
		var path = filepath.Join(dir, fmt.Sprintf("part-%03d.ndjson", i))
		var f, err = os.Open(path)
		if err != nil {
			return err
		}
		var resp, aerr = client.Append(ctx, rjc, pb.AppendRequest{Journal: j}, f)
		_ = f.Close()
		if aerr != nil {
			return fmt.Errorf("appending %s to %s: %w", path, j, aerr)
		}
		fmt.Printf("appended %s to %s at [%d, %d)\n", path, j, resp.Commit.Begin, resp.Commit.End)
	}
	return nil
}
