"""The message type a :class:`courant.Consumer` yields."""

from typing import Any, NamedTuple


class Message(NamedTuple):
    """A committed message, delivered once.

    Attributes:
        value: The message: a dict for JSON journals (including its ``"UUID"`` key), a
            list of strings for CSV journals, the bytes for protobuf journals.
        journal: The journal it was read from.
        offset: The journal offset of its first byte.
        uuid: Its UUID (canonical string form).
        end: The journal offset after its last byte.
    """

    value: Any
    journal: str
    offset: int
    uuid: str
    end: int
