"""Search over what was remembered: the tokenizer, the ranking and the sealed search data.

Nothing here touches a store.  The core lists a namespace's stored values
(through its listing index) and hands them to :class:`SearchCache`, which
keeps, per namespace, what it decrypted and tokenised, by key and stored text
(the text itself, or its digest when long): a value another process rewrote
has another text (a fresh IV on every write) and is decrypted again, and a
cached entry whose key that read did not list is dropped, so the store read on
every search stays the source of truth: a result is never an entry ``get``
would not return, whichever process forgot, erased or rewrote it.

Ranking is BM25 over the key (weighted up), every string and object key at
any depth of the value, the brand and the metadata, after Unicode folding
(NFKD, combining marks dropped, casefold), a light English stemmer and a
small stop-word list.  A query term also matches, at lower weights, a few
general synonyms, the terms it is a prefix of, the vocabulary terms that are a
prefix of it, and (five letters or more) terms one edit away.  With an
embedder, each entry's vector (sealed inside its envelope, see
:func:`embedding_member`) adds its similarity to the query (see :func:`_fuse`).
The work of a query is bounded whatever the vocabulary: prefixes are found by
bisection, one-edit matches as generated edits.
"""

from __future__ import annotations

import array
import base64
import bisect
import contextlib
import hashlib
import heapq
import math
import operator
import re
import struct
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ._codec import EntryFields
from ._embedders import NAMED, named_embedder
from .errors import RememberConfigurationError, RememberInputError, RememberInputTypeError

#: The longest query accepted, in characters.
MAX_QUERY_CHARS: Final = 2_000
#: Most terms of a query that are ranked (the rest are ignored).
_MAX_QUERY_TERMS: Final = 32
#: Decoded entries a plugin keeps for search, over all namespaces, by default.
DEFAULT_CACHE_ENTRIES: Final = 100_000
#: Stored bytes (their texts' length) whose decoded entries a plugin keeps, by default.
DEFAULT_CACHE_BYTES: Final = 256 * 1024 * 1024
#: Characters of one entry's text that are indexed (a bound on memory per entry).
_MAX_TEXT_CHARS: Final = 65_536
#: Stored texts up to this many characters are kept as they are to recognise them
#: unchanged; longer ones by their digest.
_MAX_KEPT_TEXT: Final = 4096
#: Tokens longer than this are not words (hashes, base64) and are not indexed.
_MAX_TOKEN: Final = 40
_K1: Final = 1.2
_B: Final = 0.75
#: How much a term in the key counts against one in the value.
_KEY_WEIGHT: Final = 3.0
#: Weights of the matches a query term is expanded to.
_SYNONYM: Final = 0.7
_PREFIX: Final = 0.6
_SHORTER: Final = 0.5
_TYPO: Final = 0.5
#: Most prefix, shorter or typo matches one query term expands to.
_MAX_EXPANSIONS: Final = 24
#: The share of the hybrid score given to meaning (the rest is the lexical score).
_SEMANTIC_SHARE: Final = 0.5

# -- text ---------------------------------------------------------------------------------

# Combining marks of the Unicode blocks that carry Latin, Greek and Cyrillic accents.
_MARKS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
# Word characters without "_": snake_case keys split into words.
_WORD = re.compile(r"[^\W_]+")
# camelCase and PascalCase keys split into words ("favoriteColor" -> "favorite Color").
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

