"""agmi's memory-specific attacks run against ``search`` through its semantic adapter.

agmi (PyPI ``agent-memory-integrity``) drives a tool the way an agent does:
write memories for a user, then retrieve by query for a user.  Here a genuine
memory (the user's own, signed by agmi) is written by the host through the
accessor; every attacker write -- whatever label or signature it carries --
arrives the only way a model can write, through the ``remember_this`` tool.
Retrieval is ``accessor.search``, with or without ``host_only``.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin
from tests.conftest import TEST_SECRET

if not os.environ.get("CI"):  # under CI a missing agmi fails the collection, never skips
    pytest.importorskip("agmi", reason="pip install agent-memory-integrity==0.6.3 (test extra)")
import agmi.attacks.memory_specific as agmi  # noqa: E402
from agmi.adapters.semantic_base import (  # noqa: E402
    MemoryItem,
    Retrieved,
    SemanticMemoryAdapter,
)
from agmi.signing import KEYRING  # noqa: E402

ATTACKS = {
    "memory_injection": agmi.MemoryInjectionAttack,
    "cross_session_bleed": agmi.CrossSessionBleedAttack,
    "retrieval_hijack": agmi.RetrievalHijackAttack,
    "indirect_prompt_injection": agmi.IndirectPromptInjectionAttack,
    "update_poisoning": agmi.UpdatePoisoningAttack,
}


class SearchAdapter(SemanticMemoryAdapter):
    """remember_sync's search behind agmi's adapter interface."""

    def __init__(self, *, host_only: bool) -> None:
        self.name = f"remember_sync search (host_only={host_only})"
        self.host_only = host_only
        self.plugin: RememberPlugin | None = None
        self.reset()

    def reset(self) -> None:
        self.close()
        self.plugin = RememberPlugin.init(
            encryption={"secrets": [TEST_SECRET]}, tools={"enabled": True},
            skip_legacy_purge=True,
        )

    def add_memory(self, item: MemoryItem) -> None:
        assert self.plugin is not None
        who = Identity(session_id=f"s-{item.user_id}", user_id=item.user_id)
        key = "m-" + hashlib.sha256(item.text.encode()).hexdigest()[:16]
        first_party = item.source == "user" and item.signature is not None and KEYRING.verify(
            item.user_id, item.source, item.text, item.signature
        )
        if first_party and item.signature is not None and not _agent_signed(item):
            self.plugin.accessor(who).set(key, item.text, scope="user")
            return
        result = self.plugin.call_tool(
            "remember_this", {"key": key, "value": item.text, "scope": "user"}, identity=who
        )
        assert not result["isError"], result

    def retrieve(self, query: str, user_id: str, k: int = 5) -> list[Retrieved]:
        assert self.plugin is not None
        who = Identity(session_id=f"s-{user_id}", user_id=user_id)
        hits = self.plugin.accessor(who).search(query, limit=k, host_only=self.host_only)
        return [Retrieved(str(h.entry.value), user_id, h.score) for h in hits]

    def close(self) -> None:
        if self.plugin is not None:
            self.plugin.close()
            self.plugin = None


#: Texts agmi's "agent-laundered" channel signed: they came through the agent (a model),
#: so they are written through the tool even though the signature is valid.
_AGENT_TEXTS: set[str] = set()


def _agent_signed(item: MemoryItem) -> bool:
    return item.text in _AGENT_TEXTS


@pytest.fixture(autouse=True)
def _agent_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    original = agmi.attacker_write

    def attacker_write(text: str, user_id: str, channel: str) -> Any:
        _AGENT_TEXTS.add(text)
        return original(text, user_id, channel)

    monkeypatch.setattr(agmi, "attacker_write", attacker_write)


def run(attack: str, *, host_only: bool) -> Any:
    adapter = SearchAdapter(host_only=host_only)
    try:
        return ATTACKS[attack]().run(adapter)
    finally:
        adapter.close()


@pytest.mark.parametrize("host_only", [False, True])
def test_cross_session_bleed_kept_out_5_of_5(host_only: bool) -> None:
    """User B's search never serves user A's memory: all five fixtures, both settings."""
    result = run("cross_session_bleed", host_only=host_only)
    assert result.error is None, result.error
    assert result.safe, result.detail
    assert result.channels == {"cross-user": [False] * 5}


def test_host_only_keeps_model_writes_out() -> None:
    """With host_only, nothing an attacker wrote through the tools reaches retrieval."""
    for attack in ("memory_injection", "retrieval_hijack", "indirect_prompt_injection",
                   "update_poisoning"):
        result = run(attack, host_only=True)
        assert result.error is None, (attack, result.error)
        assert result.safe, (attack, result.detail)


def test_report(capsys: pytest.CaptureFixture[str]) -> None:
    """Every attack with and without host_only (the table in docs/reliability.rst)."""
    for host_only in (False, True):
        for attack in ATTACKS:
            result = run(attack, host_only=host_only)
            print(f"host_only={host_only} {attack}: {result.status} "
                  f"{result.detail or result.error}")
    out = capsys.readouterr().out
    assert out.count("cross_session_bleed: safe") == 2, out
