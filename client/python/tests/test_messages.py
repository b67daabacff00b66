"""Messages: committed publishes, transactions committed and rolled back, each read
exactly once; checkpoints; and bad input."""

import json

import pytest

import courant


def read_all(client, journals, checkpoint=None, **kw):
    with courant.read_committed(client, journals, checkpoint, block=False, **kw) as consumer:
        messages = list(consumer)
        return messages, consumer.checkpoint()


def test_publish_committed(client, make_journal, journal_name):
    make_journal(journal_name)
    publisher = courant.Publisher(client)
    uuids = [publisher.publish(journal_name, {"ID": f"c{i}", "Value": i}) for i in range(20)]
    publisher.flush()
    messages, _ = read_all(client, [journal_name])
    assert [m.value["ID"] for m in messages] == [f"c{i}" for i in range(20)]
    assert [m.uuid for m in messages] == uuids
    assert all(m.value["UUID"] == m.uuid for m in messages)
    assert all(m.journal == journal_name for m in messages)
    # Offsets are those of the lines in the journal.
    raw = b"".join(client.read(journal_name))
    for m in messages:
        line = json.loads(raw[m.offset : m.end])
        assert line["ID"] == m.value["ID"]
    # Gazette's UUID: version 1, flags OUTSIDE_TXN (the 4th group's low bits are 0).
    assert all(m.uuid[14] == "1" and int(m.uuid[19:23], 16) & 0x3FF == 0 for m in messages)
    assert len({u[24:] for u in uuids}) == 1  # One producer.
    assert publisher.producer == uuids[0][24:]


def test_transactions_commit_and_roll_back(client, make_journal, journal_name):
    a = make_journal(journal_name + "-a")
    b = make_journal(journal_name + "-b")
    publisher = courant.Publisher(client)
    with publisher.transaction() as txn:
        txn.publish(a, {"ID": "t1-a", "Value": 1})
        txn.publish(b, {"ID": "t1-b", "Value": 2})

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        with publisher.transaction() as txn:
            txn.publish(a, {"ID": "t2-a", "Value": 100})
            txn.publish(b, {"ID": "t2-b", "Value": 200})
            raise Abort()
    publisher.publish(a, {"ID": "c1", "Value": 3})
    with publisher.transaction() as txn:
        txn.publish(b, {"ID": "t3-b", "Value": 4})
    publisher.flush()

    messages, _ = read_all(client, [a, b])
    ids = sorted(m.value["ID"] for m in messages)
    assert ids == ["c1", "t1-a", "t1-b", "t3-b"]
    assert sum(m.value["Value"] for m in messages) == 10
    # The rolled-back messages are in the journals all the same: readers drop them.
    raw = b"".join(client.read(a)) + b"".join(client.read(b))
    assert b"t2-a" in raw and b"t2-b" in raw
    # Reading again from scratch gives the same, once each.
    again, _ = read_all(client, [a, b])
    assert sorted(m.value["ID"] for m in again) == ids


def test_explicit_commit_rollback_and_misuse(client, make_journal, journal_name):
    make_journal(journal_name)
    publisher = courant.Publisher(client)
    txn = publisher.transaction()
    txn.publish(journal_name, {"ID": "x", "Value": 1})
    # One transaction at a time, and no committed publish while it is open.
    with pytest.raises(courant.CourantError):
        publisher.transaction()
    with pytest.raises(courant.CourantError) as err:
        publisher.publish(journal_name, {"ID": "y", "Value": 1})
    assert err.value.journal == journal_name
    assert txn.commit() == [journal_name]
    assert not txn.is_open
    with pytest.raises(courant.ClosedError):
        txn.publish(journal_name, {"ID": "z", "Value": 1})
    with pytest.raises(courant.ClosedError):
        txn.rollback()
    txn = publisher.transaction()
    txn.publish(journal_name, {"ID": "w", "Value": 1})
    assert txn.rollback() == [journal_name]
    messages, _ = read_all(client, [journal_name])
    assert [m.value["ID"] for m in messages] == ["x"]


