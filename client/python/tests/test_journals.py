"""The journal layer: create/list, append/read round trips, fragments, and errors."""

import os
import signal
import threading
import time

import pytest

import courant


def test_create_and_list(client, make_journal, journal_name):
    make_journal(journal_name, labels={"app": "pytest"}, replication=1)
    listed = client.list(f"name={journal_name}")
    assert [j.name for j in listed] == [journal_name]
    journal = listed[0]
    assert journal.content_type == "application/x-ndjson"
    assert ("app", "pytest") in journal.spec.labels
    assert journal.spec.replication == 1
    assert journal.mod_revision > 0
    assert len(journal.route) == 1
    # A selector on the label finds it too; an excluding one does not.
    assert journal_name in [j.name for j in client.list("app=pytest")]
    assert journal_name not in [j.name for j in client.list("app=pytest,!app")]


def test_append_read_round_trip(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/octet-stream")
    first = client.append(journal_name, b"hello, ")
    second = client.append(journal_name, b"world\n")
    assert first == (0, 7)
    assert second == (7, 13)
    with client.read(journal_name) as reader:
        data = b"".join(reader)
        assert reader.offset == 13
    assert data == b"hello, world\n"
    # From an offset.
    assert b"".join(client.read(journal_name, offset=7)) == b"world\n"


def test_large_append_reads_back(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/octet-stream")
    blob = bytes(range(256)) * 12_000  # About 3 MiB: several chunks each way.
    assert client.append(journal_name, blob) == (0, len(blob))
    assert b"".join(client.read(journal_name)) == blob


def test_blocking_read_waits_for_appends(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/octet-stream")
    got = []

    def read():
        with client.read(journal_name, block=True) as reader:
            for chunk in reader:
                got.append(chunk)
                if sum(map(len, got)) >= 6:
                    return

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.3)
    client.append(journal_name, b"abc")
    client.append(journal_name, b"def")
    t.join(20)
    assert not t.is_alive()
    assert b"".join(got) == b"abcdef"


def test_closed_reader_yields_nothing(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/octet-stream")
    client.append(journal_name, b"x" * 10)
    reader = client.read(journal_name, block=True)
    assert next(reader) == b"x" * 10
    reader.close()
    assert list(reader) == []


def test_list_fragments(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/octet-stream")
    client.append(journal_name, b"0123456789")
    fragments = client.list_fragments(journal_name)
    assert fragments, "a journal with content has a fragment"
    assert fragments[0].journal == journal_name
    assert fragments[0].begin == 0
    assert fragments[-1].end == 10
    assert len(fragments[0].sum) == 40


def test_apply_and_delete(client, journal_name):
    spec = courant.JournalSpec(journal_name, labels=[("team", "a")], fragment_length=1 << 20)
    revision = client.apply(upsert=[spec])
    assert revision > 0
    listed = client.list(f"name={journal_name}")[0]
    assert listed.spec.fragment_length == 1 << 20
    # A stale expected revision is refused, naming the journal.
    with pytest.raises(courant.BrokerError) as err:
        client.apply(upsert=[spec], expect_mod_revision={journal_name: listed.mod_revision + 1000})
    assert err.value.journal == journal_name
    assert err.value.status == "ETCD_TRANSACTION_FAILED"
    client.delete_journal(journal_name)
    assert client.list(f"name={journal_name}") == []


def test_append_to_missing_journal(client, journal_name):
    with pytest.raises(courant.JournalNotFoundError) as err:
        client.append(journal_name, b"x")
    assert err.value.journal == journal_name
    assert journal_name in str(err.value)
    assert isinstance(err.value, courant.CourantError)


def test_invalid_arguments(client):
    with pytest.raises(courant.InvalidArgumentError) as err:
        client.read("bad name", offset=0)
    assert "bad name" in str(err.value)
    with pytest.raises(courant.InvalidArgumentError):
        client.read("pytest/j", offset=-2)
    with pytest.raises(courant.InvalidArgumentError):
        client.list("=(")
    with pytest.raises(courant.InvalidArgumentError):
        courant.Client([])
    with pytest.raises(courant.InvalidArgumentError):
        client.apply(upsert=[courant.JournalSpec("pytest/x", compression="LZ77")])
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too.
        courant.Client("http://127.0.0.1:1", retry_timeout=-1)


def test_unreachable_broker_is_a_transport_error():
    port_nobody_listens_on = "http://127.0.0.1:1"
    client = courant.Client(port_nobody_listens_on, retry_timeout=0.5, dial_timeout=0.2)
    with pytest.raises(courant.TransportError) as err:
        client.append("pytest/unreachable", b"x")
    assert isinstance(err.value, ConnectionError)
    assert err.value.retried is not None


def test_waits_release_the_gil_and_take_interrupts(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/octet-stream")
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    # SIGINT to this process while the main thread waits in a blocking read.
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            with client.read(journal_name, block=True) as reader:
                next(reader)
    finally:
        stop.set()
        counter.join()
        timer.cancel()
    assert time.monotonic() - started < 5
    assert len(ticks) > 50, "another thread ran while the read waited"
