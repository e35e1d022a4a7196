"""The ``remember-sync`` command, run as users run it: in a subprocess, via its entry points.

Every command goes through ``python -m remember_sync`` (and once through the
installed ``remember-sync`` console script) against the in-memory default
where that means something, a real redis-server (the ``redis_url`` fixture)
and the Vercel KV emulator.  Secrets reach the child through its environment,
as they would in production.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberEntry, RememberPlugin
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import free_port
from tests.conftest import require_component

SECRET_A = "cli-secret-A-0123456789abcdef0123456789"
SECRET_B = "cli-secret-B-0123456789abcdef0123456789"
SECRET_C = "cli-secret-C-0123456789abcdef0123456789"
TIMEOUT = 60
REPO = Path(__file__).resolve().parent.parent

#: Variables a developer's shell may hold that would change what the child does.
_SCRUBBED = (
    "REMEMBER_SECRET",
    "MCP_MEMORY_SECRET",
    "MCP_SESSION_SECRET",
    "REMEMBER_PREVIOUS_SECRETS",
    "REMEMBER_ENV",
    "NODE_ENV",
    "REMEMBER_REDIS_URL",
    "KV_REST_API_URL",
    "KV_REST_API_TOKEN",
    "REDIS_URL",
    "REMEMBER_VERCEL_KV",
)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env["PYTHONIOENCODING"] = "utf-8"
    # The checkout under test, whatever the editable install points at.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str], cwd: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m remember_sync ARGS`` with exactly *env*; its output captured as text."""
    return subprocess.run([sys.executable, "-m", "remember_sync", *args], cwd=cwd, env=env,
                          input=stdin, capture_output=True, text=True, timeout=TIMEOUT)


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path) -> Run:
    """Run ``python -m remember_sync ARGS`` in a clean working directory."""

    def run(
        *args: str,
        env: dict[str, str] | None = None,
        secret: str | None = SECRET_A,
        stdin: str | None = None,
        **extra_env: str,
    ) -> subprocess.CompletedProcess[str]:
        environ = child_env(**extra_env) if env is None else env
        if secret is not None and env is None:
            environ["REMEMBER_SECRET"] = secret
        return run_cli(*args, cwd=tmp_path, env=environ, stdin=stdin if stdin is not None else "")

    return run


@pytest.fixture
def url(redis_url: str, redis_client: redis.Redis) -> str:
    """The test server's URL, database flushed."""
    return redis_url


@pytest.fixture
def url_db1(redis_url: str) -> Iterator[str]:
    """A second, flushed database on the same server (an empty store to import into)."""
    other = redis_url.rsplit("/", 1)[0] + "/1"
    client = redis.Redis.from_url(other)
    client.flushdb()
    yield other
    client.flushdb()
    client.close()


@pytest.fixture
def open_plugin(redis_url: str) -> Iterator[Callable[..., RememberPlugin]]:
    """In-process plugins on the test server, to seed and to check what the CLI did."""
    made: list[tuple[RememberPlugin, RedisStore]] = []

    def make(*secrets: str, url: str = redis_url, prefix: str = "remember:") -> RememberPlugin:
        store = RedisStore.from_url(url)
        plugin = RememberPlugin.init(
            store=store,
            key_prefix=prefix,
            encryption={"secrets": list(secrets or (SECRET_A,))},
            skip_legacy_purge=True,
        )
        made.append((plugin, store))
        # The background reindex writes its lease and record; tests that snapshot raw keys
        # must not race it, so wait for it to end before handing the plugin out.
        backfill = plugin.index_backfill
        assert backfill is None or backfill.wait(30), "background reindex did not finish"
        return plugin

    yield make
    for plugin, store in made:
        plugin.close()
        store.close()


ALICE = Identity(session_id="s-alice", user_id="alice")
BOB = Identity(user_id="bob", tool_name="planner")


def seed(plugin: RememberPlugin) -> None:
    """One entry in every scope, with brands, metadata and deadlines of all kinds."""
    alice = plugin.accessor(ALICE)
    alice.set("theme", "dark", scope="user", brand="preference", metadata={"src": "ui"})
    alice.set("draft", {"title": "Q3", "parts": [1, 2.5, None]}, scope="session", ttl=3600)
    alice.set("otp", "493021", scope="session", ttl=600, brand="cache")
    plugin.accessor(BOB).set("step", 3, scope="tool", brand="state", ttl=7200)
    plugin.accessor(BOB).set("naïve ☃", ["ü"], scope="user", brand="custom")
    plugin.accessor(Identity()).set("motd", "hello", scope="global")


SEEDED = [
    (ALICE, "user", "theme"),
    (ALICE, "session", "draft"),
    (ALICE, "session", "otp"),
    (BOB, "tool", "step"),
    (BOB, "user", "naïve ☃"),
    (Identity(), "global", "motd"),
]


# -- help, demo, secret ----------------------------------------------------------------------