_STOP: Final = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve y don doesn didn isn aren wasn weren let lets also tell know remember
    remembered stored saved anything something thing things please""".split()
)

# General English synonym groups for what agents keep (people, places, work, likes,
# time, software).  A query term matches the others of its group at a lower weight.
# The groups are general vocabulary, not tuned to any evaluation's questions.  Words
# common in keys and values whatever they are about (mode, state, type, status, name,
# number, time, size, key, value, user, result...) are in no group (_GENERIC): through
# one, every entry keyed ``*_mode`` would match a search for "dark".
_SYNONYM_GROUPS: Final = (
    "like love enjoy prefer favorite favourite fond fan",
    "dislike hate avoid detest",
    "job work occupation profession career employer employment",
    "company employer firm organization organisation business",
    "live home reside residence city town located location",
    "wife husband spouse partner married",
    "child children kid son daughter",
    "mother mom mum father dad parent",
    "brother sister sibling",
    "friend buddy colleague coworker",
    "pet dog cat",
    "birthday born birth",
    "age birthday",
    "phone mobile cell telephone",
    "email mail inbox",
    "food meal eat cuisine dish diet",
    "drink beverage coffee tea",
    "vegetarian vegan plant",
    "allergy allergic intolerance intolerant",
    "doctor physician medical health",
    "medication medicine drug prescription",
    "language speak spoken",
    "music song band artist listen",
    "movie film cinema",
    "book read reading novel author",
    "sport exercise workout gym fitness running",
    "travel trip vacation holiday journey flight",
    "car vehicle drive",
    "money budget cost price spend spending salary",
    "meeting call appointment schedule calendar",
    "deadline due date",
    "timezone zone",
    "morning early",
    "evening night late",
    "week weekly",
    "day daily",
    "month monthly",
    "year yearly annual",
    "project repo repository codebase",
    "bug issue defect error problem",
    "fix patch resolve solution",
    "deploy deployment release ship production",
    "test testing tests ci",
    "database db sql postgres postgresql mysql sqlite",
    "server host",
    "api endpoint",
    "credential secret password passphrase",
    "config configuration setting settings option preference",
    "theme appearance color colour palette",
    "dark light",
    "font typeface",
    "editor ide vim emacs vscode",
    "shell terminal console bash zsh",
    "os operating system linux macos windows",
    "browser chrome firefox safari",
    "notify notification alert reminder remind",
    "cache cached caching",
    "search query lookup find",
    "weather forecast temperature",
    "address street",
    "goal objective aim target",
    "task todo chore",
    "note notes memo",
    "team group squad",
    "manager boss lead supervisor",
    "customer client",
    "purchase buy bought",
    "ticket reservation booking",
    "hotel accommodation lodging stay",
    "restaurant cafe dining",
    "school university college study studied education degree",
    "hobby hobbies pastime interest interests",
    "style format formatting tone",
    "short brief concise terse",
    "long detailed verbose",
    "language locale",
    "currency dollar euro",
    "small large big",
    "fast quick speed",
    "slow latency",
    "sleep bedtime",
    "wake wakeup alarm",
)


def fold(text: str) -> str:
    """*text* casefolded, accents removed (NFKD, combining marks dropped)."""
    if not text.isascii():
        text = _MARKS.sub("", unicodedata.normalize("NFKD", text))
    return text.casefold()


def stem(word: str) -> str:
    """A light English stemmer: plural and verb endings off, a final ``e`` and ``y`` evened.

    Deterministic and the same for documents and queries, so ``likes``,
    ``liked``, ``liking`` and ``like`` meet; it is not a dictionary form.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("ied") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith(("xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith("ing") and len(word) >= 6:
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) >= 5:
        word = _undouble(word[:-2])
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 2 and word.endswith("y"):
        word = word[:-1] + "i"
    return word


def _undouble(word: str) -> str:
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in "aeioulsz":
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The indexed terms of *text*: split on non-word characters, ``_`` and camelCase,
    folded, stop words dropped, stemmed."""
    text = _CAMEL.sub(" ", text[:_MAX_TEXT_CHARS])
    out = []
    for word in _WORD.findall(fold(text)):
        if word in _STOP or len(word) > _MAX_TOKEN:
            continue
        out.append(stem(word))
    return out


_GENERIC: Final = frozenset(
    """mode state type kind status name number time size key value values data info item
    list user result output response answer order plan run old new current default level
    flag enabled on off id address count total""".split()
)


def _synonym_table() -> dict[str, tuple[str, ...]]:
    table: dict[str, set[str]] = {}
    generic = {stem(w) for w in _GENERIC}
    for group in _SYNONYM_GROUPS:
        terms = {stem(w) for w in group.split()} - generic
        for term in terms:
            table.setdefault(term, set()).update(terms - {term})
    return {term: tuple(sorted(others)) for term, others in table.items()}


_SYNONYMS: Final = _synonym_table()


def _strings(value: Any, out: list[str], budget: int) -> int:
    """Append the strings (and object keys) of *value* at any depth; return the budget left."""
    stack = [value]
    while stack and budget > 0:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            budget -= len(item)
        elif isinstance(item, dict):
            for k, v in item.items():
                out.append(k)
                budget -= len(k)
                stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, (int, float)):
            out.append(str(item))
    return budget


def entry_text(
    key: str, value: Any, brand: str | None, metadata: Mapping[str, Any] | None
) -> str:
    """The text of an entry a person would search: key, value strings, brand, metadata.

    What the embedder is given, and (the key apart) what is indexed lexically.
    """
    parts = [key.replace("_", " ")]
    budget = _strings(value, parts, _MAX_TEXT_CHARS)
    if brand:
        parts.append(brand)
    if metadata:
        _strings(metadata, parts, budget)
    return "\n".join(parts)[:_MAX_TEXT_CHARS]


def preview(value: Any, size: int = 160) -> str:
    """A short text of *value* for a search result: its strings, or its JSON."""
    if isinstance(value, str):
        text = value
    else:
        parts: list[str] = []
        _strings(value, parts, size * 4)
        text = " ".join(parts)
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 1] + "…"


def check_query(query: object, limit: object, *, max_limit: int) -> tuple[str, int]:
    """Validate a search's *query* and *limit*.

    :raises RememberInputTypeError: *query* is not a ``str``.
    :raises RememberInputError: an empty or too long query, a bad *limit*.
    """
    if not isinstance(query, str):
        raise RememberInputTypeError(f"query must be a str; got {type(query).__name__}")
    if not query.strip():
        raise RememberInputError("query must not be empty")
    if len(query) > MAX_QUERY_CHARS:
        raise RememberInputError(
            f"query is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_limit:
        raise RememberInputError(f"limit must be an int from 1 to {max_limit}; got {limit!r}")
    return query, limit


# -- embeddings -----------------------------------------------------------------------------

Embedder = Callable[[str], Sequence[float]]


@dataclass(frozen=True)
class SearchSettings:
    """The ``search`` option of ``RememberPlugin.init``, checked.

    :param embedder: text -> vector, or ``None`` for lexical ranking only (the
        option also takes an embedder's name, e.g. ``"wordllama"``).
    :param model: the name stored with each vector; a vector stored under
        another name is recomputed (in memory) on search.
    :param cache_entries: decoded entries kept for search over all namespaces.
    :param cache_bytes: the same, counted in the length of their stored texts.
    """

    embedder: Embedder | None = None
    model: str = ""
    cache_entries: int = DEFAULT_CACHE_ENTRIES
    cache_bytes: int = DEFAULT_CACHE_BYTES


def build_settings(options: object) -> SearchSettings:
    """The :class:`SearchSettings` of the ``search`` option (``None``: lexical only).

    :raises RememberConfigurationError: naming the bad key.
    """
    if options is None:
        return SearchSettings()
    if not isinstance(options, Mapping):
        raise RememberConfigurationError(
            f"RememberPlugin.init option 'search': must be a dict; got {type(options).__name__}"
        )
    unknown = sorted(set(options) - {"embedder", "model", "cache_entries", "cache_bytes"})
    if unknown:
        raise RememberConfigurationError(
            f"RememberPlugin.init option 'search': unknown key(s) {', '.join(map(repr, unknown))}"
            "; allowed: ['cache_bytes', 'cache_entries', 'embedder', 'model']"
        )
    embedder = options.get("embedder")
    if isinstance(embedder, str):
        try:
            embedder = load_embedder(embedder)
        except RememberConfigurationError as exc:
            raise RememberConfigurationError(
                f"RememberPlugin.init option 'search.embedder': {exc}"
            ) from exc
    if embedder is not None and not callable(embedder):
        raise RememberConfigurationError(
            "RememberPlugin.init option 'search.embedder': must be a callable text -> vector"
            f" or an embedder's name ({', '.join(sorted(NAMED))})"
        )
    model = options.get("model")
    if model is None:
        model = "" if embedder is None else _callable_name(embedder)
    if not isinstance(model, str) or (embedder is not None and not model):
        raise RememberConfigurationError(
            "RememberPlugin.init option 'search.model': must be a non-empty str"
        )
    bounds = []
    for name, default in (("cache_entries", DEFAULT_CACHE_ENTRIES),
                          ("cache_bytes", DEFAULT_CACHE_BYTES)):
        size = options.get(name, default)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise RememberConfigurationError(
                f"RememberPlugin.init option 'search.{name}': must be an int >= 1; got {size!r}"
            )
        bounds.append(size)
    return SearchSettings(embedder, model, bounds[0], bounds[1])


def load_embedder(spec: str) -> Embedder:
    """The embedder called *spec* (``"wordllama"``, see :mod:`remember_sync._embedders`),
    or the one at ``"module:attribute"`` (a class is instantiated without arguments).

    :raises RememberConfigurationError: it cannot be imported or is not callable.
    """
    import importlib  # noqa: PLC0415 - only the command line names embedders

    if spec in NAMED:
        return named_embedder(spec)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise RememberConfigurationError(
            f"an embedder is one of {', '.join(sorted(NAMED))} or 'module:attribute' "
            f"(e.g. 'mypkg.embed:embedder'); got {spec!r}"
        )
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise RememberConfigurationError(f"cannot load the embedder {spec!r}: {exc}") from exc
    if isinstance(found, type):
        found = found()
    if not callable(found):
        raise RememberConfigurationError(f"the embedder {spec!r} is not callable")
    return found  # type: ignore[no-any-return]


def _callable_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "model_name", None)
    if isinstance(name, str) and name:
        return name
    kind = fn if isinstance(fn, type) or hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', 'embedder')}"


def _unit_vector(raw: object) -> tuple[float, ...]:
    """*raw* (what an embedder returned) as a unit-length tuple of floats.

    :raises RememberConfigurationError: not a non-empty sequence of finite numbers.
    """
    try:
        values = tuple(float(x) for x in raw)  # type: ignore[attr-defined]
    except (TypeError, ValueError) as exc:
        raise RememberConfigurationError(
            "the search embedder must return a sequence of numbers"
        ) from exc
    if not values or not all(math.isfinite(x) for x in values):
        raise RememberConfigurationError(
            "the search embedder returned an empty vector or one with NaN or infinity"
        )
    norm = math.sqrt(sum(x * x for x in values))
    return values if norm == 0 else tuple(x / norm for x in values)


def embed(settings: SearchSettings, text: str) -> tuple[float, ...]:
    """The unit vector of *text* (``settings.embedder`` must be set)."""
    assert settings.embedder is not None
    return _unit_vector(settings.embedder(text))


def embedding_member(
    settings: SearchSettings, key: str, value: Any, brand: str | None,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """The ``embedding`` member written inside an entry (so sealed with it), or ``None``.

    ``{"model": name, "dims": n, "data": base64url(little-endian float16)}``.
    """
    if settings.embedder is None:
        return None
    raw = settings.embedder(entry_text(key, value, brand, metadata))
    np = _np()
    if np is not None:  # the same unit vector and bytes, without a Python loop
        try:
            array_ = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError):
            array_ = None
        if array_ is not None and array_.ndim == 1 and array_.size:
            if not np.isfinite(array_).all():
                _unit_vector(raw)  # raises, naming the problem
            norm = float(np.sqrt(np.dot(array_, array_)))
            unit = array_ if norm == 0 else array_ / norm
            return _member(settings, array_.size, unit.astype("<f2").tobytes())
    vector = _unit_vector(raw)
    return _member(settings, len(vector), struct.pack(f"<{len(vector)}e", *vector))


def _member(settings: SearchSettings, dims: int, data: bytes) -> dict[str, Any]:
    return {
        "model": settings.model,
        "dims": dims,
        "data": base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii"),
    }


def stored_vector(member: object, model: str) -> tuple[float, ...] | None:
    """The vector of an ``embedding`` member written for *model*, or ``None``."""
    if not isinstance(member, dict) or member.get("model") != model:
        return None
    dims, data = member.get("dims"), member.get("data")
    if not isinstance(dims, int) or not isinstance(data, str) or not 0 < dims <= 65_536:
        return None
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        values = struct.unpack(f"<{dims}e", raw)
    except (ValueError, struct.error):
        return None
    return _unit_vector(values) if all(math.isfinite(x) for x in values) else None


# -- the per-process search data ----------------------------------------------------------


@dataclass
class _Doc:
    digest: str | bytes
    size: int
    fields: EntryFields
    terms: dict[str, float]
    length: float
    written_by: str | None
    vector: array.array[float] | None


class _Corpus:
    """One namespace's decoded entries and their postings, updated entry by entry.

    ``lock`` is held by the search using it (decrypting and ranking), so that
    searches of other namespaces never wait for it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.docs: dict[str, _Doc] = {}
        self.postings: dict[str, dict[str, float]] = {}
        self.total_length = 0.0
        self.size = 0  # the stored texts' length
        # BM25's length normalisation per entry, for the average length it was made for.
        self._norms: tuple[float, dict[str, float]] = (-1.0, {})
        # The entries' vectors as one matrix (numpy), for the dimensions it was made for.
        self._matrix: tuple[int, list[str], Any] | None = None
        # The vocabulary in order, for prefix lookups by bisection: terms added since
        # it was last ordered wait in ``_pending``; terms whose last posting went stay
        # in it (skipped) until they are a quarter of it.
        self._sorted: list[str] = []
        self._pending: list[str] = []
        self._indexed: set[str] = set()

    def add(self, bare: str, doc: _Doc) -> None:
        self._norms, self._matrix = (-1.0, {}), None
        self.docs[bare] = doc
        self.total_length += doc.length
        self.size += doc.size
        for term, tf in doc.terms.items():
            posting = self.postings.get(term)
            if posting is None:
                posting = self.postings[term] = {}
                if term not in self._indexed:
                    self._indexed.add(term)
                    self._pending.append(term)
            posting[bare] = tf

    def remove(self, bare: str) -> None:
        self._norms, self._matrix = (-1.0, {}), None
        doc = self.docs.pop(bare)
        self.total_length -= doc.length
        self.size -= doc.size
        for term in doc.terms:
            posting = self.postings[term]
            del posting[bare]
            if not posting:
                del self.postings[term]

    def matrix(self, dims: int) -> tuple[list[str], Any] | None:
        """With numpy: the keys of the entries with a *dims*-sized vector and their vectors
        as rows of one float32 matrix (kept while nothing changes); else ``None``."""
        np = _np()
        if np is None:
            return None
        if self._matrix is None or self._matrix[0] != dims:
            keys, parts = [], []
            for key, doc in self.docs.items():
                if doc.vector is not None and len(doc.vector) == dims:
                    keys.append(key)
                    parts.append(doc.vector.tobytes())
            rows = b"".join(parts)
            table = np.frombuffer(rows, dtype=np.float32).reshape(len(keys), dims)
            self._matrix = (dims, keys, table)
        return self._matrix[1], self._matrix[2]

    def norms(self, avg: float) -> dict[str, float]:
        """``k1 * (1 - b + b * length / avg)`` of every entry (kept while nothing changes)."""
        if self._norms[0] != avg:
            self._norms = (avg, {
                bare: _K1 * (1.0 - _B + _B * doc.length / avg) for bare, doc in self.docs.items()
            })
        return self._norms[1]

    def _vocabulary(self) -> list[str]:
        if self._pending:
            # Two sorted runs merge in linear time.
            self._pending.sort()
            self._sorted = sorted(self._sorted + self._pending)
            self._pending = []
        if len(self._indexed) > 4 * len(self.postings) // 3 + 64:
            postings = self.postings
            self._sorted = [t for t in self._sorted if t in postings]
            self._indexed = set(self._sorted)
        return self._sorted

    def prefixed(self, term: str) -> Iterator[str]:
        """Vocabulary terms longer than *term* that start with it, in alphabetical order;
        at most :data:`_MAX_EXPANSIONS`, found by bisection."""
        vocab = self._vocabulary()
        postings = self.postings
        found = 0
        stop = min(len(vocab), bisect.bisect_right(vocab, term) + 4 * _MAX_EXPANSIONS)
        for i in range(bisect.bisect_right(vocab, term), stop):
            t = vocab[i]
            if not t.startswith(term) or found >= _MAX_EXPANSIONS:
                return
            if t in postings:
                found += 1
                yield t

    def near(self, candidates: Iterable[str]) -> list[str]:
        """The *candidates* (one-edit variants of a term) that are in the vocabulary."""
        postings = self.postings
        return sorted(t for t in candidates if t in postings)[:_MAX_EXPANSIONS]


_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz0123456789"


def _edits(term: str) -> set[str]:
    """Every string one edit from *term* (delete, transpose, substitute, insert), over the
    ASCII letters and digits and *term*'s own characters: a bounded number of lookups,
    whatever the stored vocabulary."""
    letters = _ALPHABET if term.isascii() else _ALPHABET + "".join(set(term) - set(_ALPHABET))
    splits = [(term[:i], term[i:]) for i in range(len(term) + 1)]
    out = {a + b[1:] for a, b in splits if b}
    out.update(a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1)
    out.update(a + c + b[1:] for a, b in splits if b for c in letters)
    out.update(a + c + b for a, b in splits for c in letters)
    out.discard(term)
    return out


def _document(
    bare: str, digest: str | bytes, size: int, fields: EntryFields, obj: Mapping[str, Any],
    settings: SearchSettings,
) -> _Doc:
    value, brand, _, _, _, metadata = fields
    terms: dict[str, float] = {}
    for term in tokens(bare):
        terms[term] = terms.get(term, 0.0) + _KEY_WEIGHT
    body = entry_text("", value, brand, metadata)
    for term in tokens(body):
        terms[term] = terms.get(term, 0.0) + 1.0
    written_by = obj.get("writtenBy")
    vector = None
    if settings.embedder is not None:
        vector = stored_vector(obj.get("embedding"), settings.model)
        if vector is None:  # written before the embedder, or by another model: embed now
            vector = embed(settings, entry_text(bare, value, brand, metadata))
    return _Doc(
        digest, size, fields, terms, sum(terms.values()),
        written_by if isinstance(written_by, str) else None,
        None if vector is None else array.array("f", vector),  # 4 bytes a component
    )


#: Opens stored texts of one namespace (given their storage keys and the texts): each
#: entry's fields and parsed object, or the error that made it unreadable.
Opener = Callable[
    [Sequence[str], Sequence[str]], Sequence[tuple[EntryFields, dict[str, Any]] | Exception]
]


@dataclass(frozen=True)
class Hit:
    """One ranked entry: its namespace's label, bare key, score and decoded data."""

    label: str
    key: str
    score: float
    fields: EntryFields
    written_by: str | None


class SearchCache:
    """Per-process search data of one plugin: a corpus per namespace, bounded, thread-safe
    (each namespace has its own lock; the plugin-wide one guards only the table).

    Each search hands over every namespace's stored texts as the store returned
    them; an entry whose stored text is the one cached (compared whole up to
    4 KiB, else by BLAKE2b-128 digest) is not decrypted again, any other is,
    and an entry no longer listed is dropped.  At most ``settings.cache_entries`` entries, and
    stored texts of at most ``settings.cache_bytes`` in all, are kept over all
    namespaces (the namespaces searched longest ago go first).
    """

    def __init__(self, settings: SearchSettings) -> None:
        self.settings = settings
        self._corpora: OrderedDict[str, _Corpus] = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Drop everything decrypted (``plugin.close()``)."""
        with self._lock:
            self._corpora.clear()

    def __len__(self) -> int:
        return sum(len(c.docs) for c in self._corpora.values())

    def search(
        self,
        parts: Sequence[tuple[str, str, Sequence[tuple[str, str]], Opener]],
        query: str,
        *,
        brand: str | None,
        limit: int,
        now: int,
        host_only: bool,
        on_unreadable: Callable[[str, str, Exception], None],
    ) -> list[Hit]:
        """Rank the entries of *parts* for *query*, best first.

        :param parts: per namespace: a label (its scope), its storage-key head
            (the cache's key; storage keys start with it), its stored (storage
            key, text) pairs and a function opening texts (given storage keys
            and texts).
        :param on_unreadable: told (label, storage key, error) of each value
            that does not decrypt; such an entry is left out.
        """
        terms = list(dict.fromkeys(tokens(query)))[:_MAX_QUERY_TERMS]
        qvec = None
        if self.settings.embedder is not None:
            qvec = embed(self.settings, query)
        if not terms and qvec is None:
            return []
        with self._lock:  # only the table of namespaces: held for dictionary operations
            held = []
            for _, head, _, _ in parts:
                corpus = self._corpora.get(head)
                if corpus is None:
                    corpus = self._corpora[head] = _Corpus()
                self._corpora.move_to_end(head)
                held.append(corpus)
        try:
            with contextlib.ExitStack() as stack:
                # Each namespace's own lock, in one order (no two searches deadlock): a
                # search of other namespaces -- another principal's -- never waits.
                for corpus in sorted(set(held), key=id):
                    stack.enter_context(corpus.lock)
                corpora = [
                    (label, self._refresh(corpus, len(head), items, opener, label, on_unreadable),
                     len(head))
                    for (label, head, items, opener), corpus in zip(parts, held, strict=True)
                ]
                return _rank(corpora, terms, qvec, brand, limit, now, host_only)
        finally:
            with self._lock:
                self._trim({head for _, head, _, _ in parts})

    @staticmethod
    def _fingerprint(raw: str) -> str | bytes:
        """What identifies a stored text: itself when short, else its BLAKE2b-128 digest."""
        if len(raw) <= _MAX_KEPT_TEXT:
            return raw
        return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def _refresh(
        self, corpus: _Corpus, cut: int, items: Sequence[tuple[str, str]], opener: Opener,
        label: str, on_unreadable: Callable[[str, str, Exception], None],
    ) -> _Corpus:
        listed: set[str] = set()
        stale: list[tuple[str, str, str | bytes]] = []
        docs = corpus.docs
        fingerprint = self._fingerprint
        cached = 0  # listed keys that have a cached entry, current or not
        for key, raw in items:
            if key in listed:
                continue  # 1.8.0's doubled-prefix twin of a key already read
            listed.add(key)
            digest = fingerprint(raw)
            doc = docs.get(key)
            if doc is not None:
                cached += 1
            if doc is None or doc.digest != digest:
                stale.append((key, raw, digest))
        # A cached entry that is not listed any more (forgotten, erased, expired -- by
        # any process) is dropped, whatever the listing's size: only what was read counts.
        if cached != len(docs):
            for key in [k for k in docs if k not in listed]:
                corpus.remove(key)
        if stale:
            opened = opener([k for k, _, _ in stale], [r for _, r, _ in stale])
            for (key, raw, digest), item in zip(stale, opened, strict=True):
                if key in docs:
                    corpus.remove(key)
                if isinstance(item, Exception):
                    on_unreadable(label, key, item)
                    continue
                fields, obj = item
                corpus.add(
                    key, _document(key[cut:], digest, len(raw), fields, obj, self.settings)
                )
        return corpus

    def _trim(self, keep: set[str]) -> None:
        entries, size = self.settings.cache_entries, self.settings.cache_bytes
        count = sum(len(c.docs) for c in self._corpora.values())
        total = sum(c.size for c in self._corpora.values())
        # Oldest searched first; what was just searched last, and not kept either
        # when it alone is over the bounds.
        order = [h for h in self._corpora if h not in keep] + [h for h in keep]
        for head in order:
            if count <= entries and total <= size:
                return
            corpus = self._corpora.pop(head, None)
            if corpus is not None:
                count -= len(corpus.docs)
                total -= corpus.size


def _expand(corpora: Sequence[_Corpus], term: str) -> dict[str, float]:
    """The vocabulary terms *term* matches in *corpora*, with their weights."""
    found: dict[str, float] = {}

    def put(t: str, w: float) -> None:
        if found.get(t, 0.0) < w:
            found[t] = w

    known = any(term in c.postings for c in corpora)
    if known:
        found[term] = 1.0
    for syn in _SYNONYMS.get(term, ()):
        if any(syn in c.postings for c in corpora):
            put(syn, _SYNONYM)
    if len(term) >= 3:
        for c in corpora:
            for t in c.prefixed(term):
                put(t, _PREFIX)
    for k in range(len(term) - 1, 3, -1):  # "deployments" finds "deploy"
        if any(term[:k] in c.postings for c in corpora):
            put(term[:k], _SHORTER)
            break
    if not known and len(term) >= 5:
        candidates = _edits(term)
        for c in corpora:
            for t in c.near(candidates):
                put(t, _TYPO)
    return found


def _rank(
    corpora: Sequence[tuple[str, _Corpus, int]],
    terms: Sequence[str],
    qvec: tuple[float, ...] | None,
    brand: str | None,
    limit: int,
    now: int,
    host_only: bool,
) -> list[Hit]:
    bodies = [c for _, c, _ in corpora]
    n_docs = sum(len(c.docs) for c in bodies)
    if n_docs == 0:
        return []
    avg = max(sum(c.total_length for c in bodies) / n_docs, 1.0)
    # Per corpus: storage key -> score; each query term adds its best matching term's BM25.
    lexical: list[dict[str, float]] = [{} for _ in bodies]
    norms = [c.norms(avg) for c in bodies]
    for term in terms:
        expanded = _expand(bodies, term)
        for i, c in enumerate(bodies):
            best: dict[str, float] = {}
            get, norm = best.get, norms[i]
            for match, weight in expanded.items():
                posting = c.postings.get(match)
                if not posting:
                    continue
                df = sum(len(o.postings.get(match, ())) for o in bodies)
                factor = weight * math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)) * (_K1 + 1.0)
                for bare, tf in posting.items():
                    score = factor * tf / (tf + norm[bare])
                    if score > get(bare, 0.0):
                        best[bare] = score
            total = lexical[i]
            for bare, score in best.items():
                total[bare] = total.get(bare, 0.0) + score
    scores: dict[tuple[int, str], float] = {
        (i, bare): score for i, per in enumerate(lexical) for bare, score in per.items()
    }
    if qvec is None:
        return _order(corpora, scores, (brand, limit, now, host_only))
    # With vectors, only the entries most similar to the query are scored (besides the
    # lexical matches), unless filters then leave too few: then all of them.
    keep: int | None = max(8 * limit, 256)
    while True:
        similar, stats, cut_short = _similarities(bodies, qvec, keep)
        ranked = _order(corpora, _fuse(scores, similar, *stats), (brand, limit, now, host_only))
        if len(ranked) >= limit or not cut_short:
            return ranked
        keep = None


def _order(
    corpora: Sequence[tuple[str, _Corpus, int]],
    scores: dict[tuple[int, str], float],
    filters: tuple[str | None, int, int, bool],
) -> list[Hit]:
    """The *limit* best of *scores* that the filters (*brand*, *limit*, *now*,
    *host_only*) admit, best first."""
    brand, limit, now, host_only = filters
    bodies = [c for _, c, _ in corpora]

    def admitted(slot: tuple[int, str]) -> bool:
        doc = bodies[slot[0]].docs[slot[1]]
        fields = doc.fields
        return not (
            (fields[4] is not None and now >= fields[4])
            or (brand is not None and fields[1] != brand)
            or (host_only and doc.written_by is not None)
        )

    def order(item: tuple[tuple[int, str], float]) -> tuple[float, int, str]:
        # Best score first; on a tie the most recently written, then the key.
        (i, bare), score = item
        return (score, bodies[i].docs[bare].fields[3], _Reversed(bare))

    # The best scores first by score alone (C-level), then only those ordered and
    # filtered; when filters leave too few, everything is filtered and ordered.
    positive = [item for item in scores.items() if item[1] > 0.0]
    chosen: list[tuple[tuple[int, str], float]] = []
    if len(positive) > limit:
        cut = heapq.nlargest(limit, [score for _, score in positive])[-1]
        chosen = [item for item in positive if item[1] >= cut and admitted(item[0])]
    if len(chosen) < limit:
        chosen = [item for item in positive if admitted(item[0])]
    ranked: list[Hit] = []
    for (i, bare), score in heapq.nlargest(limit, chosen, key=order):
        doc = bodies[i].docs[bare]
        label, _, cut = corpora[i]
        ranked.append(Hit(label, bare[cut:], round(score, 6), doc.fields, doc.written_by))
    return ranked


def _similarities(
    bodies: Sequence[_Corpus], qvec: tuple[float, ...], keep: int | None
) -> tuple[dict[tuple[int, str], float], tuple[float, float], bool]:
    """The cosine similarity of *qvec* to the entries with a vector of its size: the
    *keep* most similar per namespace (``None``: all), the (mean, best) over all, and
    whether some were left out."""
    out: dict[tuple[int, str], float] = {}
    total, count, best, cut_short = 0.0, 0, -math.inf, False
    np = _np()
    for i, c in enumerate(bodies):
        matrix = c.matrix(len(qvec))
        if matrix is not None:  # with numpy: one product for the namespace
            keys, table = matrix
            if not keys:
                continue
            sims = table @ np.asarray(qvec, dtype=np.float32)
            total += float(sims.sum(dtype=np.float64))
            count += len(keys)
            best = max(best, float(sims.max()))
            if keep is not None and len(keys) > keep:
                cut_short = True
                picked = np.argpartition(sims, len(keys) - keep)[len(keys) - keep :].tolist()
                out.update(((i, keys[j]), float(sims[j])) for j in picked)
            else:
                out.update(zip([(i, k) for k in keys], sims.tolist(), strict=True))
            continue
        for bare, doc in c.docs.items():
            if doc.vector is not None and len(doc.vector) == len(qvec):
                v = sum(map(operator.mul, qvec, doc.vector))
                out[(i, bare)] = v
                total += v
                count += 1
                best = max(best, v)
    # One unrelated entry (similarity 0) counted in: a lone entry still has a lead.
    mean = total / (count + 1)
    return out, (mean, best if count else 0.0), cut_short


def _fuse(
    lexical: dict[tuple[int, str], float], similar: dict[tuple[int, str], float],
    mean: float, best: float,
) -> dict[tuple[int, str], float]:
    """Lexical and vector scores in one: each scaled to its best entry, then shared.

    The lexical score is divided by the best one.  A similarity counts by how far
    it stands above the query's *mean* similarity, as a share of the *best* one's
    lead (a model's similarities crowd in a narrow band; what stands out is the
    lead), and nothing below the mean.  Both scaled scores are in ``[0, 1]``; the
    hybrid score is their weighted sum (:data:`_SEMANTIC_SHARE`).
    """
    top = max(lexical.values(), default=0.0) or 1.0
    lead = best - mean
    semantic: dict[tuple[int, str], float] = {}
    if lead > 0:
        semantic = {slot: (v - mean) / lead for slot, v in similar.items() if v > mean}
    share = _SEMANTIC_SHARE
    return {
        slot: (1.0 - share) * lexical.get(slot, 0.0) / top + share * semantic.get(slot, 0.0)
        for slot in lexical.keys() | semantic.keys()
    }


def _np() -> Any:
    """numpy, or ``None`` when it is not installed (it comes with the embeddings extra)."""
    global _NUMPY  # noqa: PLW0603 - imported once, on first use
    if _NUMPY is False:
        try:
            import numpy  # noqa: PLC0415 - optional

            _NUMPY = numpy
        except ImportError:
            _NUMPY = None
    return _NUMPY


_NUMPY: Any = False


class _Reversed(str):
    """A key that sorts in reverse, so ties go to the alphabetically first key under nlargest."""

    __slots__ = ()

    def __lt__(self, other: str) -> bool:
        return str.__gt__(self, other)

    def __gt__(self, other: str) -> bool:
        return str.__lt__(self, other)
