"""accessor.search and the search_memories tool, on every store.

Ranking, isolation between identities, expiry, unreadable entries, what the
raw store holds, the per-process cache across writers, provenance, the tool.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberPlugin, SearchHit
from remember_sync.errors import RememberIdentityError, RememberInputError, RememberStoreError
from remember_sync.testing import HashingEmbedder
from tests.conftest import TEST_SECRET
from tests.test_cli import child_env, run_cli

Factory = Callable[..., RememberPlugin]
ALICE = Identity(session_id="s-alice", user_id="alice")
BOB = Identity(session_id="s-bob", user_id="bob")
EVAL = Path(__file__).parent / "data" / "search_eval.json"


def keys(hits: list[SearchHit]) -> list[str]:
    return [h.key for h in hits]


def test_finds_by_words_in_value_key_brand_and_metadata(make_plugin: Factory) -> None:
    """Words anywhere in the entry (nested strings, object keys, key, metadata) find it."""
    plugin = make_plugin()
    mem = plugin.accessor(ALICE)
    mem.set("favorite_color", "deep blue", scope="user", brand="preference")
    mem.set("trip", {"plan": [{"city": "Lisbon", "notes": "visit the tiled churches"}]},
            scope="user")
    mem.set("misc", "nothing here", scope="user", metadata={"source": "onboarding form"})
    assert keys(mem.search("what is the favourite colour")) == ["favorite_color"]
    assert keys(mem.search("tiled church")) == ["trip"]
    assert keys(mem.search("city")) == ["trip"]
    assert keys(mem.search("onboarding")) == ["misc"]
    hit = mem.search("blue")[0]
    assert hit.scope == "user" and hit.entry.value == "deep blue" and hit.score > 0
    assert hit.written_by == "host" and hit.written_at == hit.entry.updated_at


def test_folding_stemming_prefix_and_typo(make_plugin: Factory) -> None:
    """Case, accents, English endings, prefixes and one-letter typos still match."""
    plugin = make_plugin()
    mem = plugin.accessor(ALICE)
    mem.set("cafe", "Meets at the Café Majestic on Fridays", scope="user")
    mem.set("deploys", "Deployments run through Argo", scope="user")
    mem.set("diet", "Strictly vegetarian", scope="user")
    assert keys(mem.search("CAFE majestic")) == ["cafe"]
    assert keys(mem.search("friday meeting")) == ["cafe"]
    assert keys(mem.search("deploy")) == ["deploys"]
    assert keys(mem.search("deployment")) == ["deploys"]
    assert keys(mem.search("vegetarain")) == ["diet"]  # one transposition
    # Endings neither a prefix nor a one-letter typo reaches: only a shared stem matches.
    mem.set("cats", "She is liking the cats", scope="user")
    for query in ("likes", "liked", "like", "liking"):
        assert keys(mem.search(query)) == ["cats"], query
    # A camelCase key is split into its words, each stemmed.
    mem.set("userDietPreference", "none", scope="user")
    assert keys(mem.search("preferences")) == ["userDietPreference"]
    assert keys(mem.search("user")) == ["userDietPreference"]


def test_two_identities_sharing_words_never_see_each_other(make_plugin: Factory) -> None:
    """Bob's search never returns Alice's entries, whatever words they share."""
    plugin = make_plugin()
    alice, bob = plugin.accessor(ALICE), plugin.accessor(BOB)
    for scope in ("session", "user"):
        alice.set("secret_plan", "the launch code word is pineapple", scope=scope)
    bob.set("fruit", "pineapple smoothie recipe", scope="user")
    for _ in range(2):  # cold, then through the per-process cache
        found = bob.search("pineapple launch code word")
        assert [(h.key, h.scope) for h in found] == [("fruit", "user")]
        assert all(h.entry.value != "the launch code word is pineapple" for h in found)
        assert keys(alice.search("pineapple launch")) == ["secret_plan", "secret_plan"]
    # Global memory is shared by design; tool memory is per tool and per session.
    alice.set("shared", "pineapple", scope="global")
    assert ("shared", "global") in [(h.key, h.scope) for h in bob.search("pineapple")]


def test_scope_rules(make_plugin: Factory) -> None:
    """scope=None skips scopes the caller cannot use; an explicit one raises as elsewhere."""
    plugin = make_plugin()
    anon = plugin.accessor(Identity(session_id="s-anon"))
    anon.set("note", "anonymous note about tea", scope="session")
    assert keys(anon.search("tea")) == ["note"]
    with pytest.raises(RememberIdentityError):
        anon.search("tea", scope="user")
    assert keys(anon.search("tea", scope="session")) == ["note"]
    with pytest.raises(RememberInputError):
        anon.search("   ")
    with pytest.raises(RememberInputError):
        anon.search("tea", limit=0)
    with pytest.raises(TypeError):
        anon.search(b"tea")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        anon.search("tea", brand="nope")


def test_expired_and_unreadable_entries_are_left_out(
    make_plugin: Factory, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An expired entry or one sealed under another secret is never a result."""
    plugin = make_plugin()
    mem = plugin.accessor(ALICE)
    mem.set("short", "ephemeral walrus", scope="user", ttl=60)
    mem.set("long", "durable walrus", scope="user")
    assert sorted(keys(mem.search("walrus"))) == ["long", "short"]
    clock.advance(s=61)
    assert keys(mem.search("walrus")) == ["long"]
    other = make_plugin(encryption={"secrets": ["another-secret-0123456789abcdef0123"]})
    other.accessor(ALICE).set("foreign", "foreign walrus", scope="user")
    assert keys(mem.search("walrus")) == ["long"]
    assert plugin.stats()["unreadable"] >= 1
    assert "search leaves it out" not in caplog.text or "foreign walrus" not in caplog.text


