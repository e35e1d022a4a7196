"""Provenance survives export and import through the command line: a model's write stays one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from tests.conftest import TEST_SECRET
from tests.test_cli import child_env, run_cli

ALICE = Identity(session_id="s-alice", user_id="alice")


def _plugin(url: str) -> RememberPlugin:
    return RememberPlugin.init(type="redis", config={"url": url}, tools={"enabled": True},
                               encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)


@pytest.mark.parametrize("decrypted", [False, True], ids=["envelopes", "decrypted"])
def test_export_import_keeps_written_by(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, decrypted: bool
) -> None:
    """export (either form) then import into the emptied store: ``writtenBy`` is kept and
    ``search(host_only=True)`` still leaves the model's entry out."""
    with _plugin(redis_url) as plugin:
        plugin.accessor(ALICE).set("host_note", "heron seen by the host", scope="user")
        result = plugin.call_tool("remember_this", {"key": "model_note", "scope": "user",
                                                    "value": "heron noted by the model"},
                                  identity=ALICE)
        assert not result["isError"]
    env = child_env(REMEMBER_SECRET=TEST_SECRET)
    dump = tmp_path / "dump.jsonl"
    flag = ["--decrypted"] if decrypted else []
    exported = run_cli("export", "--redis-url", redis_url, "-o", str(dump), *flag, env=env)
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    if decrypted:
        by = {r["key"]: r.get("writtenBy") for r in records}
        assert by == {"host_note": None, "model_note": "remember_this"}
    else:
        assert all("remember_this" not in json.dumps(r) for r in records)  # sealed
    redis_client.flushdb()
    imported = run_cli("import", str(dump), "--redis-url", redis_url, "--json", env=env)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert json.loads(imported.stdout)["imported"] == 2
    with _plugin(redis_url) as plugin:
        mem = plugin.accessor(ALICE)
        hits = {h.key: h.written_by for h in mem.search("heron")}
        assert hits == {"host_note": "host", "model_note": "remember_this"}
        assert [h.key for h in mem.search("heron", host_only=True)] == ["host_note"]


def test_import_refuses_a_bad_written_by(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A decrypted record whose writtenBy is not a tool's name is a usage error; nothing
    is written."""
    dump = tmp_path / "bad.jsonl"
    record = {"scope": "user", "user": "alice", "key": "k", "value": "v",
              "createdAt": 1, "updatedAt": 1, "writtenBy": 7}
    dump.write_text(json.dumps(record) + "\n", encoding="utf-8")
    imported = run_cli("import", str(dump), "--redis-url", redis_url,
                       env=child_env(REMEMBER_SECRET=TEST_SECRET))
    assert imported.returncode != 0
    assert "writtenBy" in imported.stderr and "line 1" in imported.stderr
    assert [k for k in redis_client.scan_iter() if not k.startswith(b"remember:__")] == []
