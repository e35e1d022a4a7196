"""A signal handler that writes memory while its thread is writing never hangs, never recurses.

A Python signal handler runs in the main thread between two bytecodes, possibly
while that thread holds the memory store's lock (or the core's, or a cache's)
half-way through a write.  With plain locks the handler's own write waited for
ever (8 of 20 runs hung with ``max_entries=50``).  Each run here is a real
interval timer firing a real handler into a write loop, in a child process with
a timeout, so a hang fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)"
)

#: The child: writes for SECONDS while SIGALRM's handler writes too; prints what happened.
CHILD = textwrap.dedent(
    """
    import json, signal, sys, time
    from remember_sync import Identity, RememberPlugin
    from remember_sync.errors import RememberConflictError

    mode, bound, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    options = {"max_entries": 50} if bound == "bounded" else {}
    plugin = RememberPlugin.init(
        encryption={"secrets": ["signal-secret-0123456789abcdef0123456789"]},
        skip_legacy_purge=True, **options,
    )
    main = plugin.accessor(Identity(user_id="main"))
    side = plugin.accessor(Identity(user_id="handler"))
    state = {"handled": 0, "conflicts": 0, "busy": False, "last": {}}

    def handler(signum, frame):
        if state["busy"]:  # the timer may fire inside the handler: one level is the attack
            return
        state["busy"] = True
        try:
            n = state["handled"]
            if mode == "set":
                side.set(f"h{n % 10}", n, scope="user")
                assert side.get(f"h{n % 10}", scope="user") == n  # reads its own write
                state["last"][f"h{n % 10}"] = n
            else:
                try:
                    side.increment("count", scope="user")
                except RememberConflictError:
                    state["conflicts"] += 1
                    return
            state["handled"] = n + 1
        finally:
            state["busy"] = False

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    deadline = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < deadline:
        main.set(f"m{i % 200}", i, scope="user")
        if mode == "increment" and i % 7 == 0:
            main.forget(f"m{(i + 100) % 200}", scope="user")
        i += 1
    signal.setitimer(signal.ITIMER_REAL, 0)
    found = {k: side.get(k, scope="user") for k in state["last"]}
    print(json.dumps({
        "handled": state["handled"], "conflicts": state["conflicts"], "loops": i,
        "expected": state["last"], "found": found,
        "count": side.get("count", scope="user"),
        "entries": len(plugin.store),
    }))
    """
)


def _run(mode: str, bound: str) -> dict[str, object]:
    try:
        result = subprocess.run(
            [sys.executable, "-c", CHILD, mode, bound, "1.5"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the writer hung with a signal handler writing ({mode}, {bound})")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RecursionError" not in result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


@pytest.mark.parametrize("bound", ["bounded", "unbounded"])
def test_a_handler_that_sets_while_the_thread_sets_never_hangs(bound: str) -> None:
    """Every handler write lands and is read back; the bound still holds."""
    report = _run("set", bound)
    assert isinstance(report["handled"], int) and report["handled"] >= 100, report
    assert report["found"] == report["expected"], "a write made by the handler was lost"
    if bound == "bounded":
        assert isinstance(report["entries"], int) and report["entries"] <= 50


def test_a_handler_that_increments_never_hangs_and_never_counts_twice() -> None:
    """increment() from the handler: applied once, or refused as a conflict; never both."""
    report = _run("increment", "bounded")
    handled, conflicts = report["handled"], report["conflicts"]
    assert isinstance(handled, int) and isinstance(conflicts, int)
    assert handled >= 50, report
    assert report["count"] == handled, report