def test_brand_limit_and_host_only(make_plugin: Factory) -> None:
    """brand filters, limit bounds, host_only drops what a model wrote through the tools."""
    plugin = make_plugin(tools={"enabled": True})
    mem = plugin.accessor(ALICE)
    mem.set("pref", "likes green tea", scope="session", brand="preference")
    mem.set("cache", "green tea prices", scope="session", brand="cache")
    result = plugin.call_tool("remember_this", {"key": "model_note", "value": "green tea is best"},
                              identity=ALICE)
    assert not result["isError"]
    assert sorted(keys(mem.search("green tea"))) == ["cache", "model_note", "pref"]
    assert keys(mem.search("green tea", brand="preference")) == ["pref"]
    assert len(mem.search("green tea", limit=1)) == 1
    assert sorted(keys(mem.search("green tea", host_only=True))) == ["cache", "pref"]
    by = {h.key: h.written_by for h in mem.search("green tea")}
    assert by == {"pref": "host", "cache": "host", "model_note": "remember_this"}
    # The host rewriting it makes it host-written.
    mem.set("model_note", "green tea is best", scope="session")
    assert "model_note" in keys(mem.search("green tea", host_only=True))


def test_search_memories_tool(make_plugin: Factory) -> None:
    """The fifth tool: schema, results with preview and provenance, scopes, turning it off."""
    plugin = make_plugin(tools={"enabled": True})
    definition = next(d for d in plugin.tool_definitions() if d["name"] == "search_memories")
    assert definition["annotations"]["readOnlyHint"] is True
    assert definition["inputSchema"]["required"] == ["query"]
    assert "search_memories" in plugin.tool_definitions()[1]["description"]
    plugin.accessor(ALICE).set("diet", {"notes": "Vegetarian, allergic to peanuts"}, scope="user",
                               brand="preference")
    plugin.call_tool("remember_this", {"key": "k", "value": "peanut butter jar", "scope": "user"},
                     identity=ALICE)
    result = plugin.call_tool("search_memories", {"query": "peanut allergy"}, identity=ALICE)
    assert not result["isError"]
    out = result["structuredContent"]
    assert out["count"] == 2 and out["results"][0]["key"] == "diet"
    first = out["results"][0]
    assert first["scope"] == "user" and first["brand"] == "preference"
    assert first["preview"] == "notes Vegetarian, allergic to peanuts"
    assert first["writtenBy"] == "host" and isinstance(first["writtenAt"], int)
    assert out["results"][1]["writtenBy"] == "remember_this"
    assert json.loads(result["content"][0]["text"]) == out
    only = plugin.call_tool("search_memories", {"query": "peanut", "host_only": True},
                            identity=ALICE)["structuredContent"]
    assert [r["key"] for r in only["results"]] == ["diet"]
    bob = plugin.call_tool("search_memories", {"query": "peanut"}, identity=BOB)
    assert bob["structuredContent"] == {"results": [], "count": 0}
    refused = plugin.call_tool("search_memories", {"query": "x", "scope": "global"},
                               identity=ALICE)
    assert refused["isError"] and "REMEMBER_SCOPE_NOT_ALLOWED" in refused["content"][0]["text"]
    bad = plugin.call_tool("search_memories", {"query": ""}, identity=ALICE)
    assert bad["isError"]
    off = make_plugin(tools={"enabled": True, "search": False})
    assert "search_memories" not in [d["name"] for d in off.tool_definitions()]
    assert "search_memories" not in off.tool_definitions()[0]["description"]
    assert off.call_tool("search_memories", {"query": "x"}, identity=ALICE)["isError"]


