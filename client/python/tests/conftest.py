"""A real single-node `courant serve` for the tests: a fresh data directory, a free
loopback port, torn down at the end of the session.

The binary is `$COURANT_BIN`, else `<repo>/target/debug/courant` (build it with
`cargo build -p courant-broker --bin courant`).
"""

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import courant

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def courant_bin() -> Path:
    path = Path(os.environ.get("COURANT_BIN", REPO / "target" / "debug" / "courant"))
    if not path.is_file():
        pytest.exit(
            f"no courant binary at {path}: build it (cargo build -p courant-broker --bin courant) "
            "or set COURANT_BIN",
            returncode=2,
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Broker:
    """A `courant serve` child process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = None
        self.port = 0
        self.log = root / "broker.stderr"

    def start(self) -> None:
        for _attempt in range(4):
            self.port = free_port()
            log = open(self.log, "ab")
            self.proc = subprocess.Popen(
                [
                    str(courant_bin()),
                    "serve",
                    "--broker.port", str(self.port),
                    "--broker.host", "127.0.0.1",
                    "--broker.bind", "127.0.0.1",
                    "--data-dir", str(self.root / "data"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if answers(self.port):
                    time.sleep(0.05)
                    if self.proc.poll() is None:
                        return
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"courant serve did not start; stderr:\n{self.log.read_text()[-4000:]}")

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def broker():
    with tempfile.TemporaryDirectory(prefix="courant-py-") as root:
        b = Broker(Path(root))
        b.start()
        yield b
        b.stop()


@pytest.fixture(scope="session")
def client(broker):
    return courant.Client(broker.address, retry_timeout=20.0)


@pytest.fixture
def journal_name():
    """A fresh journal name per test (the broker is shared by the session)."""
    return f"pytest/{uuid.uuid4().hex[:12]}"


def wait_primary(client: courant.Client, name: str, timeout: float = 20.0) -> None:
    """Waits until `name` has a primary (its Route has a member)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = [j for j in client.list(f"name={name}") if j.name == name]
        if listed and listed[0].route:
            return
        time.sleep(0.05)
    raise TimeoutError(f"journal {name} has no primary after {timeout} s")


@pytest.fixture
def make_journal(client):
    """Creates a journal (JSON lines unless told) and waits for its primary."""

    def make(name: str, **spec) -> str:
        client.create_journal(name, **spec)
        wait_primary(client, name)
        return name

    return make
