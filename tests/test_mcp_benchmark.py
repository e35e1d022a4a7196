"""benchmarks/mcp_tools.py runs at a tiny size and reports both servers and a ratio."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.benchmark


def test_benchmark_runs_at_a_tiny_size() -> None:
    """run() measures the bare and the MCP server with real keep-alive clients and a ratio."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "mcp_tools.py"
    spec = importlib.util.spec_from_file_location("benchmark_mcp_tools", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.run(0.3, clients=2)
    assert [r["server"].split()[0] for r in rows] == ["bare", "McpServer"]
    for row in rows:
        assert row["requests"] > 0 and row["requests_per_s"] > 0 and row["clients"] == 2
    assert rows[0]["ratio"] == 1.0 and 0 < rows[1]["ratio"]
    assert "ratio" in module.render(rows)
