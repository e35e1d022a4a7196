"""``RememberPlugin.init(**options)``: options to a store, a keyring, a purge and tools.

Every option is validated here, and a bad one raises
:class:`~remember_sync.errors.RememberConfigurationError` naming it.  There is
never a silent fallback to another store.  Environment variables are read
here (and by named store constructors), never deep inside a store.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Mapping
from typing import Any, Literal, NoReturn, cast

from . import _metrics, _options
from ._audit import AuditTrail, audit_settings
from ._clock import Clock, system_clock
from ._codec import EntryCodec
from ._config import (
    AUDIT_ENV,
    KEYSTORE_ENV,
    METRICS_ENV,
    env_flag,
    integrity_settings,
    scope_list,
    store_settings,
)
from ._core import DEFAULT_MAX_VALUE_BYTES, MAX_TTL_SECONDS, AccessorCore
from ._crypto import Keyring
from ._erasure import check_receipt, erase
from ._integrity import INTEGRITY_MODES, Verifier, in_process, witness_from
from ._keys import storage_namespace
from ._purge import DoubledPrefixCheck, IndexBackfill, KeyIdCheck, LegacyPurge, reindex_store
from ._quota import Owners, check_quota
from ._search import build_settings
from ._secrets import resolve_keyring
from ._shred import SubjectKeys, keystore_from
from .accessor import RememberAccessor, accessor_for
from .errors import RememberConfigurationError
from .stores.base import OwnedWrites, Store
from .stores.memory import MemoryStore
from .tools import MemoryTools
from .tools.results import tools_disabled_result
from .types import (
    BackgroundPurge,
    BackgroundReindex,
    ErasureReceipt,
    Identity,
    KeyCheck,
    MasterSecrets,
    ReindexCounts,
)

__all__ = ["STORE_TYPES", "RememberPlugin"]

log = logging.getLogger("remember_sync")

STORE_TYPES = ("memory", "redis", "redis-client", "vercel-kv", "global-store")

_ENCRYPTION_OPTIONS = _options.EncryptionOptions.__optional_keys__
_TOOLS_OPTIONS = _options.ToolsOptions.__optional_keys__
_REDIS_CONFIG = _options.RedisConfig.__optional_keys__
#: Redis config keys a ``url`` replaces (the URL says where and whether TLS).
_REDIS_URL_CLASH = frozenset({"host", "port", "ssl", "sentinels", "service_name"})


def _config_error(option: str, message: str) -> RememberConfigurationError:
    return RememberConfigurationError(f"RememberPlugin.init option {option!r}: {message}")


def _check_whole(value: object, option: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _config_error(option, f"must be an int >= {minimum}; got {value!r}")
    return value


def _check_bool(value: object, option: str) -> bool:
    if not isinstance(value, bool):
        raise _config_error(option, f"must be True or False; got {value!r}")
    return value


def _check_dict(value: object, option: str, allowed: frozenset[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _config_error(option, f"must be a dict; got {type(value).__name__}")
    unknown = set(value) - allowed
    if unknown:
        names = _options.unknown_names(unknown, allowed)
        raise _config_error(option, f"unknown key(s) {names}; allowed: {sorted(allowed)}")
    return dict(value)


@functools.cache
def _init_options() -> tuple[str, ...]:
    """The keyword options of :meth:`RememberPlugin.init`."""
    parameters = inspect.signature(RememberPlugin.init).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


class RememberPlugin:
    """Encrypted, scoped memory for one application.

    Build it with :meth:`init`.  ``plugin.remember`` is the accessor for the
    identity bound in the current context; :meth:`accessor` binds an explicit
    one.  Close it (or use it as a context manager) to release what it created.
    """

    def __init__(self) -> None:
        raise TypeError("build a RememberPlugin with RememberPlugin.init(...)")

    def _setup(
        self,
        *,
        core: AccessorCore,
        owns_store: bool,
        store_type: str,
        tools: Mapping[str, Any],
        purge_options: Mapping[str, Any],
    ) -> None:
        """Make this the plugin over *core* that :meth:`init` built; start its background work."""
        self._core = core
        self._owns_store = owns_store
        self.store_type = store_type
        self.tools_options: dict[str, Any] = dict(tools)
        self._tools: MemoryTools | None = None
        if tools.get("enabled"):
            scopes = tools["allowed_scopes"]
            self._tools = MemoryTools.__new__(MemoryTools)
            self._tools._setup(
                core, prefix=tools["prefix"], allowed_scopes=scopes, search=tools["search"]
            )
        self.purge_options: dict[str, Any] = dict(purge_options)
        self._closed = False
        self._purge: LegacyPurge | None = None
        self._key_check: KeyIdCheck | None = None
        self._backfill: IndexBackfill | None = None
        self._doubled_check: DoubledPrefixCheck | None = None
        self._start_purge()
        self._start_backfill()
        self._start_doubled_check()

    # -- construction -------------------------------------------------------------------

    @classmethod
    def init(  # noqa: PLR0913 - the configuration is keyword arguments (STYLE.md rule 15)
        cls,
        *,
        type: _options.StoreType | None = None,  # noqa: A002 - the reference's option name
        config: _options.RedisConfig | None = None,
        client: Any = None,
        url: str | None = None,
        token: str | None = None,
        store: Store | None = None,
        key_prefix: str = "remember:",
        default_ttl: int = 0,
        encryption: _options.EncryptionOptions | None = None,
        tools: _options.ToolsOptions | None = None,
        legacy_purge_delay_ms: int = 86_400_000,
        skip_legacy_purge: bool = False,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        on_decrypt_error: Literal["warn", "raise"] = "warn",
        read_doubled_prefix: bool = False,
        listing: Literal["index", "scan"] | None = None,
        background_reindex: bool = True,
        integrity: Literal["default", "verified"] | None = None,
        witness: object = None,
        search: _options.SearchOptions | None = None,
        metrics: bool | None = None,
        quota: _options.QuotaOptions | None = None,
        clock: Clock | None = None,
        environ: Mapping[str, str] | None = None,
        audit: bool | _options.AuditOptions | None = None,
        keystore: str | os.PathLike[str] | Store | None = None,
        **unknown: NoReturn,
    ) -> RememberPlugin:
        """Build a plugin from snake_case mirrors of the reference options.

        :param type: the store: ``"memory"`` (default), ``"redis"`` (with
            *config*), ``"redis-client"`` (with *client*), ``"vercel-kv"``
            (*url*/*token* or ``KV_REST_API_URL``/``KV_REST_API_TOKEN``) or
            ``"global-store"`` (the host's store).
        :param config: ``type="redis"``: a :class:`~remember_sync.RedisConfig`.
        :param client: ``type="redis-client"``: a :class:`redis.Redis` or
            :class:`redis.cluster.RedisCluster`, never closed by the plugin.
        :param url: ``type="vercel-kv"``: the REST endpoint (with *token*).
        :param token: ``type="vercel-kv"``: the REST token (with *url*).
        :param store: any :class:`~remember_sync.stores.base.Store` (instead of *type*).
        :param key_prefix: ``P``, prepended to every storage key.
        :param default_ttl: seconds for ``set`` without ``ttl`` (``0``: none).
        :param encryption: an :class:`~remember_sync.EncryptionOptions`.
        :param tools: a :class:`~remember_sync.ToolsOptions`.
        :param legacy_purge_delay_ms: how long the fleet keeps legacy keys (``docs/purge.rst``).
        :param skip_legacy_purge: never purge legacy keys.
        :param max_value_bytes: the largest serialised entry accepted.
        :param max_entries: the memory store's bound on entries.
        :param max_bytes: the memory store's bound on stored bytes.
        :param on_decrypt_error: ``"warn"`` (an unreadable entry reads as absent,
            logged and counted) or ``"raise"``.
        :param read_doubled_prefix: also read the keys 1.8.0's Redis and Vercel
            KV stores wrote (``P + P + ...``).
        :param listing: ``"index"`` or ``"scan"`` (see :attr:`listing`).
        :param background_reindex: bring older entries into the listing index
            in the background.
        :param integrity: ``"verified"``: every namespace keeps an authenticated
            manifest and reads refuse deletion, replay and index edits
            (``docs/verified.rst``); default ``REMEMBER_INTEGRITY`` or ``"default"``.
        :param witness: with ``integrity="verified"``, where the latest manifest
            counters are kept outside the store: a file path, a ``redis://`` URL,
            a dict with ``type`` (``"file"`` or ``"store"``), or an object with
            ``floor``, ``advance`` and ``close``; default ``REMEMBER_WITNESS``.
        :param search: a :class:`~remember_sync.SearchOptions`: how
            :meth:`RememberAccessor.search <remember_sync.RememberAccessor.search>`
            ranks by meaning (``docs/search.rst``).
        :param metrics: record OpenTelemetry metrics (the ``[metrics]`` extra;
            ``docs/limits-and-metrics.rst``); default ``REMEMBER_METRICS``.
        :param quota: a :class:`~remember_sync.QuotaOptions`: every principal's
            bound on entries and bytes across its namespaces (``docs/many-users.rst``).
        :param clock: epoch-millisecond clock (tests).
        :param environ: the environment to read (default :data:`os.environ`).
        :param audit: ``True`` or an :class:`~remember_sync.AuditOptions`: record
            every write in a tamper-evident trail (:attr:`audit`,
            ``docs/audit.rst``); default ``REMEMBER_AUDIT``, else off.
        :param keystore: where each person's data key is kept with
            ``encryption={"subject_keys": True}`` (crypto-shredding,
            ``docs/audit.rst``), apart from the data: a file path (SQLite, 0600), a
            ``redis://`` URL, or a second :class:`~remember_sync.stores.base.Store`;
            default ``REMEMBER_KEYSTORE``.  Giving one turns ``subject_keys`` on.

        Any other keyword, or a bad value, raises
        :class:`RememberConfigurationError` naming the option; ``mypy --strict``
        flags a misspelled keyword in the caller's code.
        """
        if unknown:
            raise RememberConfigurationError(
                "RememberPlugin.init got unknown option(s) "
                + _options.unknown_names(unknown, _init_options())
            )
        options: dict[str, Any] = {
            "config": config,
            "client": client,
            "url": url,
            "token": token,
            "key_prefix": key_prefix,
            "default_ttl": default_ttl,
            "encryption": encryption,
            "tools": tools,
            "legacy_purge_delay_ms": legacy_purge_delay_ms,
            "skip_legacy_purge": skip_legacy_purge,
            "max_value_bytes": max_value_bytes,
            "on_decrypt_error": on_decrypt_error,
            "read_doubled_prefix": read_doubled_prefix,
            "background_reindex": background_reindex,
            "search": search,
        }
        # Options whose absence means something of its own (None: not given).
        absent = {
            "type": type,
            "store": store,
            "max_entries": max_entries,
            "max_bytes": max_bytes,
            "listing": listing,
            "integrity": integrity,
            "witness": witness,
            "metrics": metrics,
            "quota": quota,
            "clock": clock,
            "environ": environ,
            "audit": audit,
            "keystore": keystore,
        }
        options.update((name, value) for name, value in absent.items() if value is not None)
        return cls._from_options(options)

    @classmethod
    def _from_options(cls, options: Mapping[str, Any]) -> RememberPlugin:
        """:meth:`init` after the keywords: every value checked, then everything built."""
        environ: Mapping[str, str] = options.get("environ") or os.environ
        store_type = options.get("type", "memory" if options.get("store") is None else "custom")
        if options.get("store") is not None:
            if "type" in options:
                raise _config_error("store", "give either 'store' or 'type', not both")
            if not isinstance(options["store"], Store):
                raise _config_error("store", "must implement the Store protocol")
        elif store_type not in STORE_TYPES:
            raise _config_error(
                "type", f"must be one of {', '.join(STORE_TYPES)}; got {store_type!r}"
            )

        prefix = options.get("key_prefix", "remember:")
        if not isinstance(prefix, str):
            raise _config_error("key_prefix", f"must be a str; got {type(prefix).__name__}")
        default_ttl = _check_whole(options.get("default_ttl", 0), "default_ttl", minimum=0)
        if default_ttl > MAX_TTL_SECONDS:
            raise _config_error("default_ttl", f"must be at most {MAX_TTL_SECONDS} (100 years)")
        max_value_bytes = _check_whole(
            options.get("max_value_bytes", DEFAULT_MAX_VALUE_BYTES), "max_value_bytes", minimum=1
        )
        on_decrypt_error = options.get("on_decrypt_error", "warn")
        if on_decrypt_error not in ("warn", "raise"):
            raise _config_error(
                "on_decrypt_error", f"must be 'warn' or 'raise'; got {on_decrypt_error!r}"
            )
        read_doubled = _check_bool(options.get("read_doubled_prefix", False), "read_doubled_prefix")
        delay = _check_whole(
            options.get("legacy_purge_delay_ms", 86_400_000), "legacy_purge_delay_ms", minimum=0
        )
        skip_purge = _check_bool(options.get("skip_legacy_purge", False), "skip_legacy_purge")
        clock = options.get("clock")
        if clock is not None and not callable(clock):
            raise _config_error("clock", "must be a callable returning epoch milliseconds")
        bounds: dict[str, int] = {}
        for bound in ("max_entries", "max_bytes"):
            value = options.get(bound)
            if value is not None:
                bounds[bound] = _check_whole(value, bound, minimum=1)
                if store_type != "memory":
                    raise _config_error(bound, "only applies to the memory store")

        encryption = _check_dict(options.get("encryption"), "encryption", _ENCRYPTION_OPTIONS)
        enabled = _check_bool(encryption.get("enabled", True), "encryption.enabled")
        compatible = _check_bool(
            encryption.get("frontmcp_compatible", False), "encryption.frontmcp_compatible"
        )
        accept_unbound = _check_bool(
            encryption.get("accept_unbound", True), "encryption.accept_unbound"
        )
        if compatible and not accept_unbound:
            raise _config_error(
                "encryption.accept_unbound",
                "cannot be False with frontmcp_compatible=True, which writes unbound envelopes",
            )
        require_secret = _check_bool(
            encryption.get("require_secret", False), "encryption.require_secret"
        )
        custom_key = encryption.get("custom_key")
        if custom_key is not None and (not isinstance(custom_key, str) or not custom_key):
            raise _config_error("encryption.custom_key", "must be a non-empty string")
        tools = cls._check_tools(_check_dict(options.get("tools"), "tools", _TOOLS_OPTIONS))
        keystore = _check_subject_keys(options, environ, encryption)
        # A 1.8.0 writer keeps no listing index: beside one, list by scanning.
        listing = options.get("listing", "scan" if compatible or read_doubled else "index")
        if listing not in ("index", "scan"):
            raise _config_error("listing", f"must be 'index' or 'scan'; got {listing!r}")
        backfill = _check_bool(options.get("background_reindex", True), "background_reindex")
        search = build_settings(options.get("search"))
        metrics = options.get("metrics")
        if metrics is None:
            metrics = env_flag(environ, METRICS_ENV)
        if _check_bool(metrics, "metrics") and not _metrics.start():
            raise _config_error(
                "metrics",
                "needs OpenTelemetry: pip install 'remember-sync[metrics]' (see "
                "docs/limits-and-metrics.rst)",
            )
        audit = audit_settings(options.get("audit", env_flag(environ, AUDIT_ENV)))
        quota = check_quota(options.get("quota"))

        store, owns = _build_store(store_type, options, environ, clock, prefix, bounds)
        try:
            keyring: Keyring | None = None
            if enabled:
                keyring = resolve_keyring(
                    secrets=encryption.get("secrets"),
                    custom_key=custom_key,
                    environ=environ,
                    secret_file=encryption.get("secret_file"),
                    require_secret=require_secret,
                )
            if keystore is not None and keyring is not None:
                keyring.subjects = SubjectKeys(
                    keyring, keystore_from(keystore, store, prefix, _witness_store),
                    clock or system_clock, owns=True,
                )
            codec = EntryCodec(
                keyring, prefix=prefix, bind_key=not compatible, accept_unbound=accept_unbound
            )
            verifier = _verifier(options, environ, store, codec, prefix, clock)
            if verifier is not None and quota is not None:
                # Verified writes commit through the manifest, which charges no owner.
                raise _config_error(
                    "quota", "is not enforced together with integrity='verified' yet"
                )
            core = AccessorCore(
                store,
                codec,
                prefix=prefix,
                default_ttl=default_ttl,
                clock=clock,
                max_value_bytes=max_value_bytes,
                on_decrypt_error=on_decrypt_error,
                read_doubled_prefix=read_doubled,
                listing=listing,
                verifier=verifier,
                search=search,
                # Quotas, and a bounded memory store's eviction by principal.
                charges=Owners(keyring, prefix, quota) if quota is not None or bounds else None,
            )
            if audit is not None:
                core.audit = AuditTrail.__new__(AuditTrail)
                core.audit._setup(store, keyring, prefix, core.clock, audit)
                core.audit.head_of = core.audit_head
                if verifier is not None and verifier.witness is not None:
                    core.audit._anchor_in(verifier.witness)
        except BaseException:
            if keyring is not None and isinstance(keyring.subjects, SubjectKeys):
                keyring.subjects.close()
            if owns:
                store.close()
            raise
        plugin = cls.__new__(cls)
        plugin._setup(
            core=core,
            owns_store=owns,
            store_type=store_type,
            tools=tools,
            purge_options={"delay_ms": delay, "skip": skip_purge, "reindex": backfill},
        )
        return plugin

    @staticmethod
    def _check_tools(tools: dict[str, Any]) -> dict[str, Any]:
        enabled = _check_bool(tools.get("enabled", False), "tools.enabled")
        prefix = tools.get("prefix", "")
        if not isinstance(prefix, str):
            raise _config_error("tools.prefix", "must be a str")
        allowed = tools.get("allowed_scopes")
        if allowed is None:
            allowed = ["session", "user", "tool"]
        if isinstance(allowed, str) or not isinstance(allowed, (list, tuple)):
            raise _config_error("tools.allowed_scopes", "must be a non-empty list of scopes")
        scopes = scope_list(allowed, "RememberPlugin.init option 'tools.allowed_scopes'")
        search = _check_bool(tools.get("search", True), "tools.search")
        return {"enabled": enabled, "prefix": prefix, "allowed_scopes": scopes, "search": search}

    def _operator_core(self) -> AccessorCore:
        """The core, for the package's operator commands (:mod:`remember_sync._ops`) only:
        they read and rewrite entries below the accessor (raw envelopes, every namespace)."""
        return self._core

    # -- the public surface -------------------------------------------------------------

    @property
    def remember(self) -> RememberAccessor:
        """The accessor for the identity bound in the current context (read per call)."""
        return accessor_for(self._core)

    def accessor(self, identity: Identity) -> RememberAccessor:
        """An accessor bound to an explicit identity (notebooks, cron jobs, tests)."""
        if not isinstance(identity, Identity):
            raise TypeError(f"identity must be an Identity; got {type(identity).__name__}")
        return accessor_for(self._core, identity)

    @property
    def store(self) -> Store:
        """The store this plugin writes to."""
        return self._core.store

    @property
    def tools(self) -> MemoryTools | None:
        """The memory tools (``None`` unless ``tools={"enabled": True}``): what an MCP host
        lists and dispatches beside its own tools (:meth:`MemoryTools.handles
        <remember_sync.tools.MemoryTools.handles>`, ``names``)."""
        return self._tools

    @property
    def key_prefix(self) -> str:
        """The prefix of every storage key this plugin writes (the ``prefix`` option)."""
        return self._core.prefix

    @property
    def max_value_bytes(self) -> int:
        """The largest serialised entry this plugin accepts (the ``max_value_bytes`` option)."""
        return self._core.max_value_bytes

    @property
    def listing(self) -> str:
        """How ``list``, ``entries`` and ``forget_many`` find keys: the listing mode in effect.

        ``"index"`` (the per-namespace listing index) or ``"scan"`` (a walk of the
        store): the ``listing`` option of :meth:`init`, or its default -- ``"scan"``
        with ``frontmcp_compatible`` or ``read_doubled_prefix`` (a 1.8.0 writer keeps
        no index) and on a store that keeps none.  In index mode, listing still scans
        until the fleet's one-time reindex has finished (``docs/redis.rst``).
        """
        return self._core.listing

    @property
    def keyring(self) -> MasterSecrets | None:
        """The master secrets: their ``source`` and public key ids (``kids``,
        ``primary_kid``); ``None`` with encryption disabled."""
        return self._core.codec.keyring

    def erase(self, *, user_id: str | int, dry_run: bool = False) -> ErasureReceipt:
        """Delete every entry of one person, in every scope; return a receipt.

        What goes: the user's namespace; every session recorded as theirs (their session
        and tool scope writes record the owner) unless someone else is recorded too;
        tool scope under those sessions; their ``stateless-user:`` session; the owner
        records -- in our key layout and, with ``read_doubled_prefix``, in 1.8.0's; the
        listing indexes of those namespaces and the entries' compare-and-set markers;
        with a ``quota``, the person's charges and usage ledger (their quota is whole
        again).  Entries there that the secrets cannot read are deleted too (they lie in
        the person's namespaces) and counted.  Nobody else's entry is deleted.  Sessions
        that hold entries but have no recorded owner cannot be attributed: they are left
        and counted (``docs/audit.rst`` says how to answer a deletion request).  With
        ``encryption={"subject_keys": True}`` the person's keys are destroyed in
        the keystore first (``keys_destroyed``), so copies of their entries taken
        before -- backups, replicas, exports -- can no longer be opened.

        :param user_id: the person (an ``int`` is its decimal string).
        :param dry_run: count only, delete nothing.
        :raises RememberInputError: an anonymous or empty *user_id*.
        :raises RememberStoreError: the store failed (the erasure may be partial:
            run it again).
        """
        core = self._core
        if not isinstance(dry_run, bool):
            raise TypeError(f"dry_run must be a bool; got {type(dry_run).__name__}")
        subjects = None if (keyring := self._core.codec.keyring) is None else keyring.subjects
        with core.audited("erase", None, None) as event:
            receipt = erase(
                core.owners,
                user_id,
                now=core.clock(),
                doubled=core.read_doubled_prefix,
                dry_run=dry_run,
                shred=_shredder(subjects),
                refund=None if (charges := core.charges) is None else functools.partial(
                    charges.erase, cast(OwnedWrites, core.store)
                ),
                ended=None if core.verifier is None else core.verifier.end,
            )
            event.outcome = "counted" if dry_run else "erased"
            event.count, event.ref = receipt.total, receipt.mac
        return receipt

    def quota_usage(
        self, *, user_id: str | int | None = None, session_id: str | None = None
    ) -> dict[str, int]:
        """What one principal holds against its quota: ``{"entries": N, "bytes": B}``.

        The principal is a signed-in *user_id* (every session of theirs), or, for
        an anonymous caller, its *session_id* -- the principal each write is
        charged to (``docs/many-users.rst``).  Entries past their deadline are not
        counted.  The keys are those of the ``quota`` option.

        :raises RememberConfigurationError: the plugin charges no writes (no ``quota``).
        :raises RememberInputError: neither or both of *user_id* and *session_id*, or
            an anonymous *user_id*.
        :raises RememberStoreError: the store failed.
        """
        charges = self._core.charges
        if charges is None:
            raise RememberConfigurationError("quota_usage needs a plugin built with quota=...")
        return charges.usage(cast(OwnedWrites, self._core.store), user_id, session_id)

    @property
    def audit(self) -> AuditTrail | None:
        """The audit trail (``audit=True``), or ``None`` when it is off.

        ``events(since=None, until=None, principal=None, key=None, scope=None,
        limit=None)``, ``verify()``, ``flush()``; see :class:`~remember_sync.AuditTrail`.
        """
        return self._core.audit

    def verify_receipt(self, receipt: ErasureReceipt) -> bool:
        """Whether *receipt* was issued under one of this plugin's secrets and is unchanged."""
        return check_receipt(self._core.codec, receipt)

    def stats(self) -> dict[str, int]:
        """Counters: ``unreadable`` entries seen, ``cas_retries``, ``key_derivations``."""
        return self._core.stats()

    def _start_purge(self) -> None:
        """Arm the legacy purge (SPEC section 7); implemented by :mod:`remember_sync._purge`.

        Only schedules a daemon timer: no store I/O happens on this thread.  The
        purge's first step also checks the secret against the key id the store
        records; with ``skip_legacy_purge`` a read-only one-shot check does that.
        """
        core, keyring = self._core, self._core.codec.keyring
        kids = keyring.kids if keyring is not None else None
        if self.purge_options.get("skip") or not core.prefix:
            if kids is not None and core.prefix:
                check = KeyIdCheck(core.store, core.prefix, kids, clock=core.clock)
                self._key_check = check.start()
            return
        delay = self.purge_options["delay_ms"]
        self._purge = LegacyPurge(
            core.store, core.prefix, delay_ms=delay, clock=core.clock, kids=kids,
            on_swept=self._record_purge,
        ).start()

    def _record_purge(self, result: Any) -> None:
        """The background purge's sweep, as one audit event (when the trail is on)."""
        audit = self._core.audit
        if audit is None:
            return
        try:
            audit.record("purge", None, None, outcome="purged", count=result.deleted)
        except Exception:  # noqa: BLE001 - the purge thread must not die of the trail
            log.warning("remember: the legacy purge could not be recorded", exc_info=True)

    @property
    def legacy_purge(self) -> BackgroundPurge | None:
        """The background legacy purge, or ``None`` (``skip_legacy_purge=True``, empty prefix).

        Its ``state`` (``pending``, ``armed``, ``swept``, ``stood-down``,
        ``duplicate``, ``stopped``), ``wait(timeout)``, ``last_result``, ``marker``,
        ``due_at_ms``, ``next_wake_ms`` and ``key_status`` are described in
        ``docs/purge.rst`` ("Watching it from the application"); the rest is internal.
        """
        return self._purge

    @property
    def key_id_check(self) -> KeyCheck | None:
        """The read-only, one-shot key id check a plugin runs when its purge does not, or ``None``.

        ``wait(timeout)`` and ``status`` (``matches``, ``recorded``); see
        ``docs/purge.rst`` ("Watching it from the application").
        """
        if self._key_check is not None:
            return self._key_check
        return None if self._purge is None else self._purge.key_check

    @property
    def index_backfill(self) -> BackgroundReindex | None:
        """The fleet's one-time background reindex, or ``None``.

        ``None`` when listing scans or the index was complete at once (memory).
        """
        return self._backfill

    def reindex(self) -> ReindexCounts:
        """Rebuild and prune the listing index of every namespace under :attr:`key_prefix`.

        One walk of the store (keys only: no value is read or decrypted) puts every
        entry into its namespace's index, records that the fleet is indexed, then
        runs the prune pass: index members whose entry is gone are dropped and each
        index's expiry is set from its live entries.  Every store that keeps an
        index -- memory, Redis (standalone, Sentinel, Cluster), Vercel KV; what
        ``remember-sync reindex`` does, for a deployment that runs no background
        pass (``background_reindex=False``) or reaches its store only through a
        ``client=``.  Idempotent and safe beside running writers; it runs on the
        calling thread (``docs/redis.rst``, "Reindex and prune").

        :returns: what it did: ``keys``, ``entries``, ``indexed``, ``pruned``, ``seconds``.
        :raises RememberConfigurationError: the store keeps no listing index.
        :raises RememberStoreError: the store failed (the pass is not recorded).
        """
        core = self._core
        result = reindex_store(core.store, core.prefix, clock=core.clock)
        if core.listing == "index":
            core.index_ready = True
        return result

    def _start_backfill(self) -> None:
        """In index mode, bring the fleet's older entries into the index once, in the background.

        Implemented by :class:`remember_sync._purge.IndexBackfill`; only starts a
        daemon thread (no store I/O on this thread).
        """
        core = self._core
        if core.listing != "index" or core.index_ready:
            return
        if not self.purge_options.get("reindex", True):
            return
        def done() -> None:
            core.index_ready = True

        self._backfill = IndexBackfill(core.store, core.prefix, clock=core.clock, on_done=done)
        self._backfill.start()

    def _start_doubled_check(self) -> None:
        """Warn once, in the background, about 1.8.0 doubled-prefix keys this plugin skips.

        Implemented by :class:`remember_sync._purge.DoubledPrefixCheck`; not on the
        in-process memory store, which never holds another process's data.
        """
        core = self._core
        if core.read_doubled_prefix or not core.prefix or isinstance(core.store, MemoryStore):
            return
        self._doubled_check = DoubledPrefixCheck(core.store, core.prefix).start()

    def close(self) -> None:
        """Stop background work and close the store if this plugin created it."""
        if self._closed:
            return
        self._closed = True
        if self._doubled_check is not None:
            self._doubled_check.stop()
        if self._backfill is not None:
            self._backfill.stop()
        if self._purge is not None:
            self._purge.stop()
        if self._key_check is not None:
            self._key_check.stop()
        if self._core.audit is not None:  # before the witness its head is anchored in
            try:
                self._core.audit.close()
            except Exception:  # noqa: BLE001 - logged; closing the store must still happen
                log.warning("remember: the audit trail's last events could not be written",
                            exc_info=True)
        if self._core.verifier is not None:
            self._core.verifier.close()
        self._core.search_cache.clear()
        subjects = None if (keyring := self._core.codec.keyring) is None else keyring.subjects
        if isinstance(subjects, SubjectKeys):
            subjects.close()
        if self._owns_store:
            self._core.store.close()

    def __enter__(self) -> RememberPlugin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The MCP definitions of the memory tools (SPEC sections 8.1 and 11).

        ``<prefix>remember_this``, ``<prefix>recall``, ``<prefix>forget``,
        ``<prefix>list_memories`` and (unless ``tools={"search": False}``)
        ``<prefix>search_memories``; an empty list unless ``tools.enabled``.
        """
        return [] if self._tools is None else self._tools.definitions()

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        identity: Identity | None = None,
    ) -> dict[str, Any]:
        """Run memory tool *name*; return an MCP ``CallToolResult``-shaped dict.

        Never raises: bad arguments, a scope outside ``allowed_scopes``, a
        missing identity or a store failure come back as a tool error
        (``isError: true``) with a ``code`` and a message.

        :param identity: the caller (default: the identity bound in this
            context); ``tool`` scope is keyed by *name*, the tool running.
        """
        if self._tools is None:
            return tools_disabled_result(name)
        return self._tools.call(name, arguments, identity)

    def __repr__(self) -> str:
        source = self.keyring.source if self.keyring is not None else "disabled"
        return (
            f"RememberPlugin(store={self.store_type!r}, key_prefix={self.key_prefix!r}, "
            f"encryption={source!r})"
        )


def _build_store(
    store_type: str,
    options: Mapping[str, Any],
    environ: Mapping[str, str],
    clock: Clock | None,
    prefix: str,
    bounds: Mapping[str, int],
) -> tuple[Store, bool]:
    """The store for *store_type* and whether the plugin owns (must close) it.

    *bounds* holds the memory store's ``max_entries``/``max_bytes``; its fair
    eviction groups keys by scope and identity (:func:`storage_namespace`).
    """
    given = options.get("store")
    if given is not None:
        return given, False
    if store_type == "memory":
        store = MemoryStore(
            max_entries=bounds.get("max_entries"),
            max_bytes=bounds.get("max_bytes"),
            namespace_of=functools.partial(storage_namespace, prefix),
            clock=clock,
        )
        return store, True
    if store_type == "redis":
        config = options.get("config")
        if config is None:
            raise _config_error("config", "type='redis' needs config={'host': ..., 'port': ...}")
        return _redis_store(_check_dict(config, "config", _REDIS_CONFIG), None), True
    if store_type == "redis-client":
        client = options.get("client")
        if client is None:
            raise _config_error("client", "type='redis-client' needs client=<redis.Redis>")
        return _redis_store({}, client), False
    if (options.get("url") is None) != (options.get("token") is None):
        raise _config_error("url", "give both url and token for vercel-kv, or neither")
    if store_type == "vercel-kv":
        return _vercel_store(options.get("url"), options.get("token"), environ), True
    return _global_store(options, environ), True


def _verifier(
    options: Mapping[str, Any],
    environ: Mapping[str, str],
    store: Store,
    codec: EntryCodec,
    prefix: str,
    clock: Clock | None,
) -> Verifier | None:
    """Verified mode's reads and writes when ``integrity="verified"`` (or ``REMEMBER_INTEGRITY``).

    ``None`` in the default mode, and on the memory store, which nothing
    outside the process can edit (verified mode is accepted there and costs nothing).
    """
    env_mode, env_witness = integrity_settings(environ)
    mode = options.get("integrity", env_mode or "default")
    if mode not in INTEGRITY_MODES:
        raise _config_error("integrity", f"must be 'default' or 'verified'; got {mode!r}")
    spec = options.get("witness", env_witness)
    if mode == "default":
        if spec is not None:
            raise _config_error("witness", "only applies with integrity='verified'")
        return None
    if options.get("read_doubled_prefix"):
        raise _config_error(
            "integrity", "'verified' cannot read 1.8.0's doubled-prefix keys, which no "
            "manifest lists: move them first (remember-sync rotate --read-doubled-prefix)"
        )
    if in_process(store):
        return None
    witness = witness_from(spec, _witness_store)
    try:
        return Verifier(
            store, codec, prefix=prefix, clock=clock or system_clock, witness=witness,
            owns_witness=witness is not spec,  # an object the caller passed is theirs
        )
    except BaseException:
        if witness is not None and witness is not spec:
            witness.close()
        raise


def _check_subject_keys(
    options: Mapping[str, Any], environ: Mapping[str, str], encryption: Mapping[str, Any]
) -> object:
    """The ``keystore`` to build when subject keys are on (``None``: off), every
    combination checked first (``docs/audit.rst``)."""
    keystore = options.get("keystore", environ.get(KEYSTORE_ENV) or None)
    subject_keys = _check_bool(
        encryption.get("subject_keys", keystore is not None), "encryption.subject_keys"
    )
    if not subject_keys:
        if keystore is not None:
            raise _config_error("keystore", "only applies with encryption.subject_keys")
        return None
    if keystore is None:
        raise _config_error(
            "keystore", f"is required with encryption.subject_keys (or set {KEYSTORE_ENV}): "
            "a file path, a redis:// URL or a second store, apart from the data"
        )
    if encryption.get("enabled", True) is False:
        raise _config_error("encryption.subject_keys", "needs encryption enabled")
    if encryption.get("frontmcp_compatible"):
        raise _config_error(
            "encryption.subject_keys",
            "cannot be used with frontmcp_compatible (1.8.0's envelope names no subject key)",
        )
    if options.get("read_doubled_prefix"):
        raise _config_error(
            "encryption.subject_keys", "cannot be used with read_doubled_prefix (1.8.0's "
            "entries are sealed by the master secret alone): run rotate first"
        )
    return keystore


def _shredder(subjects: object) -> Any:
    """``erase``'s *shred*: destroys the person's keys (``None`` without subject keys)."""
    if not isinstance(subjects, SubjectKeys):
        return None
    return lambda user, now, dry_run: subjects.destroy(user, now=now, dry_run=dry_run)


def _witness_store(url: str) -> Store:
    """The second store a Redis ``witness=`` URL names."""
    return _redis_store({"url": url}, None)


def _global_store(options: Mapping[str, Any], environ: Mapping[str, str]) -> Store:
    """The host's store: the explicit ``config={"url": ...}`` or ``url``/``token`` an
    integration passes from its app's configuration, else the environment (``_config``)."""
    config = _check_dict(options.get("config"), "config", _REDIS_CONFIG)
    if config:
        return _redis_store(config, None)
    if options.get("url") is not None:
        return _vercel_store(options["url"], options["token"], environ)
    found = store_settings(environ)
    if found.kind == "redis":
        return _redis_store({"url": found.redis_url}, None)
    if found.kind == "vercel-kv":
        return _vercel_store(None, None, environ)
    raise RememberConfigurationError(
        "type='global-store' found no store: configure the Flask/Django integration "
        "(REMEMBER_REDIS_URL / settings.REMEMBER), or set REMEMBER_REDIS_URL or REDIS_URL, "
        "or set both KV_REST_API_URL and KV_REST_API_TOKEN (see docs/configuration.rst)",
        code="GLOBAL_CONFIG_NOT_FOUND",
    )


def _redis_store(config: Mapping[str, Any], client: Any) -> Store:
    """A RedisStore from a ``config`` dict (``url``, host/port or sentinels, ...) or a client.

    The store checks every value (redis-py's option names, passed through);
    its :class:`RedisOptionError` is re-raised naming ``config.<key>``.
    """
    from .stores.redis import RedisOptionError, RedisStore  # noqa: PLC0415 - Redis types only

    if client is not None:
        return RedisStore(client=client)
    options = dict(config)
    try:
        if "url" not in options:
            return RedisStore(**options)
        url = options.pop("url")
        if not isinstance(url, str):
            raise _config_error("config.url", f"must be a Redis URL; got {type(url).__name__}")
        clash = sorted(_REDIS_URL_CLASH & set(options))
        if clash:
            raise _config_error(
                "config.url", f"give either url or {', '.join(clash)}; put them in the URL"
            )
        # username/password/db given beside a URL are defaults; the URL's own win.
        return RedisStore.from_url(url, **options)
    except RedisOptionError as exc:
        raise _config_error(f"config.{exc.option}", exc.detail) from None
    except TypeError as exc:  # a key RedisStore does not take (cannot happen: checked above)
        raise _config_error("config", str(exc)) from None


def _vercel_store(url: str | None, token: str | None, environ: Mapping[str, str]) -> Store:
    """A VercelKVStore from url/token, falling back to KV_REST_API_URL / KV_REST_API_TOKEN."""
    from .stores.vercel_kv import VercelKVStore  # noqa: PLC0415 - only users of KV pay for it

    return VercelKVStore(url, token, environ=environ)
