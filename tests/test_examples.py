"""Every file in examples/ runs as its docstring says and prints what it promises.

Scripts run as subprocesses (``python examples/...``) in a scratch directory;
the two web examples are started as real servers on free loopback ports and
spoken to over HTTP; the notebook is executed by ``nbclient`` on a real
``ipykernel``.  Redis-backed runs use the throw-away test Redis.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
import requests

import remember_sync
from remember_sync import Identity
from tests.conftest import TEST_SECRET, require_component
from tests.fixtures_redis import redis_plugin

EXAMPLES = Path(remember_sync.__file__).resolve().parent.parent / "examples"

#: Every file under examples/ and the test that runs it.
EXERCISED = {
    "quickstart.py": "test_quickstart_prints_its_docstring",
    "cron_summary.py": "test_cron_summary_writes_one_summary_per_user",
    "notebook.ipynb": "test_notebook_executes_and_hides_values",
    "langgraph_agent.ipynb": "test_langgraph_agent_notebook_keeps_people_apart",
    "flask_mcp_bridge.py": "test_flask_mcp_bridge_serves_mcp_with_verified_sessions",
    "django_bridge/manage.py": "test_django_bridge_serves_notes_per_user",
    "django_bridge/bridge/__init__.py": "test_django_bridge_serves_notes_per_user",
    "django_bridge/bridge/settings.py": "test_django_bridge_serves_notes_per_user",
    "django_bridge/bridge/urls.py": "test_django_bridge_serves_notes_per_user",
    "django_bridge/bridge/views.py": "test_django_bridge_serves_notes_per_user",
    "django_bridge/bridge/auth.py": "test_django_bridge_serves_notes_per_user",
}


def example_env(**extra: str) -> dict[str, str]:
    """The environment of an example run: the test secret, no developer store settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REMEMBER_", "MCP_", "KV_REST_API_", "REDIS_URL", "DJANGO_"))
    }
    env.update(REMEMBER_SECRET=TEST_SECRET, PYTHONUNBUFFERED="1", **extra)
    return env


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=example_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def docstring_block(path: Path, marker: str) -> list[str]:
    """The indented literal block after *marker* in the module docstring of *path*."""
    doc = ast_docstring(path)
    after = doc.split(marker, 1)[1]
    lines = []
    for line in after.splitlines()[1:]:
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line[4:])
    return [line for line in lines if line.strip()]


