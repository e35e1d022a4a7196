"""Entries to stored strings and back: the entry JSON and the envelope policy.

The plaintext entry is compact JSON with keys in the reference's order and
absent optionals omitted (never ``null``)::

    {"value":...,"brand":...,"createdAt":ms,"updatedAt":ms,"expiresAt":ms,"metadata":{...}}

With encryption on, that JSON is sealed into an envelope (see
:mod:`remember_sync._crypto`); our default binds the storage key without the
prefix as associated data.  Nothing here ever returns plaintext for a value
that "does not look encrypted": such a value is unreadable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ._crypto import Keyring, seal
from ._text import TEXT_ERRORS
from .errors import RememberDecryptionError, RememberInputTypeError
from .types import Namespace, RememberEntry

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


_NoneType = type(None)
#: Exact types that need no further look (their subclasses take the general path).
_LEAVES = frozenset({str, int, bool, _NoneType})


def check_json_value(value: Any, what: str) -> None:
    """Raise ``TypeError`` unless *value* round-trips through JSON unchanged in kind.

    Rejects non-JSON types, NaN/Infinity and dicts with non-``str`` keys (which
    ``json`` would silently turn into strings).
    """
    leaves = _LEAVES
    stack = [value]
    # Containers already checked: a shared one is checked once, and a container that
    # holds itself cannot loop forever (json then reports the circular reference).
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in leaves:  # the common case, decided without isinstance calls
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if kind is dict:
            for k, v in item.items():
                if type(k) is not str and not isinstance(k, str):
                    raise RememberInputTypeError(
                        f"{what} has a dict key of type {type(k).__name__}; JSON keys must be str"
                    )
                if type(v) not in leaves:
                    stack.append(v)
            continue
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
    return entry_json(
        entry.value,
        entry.brand,
        entry.created_at,
        entry.updated_at,
        entry.expires_at,
        entry.metadata,
    )


def entry_json(
    value: Any,
    brand: str | None,
    created_at: int,
    updated_at: int,
    expires_at: int | None,
    metadata: dict[str, Any] | None,
    extras: dict[str, Any] | None = None,
) -> str:
    """:func:`entry_to_json` from the fields, without building a :class:`RememberEntry`.

    :param extras: optional members written after ``metadata`` (the search data:
        ``writtenBy``, the tool that wrote the entry, and ``embedding``, its sealed
        vector).  Readers that follow the reference's rules ignore members they do
        not know; :func:`entry_record` returns them.
    """
    try:
        if (
            brand is None
            and metadata is None
            and not extras
            and type(created_at) is int
            and type(updated_at) is int
            and (expires_at is None or type(expires_at) is int)
        ):
            # The usual entry, assembled directly: the same bytes json would write
            # for this dict (plain ints print the same either way), one dict less.
            text = f'{{"value":{_dumps(value)},"createdAt":{created_at},"updatedAt":{updated_at}'
            if expires_at is not None:
                text += f',"expiresAt":{expires_at}'
            return text + "}"
        obj: dict[str, Any] = {"value": value}
        if brand is not None:
            obj["brand"] = brand
        obj["createdAt"] = created_at
        obj["updatedAt"] = updated_at
        if expires_at is not None:
            obj["expiresAt"] = expires_at
        if metadata is not None:
            obj["metadata"] = metadata
        if extras:
            for name, extra in extras.items():
                if name not in obj:
                    obj[name] = extra
        return str(_dumps(obj))
    except RecursionError as exc:
        # check_json_value walks iteratively; json's encoder recurses.
        raise RememberInputTypeError(
            "value is nested too deeply to be stored as JSON"
        ) from exc
    except (TypeError, ValueError) as exc:  # pragma: no cover - values are checked before
        raise RememberInputTypeError(f"entry is not JSON-serialisable: {exc}") from exc


def _ms(value: Any, name: str) -> int:
    # NaN and +-Infinity (JSON 1e400) are not times: int() of them would raise a bare error.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RememberDecryptionError(f"entry field {name} is not a finite number")
    return int(value)


# The C scanner json.loads runs underneath its wrappers (typeshed does not describe
# the attribute, hence the annotation).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


_NOT_PARSED: Any = object()

#: An entry as a tuple: (value, brand, created_at, updated_at, expires_at, metadata),
#: the order of :class:`~remember_sync.types.RememberEntry`'s fields.
EntryFields = tuple[Any, str | None, int, int, int | None, dict[str, Any] | None]


def entry_fields(text: str | bytes) -> EntryFields:
    """Parse and check an entry: ``(value, brand, created_at, updated_at, expires_at, metadata)``.

    :raises RememberDecryptionError: if *text* is not an entry.
    """
    return entry_record(text)[0]


def entry_record(text: str | bytes) -> tuple[EntryFields, dict[str, Any]]:
    """:func:`entry_fields` and the parsed entry object (its optional extra members too).

    :raises RememberDecryptionError: if *text* is not an entry.
    """
    # json's C scanner directly when the text is one JSON object (json.loads adds its
    # encoding detection and Python wrappers); anything the shortcut does not settle
    # (surrounding whitespace, another encoding, garbage) goes through json.loads
    # itself, so the result and the errors are json's own.
    obj: Any = _NOT_PARSED
    try:
        candidate: str | None = None
        if type(text) is bytes:
            # Bytes opening with "{" and no NUL after it are UTF-8 to json.loads
            # (detect_encoding), decoded with surrogatepass: a decrypted entry.
            if text[:1] == b"{" and (len(text) == 1 or text[1] != 0):
                candidate = text.decode("utf-8", "surrogatepass")
        elif type(text) is str and text[:1] == "{":
            candidate = text
        if candidate is not None:
            obj, end = _scan_json(candidate, 0)
            if end != len(candidate):
                obj = _NOT_PARSED
    except (ValueError, StopIteration, RecursionError):
        obj = _NOT_PARSED
    try:
        if obj is _NOT_PARSED:
            obj = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise RememberDecryptionError("stored entry is not JSON") from exc
    if type(obj) is not dict or "value" not in obj:
        raise RememberDecryptionError("stored value is not a remember entry")
    brand = obj.get("brand")
    metadata = obj.get("metadata")
    if brand is not None and not isinstance(brand, str):
        raise RememberDecryptionError("entry brand is not a string")
    if metadata is not None and not isinstance(metadata, dict):
        raise RememberDecryptionError("entry metadata is not an object")
    created, updated, expires = obj.get("createdAt"), obj.get("updatedAt"), obj.get("expiresAt")
    return (
        obj["value"],
        brand,
        created if type(created) is int else _ms(created, "createdAt"),
        updated if type(updated) is int else _ms(updated, "updatedAt"),
        None if expires is None else expires if type(expires) is int else _ms(expires, "expiresAt"),
        metadata,
    ), obj


def entry_from_json(text: str | bytes) -> RememberEntry:
    """Parse an entry; :class:`RememberDecryptionError` if it is not one."""
    return RememberEntry(*entry_fields(text))


class EntryCodec:
    """Turns entries into stored strings for one plugin's settings.

    :param keyring: the secrets, or ``None`` when encryption is disabled.
    :param prefix: the key prefix ``P`` (stripped from the associated data).
    :param bind_key: seal with ``kid`` and the storage key as associated data
        (our default); ``False`` writes the plain reference envelope.
    :param accept_unbound: open envelopes without the key binding (1.8.0's form).
        ``False`` makes them unreadable: someone who can write to the store
        could otherwise copy such an envelope from one key of a namespace over
        another, and it would open there.
    """

    def __init__(
        self,
        keyring: Keyring | None,
        *,
        prefix: str,
        bind_key: bool = True,
        accept_unbound: bool = True,
    ) -> None:
        self.keyring = keyring
        self.prefix = prefix
        self.bind_key = bind_key
        self.accept_unbound = accept_unbound

    def encode(self, entry: RememberEntry, ns: Namespace, storage_key: str) -> str:
        """The string to store for *entry* under *storage_key*."""
        return self.seal_text(entry_to_json(entry).encode("utf-8"), ns, storage_key)

    def seal_text(
        self,
        text: bytes,
        ns: Namespace,
        storage_key: str,
        *,
        writer: str | None = None,
        like: str | None = None,
    ) -> str:
        """The string to store for an already serialised entry *text* (UTF-8).

        With subject keys (:attr:`Keyring.subjects <remember_sync._crypto.Keyring.subjects>`)
        an entry of a person is sealed under that person's key: the user of a user
        namespace or of a ``stateless-user:`` session, else *writer* (the signed-in
        user writing into a session), else the subject key the stored envelope
        *like* names (an entry sealed anew in place).

        :raises RememberStoreError: the keystore failed.
        """
        keyring = self.keyring
        if keyring is None:
            return text.decode("utf-8")
        if self.bind_key:
            aad = storage_key[len(self.prefix) :].encode("utf-8", TEXT_ERRORS)
            subjects = keyring.subjects
            if subjects is not None:
                sealed = subjects.seal_subject(text, ns, aad, writer, like)
                if sealed is not None:
                    return sealed
            return seal(text, keyring.key(ns), kid=keyring.primary_kid, aad=aad)
        return seal(text, keyring.key(ns))

    def decode(self, stored: str, ns: Namespace, storage_key: str) -> RememberEntry:
        """The entry stored under *storage_key*; :class:`RememberDecryptionError` if unreadable."""
        return RememberEntry(*self.open_fields(stored, ns, storage_key)[0])

    def reseal(self, stored: str, ns: Namespace, storage_key: str) -> str:
        """*stored* sealed anew under the primary secret and envelope form, its entry
        text unchanged (every member kept, the search data included).

        :raises RememberDecryptionError: *stored* is unreadable or not an entry.
        """
        keyring = self.keyring
        if keyring is None:
            entry_fields(stored)
            return stored
        aad = storage_key[len(self.prefix) :].encode("utf-8", TEXT_ERRORS)
        text = keyring.open(stored, ns, aad, bound_only=not self.accept_unbound)[0]
        entry_fields(text)
        return self.seal_text(text, ns, storage_key, like=stored)

    def decode_many(
        self, stored: Sequence[str], ns: Namespace, storage_keys: Sequence[str]
    ) -> list[EntryFields | RememberDecryptionError]:
        """The entries of many stored values of *ns*: each one's fields, or its error."""
        return [
            item if isinstance(item, RememberDecryptionError) else item[0]
            for item in self.records_many(stored, ns, storage_keys)
        ]

    def records_many(
        self, stored: Sequence[str], ns: Namespace, storage_keys: Sequence[str]
    ) -> list[tuple[EntryFields, dict[str, Any]] | RememberDecryptionError]:
        """:meth:`decode_many` with each entry's parsed object (see :func:`entry_record`)."""
        keyring = self.keyring
        if keyring is None:
            opened: Sequence[tuple[str | bytes, int, bool] | RememberDecryptionError]
            opened = [(text, 0, True) for text in stored]
        else:
            cut = len(self.prefix)
            aads = [key[cut:].encode("utf-8", TEXT_ERRORS) for key in storage_keys]
            opened = keyring.open_many(stored, ns, aads, bound_only=not self.accept_unbound)
        out: list[tuple[EntryFields, dict[str, Any]] | RememberDecryptionError] = []
        for item in opened:
            if isinstance(item, RememberDecryptionError):
                out.append(item)
                continue
            try:
                out.append(entry_record(item[0]))
            except RememberDecryptionError as exc:
                out.append(exc)
        return out

    def decode_fields(
        self, stored: str, ns: Namespace, storage_key: str
    ) -> tuple[EntryFields, bool]:
        """The entry as the tuple of :func:`entry_fields`, and whether its stored form is current.

        The second item is ``False`` when the value was sealed by an older secret
        or in the other envelope form, i.e. when ``rotate`` should re-seal it.
        """
        fields, index, bound = self.open_fields(stored, ns, storage_key)
        return fields, index == 0 and bound == self.bind_key

    def open_fields(
        self, stored: str, ns: Namespace, storage_key: str
    ) -> tuple[EntryFields, int, bool]:
        """The entry's fields, the index of the secret that opened it, and whether it is bound.

        ``accept_unbound=False`` is the keyring's ``bound_only``.  Without
        encryption there is no envelope: the index is ``0`` and "bound" is
        ``bind_key`` (so the entry counts as current).

        :raises RememberDecryptionError: unreadable, or unbound and refused.
        """
        keyring = self.keyring
        if keyring is None:
            return entry_fields(stored), 0, self.bind_key
        # The key's bytes as the store holds them (remember_sync._text): a key that is
        # not UTF-8 -- another writer's -- binds as those bytes and opens nothing.
        aad = storage_key[len(self.prefix) :].encode("utf-8", TEXT_ERRORS)
        opened = keyring.open(stored, ns, aad, bound_only=not self.accept_unbound)
        return entry_fields(opened[0]), opened[1], opened[2]
