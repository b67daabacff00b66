#!/usr/bin/env python3
"""The Python counterpart of bench/go/msgbench and courant-msgbench (same flags, same
messages, same JSON on stdout), measuring the `courant` Python package's message layer.

--mode publish: one courant.Publisher publishes --messages committed JSON messages of --size
bytes (newline included), round-robin over the journals <prefix>part-NNN, then flushes.
--mode read: courant.read_committed(client, journals, block=False) to the write heads,
counting the messages delivered.

Before the measured phase it prints {"event":"start"}; the result line has messages,
seconds and cpuSeconds (this process's user + system CPU over the phase). --check exits 0
when the package has what the benchmark needs, else prints why and exits 3.
"""

import argparse
import json
import resource
import sys
import time

NEEDED = ("Client", "Publisher", "read_committed")


def unavailable():
    """Why the courant package cannot run this benchmark, or None."""
    try:
        import courant
    except ImportError as e:
        return f"the courant Python package is not importable ({e}); pip install ./client/python"
    missing = [n for n in NEEDED if not hasattr(courant, n)]
    if not missing and not all(hasattr(courant.Publisher, m) for m in ("publish", "flush")):
        missing.append("Publisher.publish/flush")
    if missing:
        return f"the courant Python package lacks {', '.join(missing)}"
    return None


def fixed_len(value):
    """Framed length with a 36-character UUID, a 10-character ID and an empty Pad."""
    return len('{"UUID":"') + 36 + len('","ID":"') + 10 + len('","Value":') + \
        len(str(value)) + len(',"Pad":""}') + 1


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def begin():
    print('{"event":"start"}', flush=True)
    return time.perf_counter(), cpu_seconds()


def finish(start, cpu0, messages, extra=None):
    out = {"messages": messages, "seconds": time.perf_counter() - start,
           "cpuSeconds": cpu_seconds() - cpu0}
    out.update(extra or {})
    print(json.dumps(out), flush=True)


def publish(courant, client, names, messages, size):
    publisher = courant.Publisher(client)
    pad = "x" * size
    start, cpu0 = begin()
    n = len(names)
    for i in range(messages):
        value = i + 1
        publisher.publish(names[i % n], {"ID": "m-%08d" % i, "Value": value,
                                         "Pad": pad[:size - fixed_len(value)]})
    publisher.flush()
    finish(start, cpu0, messages)


def read(courant, client, names):
    start, cpu0 = begin()
    count = 0
    for _ in courant.read_committed(client, names, block=False):
        count += 1
    finish(start, cpu0, count)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--broker", default="http://127.0.0.1:8080")
    p.add_argument("--prefix", default="msgbench/")
    p.add_argument("--journals", type=int, default=4)
    p.add_argument("--messages", type=int, default=100000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--mode", default="publish", choices=["publish", "read"])
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    why = unavailable()
    if a.check or why:
        if why:
            print(why)
            return 3
        return 0
    if a.journals < 1 or not 1 <= a.messages < 10**9:
        print(f"--journals must be >= 1 and --messages in [1, 1e9), got {a.journals} and {a.messages}",
              file=sys.stderr)
        return 2
    if fixed_len(a.messages) > a.size:
        print(f"--size {a.size} is below the smallest message ({fixed_len(a.messages)} bytes)", file=sys.stderr)
        return 2
    import courant
    client = courant.Client(a.broker)
    names = ["%spart-%03d" % (a.prefix, i) for i in range(a.journals)]
    if a.mode == "publish":
        publish(courant, client, names, a.messages, a.size)
    else:
        read(courant, client, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
