"""TLS and ACL users on real servers: standalone, Sentinel and Cluster (issue 22).

Every server speaks TLS only (``--port 0``), with certificates made for the
module by :mod:`tests.tls_certs`; the store runs as an ACL user limited to
``~remember:*`` and the commands docs/redis.rst recommends.  The whole public
surface passing as that user -- with the server's ``ACL LOG`` empty and no key
outside the prefix afterwards (read as the admin) -- proves the store never
touches a key outside its prefix.  Wrong CA, expired certificate, missing
client certificate, missing permission and wrong password each raise a
remember error that names the cause, within seconds, without the password;
rejected certificates are configuration errors, tried once.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.connection import SSLConnection

from remember_sync import Identity, RememberPlugin
from remember_sync.errors import RememberConfigurationError, RememberError, RememberStoreError
from remember_sync.stores.redis import RedisStore
from tests.fixtures_redis_tls import (
    ACL_CLUSTER_COMMANDS,
    ACL_COMMANDS,
    ACL_KEYS,
    ACL_PASSWORD,
    ACL_USER,
    SERVICE,
    TlsCluster,
    TlsRedisServer,
    TlsSentinelSet,
    flush,
    keys_outside,
    set_acl_user,
    tls_client_options,
    tls_url,
)
from tests.test_cli import SECRET_A, SECRET_B, child_env
from tests.tls_certs import TlsFiles

PREFIX = "remember:"
ALICE = Identity(session_id="s-1", user_id="alice", tool_name="planner")
#: An error must arrive within this many seconds (a hang would be the bug).
BOUND = 4.0
#: A legacy (pre-v2) entry: the purge deletes values shaped like this.
LEGACY_KEY, LEGACY_ENTRY = "remember:session:old:x", '{"value":"old","createdAt":1,"updatedAt":1}'


def _reset_acl_log(servers: list[TlsRedisServer]) -> None:
    for server in servers:
        admin = server.client()
        try:
            admin.acl_log_reset()
        finally:
            admin.close()


def _denials(servers: list[TlsRedisServer]) -> list[dict[str, Any]]:
    """Every ACL LOG entry of our user: a denied command or key, or a failed login."""
    found: list[dict[str, Any]] = []
    for server in servers:
        admin = server.client()
        try:
            found += [e for e in admin.acl_log() if e.get("username") == ACL_USER]
        finally:
            admin.close()
    return found


def exercise(plugin: RememberPlugin) -> None:
    """The accessor's whole public surface, on every scope that has a key."""
    mem = plugin.accessor(ALICE)
    for scope in ("session", "user", "tool", "global"):
        mem.set("theme", "dark", scope=scope, ttl=600, brand="preference")
        mem.set("n", 1, scope=scope)
        assert mem.get("theme", scope=scope) == "dark"
        assert mem.knows("theme", scope=scope) and not mem.knows("nope", scope=scope)
        assert mem.update("theme", "light", scope=scope) is True
        assert mem.update("missing", 1, scope=scope) is False
        assert mem.modify("n", lambda v: (v or 0) + 10, scope=scope) == 11
        assert mem.increment("n", 2, scope=scope) == 13
        assert mem.increment("fresh", scope=scope) == 1
        assert sorted(mem.list(scope=scope)) == ["fresh", "n", "theme"]
        entries = mem.entries(scope=scope, brand="preference")
        assert list(entries) == ["theme"] and entries["theme"].value == "light"
        assert mem.get_entry("n", scope=scope) is not None
        assert mem.forget("fresh", scope=scope) is True
        assert mem.forget_many(scope=scope, pattern="*") == 2
        assert mem.list(scope=scope) == []
    mem.set("kept", {"a": [1, 2]}, scope="user")
    assert plugin.stats()["unreadable"] == 0


def _check_clean(servers: list[TlsRedisServer]) -> None:
    """No key outside the prefix, no denial of any command or key in the ACL log."""
    assert keys_outside(servers, PREFIX) == []
    assert _denials(servers) == []


# -- standalone --------------------------------------------------------------------------


