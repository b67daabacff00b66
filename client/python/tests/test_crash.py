"""Exactly once through crashes: `examples/consume.py` keeps a running sum in SQLite with
its checkpoint in the same transaction; it is killed with SIGKILL three times mid-stream and
resumed from its checkpoint each time, and must end with the exact count and sum."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import courant
from conftest import EXAMPLES, wait_primary


def publish_workload(client, journals):
    """Committed messages and transactions (every third rolled back); the expected
    count and sum of what readers must deliver."""
    publisher = courant.Publisher(client)
    count, total, n = 0, 0, 0
    for t in range(60):
        for _ in range(10):
            n += 1
            publisher.publish(journals[n % len(journals)], {"ID": f"c{n}", "Value": n})
            count, total = count + 1, total + n
        txn = publisher.transaction()
        values = []
        for k in range(8):
            value = 100_000 + 10 * t + k
            txn.publish(journals[(t + k) % len(journals)], {"ID": f"t{t}-{k}", "Value": value})
            values.append(value)
        if t % 3 == 2:
            txn.rollback()
        else:
            txn.commit()
            count, total = count + len(values), total + sum(values)
    publisher.flush()
    return count, total


def progress(db_path):
    try:
        with sqlite3.connect(db_path, timeout=5) as db:
            row = db.execute("SELECT count, sum, duplicates FROM totals").fetchone()
            return row or (0, 0, 0)
    except sqlite3.OperationalError:
        return (0, 0, 0)  # Not created yet.


def test_consumer_killed_mid_stream_ends_with_exact_sum(broker, client, journal_name, tmp_path):
    journals = [f"{journal_name}-{i}" for i in range(2)]
    for j in journals:
        client.create_journal(j)
        wait_primary(client, j)
    count, total = publish_workload(client, journals)
    db_path = tmp_path / "sum.db"
    cmd = [
        sys.executable, str(EXAMPLES / "consume.py"),
        "--broker", broker.address,
        "--journals", ",".join(journals),
        "--sqlite", str(db_path),
        "--batch", "5",
        "--delay", "0.01",
    ]
    kills, last = 0, 0
    deadline = time.monotonic() + 120
    while kills < 3:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Kill it once it made progress past where the last one was killed.
        target = last + 40
        while progress(db_path)[0] < target and proc.poll() is None:
            assert time.monotonic() < deadline, "the consumer made no progress"
            time.sleep(0.01)
        assert proc.poll() is None, f"the consumer ended before it could be killed: {proc.communicate()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        last = progress(db_path)[0]
        assert last < count, "killed after it had finished: not mid-stream"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert progress(db_path) == (count, total, 0), out.stdout
    # Every message once: as many distinct IDs as deliveries.
    with sqlite3.connect(db_path) as db:
        distinct = db.execute("SELECT COUNT(DISTINCT id) FROM delivered").fetchone()[0]
    assert distinct == count
    # Another run from the final checkpoint changes nothing.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert progress(db_path) == (count, total, 0)
