"""Random operations under a quota (a Hypothesis state machine), on every store: after each
step every acknowledged value reads back, and the principal's quota count is exactly the
entries it holds (bytes: exactly their stored size)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from remember_sync import Identity, RememberPlugin, RememberQuotaError

QUOTA = 6
TOOL = "remember_this"
KEYS = st.sampled_from(["a", "b", "tmp:1", "tmp:2", "tmp:3"])
SCOPES = st.sampled_from(["user", "session", "tool"])
VALUES = st.integers(min_value=-1000, max_value=1000)
#: Examples per store: the network stores cost more per step.
EXAMPLES = {"memory": 30, "redis": 25, "redis_cluster": 8, "vercel_kv": 8}


class QuotaMachine(RuleBasedStateMachine):
    """One fresh principal per example, on a plugin shared by the examples."""

    plugin: RememberPlugin

    def __init__(self) -> None:
        super().__init__()
        self.user = f"user-{uuid.uuid4().hex[:10]}"
        self.ident = Identity(session_id=f"s-{uuid.uuid4().hex[:10]}", user_id=self.user)
        self.model: dict[tuple[str, str], int] = {}

    def accessor(self, scope: str) -> Any:
        ident = self.ident.with_tool(TOOL) if scope == "tool" else self.ident
        return self.plugin.accessor(ident)

    def charged(self, scope: str, key: str, write: Any) -> tuple[bool, Any]:
        """Run *write*: (whether it was acknowledged, what it returned).  A quota refusal is
        allowed only for a new entry while the principal holds its quota."""
        try:
            return True, write()
        except RememberQuotaError:
            assert (scope, key) not in self.model and len(self.model) == QUOTA
            return False, None

    def tool(self, name: str, args: dict[str, Any]) -> Any:
        result = self.plugin.call_tool(name, args, identity=self.ident)
        text = json.loads(result["content"][0]["text"]) if not result["isError"] else None
        if result["isError"]:
            assert "REMEMBER_QUOTA_EXCEEDED" in result["content"][0]["text"], result
            assert (args["scope"], args["key"]) not in self.model
            assert len(self.model) == QUOTA
        return text

    @rule(key=KEYS, scope=SCOPES, value=VALUES)
    def set(self, key: str, scope: str, value: int) -> None:
        accessor = self.accessor(scope)
        done, _ = self.charged(scope, key, lambda: accessor.set(key, value, scope=scope))
        if done:
            self.model[(scope, key)] = value

    @rule(key=KEYS, scope=SCOPES, value=VALUES)
    def update(self, key: str, scope: str, value: int) -> None:
        written = self.accessor(scope).update(key, value, scope=scope)
        assert written == ((scope, key) in self.model)
        if written:
            self.model[(scope, key)] = value

    @rule(key=KEYS, scope=SCOPES, by=VALUES)
    def increment(self, key: str, scope: str, by: int) -> None:
        write = lambda: self.accessor(scope).increment(key, by, scope=scope)  # noqa: E731
        done, got = self.charged(scope, key, write)
        if done:
            assert got == self.model.get((scope, key), 0) + by
            self.model[(scope, key)] = got

    @rule(key=KEYS, scope=SCOPES)
    def modify(self, key: str, scope: str) -> None:
        accessor = self.accessor(scope)
        done, got = self.charged(
            scope, key, lambda: accessor.modify(key, lambda v: v * 2 + 1, scope=scope, default=0)
        )
        if done:
            assert got == self.model.get((scope, key), 0) * 2 + 1
            self.model[(scope, key)] = got

    @rule(key=KEYS, scope=SCOPES)
    def forget(self, key: str, scope: str) -> None:
        assert self.accessor(scope).forget(key, scope=scope) == ((scope, key) in self.model)
        self.model.pop((scope, key), None)

    @rule(scope=SCOPES)
    def forget_many(self, scope: str) -> None:
        doomed = [k for k in self.model if k[0] == scope and k[1].startswith("tmp:")]
        assert self.accessor(scope).forget_many(scope=scope, pattern="tmp:*") == len(doomed)
        for k in doomed:
            del self.model[k]

    @rule(key=KEYS, scope=SCOPES, value=VALUES)
    def tool_remember(self, key: str, scope: str, value: int) -> None:
        if self.tool("remember_this", {"key": key, "value": value, "scope": scope}) is not None:
            self.model[(scope, key)] = value

    @rule(key=KEYS, scope=st.sampled_from(["user", "session"]))
    def tool_forget(self, key: str, scope: str) -> None:
        done = self.tool("forget", {"key": key, "scope": scope})
        assert done["existed"] == ((scope, key) in self.model)
        self.model.pop((scope, key), None)

    @invariant()
    def values_read_back(self) -> None:
        for (scope, key), value in self.model.items():
            assert self.accessor(scope).get(key, scope=scope) == value, (scope, key)

    @invariant()
    def count_is_exact(self) -> None:
        # A forget through the tools leaves a tombstone counted until it expires (1 ms).
        deadline = time.monotonic() + 2.0
        while (usage := self.plugin.quota_usage(user_id=self.user))["entries"] != len(self.model):
            assert time.monotonic() < deadline, (usage, self.model)
            time.sleep(0.002)
        assert usage["bytes"] == self.held_bytes()

    def held_bytes(self) -> int:
        total = 0
        for scope, key in self.model:
            # The storage key (SPEC section 3): P + "v2:" + scope + ":" + namespace + ":" + key.
            space = {"user": self.user, "session": self.ident.session_id,
                     "tool": f"{TOOL}:{self.ident.session_id}"}[scope]  # fmt: skip
            head = f"{self.plugin.key_prefix}v2:{scope}:{space}:"
            raw = self.plugin.store.get(head + key)
            assert raw is not None
            total += len((head + key).encode()) + len(raw.encode())
        return total


@pytest.mark.parametrize("quota", [{"entries": QUOTA}, {"entries": QUOTA, "bytes": 10**7}])
def test_random_operations_keep_values_and_counts(
    make_plugin: Any, store_kind: str, quota: dict[str, int]
) -> None:
    """Random set/update/increment/modify/forget/forget_many/tool writes under a quota."""
    QuotaMachine.plugin = make_plugin(quota=quota, tools={"enabled": True})
    run_state_machine_as_test(
        QuotaMachine,
        settings=settings(
            max_examples=EXAMPLES[store_kind], stateful_step_count=20, deadline=None,
            suppress_health_check=list(HealthCheck), database=None,
        ),
    )  # fmt: skip