def test_checkpoint_resumes_exactly(client, make_journal, journal_name):
    a = make_journal(journal_name + "-a")
    b = make_journal(journal_name + "-b")
    publisher = courant.Publisher(client)
    for i in range(10):
        publisher.publish(a if i % 2 else b, {"ID": f"c{i}", "Value": i})
    with publisher.transaction() as txn:
        for i in range(10, 20):
            txn.publish(a if i % 2 else b, {"ID": f"t{i}", "Value": i})
    publisher.flush()

    seen = []
    with courant.read_committed(client, [a, b], block=False) as consumer:
        for m in consumer:
            seen.append(m.value["ID"])
            if len(seen) == 13:  # Mid-transaction.
                checkpoint = consumer.checkpoint()
                break
    assert isinstance(checkpoint, bytes)
    rest, final = read_all(client, [a, b], checkpoint)
    ids = seen + [m.value["ID"] for m in rest]
    assert sorted(ids) == sorted([f"c{i}" for i in range(10)] + [f"t{i}" for i in range(10, 20)])
    # Resuming from the final checkpoint delivers nothing more.
    assert read_all(client, [a, b], final)[0] == []
    # New messages after it are delivered, once.
    publisher.publish(a, {"ID": "late", "Value": 0})
    publisher.flush()
    assert [m.value["ID"] for m in read_all(client, [a, b], final)[0]] == ["late"]


def test_unknown_content_type(client, make_journal, journal_name):
    make_journal(journal_name, content_type="application/x-unknown")
    publisher = courant.Publisher(client)
    with pytest.raises(courant.FramingError) as err:
        publisher.publish(journal_name, {"ID": "x"})
    assert err.value.journal == journal_name
    assert "application/x-unknown" in str(err.value)
    with pytest.raises(courant.FramingError):
        courant.read_committed(client, [journal_name], block=False)


def test_publish_to_a_csv_journal_is_refused(client, make_journal, journal_name):
    make_journal(journal_name, content_type="text/csv")
    with pytest.raises(courant.FramingError) as err:
        courant.Publisher(client).publish(journal_name, {"ID": "x"})
    assert err.value.journal == journal_name
    assert "text/csv" in str(err.value)


def test_malformed_frame(client, make_journal, journal_name):
    make_journal(journal_name)
    publisher = courant.Publisher(client)
    publisher.publish(journal_name, {"ID": "ok", "Value": 1})
    publisher.flush()
    begin, _ = client.append(journal_name, b"this is not json\n")
    consumer = courant.read_committed(client, [journal_name], block=False)
    first = next(consumer)
    assert first.value["ID"] == "ok"
    with pytest.raises(courant.FramingError) as err:
        next(consumer)
    assert err.value.journal == journal_name
    assert err.value.offset == begin
    assert f"offset {begin}" in str(err.value)


def test_oversized_messages(client, make_journal, journal_name):
    make_journal(journal_name)
    small = courant.Publisher(client, max_message_size=100)
    with pytest.raises(courant.MessageTooLargeError) as err:
        small.publish(journal_name, {"ID": "big", "Value": 1, "pad": "x" * 200})
    assert err.value.journal == journal_name
    publisher = courant.Publisher(client)
    publisher.publish(journal_name, {"ID": "big", "Value": 1, "pad": "x" * 2000})
    publisher.flush()
    with pytest.raises(courant.MessageTooLargeError) as err:
        list(courant.read_committed(client, [journal_name], block=False, max_message_size=1024))
    assert err.value.journal == journal_name
    assert err.value.offset == 0
    # With the default limit it reads.
    assert len(read_all(client, [journal_name])[0]) == 1


def test_bad_messages_and_checkpoints(client, make_journal, journal_name):
    make_journal(journal_name)
    publisher = courant.Publisher(client)
    with pytest.raises(TypeError):
        publisher.publish(journal_name, ["not", "a", "dict"])
    with pytest.raises(TypeError):  # json.dumps refuses it.
        publisher.publish(journal_name, {"ID": object()})
    with pytest.raises(courant.InvalidArgumentError):
        courant.read_committed(client, [journal_name], b"\xff\xff not a checkpoint")
    with pytest.raises(courant.JournalNotFoundError) as err:
        courant.read_committed(client, [journal_name + "-missing"])
    assert err.value.journal == journal_name + "-missing"
