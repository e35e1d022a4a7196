"""The package's shape: import direction (STYLE.md), the public surface, py.typed.

ruff and mypy (strict) are gates of ``.ci/run``, not tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import remember_sync

PACKAGE = Path(remember_sync.__file__).parent

CORE = {
    "_bounded", "_clock", "errors", "types", "_keys", "_crypto", "identity", "_codec",
    "_secrets", "_sessions", "_quota",
}
# module (first dotted part below remember_sync) -> internal modules it may import.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "types": {"errors", "_clock"},
    "_glob": set(),
    "_fork": set(),
    "_clock": set(),
    "_bounded": set(),
    "_text": set(),
    "_metrics": set(),
    "_keys": {"errors", "types", "_glob"},
    "_crypto": {"errors", "types", "_fork", "_clock", "_bounded"},
    "identity": {"errors", "types"},
    "_codec": {"errors", "types", "_crypto", "_text"},
    "_embedders": {"errors", "_fork"},
    "_search": {"errors", "_codec", "_embedders"},
    "_secrets": {"errors", "types", "_crypto", "_fork", "_clock", "_bounded", "_config"},
    "_sessions": {"errors", "types", "_crypto", "_clock", "_bounded"},
    "_quota": {"errors", "types", "identity", "_crypto", "_bounded", "stores"},
    # _config: the environment variables' names (named constructors read them).
    "stores": {
        "errors", "stores", "_glob", "_fork", "_clock", "_bounded", "_text", "_config", "_metrics",
    },
    "_purge": {
        "errors", "types", "_keys", "_crypto", "_codec", "stores", "_fork", "_clock", "_bounded",
    },
    "_erasure": {
        "errors", "types", "identity", "_keys", "_crypto", "_codec", "_bounded", "_clock",
        "stores",
    },
    "_audit_sign": {"errors", "_crypto", "stores"},
    "_audit": {
        "errors", "types", "identity", "_keys", "_crypto", "_codec", "_bounded", "_clock",
        "_fork", "stores", "_audit_sign",
    },
    "_shred": {
        "errors", "types", "identity", "_keys", "_crypto", "_erasure", "_bounded", "_clock",
        "_fork", "stores",
    },
    "_witness": {"errors", "_keys", "_bounded", "_fork", "stores"},
    "_manifest": {"errors", "_text"},
    "_integrity": {
        "errors", "types", "_keys", "_crypto", "_codec", "_text", "_clock", "_bounded", "_fork",
        "stores", "_witness", "_manifest",
    },
    "_core": CORE | {"stores", "_fork", "_integrity", "_search", "_metrics", "_erasure", "_audit"},
    "accessor": {"_core", "errors", "types", "identity", "_metrics"},
    "tools": CORE | {"stores", "_core", "accessor", "_search", "_metrics"},
    "plugin": CORE
    | {
        "stores", "_core", "accessor", "_purge", "tools", "_config", "_options", "_integrity",
        "_search", "_metrics", "_erasure", "_audit", "_shred",
    },
    "_progress": {"_clock"},
    "_config": {"errors", "types"},
    "_options": {"types"},
    "_ops": CORE
    | {
        "stores", "_core", "accessor", "_purge", "plugin", "_progress", "tools", "_config",
        "_options", "_integrity", "_witness", "_search", "_audit", "_shred", "_erasure",
    },
    "mcp": CORE
    | {"stores", "_core", "accessor", "_purge", "plugin", "tools", "mcp", "_progress", "_fork",
       "_config", "_metrics"},
    "cli": CORE
    | {
        "stores", "_core", "accessor", "_purge", "plugin", "tools", "_ops", "_progress", "mcp",
        "_config", "cli", "_metrics", "_audit", "_audit_sign",
    },
    "__main__": {"cli"},
    "__init__": CORE | {"stores", "accessor", "plugin", "_options", "_audit"},
    "integrations": CORE
    | {
        "stores", "accessor", "plugin", "tools", "mcp", "integrations", "_fork", "_config",
        "_embedders",
    },
    "testing": {"errors", "stores", "testing", "_clock", "_bounded"},
}
# Third-party packages and the only places that may import them.
DRIVERS = {
    "redis": {"stores", "testing"},
    "requests": {"stores", "testing"},
    "flask": {"integrations"},
    "django": {"integrations"},
    "mcp": {"integrations"},
    "langgraph": {"integrations"},
    "langchain_core": {"integrations"},
    "jwt": {"mcp"},
    "limits": {"mcp"},
    "opentelemetry": {"_metrics"},
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute module names imported at run time (TYPE_CHECKING blocks excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ["remember_sync", *path.relative_to(PACKAGE).with_suffix("").parts[:-1]]
    if path.name == "__init__.py":
        package = ["remember_sync", *path.relative_to(PACKAGE).parts[:-1]]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.orelse:
                    visit(stmt)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                    if child.module is None:
                        found.extend((f"{mod}.{a.name}", child.lineno) for a in child.names)
                        continue
                else:
                    mod = child.module or ""
                found.append((mod, child.lineno))
            visit(child)

    visit(tree)
    return found


def test_every_module_has_a_layer() -> None:
    """Every module of the package is placed in the dependency table."""
    missing = {_layer(p) for p in _modules()} - set(ALLOWED)
    assert not missing, f"add these modules to ALLOWED in {__file__}: {missing}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_dependency_direction(path: Path) -> None:
    """No module imports against the layering of STYLE.md; drivers stay at their edge."""
    layer = _layer(path)
    allowed = ALLOWED.get(layer, set())
    for name, line in _imports(path):
        parts = name.split(".")
        if parts[0] == "remember_sync":
            target = parts[1] if len(parts) > 1 else "__init__"
            if target == layer and layer not in ("stores", "mcp", "integrations", "testing", "cli"):
                continue
            assert target in allowed, f"{path.name}:{line} imports remember_sync.{target}"
        elif parts[0] in DRIVERS:
            assert layer in DRIVERS[parts[0]], f"{path.name}:{line} imports {parts[0]}"


def test_layering_check_catches_a_violation(tmp_path: Path) -> None:
    """The import walker sees relative imports (so the check above can fail)."""
    fake = PACKAGE / "errors.py"
    names = [n for n, _ in _imports(PACKAGE / "_core.py")]
    assert "remember_sync.identity" in names and "remember_sync.stores.base" in names
    assert _imports(fake) == [("__future__", _imports(fake)[0][1])]


def test_public_all_is_sorted_and_exported() -> None:
    """__init__ re-exports a sorted __all__, every name resolvable."""
    assert remember_sync.__all__ == sorted(remember_sync.__all__)
    for name in remember_sync.__all__:
        assert getattr(remember_sync, name) is not None


def test_private_modules_have_no_all() -> None:
    """``__all__`` is the public surface: a private module (any ``_`` part) has none."""
    found = [
        _module_name(path) for path in _modules()
        if any(part.startswith("_") and part != "__init__.py"
               for part in path.relative_to(PACKAGE).parts)
        and re.search(r"^__all__\b", path.read_text(encoding="utf-8"), re.M)
    ]  # fmt: skip
    assert found == []


def test_py_typed_marker_present() -> None:
    """The package ships py.typed."""
    assert (PACKAGE / "py.typed").is_file()


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return ".".join(["remember_sync", *(rel.parts[:-1] if rel.name == "__init__" else rel.parts)])


def _import_graph(*, lazy: bool) -> dict[str, set[str]]:
    """Each module's package imports; with *lazy*, those inside functions too."""
    modules = {_module_name(p): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = set() if lazy else {
            line
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
        }
        graph[name] = {
            max((m for m in modules if target == m or target.startswith(m + ".")), key=len)
            for target, line in _imports(path)
            if line not in inside and target.startswith("remember_sync")
        } - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle of *graph* (one per strongly connected group), as text."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def connect(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in sorted(graph.get(name, ())):
            if target not in index:
                connect(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                found.append(" <-> ".join(sorted(group)))

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return sorted(found)


def test_no_import_cycles() -> None:
    """No module reaches itself through module-level imports: loading the package never
    depends on the order modules happen to be imported in."""
    assert _cycles(_import_graph(lazy=False)) == []


def test_no_import_cycles_through_function_level_imports() -> None:
    """Not even through an import made inside a function: a module that imports the
    module importing it is one design in two files."""
    assert _cycles(_import_graph(lazy=True)) == []


def test_the_cycle_check_sees_a_circle() -> None:
    """Two modules importing each other, and a longer loop, are each reported once."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "x": {"y"}, "y": {"z"}, "z": {"x"}}
    assert _cycles(graph) == ["a <-> b", "x <-> y <-> z"]


# The private attributes that hold the core and the memory tools: each object reads
# only its own (``self._core``); everything else goes through a public route.
_INTERNALS = frozenset({"_core", "_tools"})
REPOSITORY = PACKAGE.parent


def _reached_internals(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every ``<not self>._core`` / ``<not self>._tools`` read
    (the module that makes such an object may set them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _INTERNALS
            and isinstance(node.ctx, ast.Load)
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def _code_outside_tests() -> list[Path]:
    roots = [PACKAGE, REPOSITORY / "benchmarks", REPOSITORY / "examples"]
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_nothing_reaches_into_the_core_or_the_tools() -> None:
    """Outside the objects that own them, nothing reads ``._core`` or ``._tools``
    (the package, the benchmarks, the examples): they change without notice."""
    assert (REPOSITORY / "benchmarks").is_dir()
    reached = [
        f"{path.relative_to(REPOSITORY)}:{line}: {expression}"
        for path in _code_outside_tests()
        for line, expression in _reached_internals(path.read_text(encoding="utf-8"))
    ]
    assert not reached, "reaches a private core or tools attribute:\n" + "\n".join(reached)


def test_the_internals_check_sees_a_reach() -> None:
    """The walker flags another object's ``_core``/``_tools`` and lets an object use its own."""
    source = (
        "x = plugin._core.store\ny = self.plugin._tools\nz = self._core.prefix\n"
        "made._core = core\n"
    )
    assert _reached_internals(source) == [(1, "plugin._core"), (2, "self.plugin._tools")]


def test_the_mcp_server_is_composed_not_inherited() -> None:
    """``McpServer`` holds its HTTP endpoint, session gate and protocol dispatch as parts:
    no base class, and no ``TYPE_CHECKING`` method stubs gluing classes of the mcp package."""
    from remember_sync.mcp import McpServer

    assert McpServer.__bases__ == (object,)
    for path in sorted((PACKAGE / "mcp").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                stubs = [n.name for n in node.body if isinstance(n, ast.FunctionDef)]
                assert not stubs, f"mcp/{path.name}:{node.lineno} declares stubs {stubs}"
