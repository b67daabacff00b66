"""The interop examples against each other: what `examples/publish.py` publishes,
`examples/consume.py` reads exactly once (checked here as Gazette's Go `read --observed`
checks it). With `$POLYGLOT_READ_BIN` (Go's `read` from tests/go/message), Go checks both
sides too."""

import json
import os
import subprocess
import sys

import pytest

from conftest import EXAMPLES


def run_example(name, *args):
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def check_observed(expect, observed_lines):
    observed = [json.loads(line) for line in observed_lines if line.strip()]
    committed = {i["id"]: i for i in expect["committed"]}
    rolled_back = {i["id"] for i in expect["rolled_back"]}
    ids = [o["id"] for o in observed]
    assert len(ids) == len(set(ids)), "a message was delivered twice"
    assert not rolled_back & set(ids), "a rolled-back message was delivered"
    assert set(ids) == set(committed)
    for o in observed:
        assert o["value"] == committed[o["id"]]["value"]
        assert o["journal"] == committed[o["id"]]["journal"]
    assert sum(o["value"] for o in observed) == expect["sum"]


def test_publish_then_consume(broker, journal_name, tmp_path):
    expect_path, got = tmp_path / "expect.json", tmp_path / "got.jsonl"
    run_example(
        "publish.py", "--broker", broker.address, "--prefix", journal_name,
        "--journals", "3", "--committed", "40", "--txns", "9", "--expect-out", str(expect_path),
    )
    expect = json.loads(expect_path.read_text())
    assert expect["count"] == len(expect["committed"]) and expect["rolled_back"]
    run_example("consume.py", "--broker", broker.address, "--expect", str(expect_path),
                "--observed-out", str(got))
    check_observed(expect, got.read_text().splitlines())
    # The SQLite mode observes the same, and a second run adds nothing.
    db = tmp_path / "sum.db"
    for _ in range(2):
        out = run_example("consume.py", "--broker", broker.address, "--expect", str(expect_path),
                          "--sqlite", str(db), "--observed-out", str(got))
        assert out.strip() == f"count {expect['count']} sum {expect['sum']} duplicates 0"
        check_observed(expect, got.read_text().splitlines())

    go_read = os.environ.get("POLYGLOT_READ_BIN")
    if not go_read:
        pytest.skip("POLYGLOT_READ_BIN unset: Go's read did not check the examples")
    for args in (["--broker", broker.address, "--require-outcomes", "ackRollback"],
                 ["--observed", str(got)]):
        out = subprocess.run([go_read, "--expect", str(expect_path), *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
