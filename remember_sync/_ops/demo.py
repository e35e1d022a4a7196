"""``remember-sync demo``: a scripted walkthrough, in process, in about a second.

Everything runs on the in-memory store with a throw-away secret made for the
run (nothing is written to disk: no ``.frontmcp/`` file), and the memory tools
are called exactly as a model's MCP client would call them.  Time is a
simulated clock the demo moves forward, so the TTL step does not sleep.

The script checks its own expectations: if any step does not come out as
narrated, it says which and the command exits non-zero.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, TextIO

from .._clock import FakeClock, system_clock
from .._keys import glob_escape
from .._secrets import generate_secret
from ..errors import DemoFailed
from ..plugin import RememberPlugin
from ..tools import error_parts
from ..types import Identity

PREFIX = "remember:"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Script:
    def __init__(self, plugin: RememberPlugin, out: TextIO) -> None:
        self.plugin = plugin
        self.out = out
        self.step = 0

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def heading(self, text: str) -> None:
        self.step += 1
        self.say()
        self.say(f"{self.step}. {text}")

    def call(self, who: str, ident: Identity, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        result = self.plugin.call_tool(tool, args, identity=ident)
        self.say(f"   {who:<16} -> {tool} {_compact(args)}")
        if result["isError"]:
            code, message = error_parts(result)
            self.say(f"   {'':<16} <- error {code}")
            pad = " " * 23
            self.say(textwrap.fill(message, 96, initial_indent=pad, subsequent_indent=pad))
        else:
            self.say(f"   {'':<16} <- {_compact(result['structuredContent'])}")
        return result

    @staticmethod
    def error_code(result: dict[str, Any]) -> str | None:
        """The code of a tool error result; ``None`` for a success."""
        return error_parts(result)[0] if result["isError"] else None

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            raise DemoFailed(f"step {self.step}: expected {what}")


def run_demo(out: TextIO) -> None:
    """Print the walkthrough to *out*; raise :class:`DemoFailed` if a step misbehaves."""
    clock = FakeClock(system_clock())
    plugin = RememberPlugin.init(
        encryption={"secrets": [generate_secret()]},
        tools={"enabled": True, "allowed_scopes": ["session", "user", "tool"]},
        clock=clock,
        key_prefix=PREFIX,
        skip_legacy_purge=True,
    )
    with plugin:
        _walkthrough(_Script(plugin, out), clock)


def _walkthrough(s: _Script, clock: FakeClock) -> None:
    alice_1 = Identity(session_id="s-alice-1", user_id="alice")
    alice_2 = Identity(session_id="s-alice-2", user_id="alice")
    bob = Identity(session_id="s-bob-1", user_id="bob")
    anonymous = Identity()

    s.say("remember-sync demo: encrypted, scoped memory for AI-agent tools")
    s.say("Store: in-memory.  Secret: a throw-away one made for this run (nothing on disk).")
    s.say("Each call below is a memory tool called the way a model calls it over MCP.")

    s.heading('Alice saves a preference for all her sessions (scope "user") ...')
    r = s.call("alice/s-alice-1", alice_1, "remember_this",
               {"key": "theme", "value": "dark", "scope": "user", "brand": "preference"})
    s.expect(not r["isError"], "remember_this to succeed")
    s.heading('... and a note for this session only (scope "session")')
    r = s.call("alice/s-alice-1", alice_1, "remember_this",
               {"key": "draft", "value": "Q3 plan, section 2", "scope": "session"})
    s.expect(not r["isError"], "remember_this to succeed")

    s.heading("In her second session, the user memory follows Alice; the session memory does not")
    r = s.call("alice/s-alice-2", alice_2, "recall", {"key": "theme", "scope": "user"})
    s.expect(r["structuredContent"].get("value") == "dark", "alice to recall her theme")
    r = s.call("alice/s-alice-2", alice_2, "recall", {"key": "draft", "scope": "session"})
    s.expect(r["structuredContent"].get("found") is False, "the draft to stay in session 1")

    s.heading("Bob has his own memory: he cannot see Alice's")
    r = s.call("bob/s-bob-1", bob, "recall", {"key": "theme", "scope": "user"})
    s.expect(r["structuredContent"].get("found") is False, "bob not to see alice's theme")
    s.call("bob/s-bob-1", bob, "remember_this", {"key": "theme", "value": "light", "scope": "user"})
    r = s.call("alice/s-alice-1", alice_1, "recall", {"key": "theme", "scope": "user"})
    s.expect(r["structuredContent"].get("value") == "dark", "alice's theme to be unchanged")

    s.heading("A caller with no verified session and no signed-in user is refused")
    r = s.call("anonymous", anonymous, "remember_this", {"key": "note", "value": "hi"})
    s.expect(
        s.error_code(r) == "REMEMBER_IDENTITY_REQUIRED",
        "REMEMBER_IDENTITY_REQUIRED",
    )
    s.say("   (Otherwise every anonymous caller would share one namespace.)")

    s.heading("Entries expire: a one-time code kept for 5 seconds")
    s.call("alice/s-alice-1", alice_1, "remember_this",
           {"key": "otp", "value": "493021", "scope": "session", "ttl": 5, "brand": "cache"})
    r = s.call("alice/s-alice-1", alice_1, "recall", {"key": "otp", "scope": "session"})
    s.expect(r["structuredContent"].get("found") is True, "the code to be there")
    clock.advance(6_000)
    s.say("   ... 6 seconds later (the demo's clock is simulated: nothing sleeps) ...")
    r = s.call("alice/s-alice-1", alice_1, "recall", {"key": "otp", "scope": "session"})
    s.expect(r["structuredContent"].get("found") is False, "the code to have expired")

    s.heading("What the store really holds: storage keys and encrypted envelopes")
    store = s.plugin.store
    keys = sorted(store.scan(glob_escape(PREFIX) + "*"))
    for key in keys:
        s.say(f"   {key}")
    shown = f"{PREFIX}v2:user:alice:theme"
    envelope = store.get(shown)
    s.expect(envelope is not None and '"alg":"A256GCM"' in envelope, "an A256GCM envelope")
    s.expect(envelope is not None and "dark" not in envelope, "no plaintext in the store")
    s.say()
    s.say(f"   {shown} =")
    s.say(f"   {envelope}")
    s.say()
    s.say("   AES-256-GCM with a key derived per user/session (HKDF-SHA256); the ciphertext")
    s.say("   is bound to its storage key, so a value copied to another key will not open.")

    s.say()
    s.say("Next: `remember-sync --help` lists the operator commands (list, get, set, forget,")
    s.say("stats, doctor, export, import, rotate, reindex, purge-legacy, verify, erase, audit);")
    s.say("`remember-sync serve` runs an MCP server.")