def ast_docstring(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, f"{path} has no docstring saying how to run it"
    return doc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[str], Path]]]:
    """Start an example server as a subprocess; it is stopped at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(args: list[str], ready_url: str, **env: str) -> tuple[subprocess.Popen[str], Path]:
        log = tmp_path / f"server-{len(procs)}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, *args],
                cwd=tmp_path,
                env=example_env(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        procs.append(proc)
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{args[0]} exited with {proc.returncode}:\n{log.read_text()}")
            try:
                requests.get(ready_url, timeout=1)
                return proc, log
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{args[0]} did not start:\n{log.read_text()}")
                time.sleep(0.1)

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# -- the inventory -------------------------------------------------------------------------


def test_every_example_file_is_exercised() -> None:
    """A new file in examples/ needs a test here (each entry names one that exists)."""
    found = {
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".frontmcp" not in p.parts
    }
    assert found == set(EXERCISED)
    for test in set(EXERCISED.values()):
        assert callable(globals()[test])
    for name in sorted(found):
        if name.endswith(".py"):
            doc = ast_docstring(EXAMPLES / name)  # every module says what it is
            if "__main__" in (EXAMPLES / name).read_text(encoding="utf-8"):
                assert "Run it" in doc, f"{name}: the docstring must say how to run it"


# -- scripts -------------------------------------------------------------------------------


def test_quickstart_prints_its_docstring(tmp_path: Path) -> None:
    """quickstart.py prints exactly the lines its docstring promises, and exits 0."""
    expected = docstring_block(EXAMPLES / "quickstart.py", "It prints exactly::")
    result = run([str(EXAMPLES / "quickstart.py")], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected
    # Without REMEMBER_SECRET it falls back to the development secret file in the cwd.
    env = example_env()
    del env["REMEMBER_SECRET"]
    again = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and again.stdout.splitlines() == expected
    assert (tmp_path / ".frontmcp" / "remember-secret.json").is_file()


def test_cron_summary_writes_one_summary_per_user(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """cron_summary.py summarises user-scope memory per user from Redis and exits 0."""
    with redis_plugin(redis_url) as plugin:
        alice = plugin.accessor(Identity(user_id="alice"))
        alice.set("theme", "dark", scope="user", brand="preference")
        alice.set("step", 1, scope="user", brand="state")
        alice.set("todo", ["x"], scope="user", brand="state")
        alice.set("scratch", 1, scope="session")  # not user scope: not summarised
        plugin.accessor(Identity(user_id="carol")).set("only", 1, scope="user")

        script = str(EXAMPLES / "cron_summary.py")
        expected = docstring_block(
            EXAMPLES / "cron_summary.py", "It prints one line per user, e.g.::"
        )
        result = run([script, "alice", "bob"], tmp_path, REDIS_URL=redis_url)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == expected

        summary = alice.get_entry("summary", scope="user")
        assert summary is not None and summary.brand == "state"
        assert summary.metadata == {"job": "cron_summary"}
        assert summary.value["entries"] == 3
        assert summary.value["by_brand"] == {"preference": 1, "state": 2}
        assert summary.value["keys"] == ["step", "theme", "todo"]
        bob = plugin.accessor(Identity(user_id="bob")).get("summary", scope="user")
        assert bob["entries"] == 0 and bob["last_updated_at"] is None
        # carol was not named: untouched.
        assert plugin.accessor(Identity(user_id="carol")).list(scope="user") == ["only"]

        # Re-running does not count its own summary; --redis-url and --ttl work too.
        again = run([script, "--redis-url", redis_url, "--ttl", "3600", "carol"], tmp_path)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines() == [
            "carol: 1 entry (none=1) -> summary written",
            "done: 1 user summarised",
        ]
        assert 0 < redis_client.pttl("remember:v2:user:carol:summary") <= 3_600_000
        rerun = run([script, "carol"], tmp_path, REDIS_URL=redis_url)
        assert rerun.stdout.splitlines()[0] == "carol: 1 entry (none=1) -> summary written"


def test_cron_summary_fails_cleanly(tmp_path: Path) -> None:
    """An unreachable Redis exits 1 with one line on stderr; no URL at all is a usage error."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = sock.getsockname()[1]
        result = run(
            [str(EXAMPLES / "cron_summary.py"), "--redis-url", f"redis://127.0.0.1:{port}/0", "a"],
            tmp_path,
        )
    assert result.returncode == 1
    assert result.stderr.startswith("cron_summary: REMEMBER_STORE_ERROR:")
    assert "Traceback" not in result.stderr
    usage = run([str(EXAMPLES / "cron_summary.py"), "a"], tmp_path)
    assert usage.returncode == 2 and "REDIS_URL" in usage.stderr


def test_cron_summary_without_secret_refuses_and_writes_nothing(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """Issue 17 path 3: run from another directory without REMEMBER_SECRET, the job exits 1
    naming what to set, creates no secret file and leaves the application's summary alone."""
    with redis_plugin(redis_url) as plugin:
        alice = plugin.accessor(Identity(user_id="alice"))
        alice.set("theme", "dark", scope="user", brand="preference")
        alice.set("summary", {"entries": 1, "by": "the application"}, scope="user")
        raw_before = redis_client.get("remember:v2:user:alice:summary")
        keys_before = sorted(redis_client.keys("*"))

        elsewhere = tmp_path / "some" / "other" / "dir"
        elsewhere.mkdir(parents=True)
        env = example_env(REDIS_URL=redis_url)
        del env["REMEMBER_SECRET"]
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "cron_summary.py"), "alice"],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1, result.stdout
        assert result.stdout == ""
        assert result.stderr.startswith("cron_summary: REMEMBER_CONFIGURATION_ERROR:")
        assert "REMEMBER_SECRET" in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (elsewhere / ".frontmcp").exists()
        assert list(elsewhere.iterdir()) == []
        assert redis_client.get("remember:v2:user:alice:summary") == raw_before
        assert sorted(redis_client.keys("*")) == keys_before
        assert alice.get("summary", scope="user") == {"entries": 1, "by": "the application"}


def test_flask_mcp_bridge_on_redis_without_secret_refuses_to_start(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """flask_mcp_bridge.py --redis-url with no REMEMBER_SECRET exits non-zero naming it."""
    env = example_env()
    del env["REMEMBER_SECRET"]
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "flask_mcp_bridge.py"), "--port", "0",
         "--redis-url", redis_url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "RememberConfigurationError" in last and "REMEMBER_SECRET" in last
    assert not (tmp_path / ".frontmcp").exists()
    assert redis_client.dbsize() == 0


