"""The operator functions behind ``remember-sync``, in process, with an injected clock.

The subprocess tests in ``test_cli.py`` pin what users see; these pin the
corners that need a controlled store or clock: a concurrent update during
``rotate``, deadlines passing between export and import, an unreadable
layout marker, the progress bar's drawing, and each principal's quota charges
through import and rotate on the memory stores (which no command reaches).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remember_sync import Identity, RememberPlugin, RememberQuotaError
from remember_sync._ops.context import SecretChoice, build_plugin, redact, secret_values
from remember_sync._ops.inspect import Check
from remember_sync._ops.rotate import rotate
from remember_sync._ops.transfer import export_entries, import_entries, parse_records
from remember_sync._ops.walk import classify
from remember_sync._progress import Progress
from remember_sync.cli import main
from remember_sync.errors import RememberConfigurationError, RememberInputError
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from tests.conftest import TEST_SECRET, FakeClock
from tests.test_import_quota import OTHER_SECRET, Seeded, usage
from tests.test_import_quota import _plugin as _quota_plugin

SECRET_A = "ops-secret-A-0123456789abcdef0123456789"
SECRET_B = "ops-secret-B-0123456789abcdef0123456789"
OK_SECRET = Check("secret", "ok", "test")


def _plugin(store: MemoryStore, clock: FakeClock, *secrets: str) -> RememberPlugin:
    return RememberPlugin.init(
        store=store, clock=clock, encryption={"secrets": list(secrets)}, skip_legacy_purge=True
    )


@pytest.fixture
def shared(clock: FakeClock) -> Iterator[MemoryStore]:
    store = MemoryStore(clock=clock)
    yield store
    store.close()


class _RacingStore(MemoryStore):
    """A memory store in which someone else writes a key just before our first CAS on it."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.before_cas: dict[str, object] = {}

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        hook = self.before_cas.pop(key, None)
        if callable(hook):
            hook()
        return super().compare_and_set(key, expected, value, ttl_ms=ttl_ms)


def test_rotate_never_loses_a_concurrent_update(clock: FakeClock) -> None:
    """An application write between rotate's read and its write wins; rotate re-reads."""
    store = _RacingStore(clock)
    old = _plugin(store, clock, SECRET_A)
    new = _plugin(store, clock, SECRET_B, SECRET_A)
    alice = Identity(user_id="alice")
    old.accessor(alice).set("theme", "dark", scope="user", ttl=60)
    old.accessor(alice).set("lang", "en", scope="user")
    store.before_cas["remember:v2:user:alice:theme"] = lambda: new.accessor(alice).update(
        "theme", "light", scope="user"
    )
    result = rotate(new._core)
    assert (result.examined, result.unreadable, result.contended) == (2, 0, 0)
    # "lang" was rotated; "theme" was already current after the concurrent update.
    assert (result.rotated, result.current) == (1, 1)
    only_b = _plugin(store, clock, SECRET_B)
    assert only_b.accessor(alice).get("theme", scope="user") == "light"
    assert only_b.accessor(alice).get("lang", scope="user") == "en"
    entry = only_b.accessor(alice).get_entry("theme", scope="user")
    assert entry is not None and entry.expires_at == clock.now + 60_000


def test_rotate_keeps_deadlines_and_skips_expired(shared: MemoryStore, clock: FakeClock) -> None:
    """The re-encrypted entry expires when the original would have; expired ones are skipped."""
    old = _plugin(shared, clock, SECRET_A)
    mem = old.accessor(Identity(session_id="s"))
    mem.set("short", 1, ttl=10)
    mem.set("long", 2, ttl=100)
    clock.advance(s=50)  # "short" is past its deadline (the memory store has dropped it)
    new = _plugin(shared, clock, SECRET_B, SECRET_A)
    result = rotate(new._core)
    assert result.rotated == 1
    clock.advance(s=49)
    assert _plugin(shared, clock, SECRET_B).accessor(Identity(session_id="s")).get("long") == 2
    clock.advance(s=1)
    assert _plugin(shared, clock, SECRET_B).accessor(Identity(session_id="s")).get("long") is None


def test_parse_records_names_the_bad_line() -> None:
    """A malformed record is refused with its line number before anything is written."""
    good = json.dumps({"scope": "global", "key": "k", "value": 1, "createdAt": 1, "updatedAt": 1})
    cases = {
        "{oops": "not JSON",
        "[1]": "not a JSON object",
        '{"x": 1}': "neither",
        '{"scope": "user", "key": "k", "value": 1, "createdAt": 1, "updatedAt": 1}': "'user'",
        '{"scope": "global", "key": "", "value": 1, "createdAt": 1, "updatedAt": 1}': "empty",
        '{"scope": "global", "key": "k", "value": 1}': "createdAt",
        '{"storageKey": "session:old:k", "stored": "x"}': "not a v2 or global",
    }
    for line, problem in cases.items():
        with pytest.raises(RememberInputError) as info:
            parse_records([good, "", line])
        assert info.value.message.startswith("line 3: ") and problem in info.value.message


