#!/usr/bin/env python3
"""A reference publisher of polyglot messages in plain Python (standard library only).

Written from README.md alone, it builds Gazette message UUIDs, frames JSON lines, commits
transactions with ACK_TXN messages, rolls some back by writing the producer's previous
ACK again, abandons one, and writes some messages twice, all without Gazette's Go code. It writes each journal's
content to OUT_DIR/part-NNN.ndjson and the expectation file to OUT_DIR/expect.json; the
`append` program appends those files to a broker and `read` must then deliver every
committed message exactly once. So it checks that README.md's contract is enough for a
publisher in another language, and shows one such publisher in a few lines.

Usage: reference_publisher.py --prefix PREFIX --out-dir DIR [--journals 4]
       [--committed 60] [--txns 18] [--id-prefix ref]
"""
import argparse
import json
import os
import struct
import time

OUTSIDE_TXN, CONTINUE_TXN, ACK_TXN = 0, 1, 2
GREGORIAN_TO_UNIX_100NS = 122192928000000000


def build_uuid(producer: bytes, clock: int, flags: int) -> str:
    """Gazette's message.BuildUUID, as README.md describes it, in canonical form."""
    raw = struct.pack(
        ">IHHH",
        (clock >> 4) & 0xFFFFFFFF,
        (clock >> 36) & 0xFFFF,
        ((clock >> 52) & 0xFFFF) | 0x1000,
        ((clock << 10) & 0x3C00) | flags | 0x8000,
    ) + producer
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class Producer:
    """One producer: a ProducerID and a clock ticked once per message or ACK."""

    def __init__(self):
        pid = bytearray(os.urandom(6))
        pid[0] |= 0x01  # Multicast bit: not a MAC address.
        self.id = bytes(pid)
        self.clock = (time.time_ns() // 100 + GREGORIAN_TO_UNIX_100NS) << 4
        self.last_ack = {}  # journal -> the line of its last committed ACK here.
        self.open = []  # journals touched by the open transaction, in order.

    def line(self, flags, msg_id=None, value=None):
        self.clock += 1
        doc = {"UUID": build_uuid(self.id, self.clock, flags)}
        if msg_id is not None:
            doc["ID"], doc["Value"] = msg_id, value
        return json.dumps(doc, separators=(",", ":")) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--journals", type=int, default=4)
    ap.add_argument("--committed", type=int, default=60)
    ap.add_argument("--txns", type=int, default=18)
    ap.add_argument("--id-prefix", default="ref")
    a = ap.parse_args()

    journals = [f"{a.prefix}/part-{i:03d}" for i in range(a.journals)]
    content = {j: [] for j in journals}
    committed, rolled_back = [], []
    outside, txn = Producer(), Producer()
    next_c = 0

    def publish_committed():
        nonlocal next_c
        if next_c >= a.committed:
            return
        item = {"id": f"{a.id_prefix}-c{next_c:05d}", "value": 1 + (next_c * 37) % 1000,
                "journal": journals[next_c % len(journals)]}
        content[item["journal"]].append(outside.line(OUTSIDE_TXN, item["id"], item["value"]))
        if next_c % 10 == 3:  # The same line twice, as a retried append lands: read once.
            content[item["journal"]].append(content[item["journal"]][-1])
        committed.append(item)
        next_c += 1

    sent = {}  # message ID -> its line, for duplicates.
    for t in range(a.txns + 1):
        # The first transaction touches every journal and commits, so every later rollback
        # has an earlier ACK to write again; every third one is rolled back; the one after
        # the last (t == txns) is abandoned: never acknowledged.
        n = len(journals) if t == 0 else 1 + (t * 7) % 6
        items = [{"id": f"{a.id_prefix}-t{t:03d}-{m}", "value": 1 + (t * 101 + m * 13) % 1000,
                  "journal": journals[m if t == 0 else (t + 3 * m) % len(journals)]} for m in range(n)]
        for item in items:
            sent[item["id"]] = txn.line(CONTINUE_TXN, item["id"], item["value"])
            content[item["journal"]].append(sent[item["id"]])
            if item["journal"] not in txn.open:
                txn.open.append(item["journal"])
            publish_committed()
        if t == a.txns:
            rolled_back += [dict(it, how="abandoned") for it in items]
        elif t > 0 and t % 3 == 2:
            for j in txn.open:  # Roll back: the previous commit's ACK, clock and all.
                content[j].append(txn.last_ack[j])
            rolled_back += [dict(it, how="ack-rollback") for it in items]
        else:
            for j in txn.open:  # Commit: one ACK per journal, above every message's clock.
                txn.last_ack[j] = txn.line(ACK_TXN)
                content[j].append(txn.last_ack[j])
            if t % 4 == 1:  # Re-published after its commit (a recovering consumer): read once.
                content[items[0]["journal"]].append(sent[items[0]["id"]])
            committed += items
        txn.open = []
    while next_c < a.committed:
        publish_committed()

    os.makedirs(a.out_dir, exist_ok=True)
    for i, j in enumerate(journals):
        with open(os.path.join(a.out_dir, f"part-{i:03d}.ndjson"), "w") as f:
            f.writelines(content[j])
    expect = {"format": "courant-polyglot-expect/1", "publisher": "python-reference",
              "journals": journals, "committed": committed, "rolled_back": rolled_back,
              "count": len(committed), "sum": sum(it["value"] for it in committed)}
    with open(os.path.join(a.out_dir, "expect.json"), "w") as f:
        json.dump(expect, f, indent=2)
    print(f"wrote {len(journals)} journals' content to {a.out_dir}: {len(committed)} committed "
          f"messages (sum {expect['sum']}), {len(rolled_back)} that must not be read")


if __name__ == "__main__":
    main()