# -- the notebook ----------------------------------------------------------------------------


def _execute_notebook(name: str, tmp_path: Path, *, timeout: int = 60) -> list[Any]:
    """Run examples/*name* on a real kernel (committed clean, no cell failing); its code cells."""
    for module in ("nbformat", "nbclient", "ipykernel"):
        require_component(module, importlib.util.find_spec(module) is not None, "the test extra")
    import nbclient
    import nbformat

    nb = nbformat.read(EXAMPLES / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit it clean"
    client = nbclient.NotebookClient(
        nb, timeout=timeout, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return code


def test_notebook_executes_and_hides_values(tmp_path: Path) -> None:
    """The notebook runs on a real kernel; its HTML tables list keys, never values."""
    code = _execute_notebook("notebook.ipynb", tmp_path)

    def html(cell: Any) -> str:
        (out,) = [o for o in cell.outputs if "text/html" in o.get("data", {})]
        return str(out["data"]["text/html"])

    empty, filled = html(code[0]), html(code[1])
    assert "<table>" in empty and "<td>" not in empty
    for text in ("api_key", "theme", "plan", "motd", "custom", "preference", "state"):
        assert f"<td>{text}</td>" in filled
    assert re.search(r"<td>in \d+ s</td>", filled) and "<td>never</td>" in filled
    for secret in ("sk-demo-not-for-display", "maintenance at noon", "summarise"):
        assert secret not in filled
    rows = code[3].outputs[0]["data"]["text/plain"]
    assert "sk-demo-not-for-display" in rows  # shown only when asked: table_rows(values=True)


def test_langgraph_agent_notebook_keeps_people_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LangGraph agent notebook runs offline on a real kernel: memories recalled per
    person, another person's invisible and unwritable, nothing in clear, erasure complete."""
    require_component("langgraph", importlib.util.find_spec("langgraph") is not None, "test extra")
    # The kernel imports this checkout's package, whatever is installed.
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLES.parent))
    code = _execute_notebook("langgraph_agent.ipynb", tmp_path, timeout=120)
    text = "\n".join(o.get("text", "") for c in code for o in c.outputs)
    assert "recalled for alice: ['I love sushi']" in text
    assert "bob sees of alice: [] [Item(namespace=['users', 'bob', 'memories']" in text
    assert "bob writing alice's memory: RememberIdentityError" in text
    assert "remember:v2:user:alice:langgraph:users/memories:m0" in text
    assert "any memory in clear: False" in text
    assert "alice after erase: []" in text and "bob after erase: ['hi, I am Bob']" in text


# -- the web examples ----------------------------------------------------------------------


MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def mcp_call(url: str, method: str, params: dict[str, Any], **headers: str) -> requests.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return requests.post(url, json=body, headers={**MCP_HEADERS, **headers}, timeout=10)


INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


