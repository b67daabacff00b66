"""Courant's Python client: journals of a Courant or Gazette broker, and Gazette's
exactly-once messages.

Journals::

    client = courant.Client("http://127.0.0.1:8080")
    client.create_journal("examples/greetings")
    client.append("examples/greetings", b"hello\\n")
    with client.read("examples/greetings") as chunks:
        data = b"".join(chunks)

Messages (dicts framed as JSON lines, with Gazette's UUIDs)::

    publisher = courant.Publisher(client)
    with publisher.transaction() as txn:
        txn.publish("examples/orders", {"ID": "a", "Value": 1})
    for msg in courant.read_committed(client, ["examples/orders"], block=False):
        print(msg.value, msg.offset)

Every call that waits on the network releases the GIL.
"""

from typing import Iterable, Optional

from ._courant import (
    Client,
    Consumer,
    Fragment,
    Journal,
    JournalSpec,
    Publisher,
    Reader,
    Transaction,
    __version__,
)
from ._message import Message
from .errors import (
    AppendUncertainError,
    BrokerError,
    ClosedError,
    CourantError,
    FragmentError,
    FramingError,
    InvalidArgumentError,
    JournalNotFoundError,
    MessageTooLargeError,
    ProtocolError,
    TransportError,
)

__all__ = [
    "Client",
    "Consumer",
    "Fragment",
    "Journal",
    "JournalSpec",
    "Message",
    "Publisher",
    "Reader",
    "Transaction",
    "read_committed",
    "__version__",
    "AppendUncertainError",
    "BrokerError",
    "ClosedError",
    "CourantError",
    "FragmentError",
    "FramingError",
    "InvalidArgumentError",
    "JournalNotFoundError",
    "MessageTooLargeError",
    "ProtocolError",
    "TransportError",
]


def read_committed(
    client: Client,
    journals: Iterable[str],
    checkpoint: Optional[bytes] = None,
    *,
    block: bool = True,
    max_message_size: Optional[int] = None,
) -> Consumer:
    """The committed messages of ``journals``, each delivered once, as a :class:`Consumer`.

    ``checkpoint`` is what an earlier consumer's :meth:`Consumer.checkpoint` returned: the
    new consumer delivers exactly the messages after those the earlier one had handed out.
    With ``block=False`` the iteration ends at the journals' write heads.
    """
    if isinstance(journals, str):
        journals = [journals]
    return Consumer(
        client,
        list(journals),
        checkpoint,
        block=block,
        max_message_size=max_message_size,
    )
