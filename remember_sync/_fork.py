"""Fresh locks in a forked child (a leaf module: imports nothing from the package).

``os.fork`` copies only the calling thread.  A lock another thread of the parent
held at that moment stays held for ever in the child, so the child hangs on its
first use (gunicorn ``--preload``, ``multiprocessing`` fork).  Objects and modules
that own locks register a hook here; one ``os.register_at_fork`` handler runs
every hook in the child, in registration order, and the hook replaces its locks
and restores whatever the lock guarded to a consistent state.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from types import MethodType

log = logging.getLogger("remember_sync")

_hooks: dict[int, Callable[[], Callable[[], None] | None]] = {}
_tokens = itertools.count()


def after_fork_in_child(hook: Callable[[], None]) -> None:
    """Run *hook* in every forked child of this process.

    A bound method is held weakly: registering it does not keep its object alive,
    and the hook is dropped when the object is collected.  A plain function (a
    module's hook) is held for good.
    """
    token = next(_tokens)
    if isinstance(hook, MethodType):
        ref: Callable[[], Callable[[], None] | None] = weakref.WeakMethod(
            hook, lambda _ref: _hooks.pop(token, None)
        )
    else:

        def ref() -> Callable[[], None]:
            return hook

    _hooks[token] = ref


class ForkSafeLock:
    """A module's lock that every forked child gets free, for a guard of one assignment.

    Whatever it guards must be whole or absent at any moment (assigned only once
    built), so the child needs only a new lock, not a repair.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        after_fork_in_child(self._renew)

    def _renew(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def _run_in_child() -> None:
    while True:
        try:
            refs = list(_hooks.values())
            break
        except RuntimeError:  # a weak hook was dropped by the collector meanwhile
            continue
    for ref in refs:
        hook = ref()
        if hook is None:
            continue
        try:
            hook()
        except Exception:  # noqa: BLE001 - one failing hook must not skip the others
            log.debug("remember: a fork hook failed in the child", exc_info=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_in_child)
