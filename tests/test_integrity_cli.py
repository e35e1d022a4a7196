"""``remember-sync verify [--repair]`` and ``doctor``'s integrity check, on a real Redis.

Also the Redis Cluster leftovers of a writer killed between its steps: ``verify``
reports them as unfinished, ``--repair`` settles them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
import redis

from remember_sync import RememberIntegrityError, RememberPlugin, identity
from remember_sync.cli import main
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET

Factory = Callable[..., RememberPlugin]
ENTRY = "remember:v2:user:alice:"


@pytest.fixture
def store_kind() -> str:
    return "redis"  # the stores are chosen per test


@pytest.fixture
def url(redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    return redis_url


@pytest.fixture
def verified(make_plugin: Factory, redis_store: Store) -> Factory:
    def factory(**options: Any) -> RememberPlugin:
        return make_plugin(store=redis_store, integrity="verified", **options)

    return factory


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_verify_reports_each_violation(
    url: str, verified: Factory, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean verified store exits 0; a deleted and a replayed entry are both listed, exit 1."""
    plugin = verified()
    with identity(user_id="alice"):
        plugin.remember.set("a", 1, scope="user")
        plugin.remember.set("b", 1, scope="user")
    with identity(session_id="s-1"):
        plugin.remember.set("a", 1)
    code, report = run(capsys, "verify", "--redis-url", url)
    assert code == 0 and report["violations"] == 0 and report["manifests"] == 2
    old = redis_client.get(ENTRY + "b")
    with identity(user_id="alice"):
        plugin.remember.set("b", 2, scope="user")
    redis_client.set(ENTRY + "b", old)  # type: ignore[arg-type]
    redis_client.delete(ENTRY + "a")
    code, report = run(capsys, "verify", "--redis-url", url)
    assert code == 1 and report["violations"] == 2
    problems = " ".join(report["violation_list"])
    assert "missing from the store" in problems and "not the version" in problems
    assert "alice" not in problems  # namespaces are named by a hash, never an identity
    code, report = run(capsys, "doctor", "--redis-url", url)
    integrity = next(c for c in report["checks"] if c["name"] == "integrity")
    assert code == 1 and integrity["status"] == "attention" and integrity["violations"] == 2


def test_repair_moves_a_default_store_into_verified_mode(
    url: str, make_plugin: Factory, verified: Factory, redis_store: Store,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Entries written in default mode are refused by verified reads until `verify --repair`."""
    default = make_plugin(store=redis_store)
    with identity(user_id="alice"):
        default.remember.set("a", 1, scope="user")
        default.remember.set("b", 2, scope="user", ttl=60)
        with pytest.raises(RememberIntegrityError, match="not in its manifest"):
            verified().remember.get("a", scope="user")
    code, report = run(capsys, "doctor", "--redis-url", url)
    integrity = next(c for c in report["checks"] if c["name"] == "integrity")
    assert integrity["status"] == "ok" and integrity["manifests"] == 0
    code, report = run(capsys, "verify", "--redis-url", url, "--repair")
    assert code == 0 and report["repaired"] == 1
    with identity(user_id="alice"):
        assert verified().remember.entries(scope="user").keys() == {"a", "b"}
    code, report = run(capsys, "verify", "--redis-url", url)
    assert code == 0 and report["violations"] == 0


def test_repair_leaves_unreadable_entries_in_place(
    url: str, verified: Factory, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry the secret cannot open is reported and kept, never deleted; exit 1."""
    plugin = verified()
    with identity(user_id="alice"):
        plugin.remember.set("a", 1, scope="user")
    redis_client.set(ENTRY + "x", "not an envelope")
    code, report = run(capsys, "verify", "--redis-url", url, "--repair")
    assert code == 1 and report["unreadable"] == 1 and report["repaired"] == 0
    assert redis_client.get(ENTRY + "x") == b"not an envelope"
    with identity(user_id="alice"):
        assert verified().remember.get("a", scope="user") == 1


def test_verify_warns_about_eviction(
    url: str, verified: Factory, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """maxmemory-policy other than noeviction would delete entries behind the manifest's back."""
    plugin = verified()
    with identity(user_id="alice"):
        plugin.remember.set("a", 1, scope="user")
    before = redis_client.config_get("maxmemory-policy")["maxmemory-policy"]
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        code, report = run(capsys, "verify", "--redis-url", url)
    finally:
        redis_client.config_set("maxmemory-policy", before)
    assert code == 0 and "allkeys-lru" in report["warnings"][0]


def test_serve_takes_integrity_and_witness(
    url: str, tmp_path: Any, redis_client: redis.Redis
) -> None:
    """`serve --integrity verified --witness W` starts in verified mode (the witness file is
    opened 0600); a mode that does not exist is a usage error."""
    from tests.served import serve

    env = {**os.environ, "REMEMBER_SECRET": TEST_SECRET}
    witness = tmp_path / "w.db"
    server = serve(tmp_path, "--redis-url", url, "--no-token", "--integrity", "verified",
                   "--witness", str(witness), env=env, exact_env=True)
    try:
        server.wait_ready()
        assert oct(witness.stat().st_mode & 0o777) == "0o600"
    finally:
        server.close()
    bad = serve(tmp_path, "--redis-url", url, "--integrity", "strict", env=env, exact_env=True)
    assert bad.proc.wait(30) == 2
    bad.close()
    assert "invalid choice: 'strict'" in bad.output


def test_rotate_keeps_a_verified_store_verifiable(
    url: str, make_plugin: Factory, redis_store: Store, redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """rotate re-seals entries, then rebuilds the manifests; it refuses a store that fails."""
    new = "new-secret-0123456789abcdef0123456789"
    old = make_plugin(store=redis_store, integrity="verified")
    with identity(user_id="alice"):
        old.remember.set("a", 1, scope="user")
    monkeypatch.setenv("REMEMBER_SECRET", new)
    monkeypatch.setenv("REMEMBER_PREVIOUS_SECRETS", TEST_SECRET)
    code, report = run(capsys, "rotate", "--redis-url", url)
    assert code == 0 and report["rotated"] == 1
    rotated = make_plugin(store=redis_store, integrity="verified",
                          encryption={"secrets": [new]})
    with identity(user_id="alice"):
        assert rotated.remember.get("a", scope="user") == 1
    redis_client.delete(ENTRY + "a")
    assert main(["rotate", "--redis-url", url]) == 1
    assert "fails verification" in capsys.readouterr().err


def test_a_forked_child_uses_its_own_witness_connection(
    redis_store: Store, make_plugin: Factory, tmp_path: Any
) -> None:
    """The file witness is reopened in a forked child; parent and child both advance it."""
    witness = str(tmp_path / "w.db")
    plugin = make_plugin(store=redis_store, integrity="verified", witness=witness)
    with identity(user_id="alice"):
        plugin.remember.set("a", 1, scope="user")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with identity(user_id="alice"):
                plugin.remember.set("a", 2, scope="user")
                code = 0 if plugin.remember.get("a", scope="user") == 2 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    with identity(user_id="alice"):
        plugin.remember.set("b", 3, scope="user")
        fresh = make_plugin(store=redis_store, integrity="verified", witness=witness)
        assert fresh.remember.get("a", scope="user") == 2