def test_raw_store_holds_no_word_and_no_vector(make_plugin: Factory, store: Any) -> None:
    """Every word written, and the embedding, is sealed: the raw store contains none of them."""
    plugin = make_plugin(search={"embedder": HashingEmbedder()}, tools={"enabled": True})
    mem = plugin.accessor(ALICE)
    words = {"zanzibar": "user", "quixotic": "session", "marmalade": "global"}
    for word, scope in words.items():
        mem.set(f"k_{scope}", f"{word} notes", scope=scope, metadata={"tag": f"{word}tag"})
    plugin.call_tool("remember_this", {"key": "toolkey", "value": "xylophone lesson"},
                     identity=ALICE)
    assert keys(mem.search("zanzibar")) == ["k_user"]
    assert keys(mem.search("xylophone")) == ["toolkey"]
    raw = []
    for key in store.scan("*"):
        raw.append(key)
        try:
            value = store.get(key)
        except RememberStoreError:  # a listing index (a sorted set of key names)
            continue
        if value is not None:
            raw.append(value)
    blob = "\n".join(raw).casefold()
    for word in [*words, "xylophone", "lesson", "notes", "embedding", "writtenby",
                 "remember_this", "hashing-trigram"]:
        assert word not in blob, word


def test_embedder_vectors_sealed_in_entry_and_hybrid_ranking(make_plugin: Factory) -> None:
    """With an embedder the vector is computed at write time and kept inside the envelope."""
    calls: list[str] = []
    inner = HashingEmbedder(64)

    def embedder(text: str) -> list[float]:
        calls.append(text)
        return inner(text)

    plugin = make_plugin(search={"embedder": embedder, "model": "test-64"})
    mem = plugin.accessor(ALICE)
    mem.set("pets", "a tabby kitten called Miso", scope="user")
    assert len(calls) == 1 and "kitten" in calls[0]
    hits = mem.search("kittens")
    assert keys(hits)[0] == "pets"
    assert len(calls) == 2  # the query only: the entry's vector came from the store
    # A plugin without the embedder reads the same entry (extra members are ignored).
    plain = make_plugin()
    assert plain.accessor(ALICE).get("pets", scope="user") == "a tabby kitten called Miso"
    # Written before the embedder was configured: embedded on first search.
    plain.accessor(ALICE).set("old", "a golden retriever puppy", scope="user")
    assert "old" in keys(mem.search("retriever"))


