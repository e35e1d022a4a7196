"""Compare-and-set markers of :class:`~remember_sync.stores.redis.RedisStore`: tokens and slots.

redis-py sends a command again when its connection fails after sending it
(the retry policy of :mod:`._redis_connect`), so a compare-and-set whose reply
was lost may reach the server twice.  Each call therefore carries a random
token, and the script records the tokens of the writes that landed in a marker
key beside the entry (:data:`~._index_lua.CAS_TOKEN_MS`): a resend of a write
that landed answers "written" instead of comparing again.  On a Redis Cluster
the marker must live in the entry's hash slot: :func:`slot_tag` gives a short
hash tag for every slot.
"""

from __future__ import annotations

import binascii
import os
import threading

#: Hash slots of a Redis Cluster.
SLOTS = 16384

_tags: list[str] | None = None
_tags_lock = threading.Lock()


def new_token() -> bytes:
    """A fresh token for one compare-and-set (its resends carry the same one)."""
    return os.urandom(12)


def key_slot(key: bytes) -> int:
    """The Redis Cluster slot of *key* (CRC16 of its hash tag, or of the whole key)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % SLOTS


def slot_tag(slot: int) -> str:
    """A short text (hex digits) whose hash tag ``{text}`` falls in *slot*.

    The table of all slots is built once per process, on first use (about
    300,000 CRC16s of short strings).
    """
    global _tags
    tags = _tags
    if tags is None:
        with _tags_lock:
            if _tags is None:
                found: list[str | None] = [None] * SLOTS
                left, n = SLOTS, 0
                while left:
                    text = format(n, "x")
                    slot_of = binascii.crc_hqx(text.encode(), 0) % SLOTS
                    if found[slot_of] is None:
                        found[slot_of] = text
                        left -= 1
                    n += 1
                _tags = [t for t in found if t is not None]
            tags = _tags
    return tags[slot]
