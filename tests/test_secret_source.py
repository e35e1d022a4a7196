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

from remember_sync import RememberConfigurationError, RememberPlugin, generate_secret
from tests.test_secret_file_attacks import file_plugin, opens_with, race, sealed


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
    with RememberPlugin.init(environ=env, encryption={"secret_file": str(tmp_path / "never.json")},
                             skip_legacy_purge=True) as plugin:  # fmt: skip
        assert plugin.keyring is not None and plugin.keyring.source == source
    assert not (tmp_path / "never.json").exists()


def test_explicit_secrets_beat_environment(tmp_path: Path) -> None:
    """encryption.secrets wins over the environment."""
    with RememberPlugin.init(encryption={"secrets": ["x" * 32]}, environ={"REMEMBER_SECRET": "env"},
                             skip_legacy_purge=True) as plugin:  # fmt: skip
        assert plugin.keyring is not None and plugin.keyring.source == "explicit:secrets"


def test_secret_never_in_repr() -> None:
    """Keyring and plugin reprs never show the secret."""
    secret = "super-secret-value-0123456789abcd"
    plugin = RememberPlugin.init(encryption={"secrets": [secret]}, skip_legacy_purge=True)
    assert secret not in repr(plugin.keyring)
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
    with file_plugin(path) as plugin:
        envelope = sealed(plugin)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = path.read_text()
    data = json.loads(written)
    secret = data["secret"]
    assert opens_with(secret, envelope) and len(secret) == 43 and data["version"] == 1
    assert isinstance(data["createdAt"], int)
    with file_plugin(path) as again:
        assert opens_with(secret, sealed(again))
    assert path.read_text() == written
    assert list(path.parent.iterdir()) == [path]  # no temporary files left behind


def test_plugin_uses_dev_file_in_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without env secrets, a development plugin creates ./.frontmcp/remember-secret.json and
    says so in one WARNING naming the file's absolute path; reusing it logs nothing."""
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        plugin = RememberPlugin.init(skip_legacy_purge=True)
    path = tmp_path / ".frontmcp" / "remember-secret.json"
    assert plugin.keyring is not None and plugin.keyring.source == f"file:{path}"
    assert path.exists()
    created = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(created) == 1 and str(path) in created[0].getMessage()
    assert "created the development secret file" in created[0].getMessage()
    plugin.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        RememberPlugin.init(skip_legacy_purge=True).close()
    assert caplog.records == []


def test_relative_secret_file_is_named_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A relative encryption.secret_file is created, and named in the warning, by absolute path."""
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        file_plugin(Path("sub/secret.json")).close()
    assert str(tmp_path / "sub" / "secret.json") in caplog.records[0].getMessage()


def _no_secret_init(tmp_path: Path, **options: object) -> None:
    RememberPlugin.init(
        skip_legacy_purge=True,
        encryption={"secret_file": str(tmp_path / ".frontmcp" / "remember-secret.json"), **options},  # type: ignore[dict-item]
    ).close()


def test_require_secret_refuses_without_a_secret(tmp_path: Path) -> None:
    """encryption.require_secret and no configured secret: a configuration error naming
    REMEMBER_SECRET, and the development file is neither created nor read."""
    with pytest.raises(RememberConfigurationError) as caught:
        _no_secret_init(tmp_path, require_secret=True)
    assert "REMEMBER_SECRET" in caught.value.message
    assert "require_secret" in caught.value.message
    assert not (tmp_path / ".frontmcp").exists()
    # An existing, valid development file is not read either.
    file_plugin(tmp_path / ".frontmcp" / "remember-secret.json").close()
    assert (tmp_path / ".frontmcp" / "remember-secret.json").is_file()
    with pytest.raises(RememberConfigurationError):
        _no_secret_init(tmp_path, require_secret=True)


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on", " On "])
def test_require_secret_env_truthy_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """REMEMBER_REQUIRE_SECRET=1/true/yes/on (any case) refuses to start without a secret."""
    monkeypatch.setenv("REMEMBER_REQUIRE_SECRET", value)
    with pytest.raises(RememberConfigurationError, match="REMEMBER_REQUIRE_SECRET"):
        _no_secret_init(tmp_path)
    assert not (tmp_path / ".frontmcp").exists()


@pytest.mark.parametrize("value", ["", "0", "false", "No", "off"])
def test_require_secret_env_falsy_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """REMEMBER_REQUIRE_SECRET=0/false/no/off/empty keeps the development file."""
    monkeypatch.setenv("REMEMBER_REQUIRE_SECRET", value)
    _no_secret_init(tmp_path)
    assert (tmp_path / ".frontmcp" / "remember-secret.json").is_file()


def test_require_secret_env_typo_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unrecognised REMEMBER_REQUIRE_SECRET value is refused, not read as off."""
    monkeypatch.setenv("REMEMBER_REQUIRE_SECRET", "ture")
    with pytest.raises(RememberConfigurationError, match="'ture'"):
        _no_secret_init(tmp_path)
    assert not (tmp_path / ".frontmcp").exists()


