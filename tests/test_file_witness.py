"""Verified mode's file witness opened by several processes at once (workers starting together)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from remember_sync._integrity import FileWitness

ROUNDS = 25
WORKERS = 4


def _open_and_advance(path: str, barrier: multiprocessing.synchronize.Barrier,
                      results: multiprocessing.Queue[str]) -> None:
    barrier.wait()
    try:
        witness = FileWitness(path)
        witness.advance(f"n-{os.getpid()}", 1, None)
        witness.close()
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


def test_workers_opening_a_new_witness_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Real forked processes released together open one new witness file: none is refused
    ("database is locked" while another switches it to WAL), and every advance is kept."""
    ctx = multiprocessing.get_context("fork")
    for n in range(ROUNDS):
        path = str(tmp_path / f"witness-{n}.db")
        barrier = ctx.Barrier(WORKERS)
        results: multiprocessing.Queue[str] = ctx.Queue()
        workers = [ctx.Process(target=_open_and_advance, args=(path, barrier, results))
                   for _ in range(WORKERS)]
        for worker in workers:
            worker.start()
        outcomes = [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(60)
            assert worker.exitcode == 0
        assert [o for o in outcomes if o != "ok"] == []
        reader = FileWitness(path)
        try:
            assert all(reader.floor(f"n-{w.pid}") == (1, None) for w in workers)
        finally:
            reader.close()
