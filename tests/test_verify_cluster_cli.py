"""``remember-sync verify [--repair]`` reaches a 3-node Redis Cluster through a
``redis+cluster://`` URL: a real CLI process, a store in verified mode.

A writer killed between the two steps of its write leaves an unfinished
record, which ``verify`` counts (``pending``; not a violation by itself, exit
0); a manifest edited behind the application's back fails its check (exit 1).
``verify --repair`` settles the record and rebuilds the manifest, ``verify`` is
clean (exit 0) afterwards, and the version the killed writer replaced is
refused again.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remember_sync import RememberIntegrityError, RememberPlugin, identity
from remember_sync._keys import MANIFEST_HEAD
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET
from tests.integrity_raw import RawStore
from tests.test_cli import child_env, run_cli
from tests.test_integrity_cluster import killed_before_commit
from tests.test_plugin_reindex import _cluster_url

Factory = Callable[..., RememberPlugin]
ALICE = "alice"
ENTRY = "remember:v2:user:alice:"


@pytest.fixture
def store_kind() -> str:
    return "redis_cluster"


def _verify(url: str, cwd: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    done = run_cli("verify", "--redis-url", url, "--json", *extra,
                   env=child_env(REMEMBER_SECRET=TEST_SECRET), cwd=cwd)  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _edit(raw: RawStore, key: str) -> None:
    """Change the first character of *key*'s sealed data (the attacker's edit)."""
    value = raw.get(key)
    assert value
    sealed = json.loads(value)
    data = sealed["data"]
    sealed["data"] = ("A" if data[0] != "A" else "B") + data[1:]
    raw.set(key, json.dumps(sealed))


def test_verify_and_repair_reach_a_cluster_from_the_cli(
    redis_cluster: Any, redis_cluster_client: Any, redis_cluster_store: Store,
    make_plugin: Factory, tmp_path: Path,
) -> None:
    """A writer killed between its steps: ``verify`` counts the unfinished write (exit 0,
    nothing is wrong yet); a manifest edited: ``verify`` exits 1 naming it;
    ``verify --repair`` settles and rebuilds (exit 0); ``verify`` is clean afterwards
    and the application reads the settled value."""
    raw = RawStore(redis_cluster_client)
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("approval", "granted", scope="user")
        plugin.remember.set("b", "kept", scope="user")
        plugin.remember.set("c", "other", scope="user")
    with identity(user_id="bob"):
        plugin.remember.set("n", 1, scope="user")
    granted = raw.get(ENTRY + "approval")
    status = killed_before_commit(make_plugin, redis_cluster_store, "approval", "revoked")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    url = _cluster_url(redis_cluster)

    code, found = _verify(url, tmp_path)
    assert (code, found["pending"], found["violations"]) == (0, 1, 0), found
    assert (found["namespaces"], found["manifests"], found["entries"]) == (2, 2, 4)

    manifests = [k for k in raw.keys("remember:" + MANIFEST_HEAD + "*") if k.endswith(":bob:")]
    assert len(manifests) == 1, raw.keys()
    _edit(raw, manifests[0])
    code, found = _verify(url, tmp_path)
    assert code == 1 and found["violations"] >= 1 and found["pending"] == 1, found
    assert "bob" not in json.dumps(found["violation_list"])  # never named by identity

    code, repaired = _verify(url, tmp_path, "--repair")
    assert code == 0, repaired
    assert repaired["repaired"] >= 2 and repaired["unreadable"] == 0, repaired
    code, found = _verify(url, tmp_path)
    assert (code, found["pending"], found["violations"]) == (0, 0, 0), found

    reader = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        assert reader.remember.get("approval", scope="user") == "revoked"
        assert reader.remember.entries(scope="user").keys() == {"approval", "b", "c"}
        raw.set(ENTRY + "approval", granted or "")  # the previous ciphertext put back
        with pytest.raises(RememberIntegrityError, match="not the version"):
            reader.remember.get("approval", scope="user")
    with identity(user_id="bob"):
        assert reader.remember.get("n", scope="user") == 1