@pytest.fixture
def standalone(tls_standalone: TlsRedisServer) -> TlsRedisServer:
    """The module's standalone TLS server, flushed, with the recommended ACL user."""
    flush([tls_standalone])
    set_acl_user([tls_standalone], ACL_KEYS, *ACL_COMMANDS)
    _reset_acl_log([tls_standalone])
    return tls_standalone


def test_standalone_rediss_url_acl_user_runs_everything_inside_the_prefix(
    standalone: TlsRedisServer, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin]
) -> None:
    """rediss:// URL with user, password, CA and client certificate; the purge too."""
    admin = standalone.client()
    admin.set(LEGACY_KEY, LEGACY_ENTRY)
    url = tls_url(standalone.port, tls_files, user=ACL_USER, password=ACL_PASSWORD)
    plugin = plugins(type="redis", config={"url": url}, skip_legacy_purge=False,
                     legacy_purge_delay_ms=0)
    exercise(plugin)
    assert plugin.legacy_purge is not None and plugin.legacy_purge.wait(10)
    assert admin.get(LEGACY_KEY) is None  # swept by the legacy purge, as the ACL user
    assert admin.exists("remember:__layout__", "remember:__keyid__") == 2
    admin.close()
    _check_clean([standalone])


def test_standalone_config_keys_acl_user(
    standalone: TlsRedisServer, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin]
) -> None:
    """host/port + ssl, ssl_ca_certs, ssl_certfile, ssl_keyfile, username, password config."""
    config = {"host": "127.0.0.1", "port": standalone.port, "username": ACL_USER,
              "password": ACL_PASSWORD, **tls_client_options(tls_files)}
    exercise(plugins(type="redis", config=config))
    _check_clean([standalone])


