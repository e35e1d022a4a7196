"""Search: ranking quality on an evaluation set, and latency by namespace size.

``python -m benchmarks.search quality [FILE]`` stores every memory of an
evaluation set (default ``tests/data/search_eval.json``; the format is in
``docs/search.rst``) for one user, asks each question through
``accessor.search(limit=5)`` and prints recall@5 and MRR, for lexical ranking
and for hybrid ranking with the deterministic test embedder (which hashes
character trigrams: it is not a model of meaning).

``python -m benchmarks.search speed [--sizes 1000,10000] [--rounds 9]`` times
``search`` over a namespace of N entries on the memory store, on a throw-away
``redis-server`` (database 0), and on the same server's database 1, which also
holds 100,000 other keys; the rounds of the three cases are interleaved.  It
prints the median, minimum and maximum wall time, and the median CPU time of
this process (the client's share, which the machine's load disturbs less).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from remember_sync import Identity, RememberPlugin, _search
from remember_sync.testing import HashingEmbedder

__all__ = ["evaluate", "main", "meaning", "rows_search", "speed"]

DEFAULT_SET = Path(__file__).resolve().parent.parent / "tests" / "data" / "search_eval.json"
WHO = Identity(session_id="eval-session", user_id="eval-user")
_SECRET = "search-benchmark-secret-0123456789abcdef"


def evaluate(
    data: dict[str, Any], *, embedder: Callable[[str], Sequence[float]] | str | None = None,
    k: int = 5, queries: str = "questions", vector_only: bool = False,
) -> dict[str, float]:
    """Recall@k and MRR of ``search`` over *data* (``memories`` and *queries*).

    recall@k: per question, the share of its relevant keys in the first *k*
    results, averaged; MRR: the mean of 1 / rank of the first relevant result
    (0 when none is in the first *k*).  *vector_only* ranks by the embedder
    alone (the lexical share set to nothing), to compare.
    """
    options: dict[str, Any] = {"encryption": {"secrets": [_SECRET]}, "skip_legacy_purge": True}
    if embedder is not None:
        options["search"] = {"embedder": embedder}
    share = _search._SEMANTIC_SHARE
    _search._SEMANTIC_SHARE = 1.0 if vector_only else share
    try:
        return _evaluate(data, options, k, queries)
    finally:
        _search._SEMANTIC_SHARE = share


def _evaluate(data: dict[str, Any], options: dict[str, Any], k: int, queries: str
              ) -> dict[str, float]:
    with RememberPlugin.init(**options) as plugin:
        mem = plugin.accessor(WHO)
        for m in data["memories"]:
            mem.set(m["key"], m["value"], scope=m.get("scope", "user"), brand=m.get("brand"),
                    metadata=m.get("metadata"))
        recalls, ranks = [], []
        for q in data[queries]:
            found = [h.key for h in mem.search(q["query"], limit=k)]
            relevant = set(q["relevant"])
            recalls.append(len(relevant & set(found)) / len(relevant))
            first = next((i for i, key in enumerate(found, 1) if key in relevant), None)
            ranks.append(0.0 if first is None else 1.0 / first)
    return {
        "questions": len(ranks),
        "memories": len(data["memories"]),
        f"recall@{k}": round(statistics.fmean(recalls), 3),
        "mrr": round(statistics.fmean(ranks), 3),
    }


def quality(path: Path) -> dict[str, dict[str, float]]:
    """Lexical and hybrid (test embedder) figures for the evaluation set at *path*."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        "lexical": evaluate(data),
        "hybrid (test embedder, not a model)": evaluate(data, embedder=HashingEmbedder()),
    }


def meaning(data: dict[str, Any], embedder: str = "wordllama") -> dict[str, dict[str, float]]:
    """Recall@5 of lexical, vector-only and hybrid ranking with *embedder* on *data*'s
    ``questions`` and ``paraphrases`` (``tests/data/meaning_eval.py``)."""
    out: dict[str, dict[str, float]] = {}
    for queries in ("questions", "paraphrases"):
        out[queries] = {
            "lexical": evaluate(data, queries=queries)["recall@5"],
            "vector": evaluate(data, embedder=embedder, queries=queries,
                               vector_only=True)["recall@5"],
            "hybrid": evaluate(data, embedder=embedder, queries=queries)["recall@5"],
        }
    return out


_WORDS = (
    "deploy pipeline customer invoice schedule meeting travel coffee garden budget report "
    "database kafka retry server python release weather music book family doctor train "
    "project atlas review ticket cache result morning evening holiday hotel flight cat dog"
).split()


