"""The command line never invents a secret for a real store (issue 17, "Secrets").

Every command that reads or writes a real Redis, and ``serve --redis-url``,
exits non-zero with one line naming what to set when no secret is configured;
nothing is written and no ``.frontmcp`` file appears.  ``demo`` and ``serve``
on the in-memory store keep working on a fresh machine with no secret.  A
secret file the CLI reads must be owner-only and not a symlink.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from remember_sync import Identity
from tests.fixtures_redis import redis_plugin
from tests.test_cli import SECRET_A, TIMEOUT, child_env, run_cli

VALID = json.dumps({"secret": SECRET_A, "createdAt": 1_700_000_000_000, "version": 1})


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m remember_sync ARGS`` in *cwd*, with no secret unless *env* gives one."""
    return run_cli(*args, cwd=cwd, env=child_env(**env), stdin="")


@pytest.fixture
def populated(redis_url: str, redis_client: redis.Redis) -> dict[bytes, bytes | None]:
    """A Redis holding an application's entries under SECRET_A; returns its raw contents."""
    with redis_plugin(redis_url, SECRET_A) as plugin:
        plugin.accessor(Identity()).set("k", "application value", scope="global")
        plugin.accessor(Identity(user_id="alice")).set("summary", {"n": 1}, scope="user")
    return _raw(redis_client)


def _raw(redis_client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key and its string value (``None`` for a listing index, a sorted set)."""
    keys = redis_client.keys("*")
    return dict(zip(keys, redis_client.mget(keys) if keys else [], strict=True))


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--scope", "global"],
        ["get", "k", "--scope", "global"],
        ["set", "k", '"overwritten"', "--scope", "global"],
        ["stats"],
        ["export"],
        ["rotate"],
    ],
    ids=lambda a: a[0],
)
def test_command_on_a_real_store_without_a_secret_exits_1_and_writes_nothing(
    argv: list[str],
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    populated: dict[bytes, bytes | None],
) -> None:
    """No secret anywhere: exit 1, one `remember-sync: error: no secret` line, store unchanged."""
    result = _cli(tmp_path, *argv, "--redis-url", redis_url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("remember-sync: error: no secret")
    assert "REMEMBER_SECRET" in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""
    assert not (tmp_path / ".frontmcp").exists()
    assert _raw(redis_client) == populated


def test_require_secret_env_does_not_change_a_command_with_a_secret(
    tmp_path: Path, redis_url: str, populated: dict[bytes, bytes | None]
) -> None:
    """With REMEMBER_SECRET set (and REMEMBER_REQUIRE_SECRET=1) the same command works."""
    result = _cli(
        tmp_path, "get", "k", "--scope", "global", "--redis-url", redis_url,
        REMEMBER_SECRET=SECRET_A, REMEMBER_REQUIRE_SECRET="1",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == "application value"


def test_dev_file_others_can_read_is_refused_by_the_cli(
    tmp_path: Path, redis_url: str, populated: dict[bytes, bytes | None]
) -> None:
    """A 0644 .frontmcp/remember-secret.json in the cwd: exit 1 naming `chmod 600 <path>`."""
    directory = tmp_path / ".frontmcp"
    directory.mkdir(mode=0o700)
    path = directory / "remember-secret.json"
    path.write_text(VALID)
    path.chmod(0o644)
    result = _cli(tmp_path, "get", "k", "--scope", "global", "--redis-url", redis_url)
    assert result.returncode == 1
    assert f"chmod 600 {path}" in result.stderr
    path.chmod(0o600)
    ok = _cli(tmp_path, "get", "k", "--scope", "global", "--redis-url", redis_url)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == "application value"


def test_symlinked_secret_file_is_refused_by_the_cli(
    tmp_path: Path, redis_url: str, populated: dict[bytes, bytes | None]
) -> None:
    """--secret-file naming a symlink (to a valid 0600 file): exit 1 saying it is a symlink."""
    target = tmp_path / "real.json"
    target.write_text(VALID)
    target.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    argv = ["get", "k", "--scope", "global", "--redis-url", redis_url, "--secret-file"]
    result = _cli(tmp_path, *argv, str(link))
    assert result.returncode == 1 and "symlink" in result.stderr
    assert _cli(tmp_path, *argv, str(target)).returncode == 0


def test_serve_on_a_real_store_without_a_secret_refuses_to_start(
    tmp_path: Path, redis_url: str, populated: dict[bytes, bytes | None]
) -> None:
    """`serve --redis-url` with no secret exits 1 naming REMEMBER_SECRET; no file is created."""
    done = _cli(tmp_path, "serve", "--port", "0", "--redis-url", redis_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no secret configured" in done.stderr and "REMEMBER_SECRET" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".frontmcp").exists()


def test_serve_on_the_memory_store_starts_without_a_secret(tmp_path: Path) -> None:
    """`serve` on the default in-memory store still starts on a fresh machine with no secret."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--allow-anonymous"],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the startup line, printed once it listens
        assert "memory" in first and "secret: file:" in first, first
    finally:
        proc.terminate()
        proc.communicate(timeout=TIMEOUT)
    assert (tmp_path / ".frontmcp" / "remember-secret.json").is_file()


def test_demo_runs_without_a_secret_and_writes_no_file(tmp_path: Path) -> None:
    """The README's first command, `remember-sync demo`, works with no secret and no file."""
    result = _cli(tmp_path, "demo")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / ".frontmcp").exists()
