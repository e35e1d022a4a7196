"""Private means private: no public name takes or returns a private type.

The public surface is what ``remember_sync`` re-exports and what the documented
public subpackages export (``docs/api.rst``).  A type is public when one of those
exports it; a class defined in a private module (``remember_sync._x``) that none
exports is private, and appearing in a public signature or property would make it
part of the API by the back door.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

PUBLIC_MODULES = (
    "remember_sync",
    "remember_sync.errors",
    "remember_sync.types",
    "remember_sync.identity",
    "remember_sync.accessor",
    "remember_sync.plugin",
    "remember_sync.stores",
    "remember_sync.tools",
    "remember_sync.mcp",
    "remember_sync.mcp.auth",
    "remember_sync.mcp.authoring",
    "remember_sync.mcp.oauth",
    "remember_sync.integrations.wsgi",
    "remember_sync.integrations.flask",
    "remember_sync.integrations.django",
    "remember_sync.integrations.fastmcp",
    "remember_sync.testing",
)


def _public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        ]  # fmt: skip
    return list(names)


def _modules() -> list[ModuleType]:
    found = []
    for name in PUBLIC_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ImportError as exc:  # a framework integration whose framework is absent
            pytest.fail(f"{name} cannot be imported here: {exc}")
    return found


def _exported_ids(modules: list[ModuleType]) -> set[int]:
    return {id(getattr(m, n)) for m in modules for n in _public_names(m)}


def _types_in(annotation: object) -> Iterator[type]:
    if isinstance(annotation, type):
        yield annotation
    origin = typing.get_origin(annotation)
    if isinstance(origin, type):
        yield origin
    for argument in typing.get_args(annotation):
        yield from _types_in(argument)


def _signatures(name: str, obj: object) -> Iterator[tuple[str, Any]]:
    """``(label, function)`` for *obj* and, for a class, its public methods and properties."""
    if inspect.isfunction(obj):
        yield name, obj
    if not inspect.isclass(obj):
        return
    for attr, value in vars(obj).items():
        if attr.startswith("_") and attr not in ("__init__", "__call__"):
            continue
        if isinstance(value, property) and value.fget is not None:
            yield f"{name}.{attr}", value.fget
        elif isinstance(value, (staticmethod, classmethod)):
            yield f"{name}.{attr}", value.__func__
        elif inspect.isfunction(value):
            yield f"{name}.{attr}", value


def _hints(function: Any) -> dict[str, Any]:
    """The resolved annotations; a name imported for type checking only resolves to ``object``
    (a third-party type such as ``WSGIApplication``)."""
    stand_ins: dict[str, Any] = {}
    while True:
        try:
            return typing.get_type_hints(function, localns=stand_ins)
        except NameError as exc:
            assert exc.name and exc.name not in stand_ins, exc
            stand_ins[exc.name] = object


def _private_aliases(exported: set[int]) -> dict[int, str]:
    """``id -> "module.Name"`` of every type alias (``Clock = Callable[[], int]``) a private
    module defines and no public module exports.  Resolving a hint loses an alias's name,
    so a signature is also read as written."""
    import remember_sync

    found: dict[int, str] = {}
    for info in pkgutil.walk_packages(remember_sync.__path__, "remember_sync."):
        parts = info.name.split(".")[1:]
        if "__main__" in parts or not any(part.startswith("_") for part in parts):
            continue
        module = importlib.import_module(info.name)
        source = inspect.getsource(module)
        for attr, value in vars(module).items():
            defined_here = re.search(rf"^{attr}\b[^=\n]*=", source, re.M)
            if typing.get_origin(value) is not None and id(value) not in exported and defined_here:
                found[id(value)] = f"{info.name}.{attr}"
    return found


def _aliases_written(function: Any, aliases: dict[int, str]) -> Iterator[tuple[str, str]]:
    """``(parameter, "module.Alias")`` for each private alias a signature names as written."""
    namespace = getattr(function, "__globals__", {})
    for parameter, written in getattr(function, "__annotations__", {}).items():
        text = written if isinstance(written, str) else ""
        for word in re.findall(r"[A-Za-z_]\w*", text):
            value = namespace.get(word)
            if value is not None and id(value) in aliases:
                yield parameter, aliases[id(value)]


def _private_types_in_public_signatures() -> list[str]:
    modules = _modules()
    exported = _exported_ids(modules)
    aliases = _private_aliases(exported)
    found: set[str] = set()
    for module in modules:
        for name in _public_names(module):
            for label, function in _signatures(f"{module.__name__}.{name}", getattr(module, name)):
                for parameter, alias in _aliases_written(function, aliases):
                    found.add(f"{label} {parameter}: {alias}")
                hints = _hints(function)
                for parameter, annotation in hints.items():
                    for kind in _types_in(annotation):
                        home = (kind.__module__ or "").split(".")
                        private = any(part.startswith("_") for part in home[1:])
                        if home[0] == "remember_sync" and private and id(kind) not in exported:
                            found.add(f"{label} {parameter}: {kind.__module__}.{kind.__qualname__}")
    return sorted(found)


def test_no_private_type_in_a_public_signature_or_property() -> None:
    """Every type a public function, method or property takes or returns is public."""
    assert _private_types_in_public_signatures() == []


def test_the_check_sees_a_private_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """A public function annotated with a private class is reported."""
    from remember_sync._bounded import BoundedCache

    types_module = importlib.import_module("remember_sync.types")

    def leaky(cache: object) -> None:
        """A public function taking a private type."""

    leaky.__annotations__ = {"cache": BoundedCache, "return": None}
    leaky.__module__ = types_module.__name__
    monkeypatch.setattr(types_module, "leaky", leaky, raising=False)
    monkeypatch.setattr(types_module, "__all__", [*types_module.__all__, "leaky"])
    assert "remember_sync.types.leaky cache: remember_sync._bounded.BoundedCache" in (
        _private_types_in_public_signatures()
    )


def test_the_check_sees_a_private_type_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    """A public function annotated with a private alias (``StartResponse``) is reported
    by the alias's name, which resolving the hint would lose."""
    types_module = importlib.import_module("remember_sync.types")
    from remember_sync.mcp._wsgi import StartResponse

    def leaky(start_response: StartResponse) -> None:
        """A public function taking a private alias."""

    leaky.__module__ = types_module.__name__
    monkeypatch.setattr(types_module, "leaky", leaky, raising=False)
    monkeypatch.setattr(types_module, "__all__", [*types_module.__all__, "leaky"])
    monkeypatch.setitem(leaky.__globals__, "StartResponse", StartResponse)
    assert "remember_sync.types.leaky start_response: remember_sync.mcp._wsgi.StartResponse" in (
        _private_types_in_public_signatures()
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("RememberPlugin", "RememberPlugin.init"),
        ("RememberAccessor", "plugin.remember"),
        ("AuditTrail", "plugin.audit"),
    ],
)
def test_objects_over_the_internals_are_not_constructed_directly(name: str, hint: str) -> None:
    """A class whose objects the plugin builds over its internals says where to get one."""
    import remember_sync

    with pytest.raises(TypeError, match=hint.replace(".", r"\.")):
        getattr(remember_sync, name)()


