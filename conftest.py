"""The doctests of README.rst and docs/*.rst (pyproject.toml: ``--doctest-glob``).

Each file runs in a scratch directory without the developer's secrets or store
settings, as ``tests/conftest.py`` isolates every test.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_doctest_env(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if request.node.path.suffix != ".rst":
        return
    for name in list(os.environ):
        if name.startswith(("REMEMBER_", "MCP_", "KV_REST_API_", "REDIS_URL", "NODE_ENV")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path_factory.mktemp("doctest-cwd"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("doctest-config")))
