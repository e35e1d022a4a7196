"""``RememberPlugin.init`` is typed: a user's misspelled option fails ``mypy --strict``.

The README's quick start type-checks; a script with a misspelled keyword, a
misspelled key of an option group or a mistyped value does not.  At run time
the same mistakes raise :class:`RememberConfigurationError` naming the option.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import remember_sync
from remember_sync import RememberConfigurationError, RememberPlugin

ROOT = Path(remember_sync.__file__).resolve().parents[1]

MISSPELLED = {
    "keyword": "RememberPlugin.init(defualt_ttl=60)",
    "encryption key": 'RememberPlugin.init(encryption={"enabeld": True})',
    "redis config key": 'RememberPlugin.init(type="redis", config={"host": "h", "prot": 1})',
    "tools value": 'RememberPlugin.init(tools={"enabled": "yes"})',
    "store type": 'RememberPlugin.init(type="redsi")',
}


def _readme_quick_start() -> str:
    """The ``>>>`` lines of the README's "Quick start" section, as a script."""
    text = (ROOT / "README.rst").read_text(encoding="utf-8")
    section = text.split("Quick start\n-----------\n", 1)[1].split("\n-----", 1)[0]
    lines = [m.group(1) for m in re.finditer(r"^(?:>>>|\.\.\.) ?(.*)$", section, re.M)]
    assert any("RememberPlugin.init" in line for line in lines), "quick start not found"
    return "\n".join(lines) + "\n"


def test_mypy_strict_flags_misspelled_options_and_passes_the_readme(tmp_path: Path) -> None:
    """One mypy --strict run: the README passes, each misspelling is an error on its line."""
    readme = tmp_path / "readme_quick_start.py"
    readme.write_text(_readme_quick_start(), encoding="utf-8")
    user = tmp_path / "user_script.py"
    body = ["from remember_sync import RememberPlugin", ""]
    lines: dict[str, int] = {}
    for what, call in MISSPELLED.items():
        body.append(f"p = {call}")
        lines[what] = len(body)
    user.write_text("\n".join(body) + "\n", encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(readme), str(user)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240, check=False,
    )
    out = run.stdout + run.stderr
    assert "readme_quick_start.py" not in out, out
    for what, line in lines.items():
        assert f"user_script.py:{line}: error" in out, f"{what} not flagged:\n{out}"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"defualt_ttl": 60}, "'defualt_ttl'"),
        ({"encryption": {"enabeld": True}}, "'enabeld'"),
        ({"tools": {"enabled": "yes"}}, "tools.enabled"),
        ({"type": "redsi"}, "'type'"),
    ],
)
def test_the_same_mistakes_raise_at_run_time(options: dict[str, object], named: str) -> None:
    """Options built at run time are checked too: a configuration error naming the option."""
    with pytest.raises(RememberConfigurationError, match=re.escape(named)):
        RememberPlugin.init(**options)  # type: ignore[arg-type]


def test_dict_forms_keep_working() -> None:
    """The option groups are plain dicts at run time."""
    options: dict[str, object] = {"enabled": True, "allowed_scopes": ["user"], "prefix": "m_"}
    with RememberPlugin.init(tools=options, skip_legacy_purge=True) as plugin:  # type: ignore[arg-type]
        names = [tool["name"] for tool in plugin.tool_definitions()]
    assert "m_recall" in names


def test_building_the_cli_parser_loads_no_mcp_module() -> None:
    """``remember-sync <any command>`` parses its arguments without importing the MCP server."""
    code = (
        "import sys, remember_sync.cli as cli; cli.build_parser().parse_args(['stats']); "
        "loaded = sorted(m for m in sys.modules if m.startswith('remember_sync.mcp') "
        "or m == 'remember_sync.cli.serve'); print(loaded)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.strip() == "[]", run.stdout + run.stderr
