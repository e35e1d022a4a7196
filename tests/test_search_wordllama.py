"""The WordLlama embedder: selected by name, loaded offline from its wheel, embedded once.

It needs the extra ``[embeddings]`` (in the ``test`` extra too): under ``CI=true`` a
missing ``wordllama`` fails these tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from remember_sync import Identity, RememberPlugin
from remember_sync.errors import RememberConfigurationError
from tests.conftest import TEST_SECRET
from tests.mcp_wire import ACCEPT, modern
from tests.served import serving

if os.environ.get("CI") != "true":
    pytest.importorskip("wordllama")

ALICE = Identity(session_id="s-alice", user_id="alice")
ROOT = Path(__file__).resolve().parent.parent


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120)


def _search_in_fresh_process(redis_url: str, query: str) -> tuple[list[str], list[str]]:
    """Alice's hits for *query* in a new process with WordLlama, and every text it embedded."""
    code = (
        "import json\n"
        "from remember_sync import RememberPlugin, Identity\n"
        "from remember_sync._embedders import WordLlamaEmbedder\n"
        "calls = []\n"
        "inner = WordLlamaEmbedder.__call__\n"
        "WordLlamaEmbedder.__call__ = lambda self, t: (calls.append(t), inner(self, t))[1]\n"
        f"p = RememberPlugin.init(type='redis', config={{'url': {redis_url!r}}}, "
        "skip_legacy_purge=True, search={'embedder': 'wordllama'}, "
        f"encryption={{'secrets': [{TEST_SECRET!r}]}})\n"
        "m = p.accessor(Identity(session_id='s-alice', user_id='alice'))\n"
        f"hits = m.search({query!r}, limit=100)\n"
        "print(json.dumps([[h.key for h in hits], calls]))\n"
    )
    done = _child(code)
    assert done.returncode == 0, done.stderr
    hits, calls = json.loads(done.stdout)
    return hits, calls


def test_selected_by_name_and_vectors_sealed(make_plugin: Any, store: Any) -> None:
    """``search={"embedder": "wordllama"}`` ranks a paraphrase sharing no word first; the
    vector is sealed in the entry under the model's name."""
    plugin = make_plugin(search={"embedder": "wordllama"})
    assert plugin._core.search_settings.model == "wordllama-l2_supercat-256"
    mem = plugin.accessor(ALICE)
    mem.set("allergy", "severe peanut allergy, carries an epipen", scope="user")
    mem.set("car", "drives a blue hatchback to work", scope="user")
    mem.set("music", "plays jazz piano on weekends", scope="user")
    hits = mem.search("dietary restrictions before ordering food")
    assert hits and hits[0].key == "allergy"
    plain = make_plugin()  # the same entry reads without the embedder
    assert plain.accessor(ALICE).get("allergy", scope="user").startswith("severe")


def test_loads_offline_and_never_touches_the_network() -> None:
    """In a process where every connection and name lookup fails, the model loads and embeds."""
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from remember_sync import RememberPlugin, Identity\n"
        f"p = RememberPlugin.init(search={{'embedder': 'wordllama'}}, "
        f"encryption={{'secrets': [{TEST_SECRET!r}]}})\n"
        "m = p.accessor(Identity(session_id='s', user_id='u'))\n"
        "m.set('k', 'a tabby kitten', scope='user')\n"
        "print(m.search('young cat')[0].key)\n"
    )
    done = _child(code, HOME="/nonexistent", HF_HOME="/nonexistent")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "k"