def _fill(plugin: RememberPlugin, who: Identity, n: int, seed: int) -> None:
    rng = random.Random(seed)
    mem = plugin.accessor(who)
    for i in range(n):
        text = " ".join(rng.choice(_WORDS) for _ in range(12))
        mem.set(f"note_{i:06d}", {"text": text, "n": i}, scope="user", brand="state")


def speed(sizes: Sequence[int], rounds: int, others: int) -> list[dict[str, Any]]:
    """Median latency of one ``search`` by store and namespace size (see the module doc)."""
    import redis  # noqa: PLC0415

    from remember_sync.testing.redis_server import RedisServer, find_redis_server  # noqa: PLC0415

    rows: list[dict[str, Any]] = []
    queries = ["deploy the pipeline", "customer invoice report", "morning coffee", "kafka retry"]
    binary = find_redis_server()
    if binary is None:
        raise SystemExit("redis-server is not on PATH")
    server = RedisServer(binary).start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        crowded = redis.Redis(host="127.0.0.1", port=server.port, db=1)
        base = server.url.rsplit("/", 1)[0]
        for n in sizes:
            client.flushall()
            secret = {"secrets": [_SECRET]}
            cases: dict[str, tuple[RememberPlugin, Identity]] = {
                "memory": (RememberPlugin.init(encryption=secret, skip_legacy_purge=True),
                           Identity(user_id="bench")),
                "redis": (RememberPlugin.init(type="redis", config={"url": base + "/0"},
                                              encryption=secret, skip_legacy_purge=True),
                          Identity(user_id="bench")),
                # The same namespace in a database that also holds `others` keys.
                "redis + others": (RememberPlugin.init(
                    type="redis", config={"url": base + "/1"}, encryption=secret,
                    skip_legacy_purge=True), Identity(user_id="bench")),
            }
            for plugin, who in cases.values():
                _wait_indexed(plugin)
                _fill(plugin, who, n, seed=n)
            pipe = crowded.pipeline(transaction=False)
            for i in range(others):
                pipe.set(f"other:{i}", "x" * 64)
                if i % 5000 == 4999:
                    pipe.execute()
            pipe.execute()
            samples: dict[str, list[float]] = {name: [] for name in cases}
            cpu: dict[str, list[float]] = {name: [] for name in cases}
            for plugin, who in cases.values():  # the first search decrypts: not timed
                plugin.accessor(who).search(queries[0])
            for r in range(rounds):  # interleaved: one search of each case per round
                for name, (plugin, who) in cases.items():
                    began, began_cpu = time.perf_counter(), time.process_time()
                    plugin.accessor(who).search(queries[r % len(queries)])
                    samples[name].append((time.perf_counter() - began) * 1000)
                    cpu[name].append((time.process_time() - began_cpu) * 1000)
            for name, values in samples.items():
                rows.append({
                    "store": name, "entries": n, "p50_ms": round(statistics.median(values), 2),
                    "min_ms": round(min(values), 2), "max_ms": round(max(values), 2),
                    "cpu_p50_ms": round(statistics.median(cpu[name]), 2), "rounds": len(values),
                })
            for plugin, _ in cases.values():
                plugin.close()
        rows.append({"redis_version": client.info()["redis_version"]})
    finally:
        server.cleanup()
    return rows


#: (entries, store, most milliseconds for the median search) with the embedder on.
SEARCH_TARGETS: tuple[tuple[int, str, float], ...] = (
    (1_000, "memory", 25.0), (1_000, "redis", 60.0), (10_000, "memory", 300.0),
    (10_000, "redis", 300.0),
)
#: Most ``set`` time with the embedder on, as a multiple of ``set`` without it (on
#: Redis; the memory store's row is reported without a target).
SET_TARGET = 2.0