def test_cli_over_rediss_as_the_acl_user(
    standalone: TlsRedisServer, tls_files: TlsFiles, tmp_path: Path
) -> None:
    """set/get/list/doctor/rotate/purge-legacy via --redis-url and REMEMBER_REDIS_URL."""
    url = tls_url(standalone.port, tls_files, user=ACL_USER, password=ACL_PASSWORD)
    admin = standalone.client()

    def cli(*args: str, secret: str = SECRET_A, **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "remember_sync", *args],
            cwd=tmp_path, env=child_env(REMEMBER_SECRET=secret, **env),
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert ACL_PASSWORD not in done.stdout + done.stderr
        return done

    ident = ["--scope", "user", "--user", "alice"]
    assert cli("set", "--redis-url", url, *ident, "lang", '"en"').returncode == 0
    assert cli("set", *ident, "theme", '"dark"', REMEMBER_REDIS_URL=url).returncode == 0
    got = cli("get", "--redis-url", url, *ident, "lang")
    assert (got.returncode, got.stdout.strip()) == (0, '"en"'), got.stderr
    listed = cli("list", "--redis-url", url, *ident)
    assert listed.stdout.split() == ["lang", "theme"], listed.stderr
    doctor = cli("doctor", "--redis-url", url)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    rotated = cli("rotate", "--redis-url", url, "--json", secret=SECRET_B,
                  REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["rotated"] == 2
    after = cli("get", "--redis-url", url, *ident, "theme", secret=SECRET_B)
    assert after.stdout.strip() == '"dark"'
    admin.set(LEGACY_KEY, LEGACY_ENTRY)
    purged = cli("purge-legacy", "--redis-url", url, "--yes")
    assert purged.returncode == 0 and "deleted 1 of 1" in purged.stdout, purged.stderr
    admin.close()
    _check_clean([standalone])


@pytest.mark.parametrize("with_password", [False, True], ids=["no-auth", "auth"])
def test_client_certificate_required(
    standalone: TlsRedisServer, tls_files: TlsFiles, with_password: bool
) -> None:
    """tls-auth-clients yes: without a client certificate the error points at ssl_certfile.

    TLS 1.3: the server refuses after the handshake, with an alert (a configuration
    error) or -- when the client writes first, as AUTH does -- a bare EOF, which a
    server going down also gives (a store error, retried, with the hint).
    """
    auth = f"{ACL_USER}:{ACL_PASSWORD}@" if with_password else ""
    url = f"rediss://{auth}127.0.0.1:{standalone.port}/0"
    store = RedisStore.from_url(url, ssl_ca_certs=str(tls_files.ca_cert))
    error = _assert_clear_error(lambda: store.get("remember:k"), RememberError,
                                "ssl_certfile and ssl_keyfile")
    if "certificate required" in str(error):
        assert isinstance(error, RememberConfigurationError), repr(error)
    else:
        assert "EOF occurred" in str(error) and isinstance(error, RememberStoreError), repr(error)
        assert "server may require a client certificate" in str(error)
    store.close()


# -- errors ------------------------------------------------------------------------------


def _assert_clear_error(
    call: Callable[[], object],
    kind: type[RememberError],
    *causes: str,
    caplog: pytest.LogCaptureFixture | None = None,
) -> RememberError:
    """*call* raises *kind* within BOUND seconds, naming every cause, never the password."""
    started = time.monotonic()
    with pytest.raises(kind) as info:
        call()
    elapsed = time.monotonic() - started
    assert elapsed < BOUND, f"took {elapsed:.2f} s"
    text = str(info.value)
    for cause in causes:
        assert cause in text, text
    assert ACL_PASSWORD not in text and ACL_PASSWORD not in repr(info.value)
    if caplog is not None:
        assert ACL_PASSWORD not in caplog.text
    return info.value


@pytest.fixture
def tls_connects(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts TLS connection attempts (redis-py's ``SSLConnection._connect``), one entry each."""
    attempts: list[int] = []
    original = SSLConnection._connect

    def counted(self: SSLConnection) -> Any:
        attempts.append(1)
        return original(self)

    monkeypatch.setattr(SSLConnection, "_connect", counted)
    return attempts


def test_wrong_ca_expired_certificate_and_wrong_password(
    standalone: TlsRedisServer,
    tls_expired: TlsRedisServer,
    tls_files: TlsFiles,
    plugins: Callable[..., RememberPlugin],
    caplog: pytest.LogCaptureFixture,
    tls_connects: list[int],
) -> None:
    """Each names its cause and what to check; a rejected certificate is tried only once."""
    caplog.set_level(logging.DEBUG)
    ok = tls_url(standalone.port, tls_files, user=ACL_USER, password=ACL_PASSWORD)
    wrong_ca = ok.replace(str(tls_files.ca_cert), str(tls_files.other_ca_cert))
    mem = plugins(type="redis", config={"url": wrong_ca}).accessor(ALICE)
    _assert_clear_error(lambda: mem.get("k"), RememberConfigurationError,
                        "certificate verify failed", "check ssl_ca_certs", "not retried",
                        caplog=caplog)

    expired = tls_url(tls_expired.port, tls_files, user=ACL_USER, password=ACL_PASSWORD)
    mem = plugins(type="redis", config={"url": expired}).accessor(ALICE)
    _assert_clear_error(lambda: mem.set("k", 1), RememberConfigurationError,
                        "certificate verify failed", "certificate has expired",
                        "renew it on the server", caplog=caplog)
    for url in (wrong_ca, expired):  # one connection attempt per call: not retried
        store = RedisStore.from_url(url)
        tls_connects.clear()
        with pytest.raises(RememberConfigurationError):
            store.get("remember:k")
        assert len(tls_connects) == 1, url  # the default retries=2 would make it 3
        store.close()

    bad_pw = tls_url(standalone.port, tls_files, user=ACL_USER, password="not-" + ACL_PASSWORD)
    mem = plugins(type="redis", config={"url": bad_pw}).accessor(ALICE)
    error = _assert_clear_error(lambda: mem.get("k"), RememberConfigurationError,
                                "rejected the credentials", "invalid username-password",
                                caplog=caplog)
    assert "not-" + ACL_PASSWORD not in str(error) + caplog.text


def test_missing_permission_and_key_outside_the_pattern(
    standalone: TlsRedisServer,
    tls_files: TlsFiles,
    plugins: Callable[..., RememberPlugin],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No +set, or keys limited to another prefix: RememberConfigurationError naming it."""
    caplog.set_level(logging.DEBUG)
    url = tls_url(standalone.port, tls_files, user=ACL_USER, password=ACL_PASSWORD)
    mem = plugins(type="redis", config={"url": url}).accessor(ALICE)
    set_acl_user([standalone], ACL_KEYS, *ACL_COMMANDS, "-set")
    # The write runs inside the listing index's script, whose refusal names the script.
    _assert_clear_error(lambda: mem.set("k", 1), RememberConfigurationError,
                        "lacks a permission", "SET", caplog=caplog)
    set_acl_user([standalone], "~elsewhere:*", *ACL_COMMANDS)
    _assert_clear_error(lambda: mem.get("k"), RememberConfigurationError,
                        "lacks a permission", "keys", caplog=caplog)


# -- Sentinel ----------------------------------------------------------------------------


@pytest.fixture
def sentinel_set(tls_sentinel_set: TlsSentinelSet) -> TlsSentinelSet:
    """The module's TLS primary/replica/Sentinel, flushed, the ACL user on both data nodes."""
    flush(tls_sentinel_set.data_servers)
    set_acl_user(tls_sentinel_set.data_servers, ACL_KEYS, *ACL_COMMANDS)
    _reset_acl_log(tls_sentinel_set.data_servers)
    return tls_sentinel_set


def _sentinel_config(group: TlsSentinelSet, tls: TlsFiles, **overrides: Any) -> dict[str, Any]:
    return {"sentinels": group.sentinels, "service_name": SERVICE, "username": ACL_USER,
            "password": ACL_PASSWORD, **tls_client_options(tls), **overrides}


def test_sentinel_tls_acl_user_runs_everything_and_replicates_over_tls(
    sentinel_set: TlsSentinelSet, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin]
) -> None:
    """Sentinel discovery and the primary over TLS; the replica got the writes over TLS."""
    exercise(plugins(type="redis", config=_sentinel_config(sentinel_set, tls_files)))
    primary = sentinel_set.primary.client()
    assert primary.execute_command("WAIT", 1, 5000) == 1
    replica = sentinel_set.replica.client()
    kept = list(replica.scan_iter("remember:v2:user:*"))
    assert len(kept) == 1 and replica.get(kept[0]) == primary.get(kept[0])
    primary.close()
    replica.close()
    _check_clean(sentinel_set.data_servers)


def test_sentinel_url_with_wait_replicas(
    sentinel_set: TlsSentinelSet, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin]
) -> None:
    """rediss+sentinel:// URL, certificates as config keys; WAIT needs +wait in the ACL."""
    set_acl_user(sentinel_set.data_servers, ACL_KEYS, *ACL_COMMANDS, "+wait")
    (host, port), = sentinel_set.sentinels
    url = f"rediss+sentinel://{ACL_USER}:{ACL_PASSWORD}@{host}:{port}/{SERVICE}/0"
    config = {"url": url, "wait_replicas": 1, "wait_timeout_ms": 500,
              **{k: v for k, v in tls_client_options(tls_files).items() if k != "ssl"}}
    exercise(plugins(type="redis", config=config))
    _check_clean(sentinel_set.data_servers)


def test_sentinel_wrong_ca(
    sentinel_set: TlsSentinelSet, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A CA that signed neither the sentinels nor the primary: the sentinel's failure is named.

    redis-py keeps only ``network:ConnectionError`` of each sentinel's failure; the
    store asks one sentinel again, briefly, to say why.
    """
    caplog.set_level(logging.DEBUG)
    config = _sentinel_config(sentinel_set, tls_files, ssl_ca_certs=str(tls_files.other_ca_cert))
    mem = plugins(type="redis", config=config).accessor(ALICE)
    (host, port), = sentinel_set.sentinels
    _assert_clear_error(lambda: mem.get("k"), RememberConfigurationError,
                        f"No master found for '{SERVICE}'", f"sentinel {host}:{port} failed",
                        "certificate verify failed", "check ssl_ca_certs", caplog=caplog)


def test_sentinel_wrong_ca_on_the_primary_link(
    sentinel_set: TlsSentinelSet, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin]
) -> None:
    """The primary's certificate is checked too, not only the sentinels'."""
    config = _sentinel_config(
        sentinel_set, tls_files, ssl_ca_certs=str(tls_files.other_ca_cert),
        sentinel_kwargs={"ssl_ca_certs": str(tls_files.ca_cert)},
    )
    mem = plugins(type="redis", config=config).accessor(ALICE)
    _assert_clear_error(lambda: mem.get("k"), RememberConfigurationError,
                        f"{sentinel_set.primary.port}", "certificate verify failed")


# -- Cluster -----------------------------------------------------------------------------


@pytest.fixture
def cluster(tls_cluster: TlsCluster) -> TlsCluster:
    """The module's TLS cluster, flushed, the cluster ACL user on every node."""
    flush(tls_cluster.data_servers)
    set_acl_user(tls_cluster.data_servers, ACL_KEYS, *ACL_COMMANDS, *ACL_CLUSTER_COMMANDS)
    _reset_acl_log(tls_cluster.data_servers)
    return tls_cluster


def test_cluster_tls_acl_user_runs_everything_inside_the_prefix(
    cluster: TlsCluster, plugins: Callable[..., RememberPlugin]
) -> None:
    """tls-cluster yes, an ACL user on every node: the surface and the purge's marker."""
    client = cluster.client(username=ACL_USER, password=ACL_PASSWORD, socket_timeout=2)
    plugin = plugins(type="redis-client", client=client, skip_legacy_purge=False,
                     legacy_purge_delay_ms=0)
    exercise(plugin)
    assert plugin.legacy_purge is not None and plugin.legacy_purge.wait(10)
    admin = cluster.client()
    assert admin.exists("remember:__layout__") == 1
    admin.close()
    client.close()
    _check_clean(cluster.data_servers)


def test_cluster_missing_permission(
    cluster: TlsCluster, plugins: Callable[..., RememberPlugin]
) -> None:
    """A cluster user without +evalsha: update raises RememberConfigurationError naming it."""
    client = cluster.client(username=ACL_USER, password=ACL_PASSWORD, socket_timeout=2)
    mem = plugins(type="redis-client", client=client).accessor(ALICE)
    mem.set("k", 1)
    set_acl_user(cluster.data_servers, ACL_KEYS, *ACL_COMMANDS, *ACL_CLUSTER_COMMANDS,
                 "-evalsha", "-eval")
    _assert_clear_error(lambda: mem.update("k", 2), RememberConfigurationError,
                        "lacks a permission")
    client.close()


def test_cluster_certificate_from_another_ca(
    cluster: TlsCluster, tls_files: TlsFiles, plugins: Callable[..., RememberPlugin]
) -> None:
    """A cluster client whose next connections meet a certificate it does not trust.

    ``RedisCluster(...)`` connects while it is built, so a wrong CA from the start
    fails in the application's constructor; here the client's CA is swapped
    underneath it (its connection settings, then its pools reset), as when the
    nodes' certificates are replaced by ones from another CA.
    """
    client = cluster.client(username=ACL_USER, password=ACL_PASSWORD, socket_timeout=2)
    mem = plugins(type="redis-client", client=client).accessor(ALICE)
    mem.set("k", 1)
    other = str(tls_files.other_ca_cert)
    client.nodes_manager.connection_kwargs["ssl_ca_certs"] = other
    for node in client.get_nodes():
        pool = node.redis_connection.connection_pool
        pool.connection_kwargs["ssl_ca_certs"] = other
        pool.reset()
    _assert_clear_error(lambda: mem.get("k"), RememberConfigurationError,
                        "certificate verify failed", "check ssl_ca_certs")
    client.close()
