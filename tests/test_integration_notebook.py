"""Notebooks: an accessor bound to an explicit identity, rendered as an HTML table.

Pins (SPEC section 9): ``plugin.accessor(Identity(...))`` needs no server or
bound context; Jupyter's display machinery picks ``_repr_html_``; the table
shows keys, scopes, brands and expiry and never values (unless
``table_rows(values=True)`` asks); keys are HTML-escaped; scopes the identity
cannot use are left out instead of failing; the notebook's own stated command
(``jupyter nbconvert --to notebook --execute examples/notebook.ipynb``, what
the ``notebook`` extra installs) runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from remember_sync import RememberPlugin, current_identity
from remember_sync.types import Identity
from tests.conftest import FakeClock, require_component

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "examples" / "notebook.ipynb"

SECRET_VALUE = "sk-live-DO-NOT-SHOW-0123"


@pytest.fixture
def mem(make_plugin: Callable[..., RememberPlugin], clock: FakeClock) -> RememberPlugin:
    """A memory-store plugin on the fake clock."""
    return make_plugin()


@pytest.fixture
def store_kind() -> str:
    """The notebook story is about the default memory store."""
    return "memory"


def test_explicit_identity_needs_no_server_or_context(mem: RememberPlugin) -> None:
    """An accessor bound to Identity(user_id='me') works with nothing bound in context."""
    assert current_identity() == Identity()
    me = mem.accessor(Identity(user_id="me"))
    me.set("draft", {"title": "notes"}, scope="user")
    me.set("scratch", 1)  # session scope falls back to stateless-user:me
    assert me.get("draft", scope="user") == {"title": "notes"}
    assert me.list() == ["scratch"] and me.list(scope="user") == ["draft"]
    assert mem.accessor(Identity(user_id="you")).get("draft", scope="user") is None


def test_html_table_shows_keys_scopes_brands_expiry_never_values(
    mem: RememberPlugin, clock: FakeClock
) -> None:
    """_repr_html_ lists key, scope, brand and time to expiry; values stay out."""
    me = mem.accessor(Identity(user_id="me"))
    me.set("api_key", SECRET_VALUE, scope="user", brand="custom", ttl=3600)
    me.set("theme", "solarized-dark", scope="user", brand="preference")
    me.set("step", 3, scope="session", brand="state", ttl=60)
    me.set("motd", "maintenance-at-noon", scope="global")
    clock.advance(s=10)
    html = me._repr_html_()
    assert html.startswith("<table>") and "<th>key</th><th>scope</th>" in html
    for text in ("api_key", "theme", "step", "motd", "custom", "preference", "state"):
        assert text in html
    assert "in 3590 s" in html and "in 50 s" in html and "never" in html
    for value in (SECRET_VALUE, "solarized-dark", "maintenance-at-noon"):
        assert value not in html
    rows = me.table_rows()
    assert [(r["scope"], r["key"]) for r in rows] == [
        ("session", "step"),
        ("user", "api_key"),
        ("user", "theme"),
        ("global", "motd"),
    ]
    assert all("value" not in r for r in rows)
    with_values = {r["key"]: r["value"] for r in me.table_rows(values=True)}
    assert with_values["api_key"] == SECRET_VALUE and with_values["step"] == 3


def test_jupyter_display_uses_the_html_table(mem: RememberPlugin) -> None:
    """IPython's display formatter renders the accessor as text/html (what a notebook shows)."""
    formatters = pytest.importorskip("IPython.core.formatters")
    me = mem.accessor(Identity(user_id="me"))
    me.set("k", SECRET_VALUE, scope="user")
    data, _ = formatters.format_display_data(me)
    assert "text/html" in data and "<td>k</td>" in data["text/html"]
    assert SECRET_VALUE not in data["text/html"] and SECRET_VALUE not in data["text/plain"]


def test_keys_are_escaped_and_unusable_scopes_skipped(mem: RememberPlugin) -> None:
    """A key with markup is escaped; an anonymous identity shows only global rows, no error."""
    me = mem.accessor(Identity(user_id="me"))
    me.set("<script>alert(1)</script>", 1, scope="user")
    html = me._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    anonymous = mem.accessor(Identity())
    anonymous.set("shared", 1, scope="global")
    assert [(r["scope"], r["key"]) for r in anonymous.table_rows()] == [("global", "shared")]
    assert "shared" in anonymous._repr_html_()


def _stated_command() -> list[str]:
    """The nbconvert command the notebook's first cell tells its reader to run."""
    first = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"][0]
    found = re.search(r"`(jupyter nbconvert [^`]+)`", "".join(first["source"]))
    assert found is not None, "the notebook no longer says how to run it"
    return found.group(1).split()


def test_the_notebooks_own_command_runs_it(tmp_path: Path) -> None:
    """`jupyter nbconvert --to notebook --execute examples/notebook.ipynb` executes every cell."""
    command = _stated_command()
    assert command == [
        "jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "examples/notebook.ipynb",
    ]
    jupyter = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or shutil.which(
        "jupyter"
    )
    require_component(
        "nbconvert",
        jupyter is not None and importlib.util.find_spec("nbconvert") is not None,
        "pip install -e '.[notebook]' (or '.[test]')",
    )
    assert jupyter is not None
    # A copy, so the command's output file (notebook.nbconvert.ipynb) lands outside the repo.
    (tmp_path / "examples").mkdir()
    shutil.copy(NOTEBOOK, tmp_path / "examples" / "notebook.ipynb")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("REMEMBER_SECRET", None)
    result = subprocess.run(
        [jupyter, *command[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    executed = json.loads(
        (tmp_path / "examples" / "notebook.nbconvert.ipynb").read_text(encoding="utf-8")
    )
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    assert code and all(c["execution_count"] for c in code)
    errors = [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]
    assert errors == []
    html = [
        o["data"]["text/html"]
        for c in code
        for o in c["outputs"]
        if "text/html" in o.get("data", {})
    ]
    assert html, "the accessor's HTML table is shown"