def test_classify_tells_entries_from_legacy_marker_and_others() -> None:
    """Walks classify v2/global entries, 1.8.0 doubled keys, pre-v2 keys, the marker, the rest."""
    p = "remember:"
    assert classify(p, "remember:v2:user:alice:k")[0] == "entry"
    assert classify(p, "remember:global:k")[0] == "entry"
    assert classify(p, "remember:session:s:k")[0] == "legacy"
    assert classify(p, "remember:tool:t:s:k")[0] == "legacy"
    assert classify(p, "remember:__layout__")[0] == "marker"
    assert classify(p, "remember:remember:v2:user:alice:k")[0] == "doubled"  # 1.8.0 doubled
    assert classify(p, "remember:v2:user:%FF:k")[0] == "other"  # not UTF-8: not ours


def test_build_plugin_refuses_to_invent_a_secret() -> None:
    """No env secret and no file: a configuration error, and no file is created."""
    store = MemoryStore()
    with pytest.raises(RememberConfigurationError, match="no secret"):
        build_plugin(store, prefix="remember:", secrets=SecretChoice(), environ={})
    with pytest.raises(RememberConfigurationError, match="production"):
        build_plugin(
            store, prefix="remember:", secrets=SecretChoice(), environ={"NODE_ENV": "production"}
        )
    assert not (Path.cwd() / ".frontmcp").exists()


def test_build_plugin_reports_the_env_source_and_previous_secrets() -> None:
    """Secrets from the environment: first encrypts, previous ones decrypt, source is named."""
    opened = build_plugin(
        MemoryStore(),
        prefix="remember:",
        secrets=SecretChoice(),
        environ={"REMEMBER_SECRET": SECRET_B, "REMEMBER_PREVIOUS_SECRETS": f" {SECRET_A} ,"},
    )
    summary = opened.secret_summary()
    assert summary["source"] == "env:REMEMBER_SECRET" and summary["secrets"] == 2
    assert SECRET_A not in json.dumps(summary) and SECRET_B not in json.dumps(summary)


def test_redact_scrubs_every_known_secret() -> None:
    """Messages lose env secrets, previous secrets, the KV token and a URL password."""
    from remember_sync._config import StoreSettings

    env = {
        "REMEMBER_SECRET": "s3cret-one",
        "REMEMBER_PREVIOUS_SECRETS": "old-s3cret,older-s3cret",
        "KV_REST_API_TOKEN": "kv-t0ken",
    }
    known = secret_values(env, StoreSettings("redis", "redis://:url-pa55@h:1/0"))
    text = "s3cret-one old-s3cret older-s3cret kv-t0ken url-pa55 fine"
    assert redact(text, known) == "*** *** *** *** *** fine"


def test_progress_draws_only_on_a_tty() -> None:
    """The bar renders done/total and a rate on a terminal and writes nothing elsewhere."""
    ticks = iter([0, 2000, 2000, 4000, 4000])
    tty = _TTY()
    with Progress(100, "rotate", stream=tty, clock=lambda: next(ticks)) as bar:
        bar.advance(50)
    assert "\rrotate [############............] 50/100 keys  25 keys/s" in tty.getvalue()
    assert tty.getvalue().endswith("\n")
    quiet = io.StringIO()
    with Progress(100, "rotate", stream=quiet) as bar:
        bar.advance(100)
    assert quiet.getvalue() == ""


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_main_returns_exit_codes_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    """main() returns 0 / 2 instead of exiting, so scripts and tests can call it."""
    assert main(["secret", "generate"]) == 0
    assert len(capsys.readouterr().out.strip()) == 43
    assert main(["set", "k", "{bad", "--scope", "global"]) == 2
    assert "argument VALUE" in capsys.readouterr().err
    assert main([]) == 2

# -- import and rotate keep every principal's quota accounting (see test_import_quota) -----


@pytest.fixture(params=["memory", "bounded memory", "redis"])
def new_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """``new_store()``: an empty store of the parameter's kind (Redis: its own database)."""
    made: list[Store] = []

    def make() -> Store:
        if request.param == "memory":
            store: Store = MemoryStore(max_entries=None)
        elif request.param == "bounded memory":  # serve's: it evicts, by principal
            store = MemoryStore(max_entries=1000, max_bytes=10_000_000)
        else:
            url = request.getfixturevalue("redis_url").rsplit("/", 1)[0] + f"/{len(made) + 2}"
            store = RedisStore.from_url(url)
            store.client.flushdb()
        made.append(store)
        return store

    yield make
    for store in made:
        if isinstance(store, RedisStore):
            store.client.flushdb()
        store.close()


def _exported(plugin: RememberPlugin, decrypted: bool = False) -> list[str]:
    out = io.StringIO()
    assert export_entries(plugin._core, out, decrypted=decrypted).exported == 7
    return out.getvalue().splitlines()


