"""Entries to stored strings and back: the entry JSON and the envelope policy.

The plaintext entry is compact JSON with keys in the reference's order and
absent optionals omitted (never ``null``)::

    {"value":...,"brand":...,"createdAt":ms,"updatedAt":ms,"expiresAt":ms,"metadata":{...}}

With encryption on, that JSON is sealed into an envelope (see
:mod:`remember_sync.crypto`); our default binds the storage key without the
prefix as associated data.  Nothing here ever returns plaintext for a value
that "does not look encrypted": such a value is unreadable.
"""

from __future__ import annotations

import json
from typing import Any

from .crypto import Keyring, parse_envelope, seal
from .errors import RememberDecryptionError, RememberInputTypeError
from .types import Namespace, RememberEntry

__all__ = ["EntryCodec", "check_json_value", "entry_from_json", "entry_to_json"]

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def check_json_value(value: Any, what: str) -> None:
    """Raise ``TypeError`` unless *value* round-trips through JSON unchanged in kind.

    Rejects non-JSON types, NaN/Infinity and dicts with non-``str`` keys (which
    ``json`` would silently turn into strings).
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                raise RememberInputTypeError(
                    f"{what} contains the float {item!r}, which JSON cannot represent"
                )
            continue
        if isinstance(item, (list, tuple)):
            stack.extend(item)
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise RememberInputTypeError(
                        f"{what} has a dict key of type {type(k).__name__}; JSON keys must be str"
                    )
                stack.append(v)
            continue
        raise RememberInputTypeError(
            f"{what} of type {type(item).__name__} is not JSON-serialisable"
        )


def entry_to_json(entry: RememberEntry) -> str:
    """Serialise *entry* in the reference's key order, omitting absent optionals."""
    obj: dict[str, Any] = {"value": entry.value}
    if entry.brand is not None:
        obj["brand"] = entry.brand
    obj["createdAt"] = entry.created_at
    obj["updatedAt"] = entry.updated_at
    if entry.expires_at is not None:
        obj["expiresAt"] = entry.expires_at
    if entry.metadata is not None:
        obj["metadata"] = entry.metadata
    try:
        return str(_dumps(obj))
    except (TypeError, ValueError) as exc:  # pragma: no cover - values are checked before
        raise RememberInputTypeError(f"entry is not JSON-serialisable: {exc}") from exc


def _ms(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise RememberDecryptionError(f"entry field {name} is not a number")
    return int(value)


def entry_from_json(text: str | bytes) -> RememberEntry:
    """Parse an entry; :class:`RememberDecryptionError` if it is not one."""
    try:
        obj = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise RememberDecryptionError("stored entry is not JSON") from exc
    if not isinstance(obj, dict) or "value" not in obj:
        raise RememberDecryptionError("stored value is not a remember entry")
    brand = obj.get("brand")
    metadata = obj.get("metadata")
    if brand is not None and not isinstance(brand, str):
        raise RememberDecryptionError("entry brand is not a string")
    if metadata is not None and not isinstance(metadata, dict):
        raise RememberDecryptionError("entry metadata is not an object")
    expires = obj.get("expiresAt")
    return RememberEntry(
        value=obj["value"],
        brand=brand,
        created_at=_ms(obj.get("createdAt"), "createdAt"),
        updated_at=_ms(obj.get("updatedAt"), "updatedAt"),
        expires_at=None if expires is None else _ms(expires, "expiresAt"),
        metadata=metadata,
    )


class EntryCodec:
    """Turns entries into stored strings for one plugin's settings.

    :param keyring: the secrets, or ``None`` when encryption is disabled.
    :param prefix: the key prefix ``P`` (stripped from the associated data).
    :param bind_key: seal with ``kid`` and the storage key as associated data
        (our default); ``False`` writes the plain reference envelope.
    """

    def __init__(self, keyring: Keyring | None, *, prefix: str, bind_key: bool = True) -> None:
        self.keyring = keyring
        self.prefix = prefix
        self.bind_key = bind_key

    def _aad(self, storage_key: str) -> bytes:
        return storage_key[len(self.prefix) :].encode("utf-8")

    def encode(self, entry: RememberEntry, ns: Namespace, storage_key: str) -> str:
        """The string to store for *entry* under *storage_key*."""
        return self.seal_text(entry_to_json(entry).encode("utf-8"), ns, storage_key)

    def seal_text(self, text: bytes, ns: Namespace, storage_key: str) -> str:
        """The string to store for an already serialised entry *text* (UTF-8)."""
        if self.keyring is None:
            return text.decode("utf-8")
        key = self.keyring.key(ns)
        if self.bind_key:
            return seal(text, key, kid=self.keyring.primary_kid, aad=self._aad(storage_key))
        return seal(text, key)

    def decode(self, stored: str, ns: Namespace, storage_key: str) -> RememberEntry:
        """The entry stored under *storage_key*; :class:`RememberDecryptionError` if unreadable."""
        return self.decode_detail(stored, ns, storage_key)[0]

    def decode_detail(
        self, stored: str, ns: Namespace, storage_key: str
    ) -> tuple[RememberEntry, bool]:
        """Decode, and tell whether the stored form is current.

        The second item is ``False`` when the value was sealed by an older secret
        or in the other envelope form, i.e. when ``rotate`` should re-seal it.
        """
        if self.keyring is None:
            return entry_from_json(stored), True
        env = parse_envelope(stored)
        plaintext, index = self.keyring.open(env, ns, self._aad(storage_key))
        return entry_from_json(plaintext), index == 0 and env.aad == self.bind_key