def test_other_writer_is_seen_and_cache_dropped_on_close(make_plugin: Factory) -> None:
    """A write by another plugin (process) is seen at once; close() drops decrypted data."""
    reader = make_plugin()
    writer = make_plugin()
    mem = reader.accessor(ALICE)
    writer.accessor(ALICE).set("note", "the walrus sings", scope="user")
    assert keys(mem.search("walrus")) == ["note"]
    writer.accessor(ALICE).set("note", "the otter sings", scope="user")
    assert keys(mem.search("walrus")) == []
    assert keys(mem.search("otter")) == ["note"]
    writer.accessor(ALICE).forget("note", scope="user")
    assert keys(mem.search("otter")) == []
    mem.set("again", "otter", scope="user")
    mem.search("otter")
    assert len(reader._core.search_cache) > 0
    reader.close()
    assert len(reader._core.search_cache) == 0


def test_another_process_write_is_seen(redis_url: str, redis_client: redis.Redis) -> None:
    """A forked writer process's new and replaced entries are found by the next search."""
    plugin = RememberPlugin.init(type="redis", config={"url": redis_url},
                                 encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)
    try:
        if plugin.index_backfill is not None:
            assert plugin.index_backfill.wait(30)
        mem = plugin.accessor(ALICE)
        mem.set("a", "first heron", scope="user")
        assert keys(mem.search("heron")) == ["a"]
        code = (
            "from remember_sync import RememberPlugin, Identity\n"
            f"p = RememberPlugin.init(type='redis', config={{'url': {redis_url!r}}}, "
            f"encryption={{'secrets': [{TEST_SECRET!r}]}}, skip_legacy_purge=True)\n"
            "m = p.accessor(Identity(session_id='s-alice', user_id='alice'))\n"
            "m.set('a', 'now a pelican', scope='user')\n"
            "m.set('b', 'second heron', scope='user')\n"
            "p.close()\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        assert keys(mem.search("heron")) == ["b"]
        assert keys(mem.search("pelican")) == ["a"]
    finally:
        plugin.close()


def test_eval_set_lexical_recall_at_5() -> None:
    """Lexical ranking keeps recall@5 >= 0.75 on the committed evaluation set."""
    from benchmarks.search import evaluate  # noqa: PLC0415

    result = evaluate(json.loads(EVAL.read_text(encoding="utf-8")))
    assert result["questions"] >= 100 and result["memories"] >= 250
    assert result["recall@5"] >= 0.75, result
    assert result["mrr"] >= 0.6, result


def test_search_option_is_validated() -> None:
    """A bad search option names itself."""
    from remember_sync.errors import RememberConfigurationError  # noqa: PLC0415

    with pytest.raises(RememberConfigurationError, match="search.embedder"):
        RememberPlugin.init(search={"embedder": 3}, encryption={"secrets": [TEST_SECRET]})
    with pytest.raises(RememberConfigurationError, match="unknown key"):
        RememberPlugin.init(search={"embeder": len}, encryption={"secrets": [TEST_SECRET]})
    with pytest.raises(RememberConfigurationError, match="tools.search"):
        RememberPlugin.init(tools={"enabled": True, "search": "yes"},
                            encryption={"secrets": [TEST_SECRET]})


def test_rotate_keeps_who_wrote_and_the_vector(redis_url: str, redis_client: redis.Redis) -> None:
    """rotate re-seals the entry text as it is: a model's write stays a model's write."""
    old_secret, new_secret = TEST_SECRET, "rotated-secret-0123456789abcdef0123"

    def plugin(*secrets: str, **options: Any) -> RememberPlugin:
        return RememberPlugin.init(type="redis", config={"url": redis_url},
                                   encryption={"secrets": list(secrets)},
                                   skip_legacy_purge=True, tools={"enabled": True}, **options)

    with plugin(old_secret, search={"embedder": HashingEmbedder(32)}) as before:
        before.call_tool("remember_this", {"key": "note", "value": "model wrote this heron",
                                           "scope": "user"}, identity=ALICE)
    rotated = run_cli("rotate", "--redis-url", redis_url, "--json", env=child_env(
        REMEMBER_SECRET=new_secret, REMEMBER_PREVIOUS_SECRETS=old_secret))
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["rotated"] == 1
    calls: list[str] = []
    inner = HashingEmbedder(32)

    def counting(text: str) -> list[float]:
        calls.append(text)
        return inner(text)

    with plugin(new_secret, search={"embedder": counting, "model": inner.model_name}) as after:
        hits = after.accessor(ALICE).search("heron", host_only=False)
        assert [(h.key, h.written_by) for h in hits] == [("note", "remember_this")]
        assert after.accessor(ALICE).search("heron", host_only=True) == []
        assert calls == ["heron", "heron"]  # queries only: the stored vector survived


def test_reindex_embeddings_seals_vectors_into_older_entries(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """remember-sync reindex --embeddings embeds entries written before the embedder, once."""
    with RememberPlugin.init(type="redis", config={"url": redis_url},
                             encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True,
                             tools={"enabled": True}) as plain:
        plain.accessor(ALICE).set("old", "an old heron note", scope="user", ttl=3600)
        plain.call_tool("remember_this", {"key": "tooled", "value": "model heron", "scope": "user"},
                        identity=ALICE)
    before = {k: redis_client.pttl(k) for k in redis_client.scan_iter("remember:v2:*")}
    env = {k: v for k, v in __import__("os").environ.items()}
    env.update(REMEMBER_SECRET=TEST_SECRET, PYTHONPATH=str(Path(__file__).parent.parent))
    command = [sys.executable, "-m", "remember_sync", "reindex", "--redis-url", redis_url,
               "--embeddings", "--embedder", "remember_sync.testing:HashingEmbedder", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["embedded"] == 2 and report["unreadable"] == 0
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
    assert json.loads(again.stdout)["current"] == 2 and json.loads(again.stdout)["embedded"] == 0
    ttl = redis_client.pttl(b"remember:v2:user:alice:old")
    assert 0 < ttl <= before[b"remember:v2:user:alice:old"]
    calls: list[str] = []
    inner = HashingEmbedder()

    def counting(text: str) -> list[float]:
        calls.append(text)
        return inner(text)

    with RememberPlugin.init(type="redis", config={"url": redis_url},
                             encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True,
                             search={"embedder": counting, "model": inner.model_name}) as after:
        hits = after.accessor(ALICE).search("heron")
        assert sorted((h.key, h.written_by) for h in hits) == [
            ("old", "host"), ("tooled", "remember_this")]
        assert calls == ["heron"]


def test_cache_is_bounded_and_results_stay_right(make_plugin: Factory) -> None:
    """With a tiny cache budget every search is still complete; the cache never exceeds it."""
    plugin = make_plugin(search={"cache_entries": 3, "cache_bytes": 10_000_000})
    mem = plugin.accessor(ALICE)
    for i in range(5):
        mem.set(f"n{i}", f"otter number {i}", scope="user")
    mem.set("s", "otter in session", scope="session")
    for _ in range(2):
        assert sorted(keys(mem.search("otter"))) == ["n0", "n1", "n2", "n3", "n4", "s"]
        assert len(plugin._core.search_cache) <= 3
    small = make_plugin(search={"cache_bytes": 1})
    small.accessor(BOB).set("x", "otter", scope="user")
    assert keys(small.accessor(BOB).search("otter")) == ["x"]
    assert len(small._core.search_cache) == 0


def test_entry_with_search_members_reads_by_the_reference_rules(memory_store: Any) -> None:
    """frontmcp_compatible: a tool-written, embedded entry opens by 1.8.0's read path alone
    (HKDF, AES-GCM without AAD, JSON.parse); its six fields are where 1.8.0 looks."""
    from tests.test_crypto import reference_decrypt  # noqa: PLC0415

    plugin = RememberPlugin.init(
        store=memory_store, encryption={"secrets": [TEST_SECRET], "frontmcp_compatible": True},
        skip_legacy_purge=True, tools={"enabled": True},
        search={"embedder": HashingEmbedder(16)},
    )
    with plugin:
        plugin.call_tool("remember_this", {"key": "k", "value": {"q": "heron"}, "scope": "user",
                                           "brand": "state", "metadata": {"src": "chat"}},
                         identity=ALICE)
        raw = memory_store.get("remember:v2:user:alice:k")
        plain = json.loads(reference_decrypt(raw, TEST_SECRET, TEST_SECRET + "alice",
                                             "remember:user:alice"))
        assert list(plain)[:6] == ["value", "brand", "createdAt", "updatedAt", "metadata",
                                   "writtenBy"]
        assert plain["value"] == {"q": "heron"} and plain["brand"] == "state"
        assert plain["metadata"] == {"src": "chat"} and plain["writtenBy"] == "remember_this"
        assert plain["embedding"]["model"] == "hashing-trigram-16"
        entry = plugin.accessor(ALICE).get_entry("k", scope="user")
        assert entry is not None and entry.metadata == {"src": "chat"}


def test_threads_searching_while_another_writes(make_plugin: Factory) -> None:
    """Searches from several threads beside a writer never fail and end on the final state."""
    import threading  # noqa: PLC0415

    plugin = make_plugin()
    mem = plugin.accessor(ALICE)
    for i in range(40):
        mem.set(f"k{i}", f"otter {i}", scope="user")
    errors: list[BaseException] = []
    start = threading.Barrier(5)

    def reader() -> None:
        try:
            start.wait()
            for _ in range(30):
                for hit in mem.search("otter", limit=50):
                    assert hit.entry.value.startswith(("otter", "heron"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def writer() -> None:
        try:
            start.wait()
            for i in range(40):
                mem.set(f"k{i}", f"heron {i}", scope="user")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert mem.search("otter") == []
    assert len(mem.search("heron", limit=100)) == 40


def test_finds_an_entry_in_1_8_0_doubled_prefix_layout(memory_store: Any) -> None:
    """read_doubled_prefix: an entry 1.8.0's Redis store wrote under P+P+key is searched too."""
    options: dict[str, Any] = {"store": memory_store, "skip_legacy_purge": True}
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET], "frontmcp_compatible": True},
                             **options) as old:
        old.accessor(ALICE).set("k", "written by the reference heron", scope="user")
    skey = "remember:v2:user:alice:k"
    memory_store.set("remember:" + skey, memory_store.get(skey))
    memory_store.delete(skey)
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, read_doubled_prefix=True,
                             **options) as reader:
        hits = reader.accessor(ALICE).search("heron")
        assert [(h.key, h.scope, h.written_by) for h in hits] == [("k", "user", "host")]


def test_common_key_words_link_no_unrelated_entries(make_plugin: Factory) -> None:
    """A word common in keys ("mode", "state", "type") is in no synonym group, so a search
    for "dark" does not return ``maintenance_mode``."""
    from remember_sync._search import _SYNONYMS, stem  # noqa: PLC0415

    for word in ("mode", "state", "type", "status", "name", "number", "time", "key", "user"):
        assert stem(word) not in _SYNONYMS, word
        assert all(stem(word) not in group for group in _SYNONYMS.values()), word
    plugin = make_plugin()
    mem = plugin.accessor(ALICE)
    mem.set("maintenance_mode", "scheduled for sunday", scope="user")
    mem.set("deploy_state", "green", scope="user")
    mem.set("blood_type", "O negative", scope="user")
    mem.set("ui_theme", "dark", scope="user")
    mem.set("reading_lamp", "prefers warm light", scope="user")
    assert keys(mem.search("dark")) == ["ui_theme", "reading_lamp"]
    assert keys(mem.search("appearance")) == ["ui_theme"]
    assert keys(mem.search("color scheme")) == ["ui_theme"]
    assert keys(mem.search("green")) == ["deploy_state"]
    assert keys(mem.search("blood type")) == ["blood_type"]
