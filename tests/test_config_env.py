"""The one environment reader (``remember_sync._config``) and its precedence table (issue 20).

Pins the table of docs/configuration.rst: each variable alone chooses its
store; an explicit argument beats every variable; ``REMEMBER_REDIS_URL`` beats
``REDIS_URL`` (with a warning naming both, never their values); both
``REMEMBER_REDIS_URL`` and ``REMEMBER_VERCEL_KV=1`` is an error; ``REDIS_URL``
beats ``KV_REST_API_*``.  The same answer reaches ``global-store``,
``create_app`` and the CLI (run as a subprocess against a real redis-server:
with only ``REDIS_URL`` set, ``remember-sync list`` works).
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
import redis

from remember_sync import RememberPlugin
from remember_sync._config import (
    StoreSettings,
    check_redis_url,
    env_flag,
    env_scopes,
    previous_secrets,
    scope_list,
    store_settings,
)
from remember_sync.errors import RememberConfigurationError
from remember_sync.mcp import create_app
from remember_sync.stores.redis import RedisStore
from tests.conftest import TEST_SECRET
from tests.test_cli import child_env, run_cli

A = "redis://:pw-a-4f1e@127.0.0.1:6390/0"
B = "redis://:pw-b-77c2@127.0.0.1:6391/0"
KV = {"KV_REST_API_URL": "https://kv.example.test", "KV_REST_API_TOKEN": "kv-token-0123456789"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, StoreSettings("memory")),
        ({"REMEMBER_REDIS_URL": A}, StoreSettings("redis", A, "REMEMBER_REDIS_URL")),
        ({"REMEMBER_VERCEL_KV": "1", **KV}, StoreSettings("vercel-kv", None, "REMEMBER_VERCEL_KV")),
        ({"REDIS_URL": B}, StoreSettings("redis", B, "REDIS_URL")),
        (KV, StoreSettings("vercel-kv", None, "KV_REST_API_URL")),
        ({"KV_REST_API_URL": KV["KV_REST_API_URL"]}, StoreSettings("memory")),  # half a pair
        ({"REMEMBER_REDIS_URL": " ", "REDIS_URL": ""}, StoreSettings("memory")),  # blank = unset
    ],
    ids=[
        "nothing",
        "REMEMBER_REDIS_URL",
        "REMEMBER_VERCEL_KV",
        "REDIS_URL",
        "KV_REST_API",
        "half-kv",
        "blank",
    ],
)
def test_each_variable_alone(env: dict[str, str], expected: StoreSettings) -> None:
    """Each variable alone names its store; nothing (or half a KV pair) is the memory store."""
    assert store_settings(env) == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"REMEMBER_REDIS_URL": A, "REDIS_URL": B},
            StoreSettings("redis", A, "REMEMBER_REDIS_URL"),
        ),
        ({"REMEMBER_REDIS_URL": A, **KV}, StoreSettings("redis", A, "REMEMBER_REDIS_URL")),
        (
            {"REMEMBER_VERCEL_KV": "yes", "REDIS_URL": B, **KV},
            StoreSettings("vercel-kv", None, "REMEMBER_VERCEL_KV"),
        ),
        ({"REDIS_URL": B, **KV}, StoreSettings("redis", B, "REDIS_URL")),
        ({"REMEMBER_VERCEL_KV": "0", "REDIS_URL": B}, StoreSettings("redis", B, "REDIS_URL")),
    ],
    ids=["own-url>platform-url", "own-url>kv", "own-kv>platform", "platform-url>kv", "kv-off"],
)
def test_conflicts_resolve_by_precedence(env: dict[str, str], expected: StoreSettings) -> None:
    """The more specific variable wins: REMEMBER_* > REDIS_URL > KV_REST_API_*."""
    assert store_settings(env) == expected


def test_arguments_beat_every_variable() -> None:
    """An explicit flag/argument wins over the whole environment."""
    env = {"REMEMBER_REDIS_URL": A, "REDIS_URL": B, **KV}
    assert store_settings(env, redis_url="redis://x") == StoreSettings(
        "redis", "redis://x", "argument"
    )
    assert store_settings(env, vercel_kv=True) == StoreSettings("vercel-kv", None, "argument")
    with pytest.raises(RememberConfigurationError, match="not both"):
        store_settings({}, redis_url="redis://x", vercel_kv=True)


def test_both_own_variables_are_an_error() -> None:
    """REMEMBER_REDIS_URL with REMEMBER_VERCEL_KV=1: nothing says which was meant."""
    with pytest.raises(
        RememberConfigurationError, match="REMEMBER_REDIS_URL and REMEMBER_VERCEL_KV"
    ):
        store_settings({"REMEMBER_REDIS_URL": A, "REMEMBER_VERCEL_KV": "1"})


def test_a_bad_flag_value_is_an_error() -> None:
    """A typo in a boolean variable is named, never read as "off"."""
    with pytest.raises(RememberConfigurationError, match="REMEMBER_VERCEL_KV"):
        env_flag({"REMEMBER_VERCEL_KV": "ture"}, "REMEMBER_VERCEL_KV")


@pytest.mark.parametrize(
    ("given", "source"),
    [
        ({"redis_url": "not a url"}, "redis_url"),
        ({"env": {"REMEMBER_REDIS_URL": "http://:pw-a-4f1e@h/"}}, "REMEMBER_REDIS_URL"),
        ({"env": {"REDIS_URL": "h:6379"}}, "REDIS_URL"),
    ],
)
def test_a_url_without_a_redis_scheme_is_named(given: dict[str, object], source: str) -> None:
    """Every Redis URL, argument or variable, passes the one check; its value is never shown."""
    env = given.get("env", {})
    url = given.get("redis_url")
    assert isinstance(env, dict) and (url is None or isinstance(url, str))
    with pytest.raises(RememberConfigurationError, match=f"{source}: must be a redis://") as info:
        store_settings(env, redis_url=url)
    assert "pw-a" not in str(info.value) and "not a url" not in str(info.value)
    assert check_redis_url("rediss+sentinel://h:1/m", "x") == "rediss+sentinel://h:1/m"


def test_scope_lists_and_previous_secrets() -> None:
    """One scope-list parser (text or list, in order, once each) and one secret-list parser."""
    assert scope_list(" user, global,user ", "X") == ["user", "global"]
    assert scope_list(("tool", "session"), "X") == ["tool", "session"]
    for bad, said in (("user,nope", "unknown scope\\(s\\) nope"), (",", "no scope")):
        with pytest.raises(RememberConfigurationError, match=f"X: {said}"):
            scope_list(bad, "X")
    assert env_scopes({"REMEMBER_ALLOWED_SCOPES": " "}) is None
    assert env_scopes({"REMEMBER_ALLOWED_SCOPES": "global"}) == ["global"]
    assert previous_secrets({"REMEMBER_PREVIOUS_SECRETS": " old , ,older,"}) == ["old", "older"]
    assert previous_secrets({}) == []


def test_different_urls_warn_without_values(caplog: pytest.LogCaptureFixture) -> None:
    """Two Redis URLs: a warning names both variables and neither password; same URL: silent."""
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        store_settings({"REMEMBER_REDIS_URL": A, "REDIS_URL": B})
    assert "REMEMBER_REDIS_URL" in caplog.text and "REDIS_URL" in caplog.text
    assert "pw-a" not in caplog.text and "pw-b" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        store_settings({"REMEMBER_REDIS_URL": A, "REDIS_URL": A})
    assert caplog.text == ""


def test_the_literal_is_defined_once() -> None:
    """One home for the variable names: the package spells "REMEMBER_REDIS_URL" in code once."""
    package = Path(__file__).resolve().parent.parent / "remember_sync"
    found = []
    for path in package.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if '"REMEMBER_REDIS_URL"' in code or "'REMEMBER_REDIS_URL'" in code:
                found.append(f"{path.relative_to(package)}:{number}")
    assert [place.split(":")[0] for place in found] == ["_config.py"], found


# -- the same answer at every entry point ---------------------------------------------------


def test_global_store_reads_the_table(redis_url: str, redis_client: redis.Redis) -> None:
    """global-store follows the table too (REMEMBER_REDIS_URL alone now resolves)."""
    for name in ("REMEMBER_REDIS_URL", "REDIS_URL"):
        plugin = RememberPlugin.init(
            type="global-store",
            environ={name: redis_url},
            encryption={"secrets": [TEST_SECRET]},
            skip_legacy_purge=True,
        )
        assert isinstance(plugin.store, RedisStore), name
        plugin.close()
    with pytest.raises(RememberConfigurationError) as caught:
        RememberPlugin.init(type="global-store", environ={}, skip_legacy_purge=True)
    assert caught.value.code == "GLOBAL_CONFIG_NOT_FOUND"


def test_create_app_reads_the_table(redis_url: str, redis_client: redis.Redis) -> None:
    """create_app: REDIS_URL alone is Redis; an argument beats REMEMBER_REDIS_URL."""
    env = {"REDIS_URL": redis_url, "REMEMBER_SECRET": TEST_SECRET}
    app = create_app(environ=env)
    assert app.plugin.store_type == "redis"
    app.close()
    dead = "redis://127.0.0.1:1/0"
    app = create_app(
        environ={"REMEMBER_REDIS_URL": dead, "REMEMBER_SECRET": TEST_SECRET}, redis_url=redis_url
    )
    assert app.plugin.store_type == "redis"
    app.plugin.store.get("probe")  # the argument's server, not the dead one
    app.close()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=child_env(REMEMBER_SECRET=TEST_SECRET, **env))


def test_cli_with_only_redis_url(redis_url: str, redis_client: redis.Redis) -> None:
    """Only REDIS_URL set: `remember-sync list` works (it exited 2 before issue 20)."""
    assert _cli("set", "k", "1", "--scope", "global", REDIS_URL=redis_url).returncode == 0
    listed = _cli("list", "--scope", "global", REDIS_URL=redis_url)
    assert listed.returncode == 0, listed.stderr
    assert "k" in listed.stdout.split()


def test_cli_precedence_between_the_two_urls(redis_url: str, redis_client: redis.Redis) -> None:
    """REMEMBER_REDIS_URL beats REDIS_URL (warned); a --redis-url flag beats both."""
    dead = "redis://:dead-pw-31@127.0.0.1:1/0"
    assert _cli("set", "k", "1", "--scope", "global", REDIS_URL=redis_url).returncode == 0
    own_wins = _cli("list", "--scope", "global", REMEMBER_REDIS_URL=redis_url, REDIS_URL=dead)
    assert own_wins.returncode == 0, own_wins.stderr
    assert "REMEMBER_REDIS_URL" in own_wins.stderr and "dead-pw" not in own_wins.stderr
    own_dead = _cli("list", "--scope", "global", REMEMBER_REDIS_URL=dead, REDIS_URL=redis_url)
    assert own_dead.returncode != 0 and "dead-pw" not in own_dead.stderr + own_dead.stdout
    flag = _cli("list", "--scope", "global", "--redis-url", redis_url, REMEMBER_REDIS_URL=dead)
    assert flag.returncode == 0, flag.stderr


def test_cli_both_own_variables_is_a_usage_error() -> None:
    """REMEMBER_REDIS_URL with REMEMBER_VERCEL_KV=1 exits 2 naming both."""
    result = _cli(
        "list",
        "--scope",
        "global",
        REMEMBER_REDIS_URL="redis://127.0.0.1:1",
        REMEMBER_VERCEL_KV="1",
    )
    assert result.returncode == 2
    assert "REMEMBER_REDIS_URL" in result.stderr and "REMEMBER_VERCEL_KV" in result.stderr


def test_serve_with_only_redis_url(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """`remember-sync serve` with only REDIS_URL keeps memory in that Redis (the banner says so)."""
    from tests.served import serve

    env = child_env(REMEMBER_SECRET=TEST_SECRET, REDIS_URL=redis_url)
    served = serve(tmp_path, "--allow-anonymous", env=env)
    try:
        served.wait_ready()
        assert f"store: redis redis://127.0.0.1:{redis_url.rsplit(':', 1)[1]}" in served.output
    finally:
        served.stop()


@pytest.mark.parametrize("command", [["serve"], ["list", "--scope", "global"]])
def test_one_redis_url_check_for_serve_and_the_other_commands(command: list[str]) -> None:
    """`serve --redis-url 'not a url'` fails at once (exit 2), like every other command, and
    a bad REDIS_URL is named; neither repeats the value."""
    flag = _cli(*command, "--redis-url", "not a url")
    assert flag.returncode == 2, flag.stderr
    assert "argument --redis-url: must be a redis://" in flag.stderr
    assert "not a url" not in flag.stderr and flag.stdout == ""
    env = _cli(*command, REDIS_URL="http://:pw-9e1c@h/0")
    assert env.returncode == 2, env.stderr
    assert "environment variable REDIS_URL: must be a redis://" in env.stderr
    assert "pw-9e1c" not in env.stderr + env.stdout