def test_memory_tools_come_from_the_plugin() -> None:
    """``MemoryTools()`` names ``plugin.tools``; the plugin's own tools work."""
    from remember_sync import Identity, RememberPlugin
    from remember_sync.tools import MemoryTools

    with pytest.raises(TypeError, match=r"plugin\.tools"):
        MemoryTools()
    with RememberPlugin.init(tools={"enabled": True}, encryption={"enabled": False}) as plugin:
        assert plugin.tools is not None
        who = Identity(session_id="s-1")
        stored = plugin.call_tool("remember_this", {"key": "k", "value": 1}, identity=who)
        assert not stored.get("isError"), stored
        assert plugin.accessor(who).get("k") == 1


def test_a_session_signer_needs_the_plugins_secrets() -> None:
    """``SessionSigner`` takes ``plugin.keyring``; a look-alike is refused by name."""
    from types import SimpleNamespace

    from remember_sync import RememberInputTypeError, RememberPlugin
    from remember_sync.mcp import SessionSigner

    fake = SimpleNamespace(source="explicit", kids=("k",), primary_kid="k")
    with pytest.raises(RememberInputTypeError, match=r"plugin\.keyring"):
        SessionSigner(fake)  # type: ignore[arg-type]
    with RememberPlugin.init(encryption={"secrets": ["s" * 32]}) as plugin:
        assert plugin.keyring is not None
        signer = SessionSigner(plugin.keyring)
        assert signer.verify(signer.issue("alice"), "alice")