def rows_search(env: Any, sizes: Any) -> list[Any]:
    """Group ``search`` of ``python -m benchmarks``: the median ``search`` over 1,000 and
    10,000 entries with the WordLlama embedder on (memory store and Redis, rounds
    interleaved), against a fixed budget; and ``set`` with the embedder against ``set``
    without it (interleaved blocks), on both stores."""
    from .harness import Row  # noqa: PLC0415

    rounds = 5 if sizes.seconds < 2 else 9
    block = 200 if sizes.seconds >= 1 else 20
    rows: list[Any] = []
    url = f"redis://127.0.0.1:{env.redis.port}/5"
    secret = {"secrets": [_SECRET]}
    queries = ["deploy the pipeline", "customer invoice report", "morning coffee", "kafka retry"]
    budgets = {(n, store): budget for n, store, budget in SEARCH_TARGETS}
    for n in sizes.search_entries:
        env.client(db=5).flushdb()
        cases = {
            "memory": RememberPlugin.init(encryption=secret, skip_legacy_purge=True,
                                          search={"embedder": "wordllama"}),
            "redis": RememberPlugin.init(type="redis", config={"url": url}, encryption=secret,
                                         skip_legacy_purge=True, search={"embedder": "wordllama"}),
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        try:
            for plugin in cases.values():
                _wait_indexed(plugin)
                _fill(plugin, WHO, n, seed=n)
                plugin.accessor(WHO).search(queries[0])  # the first search decrypts: untimed
            for r in range(rounds):
                for name, plugin in cases.items():
                    began = time.perf_counter()
                    plugin.accessor(WHO).search(queries[r % len(queries)])
                    samples[name].append(time.perf_counter() - began)
        finally:
            for plugin in cases.values():
                plugin.close()
        for store, values in samples.items():
            p50 = statistics.median(values)
            budget = budgets.get((n, store))
            scale = 1000.0 / (budget or 1000.0)  # seconds -> share of the budget (or s)
            rows.append(Row(
                group="search", operation=f"search, {n:,} entries, WordLlama on", store=store,
                ops_per_s=1.0 / p50, p50_us=p50 * 1e6, p99_us=max(values) * 1e6,
                baseline="budget" if budget is None else f"budget {budget:g} ms",
                baseline_ops_per_s=1.0 / (budget or 1000.0) * 1000.0,
                ratio=p50 * scale, ratio_kind="time", target=None if budget is None else 1.0,
                note="median over interleaved rounds, as a share of the budget",
                spread=(min(values) * scale, max(values) * scale), rounds=len(values),
            ))
    env.client(db=5).flushdb()
    for store in ("memory", "redis"):
        rows.append(_set_row(Row, store, url, secret, rounds, block))
    env.client(db=5).flushdb()
    return rows


def _set_row(
    row: Any, store: str, url: str, secret: dict[str, Any], rounds: int, block: int
) -> Any:
    """``set`` with the WordLlama embedder vs without, blocks of *block* interleaved."""
    where: dict[str, Any] = {} if store == "memory" else {"type": "redis", "config": {"url": url}}
    sides = {
        "with": RememberPlugin.init(encryption=secret, skip_legacy_purge=True,
                                    search={"embedder": "wordllama"}, **where),
        "without": RememberPlugin.init(encryption=secret, skip_legacy_purge=True, **where),
    }
    per: dict[str, list[float]] = {"with": [], "without": []}
    rng = random.Random(5)
    try:
        for plugin in sides.values():
            _wait_indexed(plugin)
        for r in range(rounds):
            for name in ("with", "without") if r % 2 == 0 else ("without", "with"):
                mem = sides[name].accessor(Identity(user_id=f"set-{name}"))
                texts = [" ".join(rng.choice(_WORDS) for _ in range(12)) for _ in range(block)]
                began = time.perf_counter()
                for i, text in enumerate(texts):
                    mem.set(f"k{i}", text, scope="user")
                per[name].append((time.perf_counter() - began) / len(texts))
    finally:
        for plugin in sides.values():
            plugin.close()
    ratios = [w / o for w, o in zip(per["with"], per["without"], strict=True)]
    with_p50, without_p50 = statistics.median(per["with"]), statistics.median(per["without"])
    return row(
        group="search", operation="set, WordLlama on", store=store, ops_per_s=1.0 / with_p50,
        p50_us=with_p50 * 1e6, p99_us=max(per["with"]) * 1e6, baseline="set, no embedder",
        baseline_ops_per_s=1.0 / without_p50, ratio=statistics.median(ratios),
        ratio_kind="time", target=SET_TARGET if store == "redis" else None,
        note=f"per-set time of interleaved blocks of {block}",
        spread=(min(ratios), max(ratios)), rounds=len(ratios),
    )


def _wait_indexed(plugin: RememberPlugin, timeout: float = 60.0) -> None:
    backfill = plugin.index_backfill
    if backfill is not None:
        backfill.wait(timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search")
    sub = parser.add_subparsers(dest="what", required=True)
    q = sub.add_parser("quality")
    q.add_argument("path", nargs="?", type=Path, default=DEFAULT_SET)
    s = sub.add_parser("speed")
    s.add_argument("--sizes", default="1000,10000")
    s.add_argument("--rounds", type=int, default=9)
    s.add_argument("--others", type=int, default=100_000)
    args = parser.parse_args(argv)
    if args.what == "quality":
        print(json.dumps(quality(args.path), indent=1))
        return 0
    sizes = [int(x) for x in args.sizes.split(",")]
    for row in speed(sizes, args.rounds, args.others):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
