"""Encrypted vs plaintext set+get on the memory store, measured in one run.

Usage::

    python -m benchmarks.encryption [--ops 20000] [--rounds 5]

Runs are interleaved (plaintext, encrypted, plaintext, ...) and the median of
each is reported, so drift on a shared machine hits both sides alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from remember_sync import Identity, RememberPlugin

VALUE = {"text": "x" * 160, "n": 12345, "ok": True}  # about 200 bytes of JSON


def _one_run(plugin: RememberPlugin, ops: int) -> float:
    mem = plugin.accessor(Identity(session_id="bench-session", user_id="bench"))
    start = time.perf_counter()
    for i in range(ops):
        key = f"k{i % 1000}"
        mem.set(key, VALUE)
        mem.get(key)
    return (2 * ops) / (time.perf_counter() - start)


def run(ops: int = 20_000, rounds: int = 5) -> list[dict[str, Any]]:
    """Measure both configurations; return rows with ops/s and the ratio."""
    secret = "benchmark-secret-0123456789abcdef012"
    encrypted = RememberPlugin.init(encryption={"secrets": [secret]}, skip_legacy_purge=True)
    plain = RememberPlugin.init(encryption={"enabled": False}, skip_legacy_purge=True)
    results: dict[str, list[float]] = {"plaintext": [], "encrypted": []}
    try:
        for _ in range(rounds):
            results["plaintext"].append(_one_run(plain, ops))
            results["encrypted"].append(_one_run(encrypted, ops))
        derivations = encrypted.stats()["key_derivations"]
    finally:
        encrypted.close()
        plain.close()
    base = statistics.median(results["plaintext"])
    enc = statistics.median(results["encrypted"])
    return [
        {"operation": "set+get", "store": "memory", "mode": "plaintext", "ops_per_s": base,
         "ratio": 1.0},
        {"operation": "set+get", "store": "memory", "mode": "encrypted", "ops_per_s": enc,
         "ratio": base / enc, "key_derivations": derivations},
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rows = run(args.ops, args.rounds)
    print(f"{'operation':<10} {'store':<7} {'mode':<10} {'ops/s':>10} {'cost ratio':>11}")
    for row in rows:
        print(
            f"{row['operation']:<10} {row['store']:<7} {row['mode']:<10} "
            f"{row['ops_per_s']:>10.0f} {row['ratio']:>10.2f}x"
        )
    print(f"HKDF derivations in the encrypted runs: {rows[1]['key_derivations']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