@pytest.mark.parametrize("decrypted", [False, True])
def test_import_charges_each_entry_to_its_principal(
    new_store: Callable[[], Store], decrypted: bool
) -> None:
    """After export -> import each principal is charged as in the source (entries, bytes);
    the entry whose owner the file does not tell is written uncharged and named."""
    quota = {"entries": 10}
    source = _quota_plugin(new_store(), quota)
    seeded = Seeded(source)
    lines = _exported(source, decrypted)
    target = _quota_plugin(new_store(), quota)
    result = import_entries(target._core, parse_records(lines))
    assert (result.imported, result.over_quota, result.uncharged) == (7, 0, 1)
    [uncharged] = result.uncharged_keys
    assert "host-sess-9" in uncharged
    alice, anonymous = seeded.principals["alice"], seeded.principals["anonymous"]
    assert usage(target, alice)[0] == 3 and usage(target, anonymous)[0] == 2
    if not decrypted:  # the very envelopes: the very bytes
        assert usage(target, alice) == usage(source, alice)
        assert usage(target, anonymous) == usage(source, anonymous)
    assert usage(target, seeded.principals["bob"]) == (0, 0)
    # The quota holds from the imported state on: alice may add 7 more, not 8.
    mem = target.accessor(Identity(session_id=seeded.alice_session, user_id="alice"))
    for n in range(7):
        mem.set(f"more-{n}", n, scope="user")
    with pytest.raises(RememberQuotaError):
        mem.set("one-too-many", 0, scope="user")
    source.close()
    target.close()


def test_an_import_over_the_quota_writes_nothing_beyond_it_unless_told(
    new_store: Callable[[], Store],
) -> None:
    """Quota 2: alice's third entry is refused and named (nothing written for it); the other
    principals' entries are imported.  ``ignore_quota`` writes it and still charges it."""
    source = _quota_plugin(new_store(), {"entries": 10})
    seeded = Seeded(source)
    records = parse_records(_exported(source))
    target = _quota_plugin(new_store(), {"entries": 2})
    result = import_entries(target._core, records)
    assert (result.imported, result.over_quota) == (6, 1)
    [refused] = result.over_quota_keys
    assert refused.startswith("remember:")
    assert target.store.get(refused) is None
    assert usage(target, seeded.principals["alice"])[0] == 2
    assert usage(target, seeded.principals["anonymous"])[0] == 2
    again = import_entries(target._core, records, ignore_quota=True)
    assert (again.imported, again.existing, again.over_quota) == (1, 6, 0)
    assert target.store.get(refused) is not None
    assert usage(target, seeded.principals["alice"])[0] == 3  # charged past the quota
    source.close()
    target.close()


def test_a_record_naming_an_anonymous_user_is_imported_uncharged(
    new_store: Callable[[], Store],
) -> None:
    """A hand-made user-scope record of an ``anon:`` user (no write of the library makes one)
    is imported uncharged and named, never charged to a shared made-up principal."""
    target = _quota_plugin(new_store(), {"entries": 1})
    line = json.dumps({"scope": "user", "user": "anon:x", "key": "k", "value": 1,
                       "createdAt": 1, "updatedAt": 1})  # fmt: skip
    records = parse_records([line, line.replace('"k"', '"k2"')])
    result = import_entries(target._core, records)
    assert (result.imported, result.uncharged, result.over_quota) == (2, 2, 0)
    assert usage(target, "session\x00") == (0, 0)
    target.close()


def test_import_without_a_quota_charges_no_one(new_store: Callable[[], Store]) -> None:
    """No quota configured: the import writes as before and keeps no ledger."""
    source = _quota_plugin(new_store(), {"entries": 10})
    Seeded(source)
    target_store = new_store()
    target = _quota_plugin(target_store, None)
    result = import_entries(target._core, parse_records(_exported(source)))
    assert (result.imported, result.uncharged) == (7, 0)
    assert not [k for k in target_store.scan("remember:__quota__:*")]
    source.close()
    target.close()


def test_rotate_moves_the_accounting_of_every_principal_to_the_new_tags(
    new_store: Callable[[], Store],
) -> None:
    """rotate re-seals every entry in place and charges it under its principal's owner tag
    of the new secret: the entries and bytes charged to each principal are the same after
    it, as the rotated fleet computes them; the old secret's ledgers are gone.  A session
    whose user the store names nowhere else (bob's host session) stays where it was."""
    store = new_store()
    plugin = _quota_plugin(store, {"entries": 10})
    seeded = Seeded(plugin)
    before = {name: usage(plugin, p) for name, p in seeded.principals.items()}
    rotating = _quota_plugin(store, {"entries": 10}, OTHER_SECRET, TEST_SECRET)
    assert rotate(rotating._core).rotated == 7
    after = {name: usage(rotating, p) for name, p in seeded.principals.items()}
    assert after == {**before, "bob": (0, 0)}
    old = {name: usage(plugin, p) for name, p in seeded.principals.items()}
    assert old == {"alice": (0, 0), "anonymous": (0, 0), "bob": before["bob"]}
    rotating.close()
    plugin.close()