def test_require_secret_beats_the_production_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """In production, require_secret refuses instead of inventing an in-memory secret."""
    monkeypatch.setenv("REMEMBER_ENV", "production")
    with pytest.raises(RememberConfigurationError, match="REMEMBER_SECRET"):
        RememberPlugin.init(skip_legacy_purge=True, encryption={"require_secret": True})


@pytest.mark.parametrize(
    ("encryption", "env", "source"),
    [
        ({"require_secret": True}, {"REMEMBER_SECRET": "s" * 32}, "env:REMEMBER_SECRET"),
        ({"require_secret": True, "secrets": ["s" * 32]}, {}, "explicit:secrets"),
        ({"require_secret": True, "custom_key": "s" * 32}, {}, "explicit:custom_key"),
        ({"require_secret": True, "enabled": False}, {}, None),
        (
            {},
            {"REMEMBER_REQUIRE_SECRET": "1", "MCP_SESSION_SECRET": "s" * 32},
            "env:MCP_SESSION_SECRET",
        ),
    ],
)
def test_require_secret_accepts_a_configured_secret(
    encryption: dict[str, object],
    env: dict[str, str],
    source: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """require_secret is satisfied by options or any secret variable (and moot unencrypted)."""
    monkeypatch.chdir(tmp_path)
    plugin = RememberPlugin.init(skip_legacy_purge=True, encryption=encryption, environ=env)
    assert (plugin.keyring.source if plugin.keyring else None) == source
    plugin.close()
    assert not (tmp_path / ".frontmcp").exists()


def test_require_secret_must_be_a_bool() -> None:
    """encryption.require_secret takes True or False only."""
    with pytest.raises(RememberConfigurationError, match="require_secret"):
        RememberPlugin.init(skip_legacy_purge=True, encryption={"require_secret": "yes"})


def test_reads_reference_dev_file(tmp_path: Path) -> None:
    """A file written by 1.8.0 (the vector's secretFileContents) is used as is."""
    from tests.vectors import VECTORS

    vector = next(v for v in VECTORS if v["name"] == "secret-dev-file")
    path = tmp_path / "remember-secret.json"
    path.write_text(vector["secretFileContents"])
    path.chmod(0o600)
    with file_plugin(path) as plugin:
        assert opens_with(vector["secret"], sealed(plugin))
    assert path.read_text() == vector["secretFileContents"]


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"secret": "short", "createdAt": 1, "version": 1}',
        '{"secret": "' + "x" * 43 + '", "createdAt": 1, "version": 2}',
        '{"secret": "' + "x" * 43 + '", "createdAt": -5, "version": 1}',
        '{"secret": "' + "x" * 43 + '", "createdAt": true, "version": 1}',
        # A createdAt in the future is no longer invalid: see test_secret_file_attacks.py.
    ],
)
def test_invalid_file_renamed_aside_with_warning(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An invalid file is moved to .invalid-<ms> with a warning, never overwritten silently."""
    path = tmp_path / "remember-secret.json"
    path.write_text(content)
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="remember_sync"), file_plugin(path) as plugin:
        envelope = sealed(plugin)
    aside = list(tmp_path.glob("remember-secret.json.invalid-*"))
    assert len(aside) == 1 and aside[0].read_text() == content
    assert opens_with(json.loads(path.read_text())["secret"], envelope)
    assert any("invalid" in r.getMessage() for r in caplog.records)


def test_unreadable_file_is_an_error_not_a_new_secret(tmp_path: Path) -> None:
    """A secret file that exists but cannot be read is reported, not replaced."""
    path = tmp_path / "remember-secret.json"
    path.mkdir()  # reading a directory fails with an OSError other than "missing"
    with pytest.raises(RememberConfigurationError, match="could not read"):
        file_plugin(path)
    assert path.is_dir() and list(path.iterdir()) == []


def test_two_processes_race_to_one_secret(tmp_path: Path) -> None:
    """Processes starting together in an empty directory end with one identical 0600 file."""
    for attempt in range(3):
        envelopes, path = race(tmp_path / f"run{attempt}", 4, None)
        secret = json.loads(path.read_text())["secret"]
        assert len(envelopes) == 4 and all(opens_with(secret, e) for e in envelopes)
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
