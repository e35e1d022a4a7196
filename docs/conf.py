"""Sphinx configuration: the API reference of the public surface, the guides as chapters.

Build it as ``.ci/run`` does (warnings are errors)::

    pip install -e '.[docs]'
    python -m sphinx -W --keep-going -b html docs build/html

The examples in these pages and in the README are doctests run by ``pytest``
(``--doctest-glob`` in pyproject.toml), not by Sphinx.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any, cast

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.domains.python import PythonDomain
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.nodes import get_node_source, make_refnode

# Document the checkout being built, not whichever copy of the package is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: The modules the reference documents (its ``automodule`` directives).
PUBLIC_MODULES = re.findall(
    r"^\.\. automodule:: (\S+)", (Path(__file__).parent / "api.rst").read_text(), re.MULTILINE
)

project = "remember_sync"
author = "remember_sync contributors"
copyright = "remember_sync contributors"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]

root_doc = "index"
exclude_patterns = ["_build"]

autodoc_member_order = "bysource"
python_use_unqualified_type_names = True
# undoc-members: every name in a public ``__all__`` appears, documented or not.
autodoc_default_options = {"members": True, "undoc-members": True}

html_theme = "alabaster"
html_theme_options = {"description": "Encrypted, scoped memory for AI-agent tools"}

# Every cross reference into the package must reach a documented public name; references to
# other libraries are not checked (no intersphinx: the build runs offline).
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!remember_sync\b).*")]


def _public_name(
    app: Sphinx, env: BuildEnvironment, node: Any, contnode: nodes.Element
) -> nodes.Element | None:
    """Resolve a reference that names a name where it is defined, not where it is public.

    Signatures and docstrings say ``remember_sync.stores.base.Store`` (or an internal type);
    the reference documents ``remember_sync.stores.Store``.  Link the public name when there is
    one, else show the text.  The pages get no such help: a role there that names a private
    module or an undocumented name stays an error.
    """
    target = str(node.get("reftarget", ""))
    if node.get("refdomain") != "py" or not target.startswith("remember_sync."):
        return None
    # A role written in a page: roles carry ``refwarn`` (annotations and field types do
    # not), and a docstring's text has a "docstring of" source.
    try:
        source = get_node_source(node)
    except ValueError:
        source = ""
    if "refwarn" in node and "docstring of" not in source:
        return None
    py = cast(PythonDomain, env.get_domain("py"))
    name = target.rpartition(".")[2]
    modules = {full for full, entry in py.objects.items() if entry.objtype == "module"}
    candidates = [
        full
        for full, entry in py.objects.items()
        if entry.objtype != "module"
        and full.rpartition(".")[0] in modules
        and full.rpartition(".")[2] == name
    ]
    # A re-export is public in the nearest package above its defining module.
    in_package = [c for c in candidates if target.startswith(c.rpartition(".")[0] + ".")]
    if in_package:
        candidates = [max(in_package, key=len)]
    if len(candidates) != 1:
        return contnode
    entry = py.objects[candidates[0]]
    return make_refnode(
        app.builder, env.docname, entry.docname, entry.node_id, contnode, candidates[0]
    )


def _load_lazy_exports(app: Sphinx) -> None:
    """Bind every ``__all__`` name a module loads lazily (PEP 562), so autodoc sees it."""
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for export in getattr(module, "__all__", ()):
            if export not in vars(module):
                setattr(module, export, getattr(module, export))


def _check_every_export_documented(app: Sphinx, env: BuildEnvironment) -> None:
    """Warn (an error under ``-W``) for a public ``__all__`` name the reference leaves out."""
    objects = cast(PythonDomain, env.get_domain("py")).objects
    for name in PUBLIC_MODULES:
        for export in getattr(importlib.import_module(name), "__all__", ()):
            if f"{name}.{export}" not in objects:
                logging.getLogger(__name__).warning(
                    "%s.%s is in __all__ but not in docs/api.rst", name, export
                )


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _load_lazy_exports)
    app.connect("env-check-consistency", _check_every_export_documented)
    app.connect("missing-reference", _public_name)
    return {"parallel_read_safe": True}