COMMANDS = [
    [],
    ["demo"],
    ["secret"],
    ["secret", "generate"],
    ["list"],
    ["get"],
    ["set"],
    ["forget"],
    ["stats"],
    ["doctor"],
    ["export"],
    ["import"],
    ["rotate"],
    ["purge-legacy"],
    ["serve"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_on_every_command_shows_no_secret(cli: Run, command: list[str]) -> None:
    """`--help` works on every command and never shows a secret, token or password."""
    result = cli(
        *command,
        "--help",
        REMEMBER_REDIS_URL="redis://:pw-in-env-9c1d@127.0.0.1:1/0",
        KV_REST_API_TOKEN="kv-token-in-env-77f2",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: remember-sync")
    for secret in (SECRET_A, "pw-in-env-9c1d", "kv-token-in-env-77f2"):
        assert secret not in result.stdout + result.stderr


def test_demo_exits_0_prints_refusal_and_envelope(cli: Run, tmp_path: Path) -> None:
    """`demo` runs without a server or secret, shows the refusal and an envelope, writes no file."""
    started = time.monotonic()
    result = cli("demo", secret=None)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "REMEMBER_IDENTITY_REQUIRED" in out
    assert "without a verified session" in out
    envelope = re.search(r'^\s*(\{"alg":"A256GCM".*\})$', out, re.M)
    assert envelope is not None, out
    assert set(json.loads(envelope.group(1))) >= {"alg", "iv", "tag", "data"}
    assert '"found":false,"key":"otp"' in out  # the TTL step expired the code
    assert result.stderr == ""
    assert not (tmp_path / ".frontmcp").exists()
    assert elapsed < 10


def test_demo_names_every_operator_command(cli: Run) -> None:
    """The demo's closing list names every command ``--help`` lists (demo and secret aside)."""
    listed = cli("--help", secret=None).stdout
    commands = re.findall(r"^    ([a-z][a-z-]+)\b", listed.split("commands:", 1)[1], re.M)
    assert {"verify", "erase", "audit", "reindex"} <= set(commands), commands
    closing = cli("demo", secret=None).stdout.split("Next:", 1)[1]
    missing = [c for c in commands if c not in ("demo", "secret") and c not in closing]
    assert missing == [], closing


def test_a_plain_reindex_runs_without_any_secret_as_its_help_says(
    cli: Run, redis_url: str
) -> None:
    """``reindex --help`` says the index is rebuilt without a secret, and it is."""
    text = " ".join(cli("reindex", "--help", secret=None).stdout.split())
    assert "rebuilt without any secret" in text
    done = cli("reindex", "--redis-url", redis_url, "--json", secret=None)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pruned"] == 0


def test_console_script_runs(tmp_path: Path) -> None:
    """The installed `remember-sync` console script reaches the same entry point."""
    script = Path(sys.executable).with_name("remember-sync")
    found = str(script) if script.exists() else shutil.which("remember-sync")
    require_component("remember-sync console script", found is not None, "pip install -e .")
    assert found is not None
    result = subprocess.run(
        [found, "demo"], cwd=tmp_path, env=child_env(), capture_output=True, text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "REMEMBER_IDENTITY_REQUIRED" in result.stdout
    version = subprocess.run(
        [found, "--version"], env=child_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert version.returncode == 0 and version.stdout.startswith("remember-sync ")


def test_secret_generate_prints_a_new_base64url_secret(cli: Run) -> None:
    """`secret generate` prints 32 random bytes as unpadded base64url, different each time."""
    first, second = cli("secret", "generate", secret=None), cli("secret", "generate", secret=None)
    assert first.returncode == second.returncode == 0
    for result in (first, second):
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}\n", result.stdout)
    assert first.stdout != second.stdout


# -- set / get / list / forget ---------------------------------------------------------------


def test_set_get_list_forget_round_trip_on_redis(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """set -> get -> list -> forget through the CLI, with what the library itself reads."""
    who = ["--scope", "user", "--user", "alice", "--redis-url", url]
    before = int(time.time() * 1000)
    result = cli("set", "theme", '{"mode": "dark"}', *who, "--ttl", "120", "--brand",
                 "preference", "--metadata", '{"src": "cli"}', "--json")
    assert result.returncode == 0, result.stderr
    written = json.loads(result.stdout)
    assert written["success"] is True
    assert before + 120_000 <= written["expiresAt"] <= int(time.time() * 1000) + 120_000
    assert cli("set", "other", '"x"', *who).returncode == 0

    got = cli("get", "theme", *who)
    assert got.returncode == 0 and json.loads(got.stdout) == {"mode": "dark"}
    full = json.loads(cli("get", "theme", *who, "--json").stdout)
    assert full["brand"] == "preference" and full["metadata"] == {"src": "cli"}
    assert full["expiresAt"] == written["expiresAt"]

    entry = open_plugin().accessor(Identity(user_id="alice")).get_entry("theme", scope="user")
    assert entry is not None and entry.value == {"mode": "dark"} and entry.brand == "preference"
    assert 110_000 < redis_client.pttl("remember:v2:user:alice:theme") <= 120_000

    listed = cli("list", *who)
    assert listed.returncode == 0 and listed.stdout == "other\ntheme\n"
    as_json = json.loads(cli("list", *who, "--json", "--brand", "preference").stdout)
    assert as_json == {"scope": "user", "keys": ["theme"], "count": 1, "unreadable": 0}

    forgot = cli("forget", "theme", *who, "--json")
    assert forgot.returncode == 0 and json.loads(forgot.stdout)["existed"] is True
    again = cli("forget", "theme", *who, "--json")
    assert json.loads(again.stdout)["existed"] is False
    missing = cli("get", "theme", *who)
    assert missing.returncode == 1 and "no entry 'theme'" in missing.stderr
    assert cli("list", *who).stdout == "other\n"


THEME_KEY = "remember:v2:user:alice:theme"
ALICE_USER = ["--scope", "user", "--user", "alice"]


def test_forget_refuses_an_entry_it_cannot_read(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """forget with the wrong secret exits 1 and leaves the bytes; --include-unreadable deletes."""
    open_plugin(SECRET_C).accessor(ALICE).set("theme", "dark", scope="user")
    stored = redis_client.get(THEME_KEY)
    refused = cli("forget", "theme", *ALICE_USER, "--redis-url", url)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout == ""
    assert "could not be read with the configured secret" in refused.stderr
    assert "--include-unreadable" in refused.stderr and "not forgotten" in refused.stderr
    assert redis_client.get(THEME_KEY) == stored
    assert redis_client.pttl(THEME_KEY) == -1

    forced = cli("forget", "theme", *ALICE_USER, "--redis-url", url, "--include-unreadable",
                 "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout) == {
        "key": "theme", "scope": "user", "existed": True, "unreadable": True
    }
    assert redis_client.exists(THEME_KEY) == 0


def test_set_refuses_to_overwrite_an_entry_it_cannot_read(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """set over an unreadable entry exits 1 and writes nothing; --include-unreadable overwrites."""
    other = open_plugin(SECRET_C).accessor(ALICE)
    other.set("theme", "dark", scope="user")
    stored = redis_client.get(THEME_KEY)
    refused = cli("set", "theme", '"light"', *ALICE_USER, "--redis-url", url, "--ttl", "60")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout == ""
    assert "could not be read with the configured secret" in refused.stderr
    assert "--include-unreadable" in refused.stderr and "not overwritten" in refused.stderr
    assert redis_client.get(THEME_KEY) == stored
    assert redis_client.pttl(THEME_KEY) == -1
    assert other.get("theme", scope="user") == "dark"

    forced = cli("set", "theme", '"light"', *ALICE_USER, "--redis-url", url,
                 "--include-unreadable")
    assert forced.returncode == 0, forced.stderr
    assert "could not be read" in forced.stdout and "--include-unreadable" in forced.stdout
    assert open_plugin(SECRET_A).accessor(ALICE).get("theme", scope="user") == "light"


def test_forget_and_set_of_readable_entries_need_no_flag(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """With the right secret set replaces and forget deletes as before, nothing unreadable."""
    mine = open_plugin(SECRET_A).accessor(ALICE)
    mine.set("theme", "dark", scope="user")
    replaced = cli("set", "theme", '"light"', *ALICE_USER, "--redis-url", url, "--json")
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads(replaced.stdout)["unreadable"] is False
    assert mine.get("theme", scope="user") == "light"
    forgot = cli("forget", "theme", *ALICE_USER, "--redis-url", url)
    assert forgot.returncode == 0, forgot.stderr
    assert forgot.stdout == "forgot 'theme' in user scope\n"
    assert redis_client.exists(THEME_KEY) == 0


def test_session_and_tool_scopes_address_the_library_namespaces(
    cli: Run, url: str, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """--session, --user (stateless session) and --tool reach the same keys as the library."""
    assert cli("set", "a", "1", "--scope", "session", "--session", "s-1",
               "--redis-url", url).returncode == 0
    assert cli("set", "b", "2", "--scope", "tool", "--tool", "planner", "--user", "bob",
               "--redis-url", url).returncode == 0
    assert cli("set", "c", "3", "--scope", "global", "--redis-url", url).returncode == 0
    plugin = open_plugin()
    assert plugin.accessor(Identity(session_id="s-1")).get("a") == 1
    assert plugin.accessor(Identity(user_id="bob", tool_name="planner")).get("b", scope="tool") == 2
    assert plugin.accessor(Identity()).get("c", scope="global") == 3


def test_data_commands_refuse_the_empty_memory_default(cli: Run) -> None:
    """Without --redis-url/--vercel-kv, commands that need data say so (exit 2)."""
    for command in (["list", "--scope", "global"], ["stats"], ["rotate"], ["export"]):
        result = cli(*command)
        assert result.returncode == 2, command
        assert "needs a real store" in result.stderr and "--redis-url" in result.stderr


def test_redis_url_from_the_environment(cli: Run, url: str) -> None:
    """REMEMBER_REDIS_URL stands in for --redis-url (keeping a password off the command line)."""
    assert cli("set", "k", "true", "--scope", "global", REMEMBER_REDIS_URL=url).returncode == 0
    assert cli("get", "k", "--scope", "global", "--redis-url", url).stdout == "true\n"


def test_vercel_kv_store(cli: Run, kv_emulator: Any, kv_redis: redis.Redis) -> None:
    """--vercel-kv talks to Upstash REST from KV_REST_API_URL/TOKEN; the token is never shown."""
    from tests.fixtures_kv import KV_TEST_TOKEN

    kv = {"KV_REST_API_URL": kv_emulator.url, "KV_REST_API_TOKEN": KV_TEST_TOKEN}
    assert cli("set", "k", '"v"', "--scope", "global", "--vercel-kv", **kv).returncode == 0
    assert cli("get", "k", "--scope", "global", "--vercel-kv", **kv).stdout == '"v"\n'
    doctor = cli("doctor", "--vercel-kv", "--json", **kv)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert KV_TEST_TOKEN not in doctor.stdout + doctor.stderr
    bad = cli("get", "k", "--scope", "global", "--vercel-kv",
              KV_REST_API_URL=kv_emulator.url, KV_REST_API_TOKEN="wrong-token-5b9e")
    assert bad.returncode == 1 and "wrong-token-5b9e" not in bad.stdout + bad.stderr
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


# -- stats -------------------------------------------------------------------------------


def test_stats_counts_by_scope_brand_expiry_and_problems(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """`stats --json` counts entries by scope and brand, expiry, unreadable and legacy keys."""
    seed(open_plugin(SECRET_A))
    open_plugin(SECRET_C).accessor(ALICE).set("alien", 1, scope="user")  # unreadable with A
    redis_client.set("remember:session:old:x", "legacy")
    redis_client.set("remember:user:old:y", "legacy")
    result = cli("stats", "--redis-url", url, "--json")
    assert result.returncode == 1, result.stderr  # an unreadable entry: work left undone
    stats = json.loads(result.stdout)
    assert stats["entries"] == 6
    assert stats["by_scope"] == {"session": 2, "user": 2, "tool": 1, "global": 1}
    assert stats["by_brand"] == {"preference": 1, "cache": 1, "state": 1, "custom": 1, "none": 2}
    assert stats["expiring_within_hour"] == 2  # draft (1 h) and otp (10 min)
    assert stats["without_expiry"] == 3
    assert stats["unreadable"] == 1
    assert stats["unreadable_keys"] == ["remember:v2:user:alice:alien"]
    assert stats["legacy"] == 2 and stats["marker"] is False
    assert stats["value_bytes"] > 0 and stats["key_bytes"] > 0
    text = cli("stats", "--redis-url", url)
    assert "by scope:" in text.stdout and "session 2  user 2  tool 1  global 1" in text.stdout


# -- doctor ------------------------------------------------------------------------------


def test_doctor_healthy_store_exits_0(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """A store whose entries all decrypt passes; the secret is named by source, never shown."""
    seed(open_plugin(SECRET_A))
    redis_client.set("remember:__layout__", '{"version":2,"firstSeenAt":1700000000000}')
    result = cli("doctor", "--redis-url", url, "--json")
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["healthy"] is True
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["secret"]["source"] == "env:REMEMBER_SECRET"
    assert checks["store"]["latency_ms"] >= 0
    assert checks["marker"]["first_seen_at"] == 1700000000000
    assert checks["entries"]["entries"] == 6
    assert SECRET_A not in result.stdout + result.stderr
    assert not redis_client.keys("remember:__doctor__*")  # the probe cleaned up after itself


def test_doctor_flags_a_wrong_secret(
    cli: Run, url: str, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """Entries that do not decrypt with the configured secret: exit 1, saying so."""
    seed(open_plugin(SECRET_A))
    result = cli("doctor", "--redis-url", url, secret=SECRET_B)
    assert result.returncode == 1
    assert "[attention] entries" in result.stdout
    assert "6 of 6 entries do not decrypt" in result.stdout
    assert "needs attention: entries" in result.stdout
    assert SECRET_B not in result.stdout + result.stderr


def test_doctor_flags_an_unreachable_store_quickly(cli: Run) -> None:
    """A closed port: exit 1 within seconds, the store check says unreachable, no traceback."""
    dead = f"redis://:hunter2-pw@127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    result = cli("doctor", "--redis-url", dead)
    assert time.monotonic() - started < 15
    assert result.returncode == 1
    assert "[attention] store" in result.stdout and "unreachable" in result.stdout
    assert "needs attention: store" in result.stdout
    assert "hunter2-pw" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_without_a_secret_says_which(cli: Run, url: str, tmp_path: Path) -> None:
    """No secret anywhere: the secret check needs attention and no secret file is created."""
    result = cli("doctor", "--redis-url", url, secret=None)
    assert result.returncode == 1
    assert "[attention] secret" in result.stdout and "REMEMBER_SECRET" in result.stdout
    assert "[ok]        store" in result.stdout
    assert not (tmp_path / ".frontmcp").exists()


def test_doctor_on_the_memory_default_checks_the_secret(cli: Run) -> None:
    """`doctor` with no store option checks the secret and says the store is in-memory."""
    result = cli("doctor")
    assert result.returncode == 0, result.stdout
    assert "in-memory store" in result.stdout and "all good" in result.stdout


def _doctor_line(stdout: str, check: str) -> str:
    """The line of ``doctor``'s report for *check* (``[status]  name  message``)."""
    return next(line for line in stdout.splitlines() if line.split()[1:2] == [check])


def test_doctor_flags_an_unreadable_marker(cli: Run, url: str, redis_client: redis.Redis) -> None:
    """A layout marker that is not a clock needs attention (the purge stands down)."""
    redis_client.set("remember:__layout__", "garbage")
    result = cli("doctor", "--redis-url", url)
    assert result.returncode == 1, result.stdout
    assert _doctor_line(result.stdout, "marker").startswith("[attention] marker")
    assert "unreadable" in _doctor_line(result.stdout, "marker")


def test_doctor_notes_entries_sealed_by_a_previous_secret(
    cli: Run, url: str, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """Readable entries under an older secret are a note suggesting rotate, not a failure."""
    seed(open_plugin(SECRET_A))
    result = cli("doctor", "--redis-url", url, secret=SECRET_B,
                 REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    assert result.returncode == 0, result.stdout
    assert _doctor_line(result.stdout, "entries").startswith("[note]      entries")
    assert "rotate" in _doctor_line(result.stdout, "entries")


def test_doctor_flags_legacy_keys_after_the_window(
    cli: Run, url: str, redis_client: redis.Redis
) -> None:
    """Legacy keys after the purge window need attention; inside it they are only noted."""
    redis_client.set("remember:tool:old:x", LEGACY_ENTRY)
    redis_client.set("remember:tool:old:foreign", "not an entry")  # never counted as legacy
    now = int(time.time() * 1000)
    redis_client.set("remember:__layout__", json.dumps({"version": 2, "firstSeenAt": now}))
    inside = cli("doctor", "--redis-url", url)
    assert inside.returncode == 0 and "[note]      legacy" in inside.stdout
    after = cli("doctor", "--redis-url", url, "--legacy-purge-delay-ms", "0")
    assert after.returncode == 1 and "[attention] legacy" in after.stdout
    assert "1 legacy (pre-v2) keys remain" in after.stdout and "purge-legacy" in after.stdout


# -- export / import ---------------------------------------------------------------------


#: The storage key of each of SEEDED after the prefix (SPEC section 3), in SEEDED's order.
SEEDED_KEYS = [
    "v2:user:alice:theme",
    "v2:session:s-alice:draft",
    "v2:session:s-alice:otp",
    "v2:tool:planner:stateless-user%3Abob:step",
    "v2:user:bob:naïve ☃",
    "global:motd",
]


def _snapshot(plugin: RememberPlugin) -> dict[str, RememberEntry]:
    """Every seeded entry as the library reads it, by storage key."""
    out = {}
    for (ident, scope, key), tail in zip(SEEDED, SEEDED_KEYS, strict=True):
        entry = plugin.accessor(ident).get_entry(key, scope=scope)  # type: ignore[arg-type]
        assert entry is not None, (scope, key)
        out[plugin.key_prefix + tail] = entry
    return out


@pytest.mark.parametrize("decrypted", [False, True], ids=["envelopes", "decrypted"])
def test_export_then_import_into_an_empty_store_reproduces_every_entry(
    cli: Run,
    url: str,
    url_db1: str,
    tmp_path: Path,
    open_plugin: Callable[..., RememberPlugin],
    decrypted: bool,
) -> None:
    """Values, brands, metadata, times and deadlines survive export -> import (either form)."""
    seed(open_plugin(SECRET_A))
    source = _snapshot(open_plugin(SECRET_A))
    dump = tmp_path / "dump.jsonl"
    flag = ["--decrypted"] if decrypted else []
    exported = cli("export", "--redis-url", url, "-o", str(dump), *flag)
    assert exported.returncode == 0, exported.stderr
    assert "exported 6" in exported.stderr
    assert ("clear text" in exported.stderr) is decrypted
    assert oct(dump.stat().st_mode & 0o777) == "0o600"
    lines = dump.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6
    if decrypted:
        assert any('"value":"dark"' in line for line in lines)
    else:
        assert all("dark" not in line for line in lines)

    imported = cli("import", str(dump), "--redis-url", url_db1, "--json")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert json.loads(imported.stdout)["imported"] == 6

    copy = _snapshot(open_plugin(SECRET_A, url=url_db1))
    assert copy.keys() == source.keys()
    for where, entry in source.items():
        got = copy[where]
        assert (got.value, got.brand, got.metadata) == (entry.value, entry.brand, entry.metadata)
        assert (got.created_at, got.updated_at) == (entry.created_at, entry.updated_at)
        assert got.expires_at == entry.expires_at, where
    target = redis.Redis.from_url(url_db1)
    try:
        # Beside the entries: listing indexes and the reindex record (bookkeeping, P + "__").
        entries = [k for k in target.scan_iter() if not k.startswith(b"remember:__")]
        assert len(entries) == len(source)
        for where, entry in source.items():
            pttl = target.pttl(where.encode("utf-8"))
            now = int(time.time() * 1000)
            if entry.expires_at is None:
                assert pttl == -1, where
            else:  # the store's TTL is the entry's own deadline, to the second
                assert abs((now + pttl) - entry.expires_at) <= 1000, where
    finally:
        target.close()


def test_import_keeps_existing_entries_unless_overwrite(
    cli: Run, url: str, tmp_path: Path, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """`import` never replaces an existing key without --overwrite, and says which it kept."""
    plugin = open_plugin(SECRET_A)
    seed(plugin)
    dump = tmp_path / "dump.jsonl"
    assert cli("export", "--redis-url", url, "-o", str(dump)).returncode == 0
    plugin.accessor(ALICE).set("theme", "light", scope="user")
    kept = cli("import", str(dump), "--redis-url", url)
    assert kept.returncode == 1
    assert "kept 6 existing entries" in kept.stdout and "--overwrite" in kept.stdout
    assert plugin.accessor(ALICE).get("theme", scope="user") == "light"
    replaced = cli("import", str(dump), "--redis-url", url, "--overwrite")
    assert replaced.returncode == 0, replaced.stdout
    assert plugin.accessor(ALICE).get("theme", scope="user") == "dark"


def test_import_skips_entries_whose_deadline_passed(
    cli: Run, url: str, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """A record exported before its deadline but imported after it is not written."""
    now = int(time.time() * 1000)
    records = [
        {"scope": "global", "key": key, "value": value, "createdAt": now - 60_000,
         "updatedAt": now - 60_000, "expiresAt": now + offset}
        for key, value, offset in (("soon", 1, -5_000), ("later", 2, 500_000))
    ]
    dump = "".join(json.dumps(record) + "\n" for record in records)
    result = cli("import", "-", "--redis-url", url, stdin=dump)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "imported 1 entries; skipped 1 past their deadline" in result.stdout
    assert open_plugin(SECRET_A).accessor(Identity()).list(scope="global") == ["later"]


def test_import_under_another_prefix_and_from_stdin(
    cli: Run, url: str, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """Envelopes move to another prefix (the key binding excludes it); `-` reads stdin."""
    seed(open_plugin(SECRET_A))
    dump = cli("export", "--redis-url", url).stdout
    result = cli("import", "-", "--redis-url", url, "--prefix", "copy:", stdin=dump)
    assert result.returncode == 0, result.stdout + result.stderr
    copied = _snapshot(open_plugin(SECRET_A, prefix="copy:"))
    assert sorted(copied.values(), key=repr) == sorted(
        _snapshot(open_plugin(SECRET_A)).values(), key=repr
    )


def test_export_reports_unreadable_entries(
    cli: Run, url: str, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """An entry that does not decrypt is named and left out, and the exit code says so."""
    seed(open_plugin(SECRET_A))
    open_plugin(SECRET_C).accessor(Identity()).set("alien", 1, scope="global")
    result = cli("export", "--redis-url", url)
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 6
    assert "'remember:global:alien'" in result.stderr and "NOT exported" in result.stderr


# -- rotate ------------------------------------------------------------------------------


def test_rotate_from_a_to_b_leaves_everything_readable_with_b_alone(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """rotate A -> [B, A]: every entry then opens with B only, deadlines kept; re-run is a no-op."""
    seed(open_plugin(SECRET_A))
    before = _snapshot(open_plugin(SECRET_A))
    pttl_before = redis_client.pttl("remember:v2:tool:planner:stateless-user%3Abob:step")
    rotated = cli("rotate", "--redis-url", url, "--json", secret=SECRET_B,
                  REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    report = json.loads(rotated.stdout)
    assert (report["examined"], report["rotated"], report["unreadable"]) == (6, 6, 0)

    after = _snapshot(open_plugin(SECRET_B))
    assert after == before  # same values, brands, metadata, times, deadlines
    pttl_after = redis_client.pttl("remember:v2:tool:planner:stateless-user%3Abob:step")
    assert 0 < pttl_after <= pttl_before and pttl_before - pttl_after < 5000

    again = cli("rotate", "--redis-url", url, "--json", secret=SECRET_B,
                REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    assert again.returncode == 0
    assert json.loads(again.stdout)["rotated"] == 0
    assert json.loads(again.stdout)["current"] == 6


def test_rotate_reports_what_it_cannot_read_and_leaves_it(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """Entries under an unknown secret are listed, untouched, and the exit code is 1."""
    seed(open_plugin(SECRET_A))
    open_plugin(SECRET_C).accessor(ALICE).set("alien", 1, scope="user")
    alien = redis_client.get("remember:v2:user:alice:alien")
    result = cli("rotate", "--redis-url", url, secret=SECRET_B, REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    assert result.returncode == 1
    assert "re-encrypted 6 of 7" in result.stdout
    assert "could not read 1 entries" in result.stdout
    assert "'remember:v2:user:alice:alien'" in result.stdout
    assert redis_client.get("remember:v2:user:alice:alien") == alien


def test_rotate_dry_run_writes_nothing(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """`rotate --dry-run` counts what it would re-encrypt and changes no value."""
    seeding = open_plugin(SECRET_A)
    seed(seeding)
    seeding.close()  # its background reindex has ended: only the CLI could write now
    before = _raw_values(redis_client)
    result = cli("rotate", "--redis-url", url, "--dry-run", secret=SECRET_B,
                 REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    assert result.returncode == 0 and "would re-encrypt 6 of 6" in result.stdout
    assert _raw_values(redis_client) == before


# -- purge-legacy ------------------------------------------------------------------------

#: A legacy entry (a pre-v2 plaintext entry): the purge deletes only values like this.
LEGACY_ENTRY = '{"value":"old","createdAt":1,"updatedAt":1}'


def test_purge_legacy_dry_run_counts_and_deletes_nothing(
    cli: Run, url: str, redis_client: redis.Redis, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """--dry-run counts exactly the legacy keys; --yes then deletes them and nothing else."""
    seed(open_plugin(SECRET_A))
    for key in ("remember:session:a:x", "remember:tool:t:a:y", "remember:user:u:z"):
        redis_client.set(key, LEGACY_ENTRY)
    redis_client.set("remember:__layout__", '{"version":2,"firstSeenAt":1}')
    redis_client.set("other:session:a:x", "not ours")
    total = redis_client.dbsize()
    dry = cli("purge-legacy", "--redis-url", url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {
        "found": 3, "deleted": 0, "kept": 0, "dry_run": True, "failed_batches": 0,
        "failed_listings": 0,
    }
    assert redis_client.dbsize() == total
    refused = cli("purge-legacy", "--redis-url", url)  # no TTY, no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert redis_client.dbsize() == total
    done = cli("purge-legacy", "--redis-url", url, "--yes")
    assert done.returncode == 0 and "deleted 3 of 3" in done.stdout
    assert redis_client.dbsize() == total - 3
    assert redis_client.get("other:session:a:x") == b"not ours"
    assert redis_client.exists("remember:__layout__")


def _run_on_terminal(args: list[str], cwd: Path, answer: bytes) -> tuple[int, str]:
    """Run the CLI with stdin and stderr on a pseudo-terminal, typing *answer* when asked."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "remember_sync", *args],
        cwd=cwd,
        env=child_env(),
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + TIMEOUT
        while b"[y/N]" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                seen += os.read(master, 4096)
            elif proc.poll() is not None:
                break
        os.write(master, answer)
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        os.close(master)
    return proc.returncode, seen.decode() + stdout.decode()


def test_purge_legacy_asks_on_a_terminal(
    url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """On a terminal purge-legacy asks first: "n" deletes nothing, "y" deletes."""
    redis_client.set("remember:user:u:k", LEGACY_ENTRY)
    code, text = _run_on_terminal(["purge-legacy", "--redis-url", url], tmp_path, b"n\n")
    assert code == 1 and "Delete 1 legacy (pre-v2) entries" in text
    assert redis_client.exists("remember:user:u:k")
    code, text = _run_on_terminal(["purge-legacy", "--redis-url", url], tmp_path, b"y\n")
    assert code == 0 and "deleted 1 of 1" in text
    assert not redis_client.exists("remember:user:u:k")


# -- bad arguments, failures, secrets ----------------------------------------------------

BAD_ARGUMENTS = [
    (["set", "k", "not json", "--scope", "global"], "argument VALUE"),
    (["set", "k", "NaN", "--scope", "global"], "argument VALUE"),
    (["set", "k", "1", "--scope", "global", "--ttl", "0"], "argument --ttl"),
    (["set", "k", "1", "--scope", "global", "--ttl", "1.5"], "argument --ttl"),
    (["set", "k", "1", "--scope", "global", "--metadata", "[1]"], "argument --metadata"),
    (["set", "k", "1", "--scope", "global", "--brand", "bogus"], "argument --brand"),
    (["set", "", "1", "--scope", "global"], "argument KEY"),
    (["set", "k", "1", "--scope", "bogus"], "argument --scope"),
    (["set", "k", "1"], "--scope"),
    (["set", "k", "1", "--scope", "user"], "argument --user"),
    (["set", "k", "1", "--scope", "user", "--user", "anon:x"], "argument --user"),
    (["set", "k", "1", "--scope", "session"], "argument --session"),
    (["set", "k", "1", "--scope", "tool", "--user", "u"], "argument --tool"),
    (["set", "k", "1", "--scope", "global", "--user", "u"], "argument --user"),
    (["set", "k", "1", "--scope", "session", "--session", "s", "--tool", "t"], "argument --tool"),
    (["set", "k", "1", "--scope", "tool", "--session", "s", "--user", "u"], "argument --user"),
    (["set", "k", "1", "--scope", "global", "--vercel-kv"], "argument --vercel-kv"),
    (["list", "--scope", "global", "--pattern", "*" * 21], "argument --pattern"),
    (["import", "/nonexistent/dump.jsonl"], "argument FILE"),
    (["rotate", "--plaintext"], "argument --plaintext"),
    (["purge-legacy", "--prefix", ""], "argument --prefix"),
    (["doctor", "--legacy-purge-delay-ms", "-1"], "argument --legacy-purge-delay-ms"),
]


@pytest.mark.parametrize(("args", "named"), BAD_ARGUMENTS, ids=lambda a: " ".join(a)
                         if isinstance(a, list) else a)
def test_bad_arguments_are_usage_errors_and_write_nothing(
    cli: Run, url: str, redis_client: redis.Redis, args: list[str], named: str
) -> None:
    """A bad argument: usage message naming it, exit 2, and the store untouched."""
    redis_client.set("sentinel", "1")
    result = cli(*args, "--redis-url", url)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("usage: remember-sync")
    assert named in result.stderr
    assert redis_client.keys("*") == [b"sentinel"]


def test_a_malformed_import_file_is_refused_before_any_write(
    cli: Run, url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Line 2 of 3 is broken: exit 2 naming the line, and line 1 was not imported either."""
    dump = tmp_path / "dump.jsonl"
    good = {"scope": "global", "key": "a", "value": 1, "createdAt": 1, "updatedAt": 1}
    dump.write_text(json.dumps(good) + "\n{oops\n" + json.dumps(good) + "\n", encoding="utf-8")
    result = cli("import", str(dump), "--redis-url", url)
    assert result.returncode == 2
    assert "argument FILE" in result.stderr and "line 2" in result.stderr
    assert redis_client.dbsize() == 0


def test_store_failure_is_one_line_without_traceback_or_password(cli: Run) -> None:
    """An unreachable store: one line on stderr, exit 1, the URL's password scrubbed."""
    dead = f"redis://:sup3r-s3cret-pw@127.0.0.1:{free_port()}/0"
    result = cli("get", "k", "--scope", "global", "--redis-url", dead)
    assert result.returncode == 1
    assert result.stderr.startswith("remember-sync: error: ")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert "sup3r-s3cret-pw" not in result.stdout + result.stderr


def test_no_secret_is_an_error_and_creates_no_file(
    cli: Run, url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Without any secret the CLI stops (never invents one) and writes nothing."""
    result = cli("set", "k", "1", "--scope", "global", "--redis-url", url, secret=None)
    assert result.returncode == 1
    assert "no secret" in result.stderr and "REMEMBER_SECRET" in result.stderr
    assert not (tmp_path / ".frontmcp").exists()
    assert redis_client.dbsize() == 0
    prod = cli("set", "k", "1", "--scope", "global", "--redis-url", url, secret=None,
               REMEMBER_ENV="production")
    assert prod.returncode == 1 and "production" in prod.stderr
    assert redis_client.dbsize() == 0


def test_secret_file_option_reads_an_existing_file(
    cli: Run, url: str, tmp_path: Path, open_plugin: Callable[..., RememberPlugin]
) -> None:
    """--secret-file reads the application's remember-secret.json (and never replaces it)."""
    secret_file = tmp_path / "remember-secret.json"
    body = json.dumps({"secret": SECRET_B, "createdAt": 1700000000000, "version": 1})
    secret_file.write_text(body, encoding="utf-8")
    secret_file.chmod(0o600)  # a group/world-readable secret file is refused
    result = cli("set", "k", '"v"', "--scope", "global", "--redis-url", url,
                 "--secret-file", str(secret_file), secret=SECRET_A)
    assert result.returncode == 0, result.stderr
    assert open_plugin(SECRET_B).accessor(Identity()).get("k", scope="global") == "v"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    broken.chmod(0o600)
    bad = cli("get", "k", "--scope", "global", "--redis-url", url, "--secret-file", str(broken))
    assert bad.returncode == 1 and "invalid" in bad.stderr
    assert broken.read_text(encoding="utf-8") == "{not json"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("broken")) == [
        "broken.json"
    ]


# -- progress ----------------------------------------------------------------------------


def _raw_values(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key and its string value (``None`` for a listing index, a sorted set)."""
    keys = client.keys("*")
    return dict(zip(keys, client.mget(keys) if keys else [], strict=True))


def _seed_many(url: str, count: int) -> None:
    store = RedisStore.from_url(url)
    # listing="scan": exactly *count* keys, no listing index or reindex record beside them.
    plugin = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_A]},
                                 skip_legacy_purge=True, listing="scan")
    try:
        mem = plugin.accessor(Identity())
        for i in range(count):
            mem.set(f"k{i}", i, scope="global")
    finally:
        plugin.close()
        store.close()


def test_progress_is_silent_without_a_tty(cli: Run, url: str) -> None:
    """With stderr redirected (cron), a long walk prints no progress bar."""
    _seed_many(url, 1200)
    result = cli("stats", "--redis-url", url)
    assert result.returncode == 0
    assert result.stderr == ""
    assert "keys/s" not in result.stdout


def test_progress_shows_on_a_terminal(url: str, tmp_path: Path) -> None:
    """With stderr on a pseudo-terminal, the walk draws done/total and a rate."""
    import pty

    _seed_many(url, 1200)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "remember_sync", "stats", "--redis-url", url],
            cwd=tmp_path,
            env=child_env(REMEMBER_SECRET=SECRET_A),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        slave = -1
        chunks: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    drawn = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "stats [" in drawn and "1200/1200 keys" in drawn and "keys/s" in drawn
    assert b"keys/s" not in stdout  # the bar never touches the result stream
