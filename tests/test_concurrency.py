"""Many threads on one plugin: no exception, no lost created_at, a consistent end state."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from remember_sync import Identity, RememberPlugin
from tests.conftest import run_threads

THREADS = 8
KEYS = [f"k{i}" for i in range(16)]


def test_mixed_operations_from_eight_threads(
    make_plugin: Callable[..., RememberPlugin], store_kind: str
) -> None:
    """8 threads x 2,000 mixed set/get/update/forget/list keep every entry's invariants."""
    ops_per_thread = 2000 if store_kind == "memory" else 300
    lock = threading.Lock()
    local = threading.local()
    base = 1_800_000_000_000

    def clock() -> int:
        # Per-thread tick sequences interleaved by thread index: every call returns a
        # unique value, and a thread can predict the created_at of its own next set().
        local.n = getattr(local, "n", 0) + 1
        return base + local.n * 16 + getattr(local, "tid", 15)

    def next_tick() -> int:
        return base + (getattr(local, "n", 0) + 1) * 16 + getattr(local, "tid", 15)

    plugin = make_plugin(clock=clock)
    mem = plugin.accessor(Identity("s-conc", "u-conc", "tool"))
    created: dict[str, int] = {}  # generation id -> created_at of the set() that wrote it
    errors: list[BaseException] = []

    def check(entry: object) -> None:
        if entry is None:
            return
        gen = entry.metadata["gen"]  # type: ignore[attr-defined]
        with lock:
            expected = created.get(gen)
        # created_at and metadata always come from one and the same set() call.
        assert expected is not None and entry.created_at == expected, (gen, entry)  # type: ignore[attr-defined]
        assert entry.brand == "state"  # type: ignore[attr-defined]

    def worker(seed: int) -> None:
        local.tid = seed
        rng = random.Random(seed)
        try:
            for i in range(ops_per_thread):
                key = rng.choice(KEYS)
                op = rng.random()
                if op < 0.3:
                    gen = f"{seed}-{i}"
                    # Record before writing so a concurrent reader can always find it;
                    # set() reads the clock exactly once.
                    with lock:
                        created[gen] = next_tick()
                    mem.set(key, {"n": i}, brand="state", metadata={"gen": gen})
                elif op < 0.55:
                    check(mem.get_entry(key))
                elif op < 0.8:
                    mem.update(key, {"n": -i})
                elif op < 0.9:
                    mem.forget(key)
                else:
                    for name, entry in mem.entries(pattern="k*").items():
                        assert name in KEYS
                        check(entry)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(worker, THREADS)
    assert errors == []
    listed = set(mem.list())
    for key in KEYS:
        entry = mem.get_entry(key)
        assert (entry is not None) == (key in listed)
        check(entry)
