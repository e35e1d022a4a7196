"""The package's shape: import direction (STYLE.md), the public surface, typing."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import remember_sync

PACKAGE = Path(remember_sync.__file__).parent

CORE = {
    "_bounded", "_clock", "errors", "types", "_keys", "_crypto", "identity", "_codec",
    "_secrets", "_sessions",
}
# module (first dotted part below remember_sync) -> internal modules it may import.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "types": {"errors"},
    "_glob": set(),
    "_fork": set(),
    "_clock": set(),
    "_bounded": set(),
    "_keys": {"errors", "types", "_glob"},
    "_crypto": {"errors", "types", "_fork", "_clock", "_bounded"},
    "identity": {"errors", "types"},
    "_codec": {"errors", "types", "_crypto"},
    "_secrets": {"errors", "types", "_crypto", "_fork", "_clock", "_bounded"},
    "_sessions": {"errors", "types", "_crypto", "_clock", "_bounded"},
    "stores": {"errors", "stores", "_glob", "_fork", "_clock", "_bounded"},
    "_purge": {
        "errors", "types", "_keys", "_crypto", "_codec", "stores", "_fork", "_clock", "_bounded",
    },
    "_core": CORE | {"stores", "_fork"},
    "accessor": {"_core", "errors", "types", "identity"},
    "tools": CORE | {"stores", "_core", "accessor"},
    "plugin": CORE | {"stores", "_core", "accessor", "_purge", "tools", "_config"},
    "_progress": {"_clock"},
    "_config": {"errors", "types"},
    "_ops": CORE
    | {"stores", "_core", "accessor", "_purge", "plugin", "_progress", "tools", "_config"},
    "mcp": CORE
    | {"stores", "_core", "accessor", "_purge", "plugin", "tools", "mcp", "_progress", "_fork",
       "_config"},
    "cli": CORE
    | {"stores", "_core", "accessor", "_purge", "plugin", "tools", "_ops", "_progress", "mcp",
       "_config"},
    "__main__": {"cli"},
    "__init__": CORE | {"stores", "accessor", "plugin"},
    "integrations": CORE
    | {"stores", "accessor", "plugin", "tools", "mcp", "integrations", "_fork", "_config"},
    "testing": {"errors", "stores", "testing", "_clock", "_bounded"},
}
# Third-party packages and the only places that may import them.
DRIVERS = {
    "redis": {"stores", "testing"},
    "requests": {"stores", "testing"},
    "flask": {"integrations"},
    "django": {"integrations"},
    "mcp": {"integrations"},
    "jwt": {"mcp"},
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
            if target == layer and layer not in ("stores", "mcp", "integrations", "testing"):
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


def test_py_typed_marker_present() -> None:
    """The package ships py.typed."""
    assert (PACKAGE / "py.typed").is_file()


def test_mypy_strict_passes() -> None:
    """mypy --strict (configured in pyproject.toml) passes on the package."""
    if (
        shutil.which("mypy") is None
        and subprocess.run(
            [sys.executable, "-m", "mypy", "--version"], capture_output=True
        ).returncode
    ):
        pytest.fail("mypy is part of the test extra and must be installed")
    root = PACKAGE.parent
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_ruff_clean() -> None:
    """ruff (configured in pyproject.toml) reports nothing on the package, tests and examples."""
    root = PACKAGE.parent
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "remember_sync", "tests", "benchmarks", "examples"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
