"""Where the master secret comes from (SPEC section 4.1)."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remember_sync import RememberConfigurationError, RememberPlugin
from remember_sync.secret_source import (
    generate_secret,
    load_or_create_secret_file,
    resolve_keyring,
)


@pytest.mark.parametrize(
    ("env", "source"),
    [
        (
            {"REMEMBER_SECRET": "a", "MCP_MEMORY_SECRET": "b", "MCP_SESSION_SECRET": "c"},
            "env:REMEMBER_SECRET",
        ),
        (
            {"REMEMBER_SECRET": "", "MCP_MEMORY_SECRET": "b", "MCP_SESSION_SECRET": "c"},
            "env:MCP_MEMORY_SECRET",
        ),
        ({"MCP_SESSION_SECRET": "c"}, "env:MCP_SESSION_SECRET"),
    ],
)
def test_environment_precedence(env: dict[str, str], source: str, tmp_path: Path) -> None:
    """REMEMBER_SECRET > MCP_MEMORY_SECRET > MCP_SESSION_SECRET; empty counts as unset."""
    keyring = resolve_keyring(environ=env, secret_file=tmp_path / "never.json")
    assert keyring.source == source
    assert not (tmp_path / "never.json").exists()


def test_explicit_secrets_beat_environment(tmp_path: Path) -> None:
    """encryption.secrets wins over the environment."""
    keyring = resolve_keyring(secrets=["x" * 32], environ={"REMEMBER_SECRET": "env"})
    assert keyring.source == "explicit:secrets"


def test_secret_never_in_repr() -> None:
    """Keyring and plugin reprs never show the secret."""
    secret = "super-secret-value-0123456789abcd"
    keyring = resolve_keyring(secrets=[secret])
    plugin = RememberPlugin.init(encryption={"secrets": [secret]}, skip_legacy_purge=True)
    assert secret not in repr(keyring)
    assert secret not in repr(plugin)
    assert secret not in repr(plugin.remember)
    plugin.close()


@pytest.mark.parametrize(
    "encryption",
    [
        {"custom_key": "a" * 32, "secrets": ["b" * 32]},
        {"secrets": []},
        {"secrets": "just-a-string"},
        {"secrets": ["ok", ""]},
        {"custom_key": ""},
    ],
)
def test_bad_secret_options(encryption: dict[str, object]) -> None:
    """Contradictory or empty secrets are configuration errors."""
    with pytest.raises(RememberConfigurationError):
        RememberPlugin.init(encryption=encryption, skip_legacy_purge=True)


def test_dev_file_created_with_modes_and_format(tmp_path: Path) -> None:
    """The development file: dir 0700, file 0600, reference JSON format, reused next time."""
    path = tmp_path / ".frontmcp" / "remember-secret.json"
    secret = load_or_create_secret_file(path)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["secret"] == secret and len(secret) == 43 and data["version"] == 1
    assert isinstance(data["createdAt"], int)
    assert load_or_create_secret_file(path) == secret
    assert list(path.parent.iterdir()) == [path]  # no temporary files left behind


def test_plugin_uses_dev_file_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without env secrets, a development plugin uses ./.frontmcp/remember-secret.json."""
    monkeypatch.chdir(tmp_path)
    plugin = RememberPlugin.init(skip_legacy_purge=True)
    path = tmp_path / ".frontmcp" / "remember-secret.json"
    assert plugin.keyring is not None and plugin.keyring.source == f"file:{path}"
    assert path.exists()


def test_reads_reference_dev_file(tmp_path: Path) -> None:
    """A file written by 1.8.0 (the vector's secretFileContents) is used as is."""
    from tests.vectors import VECTORS

    vector = next(v for v in VECTORS if v["name"] == "secret-dev-file")
    path = tmp_path / "remember-secret.json"
    path.write_text(vector["secretFileContents"])
    assert load_or_create_secret_file(path) == vector["secret"]


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"secret": "short", "createdAt": 1, "version": 1}',
        '{"secret": "' + "x" * 43 + '", "createdAt": 1, "version": 2}',
        '{"secret": "' + "x" * 43 + '", "createdAt": -5, "version": 1}',
        '{"secret": "' + "x" * 43 + '", "createdAt": 99999999999999, "version": 1}',
    ],
)
def test_invalid_file_renamed_aside_with_warning(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An invalid file is moved to .invalid-<ms> with a warning, never overwritten silently."""
    path = tmp_path / "remember-secret.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        secret = load_or_create_secret_file(path)
    aside = list(tmp_path.glob("remember-secret.json.invalid-*"))
    assert len(aside) == 1 and aside[0].read_text() == content
    assert json.loads(path.read_text())["secret"] == secret
    assert any("invalid" in r.getMessage() for r in caplog.records)


def test_unreadable_file_is_an_error_not_a_new_secret(tmp_path: Path) -> None:
    """A secret file that exists but cannot be read is reported, not replaced."""
    path = tmp_path / "remember-secret.json"
    path.mkdir()  # reading a directory fails with an OSError other than "missing"
    with pytest.raises(RememberConfigurationError, match="could not read"):
        load_or_create_secret_file(path)


_RACE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from remember_sync.secret_source import load_or_create_secret_file
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    print(load_or_create_secret_file(Path(sys.argv[1])))
    """
)


def test_two_processes_race_to_one_secret(tmp_path: Path) -> None:
    """Two processes starting together in an empty directory end with one identical 0600 file."""
    import time

    for attempt in range(3):
        path = tmp_path / f"run{attempt}" / ".frontmcp" / "remember-secret.json"
        start = str(time.time() + 1.0)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _RACE, str(path), start],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outputs = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert len(outputs) == 1
        assert json.loads(path.read_text())["secret"] == outputs.pop()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert list(path.parent.iterdir()) == [path]


_PRODUCTION = textwrap.dedent(
    """
    import logging
    from remember_sync import RememberPlugin
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    a = RememberPlugin.init(skip_legacy_purge=True)
    b = RememberPlugin.init(skip_legacy_purge=True)
    with __import__("remember_sync").identity(user_id="u"):
        a.remember.set("k", 1, scope="user")
        assert b.remember.get("k", scope="user") is None  # separate memory stores
    print(a.keyring.source, a.keyring.primary_kid == b.keyring.primary_kid)
    """
)


@pytest.mark.parametrize("var", ["REMEMBER_ENV", "NODE_ENV"])
def test_production_without_secret_warns_once(tmp_path: Path, var: str) -> None:
    """Production: no file, one in-memory secret per process, exactly one warning."""
    env = {k: v for k, v in os.environ.items() if "SECRET" not in k}
    env[var] = "production"
    result = subprocess.run(
        [sys.executable, "-c", _PRODUCTION],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "ephemeral True"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1
    assert "unreadable after a restart" in warnings[0]
    assert not (tmp_path / ".frontmcp").exists()


def test_generate_secret() -> None:
    """generate_secret gives 43 base64url characters of fresh randomness."""
    a, b = generate_secret(), generate_secret()
    assert a != b and len(a) == 43
    assert set(a) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
