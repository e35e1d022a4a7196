"""AES-GCM IVs stay unique when a signal handler encrypts in the middle of an encryption.

Issue 18 item 3: the old ``random_iv`` read a per-thread offset, called
``os.getpid()`` and only then stored the next offset, so a signal handler that
sealed in that gap was handed the same IV under the same key (two ciphertexts
XOR to the XOR of their plaintexts).  These tests run the attack with a real
interval timer and a real Python signal handler.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from remember_sync._crypto import IV_BYTES, Keyring, parse_envelope, random_iv, seal
from remember_sync.types import Namespace
from tests.conftest import TEST_SECRET

NS = Namespace("user", user="alice")
AAD = b"user:alice:k"

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)"
)


def _seal(keyring: Keyring, plaintext: bytes) -> str:
    """The real write path of every set: the primary secret's key, its kid, the key bound."""
    return seal(plaintext, keyring.key(NS), kid=keyring.primary_kid, aad=AAD)


@pytest.fixture
def itimer() -> Iterator[None]:
    """Restore SIGALRM's handler and stop the timer whatever the test does."""
    previous = signal.getsignal(signal.SIGALRM)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _ivs_under_signal_storm(seconds: float) -> tuple[list[bytes], int]:
    """Seal in a loop while a 50 us interval timer's handler seals too; return IVs and calls."""
    keyring = Keyring([TEST_SECRET], source="explicit")
    keyring.key(NS)  # derive outside the storm
    ivs: list[bytes] = []
    handled = [0]
    busy = [False]

    def handler(signum: int, frame: FrameType | None) -> None:
        # A handler that writes memory: the real write path of every set.  The
        # timer may fire again inside the handler; one level of re-entry is the attack.
        if busy[0]:
            return
        busy[0] = True
        try:
            ivs.append(parse_envelope(_seal(keyring, b"from the handler")).iv)
            handled[0] += 1
        finally:
            busy[0] = False

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            for _ in range(200):
                ivs.append(random_iv())
                ivs.append(parse_envelope(_seal(keyring, b"main loop")).iv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return ivs, handled[0]


def test_signal_handler_sealing_mid_seal_never_reuses_an_iv(itimer: None) -> None:
    """A real SIGALRM handler sealing between every few bytecodes of a seal loop gets fresh IVs."""
    ivs, handled = _ivs_under_signal_storm(1.5)
    assert handled >= 200, f"the timer fired only {handled} times; the attack did not run"
    assert all(len(iv) == IV_BYTES for iv in ivs)
    repeats = len(ivs) - len(set(ivs))
    assert repeats == 0, f"{repeats} IVs of {len(ivs)} were handed out twice"


def test_threads_and_handler_never_share_an_iv(itimer: None) -> None:
    """Four threads sealing while the main thread's signal handler seals: every IV is distinct."""
    keyring = Keyring([TEST_SECRET], source="explicit")
    stop = threading.Event()
    per_thread: list[list[bytes]] = [[] for _ in range(4)]

    def worker(out: list[bytes]) -> None:
        while not stop.is_set():
            out.append(parse_envelope(seal(b"thread", keyring.key(NS), aad=AAD)).iv)

    threads = [threading.Thread(target=worker, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    try:
        ivs, handled = _ivs_under_signal_storm(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    everything = ivs + [iv for out in per_thread for iv in out]
    assert handled > 0 and all(per_thread)
    repeats = len(everything) - len(set(everything))
    assert repeats == 0, f"{repeats} IVs of {len(everything)} were handed out twice"


def test_forked_child_draws_different_ivs() -> None:
    """A forked child's IVs never repeat the parent's, before or after the fork."""
    before = [random_iv() for _ in range(50)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.write(write, b"".join(random_iv() for _ in range(50)))
        finally:
            os._exit(0)
    os.close(write)
    after = [random_iv() for _ in range(50)]
    with os.fdopen(read, "rb") as fh:
        child_bytes = fh.read()
    os.waitpid(pid, 0)
    child = [child_bytes[i : i + IV_BYTES] for i in range(0, len(child_bytes), IV_BYTES)]
    assert len(child) == 50
    everything = before + after + child
    assert len(set(everything)) == len(everything)
