#!/usr/bin/env python3
"""Consumes journals read-committed with the courant Python client, exactly once.

Two outputs, either or both:

- `--sqlite PATH`: a running count and sum of the messages' `Value`, every delivered ID,
  and the consumer's checkpoint, all updated in one SQLite transaction per batch. Killed at
  any moment (even `kill -9`) and started again, it resumes from the stored checkpoint and
  ends with the exact count and sum. IDs delivered twice are counted in `duplicates`.
- `--observed-out FILE`: the observation file of Gazette's Go `read --observed` check
  (tests/go/message/README.md): one JSON line `{"id","value","journal","offset"}` per
  delivered message, in delivery order (written at the end; from SQLite if used).

Journals come from `--journals a,b`, or from the expectation file `--expect FILE`. It reads
to the journals' write heads and exits 0 (`--block`: it waits for more, until
`--stop-after` messages in all).

    consume.py --broker http://127.0.0.1:8080 --expect expect.json --observed-out got.jsonl
    consume.py --broker http://127.0.0.1:8080 --journals a,b --sqlite sum.db
"""

import argparse
import json
import os
import sqlite3
import sys
import time

import courant

SCHEMA = """
CREATE TABLE IF NOT EXISTS totals (id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL,
                                   sum INTEGER NOT NULL, duplicates INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0, 0);
CREATE TABLE IF NOT EXISTS delivered (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL,
                                      value INTEGER NOT NULL, journal TEXT NOT NULL,
                                      offset INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS delivered_id ON delivered (id);
CREATE TABLE IF NOT EXISTS checkpoint (id INTEGER PRIMARY KEY CHECK (id = 1), bytes BLOB NOT NULL);
"""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker", default=os.environ.get("BROKER_ADDRESS", "http://127.0.0.1:8080"))
    p.add_argument("--journals", help="comma-separated journals to read")
    p.add_argument("--expect", help="expectation file whose journals to read")
    p.add_argument("--sqlite", help="SQLite database of the running sum and checkpoint")
    p.add_argument("--observed-out", help="observation file to write")
    p.add_argument("--batch", type=int, default=16, help="messages per SQLite transaction")
    p.add_argument("--delay", type=float, default=0.0, help="seconds to sleep per batch (tests)")
    p.add_argument("--block", action="store_true", help="wait for more at the write heads")
    p.add_argument("--stop-after", type=int, default=0, help="stop after N messages in all (0: never)")
    return p.parse_args(argv)


def journals_of(args):
    if args.journals:
        return [j for j in args.journals.split(",") if j]
    if args.expect:
        with open(args.expect) as f:
            return json.load(f)["journals"]
    raise SystemExit("consume: give --journals or --expect")


def open_db(path):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(SCHEMA)
    return db


def store(db, consumer, batch):
    """One transaction: the batch's effects and the checkpoint that covers them."""
    db.execute("BEGIN IMMEDIATE")
    for m in batch:
        mid, value = str(m.value.get("ID", "")), int(m.value.get("Value", 0))
        dup = db.execute("SELECT 1 FROM delivered WHERE id = ?", (mid,)).fetchone() is not None
        db.execute(
            "INSERT INTO delivered (id, value, journal, offset) VALUES (?, ?, ?, ?)",
            (mid, value, m.journal, m.offset),
        )
        db.execute(
            "UPDATE totals SET count = count + 1, sum = sum + ?, duplicates = duplicates + ?",
            (value, int(dup)),
        )
    db.execute("INSERT OR REPLACE INTO checkpoint VALUES (1, ?)", (consumer.checkpoint(),))
    db.execute("COMMIT")


def consume(args):
    client = courant.Client(args.broker)
    journals = journals_of(args)
    db = open_db(args.sqlite) if args.sqlite else None
    row = db.execute("SELECT bytes FROM checkpoint").fetchone() if db else None
    checkpoint = row[0] if row else None
    observed, batch, total = [], [], 0
    with courant.read_committed(client, journals, checkpoint, block=args.block) as consumer:
        for m in consumer:
            total += 1
            if db:
                batch.append(m)
                if len(batch) >= args.batch:
                    store(db, consumer, batch)
                    batch = []
                    if args.delay:
                        time.sleep(args.delay)
            else:
                observed.append((m.value.get("ID", ""), m.value.get("Value", 0), m.journal, m.offset))
            if args.stop_after and total >= args.stop_after:
                break
        if db and batch:
            store(db, consumer, batch)
        if db:
            # The final checkpoint also covers the ACKs read after the last message.
            store(db, consumer, [])
    if db:
        observed = db.execute("SELECT id, value, journal, offset FROM delivered ORDER BY seq").fetchall()
        count, total_sum, dups = db.execute("SELECT count, sum, duplicates FROM totals").fetchone()
        print(f"count {count} sum {total_sum} duplicates {dups}")
    else:
        print(f"count {len(observed)} sum {sum(int(o[1]) for o in observed)}")
    if args.observed_out:
        with open(args.observed_out, "w") as f:
            for mid, value, journal, offset in observed:
                f.write(json.dumps({"id": mid, "value": value, "journal": journal, "offset": offset}) + "\n")


def main(argv=None):
    try:
        consume(parse_args(argv))
    except courant.CourantError as e:
        print(f"consume: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
