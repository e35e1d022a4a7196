"""Options inside a Redis URL are checked like keyword options, and no URL's password leaks.

A query option redis-py does not parse itself (``?ssl_cert_reqs=none`` on a
``redis://`` URL, ``?ssl_ca_certs=...`` without TLS, a typo such as
``?sokcet_timeout=1``) used to be accepted and then handed to every new
connection, so every operation raised a bare ``TypeError`` (a traceback from
the CLI, a dead ``serve``).  These tests use the doors users use: the plugin's
``config``, the environment, ``serve --redis-url``, ``create_app(redis_url=)``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remember_sync import Identity, RememberPlugin
from remember_sync.errors import RememberConfigurationError
from remember_sync.mcp import create_app
from remember_sync.stores.redis import RedisStore, redacted_url

SECRET = "url-options-secret-0123456789abcdef012345"
REPO = Path(__file__).resolve().parent.parent

#: (query, the option the message must name) -- each an error today only on first use.
BAD_QUERIES = [
    ("ssl_cert_reqs=none", "ssl_cert_reqs"),
    ("ssl_ca_certs=/etc/ssl/certs/ca.pem", "ssl_ca_certs"),
    ("sokcet_timeout=1", "sokcet_timeout"),
    ("socket_timeout=soon", "socket_timeout"),
    ("retries=-1", "retries"),
    ("client_name=x&client_name=y", "client_name"),
]


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _with_password(url: str, query: str) -> str:
    return _with_query(url.replace("redis://", "redis://:hunter2SECRET@"), query)


@pytest.mark.parametrize(("query", "option"), BAD_QUERIES)
def test_a_bad_url_option_is_a_configuration_error_at_init(
    redis_url: str, query: str, option: str
) -> None:
    """init() refuses the URL, naming the option and the names a URL accepts."""
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(
            type="redis", config={"url": _with_query(redis_url, query)}, skip_legacy_purge=True
        )
    message = str(info.value)
    assert "config.url" in message and repr(option) in message
    assert "socket_timeout" in message  # the accepted names are listed


def test_good_url_options_are_used_and_win_over_keywords(redis_url: str) -> None:
    """Accepted options work on real Redis; the URL's values win, as for redis-py's own."""
    url = _with_query(redis_url, "socket_timeout=2.5&socket_connect_timeout=0.75&retries=1")
    store = RedisStore.from_url(url, socket_timeout=9.0)
    try:
        kwargs = store.client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 2.5 and kwargs["socket_connect_timeout"] == 0.75
        assert "retries" not in kwargs  # ours, turned into redis-py's retry policy
        store.set("remember:url-options", "v")
        assert store.get("remember:url-options") == "v"
    finally:
        store.close()


def test_an_unknown_keyword_is_refused_when_the_store_is_built(redis_url: str) -> None:
    """A misspelt redis-py keyword to from_url is refused at once, not at every call."""
    with pytest.raises(RememberConfigurationError, match="sokcet_timeout"):
        RedisStore.from_url(redis_url, sokcet_timeout=1)
    store = RedisStore.from_url(redis_url, client_name="named")  # a real redis-py option
    try:
        assert store.client.client_getname() in (b"named", "named")
    finally:
        store.close()


#: URLs of every shape a password can hide in; none may reach a message.
SECRET_SHAPES = [
    "redis//:hunter2SECRET@127.0.0.1:6379/0",
    "redis:/:hunter2SECRET@127.0.0.1:6379/0",
    "redis:hunter2SECRET@127.0.0.1",
    "//:hunter2SECRET@127.0.0.1:6379",
    ":hunter2SECRET@127.0.0.1:6379",
    "redis://:hunter2SECRET@127.0.0.1:port/0",
    "redis://:hunter2SECRET@[::1/0",
    "redis://user:hunter2SECRET@127.0.0.1:6379/0?sokcet_timeout=1",
    "redis://127.0.0.1:6379/0?password=hunter2SECRET",
    "redis+sentinel://:hunter2SECRET@127.0.0.1:1/svc?sokcet_timeout=1",
    "http://:hunter2SECRET@127.0.0.1:6379",
]


@pytest.mark.parametrize("url", SECRET_SHAPES)
def test_no_message_shows_a_password_whatever_the_url_shape(url: str) -> None:
    """from_url's error and redacted_url hide the password of a URL of any shape."""
    assert "SECRET" not in redacted_url(url)
    with pytest.raises(RememberConfigurationError) as info:
        RedisStore.from_url(url)
    assert "SECRET" not in str(info.value)
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(type="redis", config={"url": url}, skip_legacy_purge=True)
    assert "SECRET" not in str(info.value)


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMEMBER_", "REDIS_URL"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["REMEMBER_SECRET"] = SECRET
    env.update(extra)
    return env


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remember_sync", *args],
        cwd=cwd,
        env=_child_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("env_name", ["REDIS_URL", "REMEMBER_REDIS_URL", None])
