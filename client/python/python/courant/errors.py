"""The exceptions of the ``courant`` package.

Every exception is a :class:`CourantError`. Where a failure concerns a journal, its
``journal`` attribute names it and ``offset`` gives the journal offset (``None`` where no
offset is known); both also appear in the message.
"""

from typing import Optional

__all__ = [
    "CourantError",
    "InvalidArgumentError",
    "BrokerError",
    "JournalNotFoundError",
    "TransportError",
    "AppendUncertainError",
    "FramingError",
    "MessageTooLargeError",
    "FragmentError",
    "ProtocolError",
    "ClosedError",
]


class CourantError(Exception):
    """A failure of a Courant (or Gazette) broker call or of the message layer.

    Attributes:
        journal: The journal concerned, or ``None``.
        offset: The journal offset concerned, or ``None``.
        retried: Whether the call was retried (for this long, in seconds) before failing,
            or ``None`` when it was not retried.
    """

    def __init__(
        self,
        message: str,
        journal: Optional[str] = None,
        offset: Optional[int] = None,
        retried: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.journal = journal
        self.offset = offset
        self.retried = retried


class InvalidArgumentError(CourantError, ValueError):
    """An argument was refused before any call (a bad journal name, offset, address...)."""


class BrokerError(CourantError):
    """The broker answered with an error: a non-OK ``protocol.Status`` or a gRPC error.

    Attributes:
        status: The broker status name (e.g. ``"WRONG_APPEND_OFFSET"``), or ``None``.
        code: The gRPC status code name (e.g. ``"Unavailable"``), or ``None``.
    """

    status: Optional[str] = None
    code: Optional[str] = None


class JournalNotFoundError(BrokerError, LookupError):
    """The journal does not exist (status ``JOURNAL_NOT_FOUND``)."""


class TransportError(CourantError, ConnectionError):
    """No broker could be reached, or a connection failed (after retries)."""


class AppendUncertainError(CourantError):
    """A connection failed after an append was committed by the client and before the
    broker answered: the broker may or may not have written it. It was not retried, to
    avoid writing the content twice."""


class FramingError(CourantError, ValueError):
    """Journal bytes could not be framed or decoded as messages (a malformed frame, a
    journal whose ``content-type`` label names no known framing, a message that is not a
    JSON object...)."""


class MessageTooLargeError(FramingError):
    """A message is larger than the framing's limit."""


class FragmentError(CourantError):
    """A persisted fragment could not be fetched or decoded from its store."""


class ProtocolError(CourantError):
    """A broker's answer broke the protocol."""


class ClosedError(CourantError):
    """The object (reader, publisher, transaction, consumer) was already closed."""
