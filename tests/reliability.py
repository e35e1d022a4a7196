"""Shared machinery of the reliability tests: a mixed workload and the models that check it.

Two kinds of keys are exercised at once:

* **private keys**: each thread has its own identity and keys nobody else
  touches, so a model in that thread knows the exact expected answer of every
  read (``get``, ``knows``, ``update``'s and ``forget``'s return values,
  ``list``, ``entries``).  When a call fails (fault tests), the model keeps
  every outcome the failed call could have had, until a later call settles it.
* **shared keys**: every thread writes the same ``global`` keys with values
  carrying a unique version stamp.  Each call is logged with its invocation
  and response times (one monotonic clock), and :func:`check_shared_history`
  then checks every read against what the operation order allows: the value
  read was written by someone, was not certainly overwritten or forgotten
  before the read began, and a read of "absent" is only accepted when a
  ``forget`` could have come between the latest certainly-completed write and
  the read.  These checks are sound (they never flag a correct history).
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from remember_sync import Identity, RememberPlugin
from remember_sync.accessor import RememberAccessor
from remember_sync.errors import RememberStoreError

_ABSENT: Any = ("<absent>",)  # a model value meaning "no entry"

PRIVATE_KEYS = 12
SHARED_KEYS = 8
_SCOPES = ("user", "session", "tool")


def private_scope(index: int) -> str:
    return _SCOPES[index % 3]


@dataclass
class Event:
    """One call on a shared key: ``kind`` is w(rite), r(ead), a(bsent seen) or p(resent seen)."""

    kind: str
    key: str
    stamp: int | None
    inv: int
    resp: int


@dataclass
class Counters:
    """What a run did: every figure the reliability docs quote."""

    ops: int = 0
    reads_checked: int = 0
    private_reads_checked: int = 0
    shared_reads_checked: int = 0
    lists_checked: int = 0
    store_errors: int = 0
    final_keys_checked: int = 0
    failures: list[str] = field(default_factory=list)
    max_call_seconds: float = 0.0

    def merge(self, other: Counters) -> None:
        self.ops += other.ops
        self.reads_checked += other.reads_checked
        self.private_reads_checked += other.private_reads_checked
        self.shared_reads_checked += other.shared_reads_checked
        self.lists_checked += other.lists_checked
        self.store_errors += other.store_errors
        self.final_keys_checked += other.final_keys_checked
        self.failures.extend(other.failures)
        self.max_call_seconds = max(self.max_call_seconds, other.max_call_seconds)


class PrivateModel:
    """What one thread's own keys may hold: a set of possible values per key.

    A successful write makes the value certain; a failed one (store error)
    adds its value to the possibilities; a successful read collapses them to
    what was seen, after checking it was possible.
    """

    def __init__(self) -> None:
        self.possible: dict[str, list[Any]] = defaultdict(lambda: [_ABSENT])

    def certain(self, key: str, value: Any) -> None:
        self.possible[key] = [value]

    def maybe(self, key: str, value: Any) -> None:
        if value not in self.possible[key]:
            self.possible[key].append(value)

    def observe(self, key: str, value: Any) -> bool:
        """Record a read; return whether it was one of the possible values."""
        ok = value in self.possible[key]
        self.possible[key] = [value]
        return ok

    def present_possible(self, key: str) -> bool:
        return any(v is not _ABSENT for v in self.possible[key])

    def absent_possible(self, key: str) -> bool:
        return any(v is _ABSENT for v in self.possible[key])

    def is_certain(self, key: str) -> bool:
        return len(self.possible[key]) == 1


def check_shared_history(events: Iterable[Event]) -> tuple[int, list[str]]:
    """Check every shared-key observation against the writes logged; (checked, failures)."""
    by_key: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_key[e.key].append(e)
    failures: list[str] = []
    checked = 0
    for key, evs in by_key.items():
        writes = {e.stamp: e for e in evs if e.kind == "w"}
        # Every op that replaces or removes the value (writes and forgets that deleted).
        changers = sorted((e for e in evs if e.kind in ("w", "f")), key=lambda e: e.inv)
        inv_sorted = [e.inv for e in changers]
        # suffix_min[i]: the earliest response among changers invoked at or after changers[i].
        suffix_min = [0] * (len(changers) + 1)
        suffix_min[-1] = 1 << 62
        for i in range(len(changers) - 1, -1, -1):
            suffix_min[i] = min(changers[i].resp, suffix_min[i + 1])
        forgets = sorted((e for e in evs if e.kind in ("f", "F")), key=lambda e: e.inv)
        forget_inv = [f.inv for f in forgets]
        forget_prefix_max = list(itertools.accumulate((f.resp for f in forgets), max))
        completed = sorted((e for e in writes.values()), key=lambda e: e.resp)
        completed_resp = [w.resp for w in completed]
        completed_prefix_max_inv = list(itertools.accumulate((w.inv for w in completed), max))

        def forget_between(after_inv: int, before_resp: int) -> bool:
            # Some forget could be ordered after a write invoked at after_inv and before the read.
            n = bisect.bisect_left(forget_inv, before_resp)
            return n > 0 and forget_prefix_max[n - 1] > after_inv

        for e in evs:
            if e.kind == "r" and e.stamp is not None:
                checked += 1
                w = writes.get(e.stamp)
                if w is None:
                    failures.append(f"{key}: read stamp {e.stamp} that nobody wrote to this key")
                    continue
                if w.inv > e.resp:
                    failures.append(f"{key}: read stamp {e.stamp} before it was written")
                    continue
                # Changers invoked after w completed: if one also completed before the read
                # began, w was certainly gone by then.
                i = bisect.bisect_right(inv_sorted, w.resp)
                if suffix_min[i] < e.inv:
                    failures.append(f"{key}: stale read of stamp {e.stamp} (overwritten before)")
            elif e.kind == "a" or (e.kind == "r" and e.stamp is None):
                checked += 1
                n = bisect.bisect_left(completed_resp, e.inv)
                if n == 0:
                    continue  # no write had certainly completed: absent is fine
                latest_inv = completed_prefix_max_inv[n - 1]
                if not forget_between(latest_inv, e.resp):
                    failures.append(f"{key}: saw no entry although a write completed before")
            elif e.kind == "p":
                checked += 1
                if not any(w.inv < e.resp for w in writes.values()):
                    failures.append(f"{key}: saw an entry before anything was written")
    return checked, failures


class Workload:
    """A mixed workload of ``set/get/update/knows/forget/list/entries`` on one plugin.

    :param plugin: what to drive.
    :param threads: worker threads, each with its own identity.
    :param ops_per_thread: stop each thread after this many calls (or ``None``).
    :param seconds: stop after this long (or ``None``).
    :param tolerate: exception types that count as a failed call (the model
        keeps both outcomes); anything else is a failure of the test.
    :param call_limit: when set, any call that takes longer is a failure.
    :param shared: also run the shared-key half of the workload.
    """

    def __init__(
        self,
        plugin: RememberPlugin,
        *,
        threads: int = 16,
        ops_per_thread: int | None = 5_000,
        seconds: float | None = None,
        tolerate: tuple[type[BaseException], ...] = (),
        call_limit: float | None = None,
        shared: bool = True,
        tag: str = "load",
    ) -> None:
        self.plugin = plugin
        self.threads = threads
        self.ops_per_thread = ops_per_thread
        self.seconds = seconds
        self.tolerate = tolerate
        self.call_limit = call_limit
        self.shared = shared
        self.tag = tag
        self._stamps = itertools.count(1)
        self.stop = threading.Event()
        self.models: list[PrivateModel] = []
        self.accessors: list[RememberAccessor] = []
        self.events: list[list[Event]] = []
        self.counters = Counters()
        #: Called by workers after each call (fault tests use it to pace themselves).
        self.on_progress: Callable[[], None] | None = None

    def identity(self, t: int) -> Identity:
        return Identity(f"{self.tag}-session-{t}", f"{self.tag}-user-{t}", f"{self.tag}-tool")

    # -- running ------------------------------------------------------------------------------

    def run(self) -> Counters:
        self.models = [PrivateModel() for _ in range(self.threads)]
        self.accessors = [self.plugin.accessor(self.identity(t)) for t in range(self.threads)]
        self.events = [[] for _ in range(self.threads)]
        per_thread = [Counters() for _ in range(self.threads)]
        deadline = None if self.seconds is None else time.monotonic() + self.seconds
        workers = [
            threading.Thread(target=self._worker, args=(t, per_thread[t], deadline), daemon=True)
            for t in range(self.threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for c in per_thread:
            self.counters.merge(c)
        return self.counters

    def _worker(self, t: int, c: Counters, deadline: float | None) -> None:
        rng = random.Random(t * 7919 + 17)
        try:
            i = 0
            while not self.stop.is_set():
                if self.ops_per_thread is not None and i >= self.ops_per_thread:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                i += 1
                r = rng.random()
                if r < 0.08:
                    self._list_op(t, rng, c)
                elif r < 0.55 or not self.shared:
                    self._private_op(t, rng, c)
                else:
                    self._shared_op(t, rng, c)
                c.ops += 1
                if self.on_progress is not None:
                    self.on_progress()
        except BaseException as exc:  # noqa: BLE001 - reported by the test, not lost in a thread
            c.failures.append(f"thread {t} died: {type(exc).__name__}: {exc}")

    def _call(self, c: Counters, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run one call; (True, result) or (False, None) for a tolerated failure."""
        start = time.monotonic()
        try:
            return True, fn()
        except self.tolerate if self.tolerate else () as exc:
            c.store_errors += 1
            if not isinstance(exc, RememberStoreError):
                c.failures.append(f"tolerated a non-store error {type(exc).__name__}: {exc}")
            return False, None
        finally:
            took = time.monotonic() - start
            c.max_call_seconds = max(c.max_call_seconds, took)
            if self.call_limit is not None and took > self.call_limit:
                c.failures.append(f"a call took {took:.2f} s (limit {self.call_limit} s)")

    # -- private keys: exact model ---------------------------------------------------------------

    def _private_op(self, t: int, rng: random.Random, c: Counters) -> None:
        model, mem = self.models[t], self.accessors[t]
        index = rng.randrange(PRIVATE_KEYS)
        key, scope = f"p{index}", private_scope(index)
        mkey = f"{scope}/{key}"
        op = rng.random()
        if op < 0.35:
            value = {"t": t, "n": next(self._stamps), "pad": "x" * rng.randrange(64)}
            ttl = 3600 if rng.random() < 0.3 else None
            ok, _ = self._call(c, lambda: mem.set(key, value, scope=scope, ttl=ttl))
            (model.certain if ok else model.maybe)(mkey, value)
        elif op < 0.65:
            ok, got = self._call(c, lambda: mem.get(key, scope=scope, default=_ABSENT))
            if ok:
                c.reads_checked += 1
                c.private_reads_checked += 1
                if not model.observe(mkey, got):
                    c.failures.append(
                        f"thread {t} get {mkey}: {got!r} not in {model.possible[mkey]!r}"
                    )
        elif op < 0.8:
            value = {"t": t, "n": next(self._stamps), "updated": True}
            ok, updated = self._call(c, lambda: mem.update(key, value, scope=scope))
            if ok:
                c.reads_checked += 1
                c.private_reads_checked += 1
                if updated:
                    if not model.present_possible(mkey):
                        c.failures.append(f"thread {t} update {mkey} succeeded on a missing entry")
                    model.certain(mkey, value)
                elif not model.absent_possible(mkey):
                    c.failures.append(f"thread {t} update {mkey} lost an entry it had")
                else:
                    model.certain(mkey, _ABSENT)
            else:
                model.maybe(mkey, value)
        elif op < 0.9:
            ok, existed = self._call(c, lambda: mem.forget(key, scope=scope))
            if ok:
                c.reads_checked += 1
                c.private_reads_checked += 1
                possible = model.present_possible(mkey) if existed else model.absent_possible(mkey)
                if not possible:
                    c.failures.append(f"thread {t} forget {mkey} returned {existed}")
                model.certain(mkey, _ABSENT)
            else:
                model.maybe(mkey, _ABSENT)
        else:
            ok, known = self._call(c, lambda: mem.knows(key, scope=scope))
            if ok:
                c.reads_checked += 1
                c.private_reads_checked += 1
                possible = model.present_possible(mkey) if known else model.absent_possible(mkey)
                if not possible:
                    c.failures.append(f"thread {t} knows {mkey} returned {known}")
                if not known:
                    model.certain(mkey, _ABSENT)

    def _list_op(self, t: int, rng: random.Random, c: Counters) -> None:
        model, mem = self.models[t], self.accessors[t]
        scope = rng.choice(_SCOPES)
        keys = [f"p{i}" for i in range(PRIVATE_KEYS) if private_scope(i) == scope]
        if rng.random() < 0.5:
            ok, listed = self._call(c, lambda: mem.list(scope=scope))
            if not ok:
                return
            c.lists_checked += 1
            for key in keys:
                mkey = f"{scope}/{key}"
                seen = key in listed
                possible = model.present_possible(mkey) if seen else model.absent_possible(mkey)
                if not possible:
                    c.failures.append(f"thread {t} list {scope}: {key} seen={seen} impossible")
            foreign = set(listed) - set(keys)
            if foreign:
                c.failures.append(f"thread {t} list {scope} showed foreign keys {foreign}")
        else:
            ok, found = self._call(c, lambda: mem.entries(scope=scope))
            if not ok:
                return
            c.lists_checked += 1
            for key in keys:
                mkey = f"{scope}/{key}"
                value = found[key].value if key in found else _ABSENT
                c.reads_checked += 1
                c.private_reads_checked += 1
                if not model.observe(mkey, value):
                    c.failures.append(f"thread {t} entries {mkey}: {value!r} impossible")
            foreign = set(found) - set(keys)
            if foreign:
                c.failures.append(f"thread {t} entries {scope} showed foreign keys {foreign}")
        if self.shared and rng.random() < 0.2:
            ok, shared = self._call(c, lambda: mem.list(scope="global"))
            if ok:
                c.lists_checked += 1
                stray = set(shared) - {f"g{i}" for i in range(SHARED_KEYS)}
                if stray:
                    c.failures.append(f"global list showed keys nobody wrote there: {stray}")

    # -- shared keys: logged, checked afterwards -----------------------------------------------

    def _shared_op(self, t: int, rng: random.Random, c: Counters) -> None:
        mem, log = self.accessors[t], self.events[t]
        key = f"g{rng.randrange(SHARED_KEYS)}"
        op = rng.random()
        now = time.perf_counter_ns
        if op < 0.35:
            stamp = next(self._stamps)
            inv = now()
            ok, _ = self._call(c, lambda: mem.set(key, {"w": t, "s": stamp}, scope="global"))
            log.append(Event("w" if ok else "w?", key, stamp, inv, now()))
        elif op < 0.7:
            inv = now()
            ok, got = self._call(c, lambda: mem.get(key, scope="global"))
            if ok:
                if got is not None and got.get("s") is None:
                    c.failures.append(f"{key}: read a value without a stamp: {got!r}")
                log.append(Event("r", key, None if got is None else got["s"], inv, now()))
        elif op < 0.85:
            stamp = next(self._stamps)
            inv = now()
            ok, updated = self._call(
                c, lambda: mem.update(key, {"w": t, "s": stamp}, scope="global")
            )
            resp = now()
            if ok:
                log.append(
                    Event("w" if updated else "a", key, stamp if updated else None, inv, resp)
                )
            else:
                log.append(Event("w?", key, stamp, inv, resp))
        elif op < 0.95:
            inv = now()
            ok, existed = self._call(c, lambda: mem.forget(key, scope="global"))
            resp = now()
            # A forget that deleted something changes the value; one that found nothing
            # still proves the key was absent at its moment.
            log.append(Event("f" if ok and existed else "F", key, None, inv, resp))
            if ok and not existed:
                log.append(Event("a", key, None, inv, resp))
        else:
            inv = now()
            ok, known = self._call(c, lambda: mem.knows(key, scope="global"))
            if ok:
                log.append(Event("p" if known else "a", key, None, inv, now()))

    def check_shared(self, final_reader: RememberAccessor | None = None) -> None:
        """Add a final read of every shared key, then check the whole shared history."""
        if not self.shared:
            return
        events = [e for log in self.events for e in log]
        # A failed write may or may not have happened: make its stamp a known (maybe) write.
        for e in events:
            if e.kind == "w?":
                e.kind = "w"
                e.resp = 1 << 62  # never certainly completed
        reader = final_reader or self.accessors[0]
        for i in range(SHARED_KEYS):
            key = f"g{i}"
            inv = time.perf_counter_ns()
            got = reader.get(key, scope="global")
            events.append(
                Event("r", key, None if got is None else got["s"], inv, time.perf_counter_ns())
            )
            self.counters.final_keys_checked += 1
        checked, failures = check_shared_history(events)
        self.counters.reads_checked += checked
        self.counters.shared_reads_checked += checked
        self.counters.failures.extend(failures)

    def check_private_final(self, reader_plugin: RememberPlugin | None = None) -> None:
        """Read every private key back (through a fresh accessor) and compare with the models."""
        plugin = reader_plugin or self.plugin
        for t, model in enumerate(self.models):
            mem = plugin.accessor(self.identity(t))
            for index in range(PRIVATE_KEYS):
                key, scope = f"p{index}", private_scope(index)
                mkey = f"{scope}/{key}"
                got = mem.get(key, scope=scope, default=_ABSENT)
                self.counters.final_keys_checked += 1
                if got not in model.possible[mkey]:
                    self.counters.failures.append(
                        f"final {t}/{mkey}: {got!r} not in {model.possible[mkey]!r}"
                    )
