#!/usr/bin/env python3
"""Publishes the polyglot workload with the courant Python client, and writes the
expectation file Gazette's Go `read` program checks (tests/go/message/README.md).

Messages are `{"UUID": ..., "ID": ..., "Value": ...}` objects in `application/x-ndjson`
journals `PREFIX/part-NNN`. The first transaction touches every journal and commits; then
committed messages and transactions alternate, and transaction `t` is rolled back when
`t % rollback_every == rollback_every - 1` (its ACKs carry the producer's last acknowledged
clock: readers drop its messages).

    publish.py --broker http://127.0.0.1:8080 --prefix polyglot/py-1 --expect-out expect.json
"""

import argparse
import json
import os
import sys
import time

import courant


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--broker", default=os.environ.get("BROKER_ADDRESS", "http://127.0.0.1:8080"))
    p.add_argument("--prefix", default=f"polyglot/py-{time.time_ns()}")
    p.add_argument("--journals", type=int, default=4, help="journals PREFIX/part-000...")
    p.add_argument("--committed", type=int, default=120, help="messages committed on their own")
    p.add_argument("--txns", type=int, default=24, help="transactions after the first")
    p.add_argument("--txn-size", type=int, default=3, help="messages per transaction")
    p.add_argument("--rollback-every", type=int, default=3, help="roll back one transaction in N (0: none)")
    p.add_argument("--id-prefix", default="py")
    p.add_argument("--create", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--expect-out", help="expectation file to write")
    return p.parse_args(argv)


def create_journals(client, journals):
    for name in journals:
        client.create_journal(name, content_type="application/x-ndjson", replication=1)
    deadline = time.monotonic() + 30
    for name in journals:
        while not any(j.name == name and j.route for j in client.list(f"name={name}")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"journal {name} has no primary")
            time.sleep(0.05)


def run(args):
    client = courant.Client(args.broker)
    journals = [f"{args.prefix}/part-{i:03d}" for i in range(args.journals)]
    if args.create:
        create_journals(client, journals)
    publisher = courant.Publisher(client)
    committed, rolled_back = [], []

    def item(mid, value, journal, how=None):
        entry = {"id": mid, "value": value, "journal": journal}
        if how:
            entry["how"] = how
        return entry

    # The first transaction touches every journal and commits.
    with publisher.transaction() as txn:
        for k, journal in enumerate(journals):
            mid, value = f"{args.id_prefix}-t000-{k}", 1000 + k
            txn.publish(journal, {"ID": mid, "Value": value})
            committed.append(item(mid, value, journal))
    per_gap = -(-args.committed // max(args.txns + 1, 1))
    c = 0
    for t in range(1, args.txns + 2):
        for _ in range(per_gap):
            if c >= args.committed:
                break
            journal, mid, value = journals[c % len(journals)], f"{args.id_prefix}-c{c:05d}", c + 1
            publisher.publish(journal, {"ID": mid, "Value": value})
            committed.append(item(mid, value, journal))
            c += 1
        if t > args.txns:
            break
        roll = args.rollback_every > 0 and t % args.rollback_every == args.rollback_every - 1
        txn = publisher.transaction()
        items = []
        for k in range(args.txn_size):
            journal = journals[(t + k) % len(journals)]
            mid, value = f"{args.id_prefix}-t{t:03d}-{k}", 1000 + 10 * t + k
            txn.publish(journal, {"ID": mid, "Value": value})
            items.append((mid, value, journal))
        if roll:
            txn.rollback()
            rolled_back += [item(*i, how="ack-rollback") for i in items]
        else:
            txn.commit()
            committed += [item(*i) for i in items]
    publisher.flush()
    expect = {
        "format": "courant-polyglot-expect/1",
        "publisher": "python",
        "journals": journals,
        "committed": committed,
        "rolled_back": rolled_back,
        "count": len(committed),
        "sum": sum(i["value"] for i in committed),
    }
    if args.expect_out:
        with open(args.expect_out, "w") as f:
            json.dump(expect, f, indent=2)
    print(
        f"published {len(committed)} committed messages (sum {expect['sum']}) and "
        f"{len(rolled_back)} rolled back to {len(journals)} journals under {args.prefix}"
    )
    return expect


def main(argv=None):
    try:
        run(parse_args(argv))
    except courant.CourantError as e:
        print(f"publish: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
