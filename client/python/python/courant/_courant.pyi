"""Type stubs of the ``courant._courant`` extension module (see ``courant``)."""

from os import PathLike
from types import TracebackType
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Type, Union

from ._message import Message

__version__: str

Labels = Union[Mapping[str, str], Iterable[Tuple[str, str]]]

class JournalSpec:
    """A journal's specification (Gazette's ``JournalSpec``): pass it to ``Client.apply``."""

    name: str
    labels: List[Tuple[str, str]]
    replication: int
    fragment_length: int
    compression: str
    stores: List[str]
    refresh_interval: float
    retention: Optional[float]
    flush_interval: Optional[float]
    path_postfix_template: str
    max_append_rate: int
    def __init__(
        self,
        name: str,
        *,
        labels: Optional[Labels] = None,
        content_type: Optional[str] = "application/x-ndjson",
        replication: int = 1,
        fragment_length: int = 1 << 26,
        compression: str = "NONE",
        stores: Sequence[str] = (),
        refresh_interval: float = 60.0,
        retention: Optional[float] = None,
        flush_interval: Optional[float] = None,
        path_postfix_template: str = "",
        max_append_rate: int = 0,
    ) -> None: ...
    @property
    def content_type(self) -> Optional[str]:
        """The ``content-type`` label's value, or ``None``."""

class Journal:
    """A journal as ``Client.list`` returns it: its spec, revision and Route."""

    name: str
    spec: JournalSpec
    mod_revision: int
    route: List[str]
    endpoints: List[str]
    @property
    def content_type(self) -> Optional[str]:
        """The ``content-type`` label's value, or ``None``."""

class Fragment:
    """A fragment of a journal: the span ``[begin, end)`` of its bytes in one file."""

    journal: str
    begin: int
    end: int
    sum: str
    compression: str
    backing_store: str
    mod_time: int
    signed_url: str

class Reader(Iterator[bytes]):
    """A read of one journal: an iterator of ``bytes`` chunks, and a context manager that
    closes the broker stream."""

    @property
    def journal(self) -> str:
        """The journal being read."""
    @property
    def offset(self) -> int:
        """The offset after the last chunk returned."""
    @property
    def chunk_offset(self) -> int:
        """The journal offset of the last chunk's first byte."""
    def __iter__(self) -> "Reader": ...
    def __next__(self) -> bytes:
        """The next chunk of the journal's bytes."""
    def close(self) -> None:
        """Ends the read (the broker stream is closed)."""
    def __enter__(self) -> "Reader": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Client:
    """A client of one or several brokers (Courant or Gazette); every call releases the GIL."""

    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        *,
        retry_timeout: float = 60.0,
        dial_timeout: float = 5.0,
        file_root: Optional[Union[str, "PathLike[str]"]] = None,
        route: bool = True,
    ) -> None: ...
    @property
    def endpoints(self) -> List[str]:
        """The broker addresses the client was made with."""
    def list(self, selector: Optional[str] = None) -> List[Journal]:
        """The journals matching ``selector`` (Gazette's label selector syntax)."""
    def apply(
        self,
        upsert: Sequence[JournalSpec] = (),
        delete: Sequence[str] = (),
        expect_mod_revision: Optional[Dict[str, int]] = None,
    ) -> int:
        """Creates, replaces and deletes journals in one etcd transaction; returns its revision."""
    def create_journal(self, name: str, **spec: Any) -> int:
        """Creates (or replaces) a journal; keyword arguments are those of ``JournalSpec``."""
    def delete_journal(self, name: str) -> int:
        """Deletes a journal; returns the etcd revision of the change."""
    def append(self, journal: str, data: bytes) -> Tuple[int, int]:
        """Appends ``data`` as one append; returns its ``(begin, end)`` offsets."""
    def read(self, journal: str, offset: int = 0, block: bool = False) -> Reader:
        """Reads ``journal`` from ``offset`` (-1: the write head) as ``bytes`` chunks."""
    def list_fragments(self, journal: str, *, signature_ttl: Optional[float] = None) -> List[Fragment]:
        """The journal's fragments, in offset order."""

class Transaction:
    """A transaction of a ``Publisher``: commits on a normal exit of its ``with`` block,
    rolls back on an exception."""

    def publish(self, journal: str, message: Dict[str, Any]) -> str:
        """Publishes ``message`` within the transaction; returns its UUID."""
    def commit(self) -> List[str]:
        """Commits; waits for the appends; returns the journals acknowledged."""
    def rollback(self) -> List[str]:
        """Rolls back (readers drop its messages); returns the journals acknowledged."""
    @property
    def is_open(self) -> bool:
        """Whether the transaction is still open."""
    def __enter__(self) -> "Transaction": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Publisher:
    """Publishes dict messages of one producer, with Gazette's UUIDs and transactions."""

    def __init__(self, client: Client, *, max_message_size: int = 64 << 20) -> None: ...
    @property
    def producer(self) -> str:
        """The producer id stamped in every UUID (12 hex digits)."""
    def publish(self, journal: str, message: Dict[str, Any]) -> str:
        """Publishes a message committed on its own; returns its UUID."""
    def transaction(self) -> Transaction:
        """Opens a transaction (one at a time per publisher)."""
    def flush(self) -> None:
        """Waits until everything published so far is acknowledged by the brokers."""

class Consumer(Iterator[Message]):
    """The committed messages of several journals, each delivered once, with checkpoints."""

    def __init__(
        self,
        client: Client,
        journals: Sequence[str],
        checkpoint: Optional[bytes] = None,
        *,
        block: bool = True,
        max_message_size: Optional[int] = None,
    ) -> None: ...
    @property
    def journals(self) -> List[str]:
        """The journals read."""
    @property
    def delivered(self) -> int:
        """How many messages were handed out."""
    def checkpoint(self) -> bytes:
        """The checkpoint covering every message handed out so far."""
    def __iter__(self) -> "Consumer": ...
    def __next__(self) -> Message:
        """The next committed message."""
    def close(self) -> None:
        """Stops reading."""
    def __enter__(self) -> "Consumer": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