def test_the_cli_reports_a_bad_url_option_without_a_traceback(
    redis_url: str, tmp_path: Path, env_name: str | None
) -> None:
    """``list`` with a typo'd URL option: exit 2, one line naming it, no traceback."""
    bad = _with_password(redis_url, "sokcet_timeout=1")
    if env_name is None:
        result = _cli("list", "--scope", "global", "--redis-url", bad, cwd=tmp_path)
    else:
        result = _cli("list", "--scope", "global", cwd=tmp_path, **{env_name: bad})
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output and "TypeError" not in output
    assert "'sokcet_timeout'" in output and "socket_timeout" in output
    assert "SECRET" not in output


def test_serve_refuses_to_start_on_a_bad_url_option(redis_url: str, tmp_path: Path) -> None:
    """``serve --redis-url URL?typo``: refuses at start with the option named (no dead server)."""
    bad = _with_password(redis_url, "ssl_cert_reqs=none")
    result = _cli("serve", "--port", "0", "--no-token", "--redis-url", bad, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output and "'ssl_cert_reqs'" in output
    assert "SECRET" not in output


def test_create_app_refuses_a_bad_url_option(redis_url: str) -> None:
    """create_app(redis_url=...) raises the configuration error, password hidden."""
    bad = _with_password(redis_url, "sokcet_timeout=1")
    with pytest.raises(RememberConfigurationError) as info:
        create_app(redis_url=bad, environ={"REMEMBER_SECRET": SECRET})
    assert "'sokcet_timeout'" in str(info.value) and "SECRET" not in str(info.value)


def test_a_rediss_url_may_still_turn_certificate_checks_off() -> None:
    """``rediss://...?ssl_cert_reqs=none`` stays accepted (documented, logged); bad values not."""
    RedisStore.from_url("rediss://127.0.0.1:1/0?ssl_cert_reqs=none").close()
    with pytest.raises(RememberConfigurationError, match="ssl_cert_reqs"):
        RedisStore.from_url("rediss://127.0.0.1:1/0?ssl_cert_reqs=bogus")
    plugin = RememberPlugin.init(
        type="redis",
        config={"url": "rediss://127.0.0.1:1/0?ssl_check_hostname=false&socket_timeout=0.2"},
        skip_legacy_purge=True,
    )
    plugin.close()
    with pytest.raises(RememberConfigurationError, match="ssl_check_hostname"):
        RedisStore.from_url("rediss://127.0.0.1:1/0?ssl_check_hostname=perhaps")


def test_operations_never_raise_a_driver_type_error(redis_url: str) -> None:
    """A URL the store accepted works; every option it passes reaches a real connection."""
    url = _with_query(redis_url.rpartition("/")[0], "db=3&retries=0&wait_replicas=0")
    plugin = RememberPlugin.init(
        type="redis", config={"url": url}, skip_legacy_purge=True, encryption={"secrets": [SECRET]}
    )
    try:
        memory = plugin.accessor(Identity(user_id="alice"))
        memory.set("k", 1, scope="user")
        assert memory.get("k", scope="user") == 1
    finally:
        plugin.close()
    other_db = RedisStore.from_url(redis_url.rpartition("/")[0] + "/3")
    try:
        assert any(key.endswith("k") for key in other_db.scan("remember:*"))
    finally:
        other_db.close()