def test_flask_mcp_bridge_serves_mcp_with_verified_sessions(
    serve: Callable[..., Any], redis_url: str, redis_client: redis.Redis
) -> None:
    """The Flask bridge serves the memory tools at /mcp; /memories needs a verified session."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    _, log = serve(
        [str(EXAMPLES / "flask_mcp_bridge.py"), "--port", str(port), "--redis-url", redis_url],
        f"{base}/healthz",
    )
    assert f"MCP endpoint: {base}/mcp" in log.read_text()
    init = mcp_call(f"{base}/mcp", "initialize", INITIALIZE)
    assert init.status_code == 200, init.text
    sid = init.headers["Mcp-Session-Id"]
    tools = mcp_call(f"{base}/mcp", "tools/list", {}, **{"Mcp-Session-Id": sid}).json()
    assert {t["name"] for t in tools["result"]["tools"]} == {
        "remember_this",
        "recall",
        "forget",
        "list_memories",
        "search_memories",
    }
    stored = mcp_call(
        f"{base}/mcp",
        "tools/call",
        {"name": "remember_this", "arguments": {"key": "color", "value": "blue"}},
        **{"Mcp-Session-Id": sid},
    ).json()["result"]
    assert stored["isError"] is False and stored["structuredContent"]["success"] is True
    recalled = mcp_call(
        f"{base}/mcp",
        "tools/call",
        {"name": "recall", "arguments": {"key": "color"}},
        **{"Mcp-Session-Id": sid},
    ).json()["result"]["structuredContent"]
    assert recalled["found"] is True and recalled["value"] == "blue"
    assert redis_client.keys("remember:v2:session:*") == [
        f"remember:v2:session:{sid}:color".encode()
    ]

    # The Flask view sees the MCP session's memory only with the verified session id.
    mine = requests.get(
        f"{base}/memories?scope=session", headers={"Mcp-Session-Id": sid}, timeout=10
    )
    assert mine.json() == {"scope": "session", "keys": ["color"]}
    for headers in ({}, {"Mcp-Session-Id": "forged"}, {"Mcp-Session-Id": sid[:-2] + "xx"}):
        refused = requests.get(f"{base}/memories?scope=session", headers=headers, timeout=10)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    # The MCP endpoint answers an id it did not issue with 404 (never binds it).
    forged = mcp_call(f"{base}/mcp", "tools/list", {}, **{"Mcp-Session-Id": "forged"})
    assert forged.status_code == 404


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flask_mcp_bridge_with_auth_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --auth-tokens both parts need a bearer token and sessions bind to its principal."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alice-0123456789abcdef alice\ntok-bob-0123456789abcdef0 bob\n")
    tokens.chmod(0o600)
    app = load_example("flask_mcp_bridge").create_app(auth_tokens=str(tokens))
    client = app.test_client()
    alice = {"Authorization": "Bearer tok-alice-0123456789abcdef"}
    bob = {"Authorization": "Bearer tok-bob-0123456789abcdef0"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}
    assert client.post("/mcp", json=body, headers=MCP_HEADERS).status_code == 401
    init = client.post("/mcp", json=body, headers={**MCP_HEADERS, **alice})
    sid = init.headers["Mcp-Session-Id"]
    with_sid = {"Mcp-Session-Id": sid}
    assert client.get("/whoami", headers={**alice, **with_sid}).json == {
        "user_id": "alice",
        "session": True,
    }
    assert client.get("/whoami", headers={**bob, **with_sid}).json == {
        "user_id": "bob",
        "session": False,
    }
    assert client.get("/memories?scope=user", headers=alice).json == {"scope": "user", "keys": []}


def _mcp_remember(url: str, headers: dict[str, str], key: str, value: Any) -> None:
    """remember_this (user scope) through the official mcp client."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.mcp_client import run, structured

    async def main() -> None:
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(20)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                args = {"key": key, "value": value, "scope": "user"}
                await structured(client, "remember_this", args)

    run(main)


def test_django_bridge_serves_notes_per_user(
    serve: Callable[..., Any], redis_url: str, redis_client: redis.Redis
) -> None:
    """The Django project runs under runserver; notes are per user, anonymous gets a JSON 403."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    manage = EXAMPLES / "django_bridge" / "manage.py"
    serve(
        [str(manage), "runserver", "--noreload", f"127.0.0.1:{port}"],
        f"{base}/notes/",
        REDIS_URL=redis_url,
    )
    alice = {"Authorization": "Bearer demo-token-alice-0123456789"}
    bob = {"Authorization": "Bearer demo-token-bob-0123456789ab"}
    put = requests.put(
        f"{base}/notes/todo", data=json.dumps({"value": "buy milk"}), headers=alice, timeout=10
    )
    assert put.json() == {"user": "alice", "key": "todo", "stored": True}
    assert requests.get(f"{base}/notes/", headers=alice, timeout=10).json() == {
        "user": "alice",
        "notes": {"todo": "buy milk"},
    }
    assert requests.get(f"{base}/notes/", headers=bob, timeout=10).json() == {
        "user": "bob",
        "notes": {},
    }
    anonymous = requests.get(f"{base}/notes/", timeout=10)
    assert anonymous.status_code == 403
    assert anonymous.json()["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    assert redis_client.keys("remember:v2:user:*") == [b"remember:v2:user:alice:todo"]
    # The MCP endpoint takes the same principal: the model's user memory is alice's notes.
    _mcp_remember(f"{base}/mcp", alice, "color", "blue")
    assert requests.get(f"{base}/notes/", headers=alice, timeout=10).json()["notes"] == {
        "color": "blue",
        "todo": "buy milk",
    }
    assert requests.get(f"{base}/notes/", headers=bob, timeout=10).json()["notes"] == {}
    # The docstring's curl transcript matches what the server said.
    doc = ast_docstring(manage)
    assert '# {"user": "alice", "notes": {"todo": "buy milk"}}' in doc
    assert '# {"user": "bob", "notes": {}}' in doc
