"""remember_sync under agmi (``agent-memory-integrity``): our :class:`MemoryAdapter`.

The attacker holds the backing database (the Redis server, the Cluster, the
database behind Vercel KV) through plain redis-py -- not the process, not the
secret, not the witness file.  Records are the entries of one user
namespace, ``m0``, ``m1``, ... in order; a record's fields are its owner and
its stored string exactly as the database holds it.

``verify()`` is the model's view through the MCP tools: ``list_memories``,
then ``recall`` of every key it listed and of every key the database holds
in the namespace (an agent asks for keys it has heard of, listed or not).
Any tool error is the tool noticing; the detection point is the read path.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agmi.adapters.base import MemoryAdapter, Record

from remember_sync import RememberPlugin, identity
from remember_sync._integrity import FileWitness
from remember_sync._ops.verify import verify_store
from tests.integrity_raw import RawStore

OWNER, OTHER = "agmi-a", "agmi-b"
_HEAD = "remember:v2:user:"


class RememberSyncAdapter(MemoryAdapter):
    """One store kind in one integrity mode.

    :param kind: the store's name in the scorecard.
    :param raw: the attacker's redis-py client on the backing database.
    :param make_plugin: builds a plugin over the store from extra ``init`` options
        (called again by :meth:`reload`, as a restarted process would).
    :param verified: ``integrity="verified"`` with a witness file outside the store.
    :param fill: entries beside agmi's records in the same namespace (``fill-<i>``),
        written in default mode and then recorded in the manifest by one
        ``verify --repair`` walk (as moving a store into verified mode does).
    """

    supports_replay = True
    supports_metadata = True
    supports_snapshot = True
    detection_point = "read"

    def __init__(
        self,
        kind: str,
        raw: RawStore,
        make_plugin: Callable[..., RememberPlugin],
        *,
        verified: bool,
        fill: int = 0,
    ) -> None:
        self.name = f"remember-sync {'verified' if verified else 'default'} ({kind})"
        self.raw = raw
        self._make = make_plugin
        self.verified = verified
        self.fill = fill
        self._filled: dict[str, tuple[bytes, int]] | None = None
        self._dir: str | None = None
        self.plugin: RememberPlugin | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def _open(self) -> None:
        options: dict[str, Any] = {"tools": {"enabled": True, "allowed_scopes": ["user"]}}
        if self.verified:
            assert self._dir is not None
            options.update(integrity="verified", witness=str(Path(self._dir) / "witness.db"))
        self.plugin = self._make(**options)

    def setup(self) -> None:
        self.raw.delete(*self.raw.keys("remember:*"))
        self._dir = tempfile.mkdtemp(prefix="agmi-witness-")
        if self.fill:
            self._fill()
        self._open()

    def _fill(self) -> None:
        """:attr:`fill` entries in the owner's namespace, under a manifest when verified
        (made once, then put back from the attacker's copy for each of agmi's runs)."""
        assert self._dir is not None
        if self._filled is not None:
            self.raw.restore(self._filled, "remember:*")
            return
        filler = self._make()
        with identity(user_id=OWNER):
            for i in range(self.fill):
                filler.remember.set(f"fill-{i}", {"n": i, "text": "x" * 100}, scope="user")
        if self.verified:
            witness = FileWitness(str(Path(self._dir) / "witness.db"))
            try:
                core = filler._core
                verify_store(core.store, "remember:", core.codec, clock=core.clock,
                             witness=witness, repair=True)
            finally:
                witness.close()
        filler.close()
        self._filled = self.raw.snapshot("remember:*")

    def teardown(self) -> None:
        if self.plugin is not None:
            self.plugin.close()
            self.plugin = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def reload(self) -> None:
        assert self.plugin is not None
        self.plugin.close()
        self._open()

    def _seed(self, owner: str, marker: str, n: int, start: int = 0) -> None:
        assert self.plugin is not None
        with identity(user_id=owner):
            for i in range(start, start + n):
                self.plugin.remember.set(
                    f"m{i}", f"{marker}{i}", scope="user", metadata={"source": "user", "ts": i}
                )

    def seed(self, n: int) -> None:
        self._seed(OWNER, "agmi-seed-", n)

    def seed_other(self, n: int) -> None:
        self._seed(OTHER, "agmi-other-", n)

    def append_genuine(self) -> None:
        self._seed(OWNER, "agmi-late-", 1, start=len(self.read_all_raw()))

    # -- the raw database --------------------------------------------------------------------

    def _records(self, owner: str) -> list[Record]:
        head = f"{_HEAD}{owner}:m"
        out = []
        for key in self.raw.keys(f"{head}*"):
            value = self.raw.get(key)
            if value is not None and key[len(head) :].isdigit():
                out.append(Record(seq=int(key[len(head) :]), fields={"owner": owner,
                                                                     "value": value}))
        return sorted(out, key=lambda r: r.seq)

    def read_all_raw(self) -> list[Record]:
        return self._records(OWNER)

    def read_other_raw(self) -> list[Record]:
        return self._records(OTHER)

    def write_raw(self, record: Record) -> None:
        self.raw.set(f"{_HEAD}{OWNER}:m{record.seq}", record.fields["value"])

    def delete_raw(self, seq: int) -> None:
        self.raw.delete(f"{_HEAD}{OWNER}:m{seq}")

    def replay_onto(self, victim_seq: int, donor: Record) -> None:
        self.raw.set(f"{_HEAD}{OWNER}:m{victim_seq}", donor.fields["value"])

    def snapshot_store(self) -> object:
        return self.raw.snapshot("remember:*")

    def restore_store(self, token: object) -> None:
        self.raw.restore(token, "remember:*")  # type: ignore[arg-type]

    # -- content and metadata ------------------------------------------------------------------

    @staticmethod
    def _envelope(record: Record) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(record.fields["value"])
        return parsed

    def identity_of(self, record: Record) -> str:
        return f"{record.fields['owner']}:{record.seq}"

    def payload_of(self, record: Record) -> str:
        # The ciphertext: what the record says (the envelope's header is its metadata).
        return str(self._envelope(record)["data"])

    def owner_of(self, record: Record) -> str | None:
        return str(record.fields["owner"])

    def mutate_payload(self, record: Record) -> Record:
        # Flip one base64url character of the ciphertext: still an envelope, other content.
        envelope = self._envelope(record)
        data = envelope["data"]
        envelope["data"] = ("B" if data[0] == "A" else "A") + data[1:]
        record.fields["value"] = json.dumps(envelope, separators=(",", ":"))
        return record

    def forge_record(self, template: Record) -> Record:
        forged = Record(seq=template.seq + 1, fields=dict(template.fields))
        return self.mutate_payload(forged)

    def read_meta(self, seq: int) -> dict[str, Any]:
        value = self.raw.get(f"{_HEAD}{OWNER}:m{seq}")
        envelope = json.loads(value or "{}")
        return {k: v for k, v in envelope.items() if k not in ("iv", "tag", "data")}

    def write_meta(self, seq: int, meta: dict[str, Any]) -> None:
        key = f"{_HEAD}{OWNER}:m{seq}"
        envelope = json.loads(self.raw.get(key) or "{}")
        body = {k: envelope[k] for k in ("iv", "tag", "data")}
        self.raw.set(key, json.dumps({**meta, **body}, separators=(",", ":")))

    # -- the tool's own answer -----------------------------------------------------------------

    def verify(self) -> bool:
        self.verify_detail = None
        assert self.plugin is not None
        plugin = self.plugin
        with identity(user_id=OWNER):
            listed = plugin.call_tool("list_memories", {"scope": "user", "limit": 100})
            if listed["isError"]:
                self.verify_detail = listed["content"][0]["text"]
                return False
            keys = set(listed["structuredContent"]["keys"])
            keys |= {f"m{r.seq}" for r in self.read_all_raw()}
            for key in sorted(keys):
                result = plugin.call_tool("recall", {"key": key, "scope": "user"})
                if result["isError"]:
                    self.verify_detail = result["content"][0]["text"]
                    return False
        return True
