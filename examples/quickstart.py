"""Quick start: encrypted, scoped memory in a plain script (in-memory store).

Run it from a checkout (after ``pip install -e .``) or anywhere the package is
installed::

    python examples/quickstart.py

Nothing is kept after the script ends (the default store is in memory).  The
master secret comes from ``REMEMBER_SECRET`` when set; otherwise, as in any
development setup, it is created once in ``.frontmcp/remember-secret.json``
under the current directory (``remember-sync secret generate`` prints a fresh
one for ``REMEMBER_SECRET``).

It prints exactly::

    alice's theme (user scope): dark
    alice's draft (session scope, no session -> her stateless session): half a poem
    stored encrypted: True
    bob's theme: light (the default: bob cannot see alice's memory)
    update kept the brand: preference, ttl 3600 s
    alice's user keys: ['theme']
    global motd, visible to anyone: maintenance at noon
    anonymous session scope: refused with REMEMBER_IDENTITY_REQUIRED
"""

from __future__ import annotations

import json

from remember_sync import Identity, RememberIdentityError, RememberPlugin, identity


def main() -> None:
    # default_ttl: entries expire after an hour unless a ttl is given.
    with RememberPlugin.init(default_ttl=3600) as plugin:
        # A host (web framework, MCP server) binds the caller per request like this;
        # plugin.remember is then the accessor for whoever is bound.
        with identity(user_id="alice"):
            mem = plugin.remember
            mem.set("theme", "dark", scope="user", brand="preference")
            print("alice's theme (user scope):", mem.get("theme", scope="user"))
            mem.set("draft", "half a poem")  # scope="session" is the default
            print(
                "alice's draft (session scope, no session -> her stateless session):",
                mem.get("draft"),
            )

        # What the store holds is an AES-256-GCM envelope, not the value.
        raw = plugin.store.get("remember:v2:user:alice:theme")
        print("stored encrypted:", raw is not None and json.loads(raw)["alg"] == "A256GCM")

        # An accessor bound to an explicit identity: notebooks, cron jobs, tests.
        bob = plugin.accessor(Identity(user_id="bob"))
        theme = bob.get("theme", scope="user", default="light")
        print(f"bob's theme: {theme} (the default: bob cannot see alice's memory)")

        alice = plugin.accessor(Identity(user_id="alice"))
        alice.update("theme", "solarized", scope="user")  # keeps brand, created_at, deadline
        entry = alice.get_entry("theme", scope="user")
        assert entry is not None and entry.expires_at is not None
        ttl_s = round((entry.expires_at - entry.created_at) / 1000)
        print(f"update kept the brand: {entry.brand}, ttl {ttl_s} s")
        print("alice's user keys:", alice.list(scope="user"))

        bob.set("motd", "maintenance at noon", scope="global")
        print(
            "global motd, visible to anyone:",
            plugin.accessor(Identity()).get("motd", scope="global"),
        )

        try:
            plugin.accessor(Identity()).set("x", 1)  # no verified session, no user
        except RememberIdentityError as exc:
            print("anonymous session scope: refused with", exc.code)


if __name__ == "__main__":
    main()
