"""RememberPlugin.init option validation (SPEC section 1) and lifecycle."""

from __future__ import annotations

from typing import Any

import pytest

from remember_sync import Identity, RememberConfigurationError, RememberPlugin
from remember_sync.stores.memory import MemoryStore


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"typo_option": 1}, "typo_option"),
        ({"type": "mongo"}, "type"),
        ({"type": "redis"}, "config"),
        ({"type": "redis", "config": {"hots": "x"}}, "hots"),
        ({"type": "redis-client"}, "client"),
        ({"type": "vercel-kv", "url": "http://127.0.0.1:1"}, "url"),
        ({"type": "vercel-kv", "token": "t"}, "url"),
        ({"default_ttl": -1}, "default_ttl"),
        ({"default_ttl": 1.5}, "default_ttl"),
        ({"default_ttl": True}, "default_ttl"),
        ({"default_ttl": "60"}, "default_ttl"),
        ({"encryption": {"custom_key": ""}}, "custom_key"),
        ({"encryption": {"enabeld": False}}, "enabeld"),
        ({"encryption": {"enabled": "no"}}, "encryption.enabled"),
        ({"encryption": "on"}, "encryption"),
        ({"tools": {"allowed_scopes": ["forever"]}}, "allowed_scopes"),
        ({"tools": {"allowed_scopes": "session"}}, "allowed_scopes"),
        ({"tools": {"prefx": "x"}}, "prefx"),
        ({"key_prefix": 5}, "key_prefix"),
        ({"legacy_purge_delay_ms": -5}, "legacy_purge_delay_ms"),
        ({"skip_legacy_purge": "yes"}, "skip_legacy_purge"),
        ({"on_decrypt_error": "ignore"}, "on_decrypt_error"),
        ({"max_value_bytes": 0}, "max_value_bytes"),
        ({"store": object()}, "store"),
        ({"store": MemoryStore(), "type": "memory"}, "store"),
        ({"clock": 5}, "clock"),
        ({"type": "global-store", "environ": {}}, "REDIS_URL"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, Any], named: str) -> None:
    """Each bad option raises RememberConfigurationError naming it; no silent fallback."""
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(**{"encryption": {"secrets": ["s" * 32]}, **options})
    assert named in str(info.value)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"defualt_ttl": 60}, "'defualt_ttl' (did you mean 'default_ttl'?)"),
        ({"key_prefx": "x:"}, "'key_prefx' (did you mean 'key_prefix'?)"),
        ({"encryption": {"secrts": ["s" * 32]}}, "'secrts' (did you mean 'secrets'?)"),
        ({"tools": {"enabeld": True}}, "'enabeld' (did you mean 'enabled'?)"),
        ({"zzzzzz": 1}, "unknown option(s) 'zzzzzz'"),
    ],
)
def test_a_misspelled_option_names_the_nearest_one(options: dict[str, Any], said: str) -> None:
    """An unknown option or key suggests the nearest known name, and only when one is near."""
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(**options)
    assert said in str(info.value)
    if "zzzzzz" in options:
        assert "did you mean" not in str(info.value)


def test_global_store_without_config_has_its_code() -> None:
    """global-store with nothing configured: code GLOBAL_CONFIG_NOT_FOUND, says what to set."""
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(type="global-store", environ={})
    assert info.value.code == "GLOBAL_CONFIG_NOT_FOUND"
    assert "KV_REST_API_URL" in str(info.value)


def test_defaults() -> None:
    """init() gives a memory store, encryption on, prefix remember:."""
    plugin = RememberPlugin.init(encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True)
    assert isinstance(plugin.store, MemoryStore)
    assert plugin.key_prefix == "remember:"
    assert plugin.keyring is not None
    assert plugin.tools_options == {
        "enabled": False,
        "prefix": "",
        "allowed_scopes": ["session", "user", "tool"],
        "search": True,
    }
    plugin.close()


def test_two_plugins_never_share_a_memory_store() -> None:
    """Two memory plugins from the same options have separate stores."""
    opts: dict[str, Any] = {"encryption": {"secrets": ["s" * 32]}, "skip_legacy_purge": True}
    a, b = RememberPlugin.init(**opts), RememberPlugin.init(**opts)
    a.accessor(Identity()).set("k", 1, scope="global")
    assert b.accessor(Identity()).get("k", scope="global") is None
    assert a.store is not b.store


def test_close_releases_created_store_only() -> None:
    """close() closes a store the plugin created, never one passed in; it is idempotent."""
    given = MemoryStore()
    given.set("x", "1")
    with RememberPlugin.init(store=given, encryption={"secrets": ["s" * 32]}) as plugin:
        assert plugin.store is given
    assert given.get("x") == "1"
    owned = RememberPlugin.init(encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True)
    owned.accessor(Identity()).set("k", 1, scope="global")
    owned.close()
    owned.close()
    assert len(owned.store) == 0  # type: ignore[arg-type]


def test_custom_prefix_and_empty_prefix() -> None:
    """key_prefix applies to every key; an empty prefix is allowed for storage."""
    store = MemoryStore()
    for prefix in ("myapp:", ""):
        plugin = RememberPlugin.init(
            store=store, key_prefix=prefix, encryption={"secrets": ["s" * 32]}
        )
        plugin.accessor(Identity(user_id="alice")).set("theme", "x", scope="user")
        assert store.get(f"{prefix}v2:user:alice:theme") is not None


def test_accessor_requires_identity() -> None:
    """plugin.accessor() takes an Identity."""
    plugin = RememberPlugin.init(encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True)
    with pytest.raises(TypeError):
        plugin.accessor("alice")  # type: ignore[arg-type]