def test_missing_extra_is_an_error_naming_it() -> None:
    """Without the package, init fails naming the extra to install."""
    code = (
        "import sys; sys.modules['wordllama'] = None\n"
        "from remember_sync import RememberPlugin\n"
        "from remember_sync.errors import RememberConfigurationError\n"
        "try:\n"
        f"    RememberPlugin.init(search={{'embedder': 'wordllama'}}, "
        f"encryption={{'secrets': [{TEST_SECRET!r}]}})\n"
        "except RememberConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    done = _child(code)
    assert done.returncode == 0, done.stderr
    assert "search.embedder" in done.stdout and "remember-sync[embeddings]" in done.stdout


def test_unknown_name_and_callable() -> None:
    """An unknown name is refused naming the known ones; a callable stays accepted."""
    with pytest.raises(RememberConfigurationError, match="wordllama"):
        RememberPlugin.init(search={"embedder": "nosuch"}, encryption={"secrets": [TEST_SECRET]})
    with RememberPlugin.init(search={"embedder": lambda text: [1.0, float(len(text))]},
                             encryption={"secrets": [TEST_SECRET]}) as plugin:
        plugin.accessor(ALICE).set("k", "value", scope="user")
        assert plugin.accessor(ALICE).search("value")[0].key == "k"


def test_fresh_process_does_not_embed_stored_entries(redis_url: str, redis_client: Any) -> None:
    """Entries embedded at write are not embedded again by a fresh process's search: only
    the query is."""
    with RememberPlugin.init(type="redis", config={"url": redis_url}, skip_legacy_purge=True,
                             search={"embedder": "wordllama"},
                             encryption={"secrets": [TEST_SECRET]}) as plugin:
        mem = plugin.accessor(ALICE)
        for i in range(50):
            mem.set(f"note{i}", f"remember the heron number {i}", scope="user")
    hits, calls = _search_in_fresh_process(redis_url, "heron")
    assert (len(hits), calls) == (50, ["heron"])


def test_serve_embedder_wordllama(tmp_path: Path) -> None:
    """``serve --embedder wordllama``: search_memories ranks by meaning; a bad name fails."""
    with serving(tmp_path) as start:
        served = start("--no-token", "--user", "alice", "--embedder", "wordllama")

        def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            message, headers = modern("tools/call", {"name": name, "arguments": arguments})
            reply = requests.post(served.url, json=message, headers={**ACCEPT, **headers},
                                  timeout=30)
            assert reply.status_code == 200, reply.text
            result: dict[str, Any] = reply.json()["result"]
            assert not result.get("isError"), result
            return result

        call("remember_this", {"key": "allergy", "value": "severe peanut allergy",
                               "scope": "user"})
        call("remember_this", {"key": "car", "value": "drives a blue hatchback", "scope": "user"})
        found = call("search_memories", {"query": "dietary restrictions before ordering food"})
        assert found["structuredContent"]["results"][0]["key"] == "allergy"
    done = subprocess.run([sys.executable, "-m", "remember_sync", "serve", "--port", "0",
                           "--allow-anonymous", "--embedder", "nosuch"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode != 0 and "nosuch" in done.stderr


def test_reindex_embeds_older_entries_with_wordllama(
    redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    """``reindex --embeddings --embedder wordllama`` seals WordLlama vectors into entries
    written without it; a plugin with the embedder then embeds only the query."""
    with RememberPlugin.init(type="redis", config={"url": redis_url}, skip_legacy_purge=True,
                             encryption={"secrets": [TEST_SECRET]}) as plain:
        plain.accessor(ALICE).set("allergy", "severe peanut allergy", scope="user")
    env = {**os.environ, "REMEMBER_SECRET": TEST_SECRET, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "remember_sync", "reindex", "--redis-url",
                           redis_url, "--embeddings", "--embedder", "wordllama", "--json"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] == 1
    query = "dietary restrictions before ordering food"
    assert _search_in_fresh_process(redis_url, query) == (["allergy"], [query])


def test_word_by_word_tokens_equal_the_whole_texts() -> None:
    """The embedder's per-word token cache gives exactly the tokenizer's ids for the whole
    text: entry texts (lines of words), odd whitespace, punctuation, other scripts."""
    import random

    from remember_sync._embedders import WordLlamaEmbedder
    from remember_sync._search import entry_text

    embedder = WordLlamaEmbedder()
    tokenizer = embedder._tokenizer
    assert tokenizer is not None
    rng = random.Random(7)
    words = ["peanut", "allergy", "EpiPen;", "Lisbon", "naïve", "日本語", "x", "42", "dark-mode",
             "user_pref", "(note)", "café", "O'Brien", "—", "emoji🙂", "A", "ZZZ", "tab\tbed"]
    texts = ["", " ", "a  b", " lead", "trail ", "x\n\ny", "\nstart", "end\n", "one\ttwo"]
    for _ in range(400):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        texts.append(line)
        texts.append(entry_text(rng.choice(words), {"note": line, "n": 3}, "brand", {"t": [line]}))
    for text in texts:
        whole = list(tokenizer.encode(text, add_special_tokens=False).ids)
        assert embedder._ids(text) == whole, text
    assert len(embedder._words) > 0  # the cache is used
