"""``remember-sync serve``'s default identity: the local token, --no-token, --allow-anonymous.

Real ``python -m remember_sync serve`` processes on 127.0.0.1 (free ports
they pick themselves), driven by the official ``mcp`` client; HOME and
XDG_CONFIG_HOME point into the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from remember_sync import RememberConfigurationError
from remember_sync.cli import main as cli_main
from remember_sync.mcp.auth import (
    check_local_user,
    default_token_file,
    load_or_create_local_token,
)
from tests.conftest import TEST_SECRET
from tests.mcp_client import connect, error_code, run, structured
from tests.mcp_wire import INIT
from tests.served import REPO, START_TIMEOUT, serving, write_tokens
from tests.served import serve as start_serve
from tests.test_mcp_server import MODERN

ACCEPT = {"Accept": "application/json, text/event-stream"}


def home_env(tmp_path: Path) -> dict[str, str]:
    """HOME and XDG_CONFIG_HOME inside the test's directory (the token goes there)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def token_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "remember-sync" / "serve-token"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start ``serve --port 0 ARGS`` (HOME in tmp_path); stopped cleanly at teardown."""
    with serving(tmp_path, env=home_env(tmp_path)) as start:
        yield start


def refused(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``serve ARGS`` expecting it to exit by itself (it must never start listening)."""
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", *args],
        cwd=tmp_path,
        env={**os.environ, "REMEMBER_SECRET": TEST_SECRET, "PYTHONPATH": str(REPO),
             **home_env(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "listening on" not in done.stdout + done.stderr
    return done


# -- the token file ----------------------------------------------------------------------------


def test_default_token_file_follows_xdg(tmp_path: Path) -> None:
    """$XDG_CONFIG_HOME when absolute, else ~/.config (a relative XDG value is ignored)."""
    assert default_token_file({"XDG_CONFIG_HOME": "/x/cfg"}) == Path(
        "/x/cfg/remember-sync/serve-token"
    )
    home = Path.home() / ".config" / "remember-sync" / "serve-token"
    assert default_token_file({"XDG_CONFIG_HOME": "rel/cfg"}) == home
    assert default_token_file({}) == home


def test_token_file_is_created_private_and_reused(tmp_path: Path) -> None:
    """A new token: file 0600 in a new 0700 directory, one line; read back unchanged later."""
    path = tmp_path / "a" / "b" / "serve-token"
    token, created = load_or_create_local_token(path)
    assert created and len(token) >= 43
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text() == token + "\n"
    assert load_or_create_local_token(path) == (token, False)
    assert [p.name for p in path.parent.iterdir()] == ["serve-token"]  # no temporary left


@pytest.mark.parametrize(
    ("content", "mode", "expected"),
    [
        ("x" * 43 + "\n", 0o640, "accessible by group or others"),
        ("x" * 43 + "\n", 0o604, "chmod 600"),
        ("short\n", 0o600, "exactly one line"),
        ("x" * 43 + "\n" + "y" * 43 + "\n", 0o600, "exactly one line"),
        ("x" * 40 + " z\n", 0o600, "exactly one line"),
        ("", 0o600, "exactly one line"),
    ],
)
def test_bad_token_files_are_refused(
    tmp_path: Path, content: str, mode: int, expected: str
) -> None:
    """A token file others may read, or one not holding one token line, is refused, unchanged."""
    path = tmp_path / "serve-token"
    path.write_text(content)
    path.chmod(mode)
    with pytest.raises(RememberConfigurationError, match=expected) as caught:
        load_or_create_local_token(path)
    assert str(path) in caught.value.message
    assert path.read_text() == content  # never repaired or replaced
    if content.strip():
        assert content.split()[0] not in caught.value.message  # the content is not echoed


def test_symlinked_token_file_is_refused(tmp_path: Path) -> None:
    """A token file that is a symlink (even to a valid 0600 file) is refused, not followed."""
    real = tmp_path / "real"
    real.write_text("x" * 43 + "\n")
    real.chmod(0o600)
    link = tmp_path / "serve-token"
    link.symlink_to(real)
    with pytest.raises(RememberConfigurationError, match="is a symlink"):
        load_or_create_local_token(link)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(RememberConfigurationError, match="is a symlink"):
        load_or_create_local_token(dangling)
    assert not (tmp_path / "nowhere").exists()  # nothing created through the link


def test_token_file_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token file another account owns (it could choose the token) is refused."""
    path = tmp_path / "serve-token"
    path.write_text("x" * 43 + "\n")
    path.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(path, 4242, -1)
    else:  # the file is ours: look at it as another uid would
        uid = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    with pytest.raises(RememberConfigurationError, match="belongs to another user"):
        load_or_create_local_token(path)


def test_group_writable_token_directory_is_refused(tmp_path: Path) -> None:
    """A directory others may write to (they could swap the token) is refused."""
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(RememberConfigurationError, match="writable by group or others"):
        load_or_create_local_token(directory / "serve-token")
    assert not (directory / "serve-token").exists()


def test_local_user_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """--user defaults to the login name and must be a usable, non-anonymous user id."""
    monkeypatch.setattr("getpass.getuser", lambda: "dana")
    assert check_local_user() == "dana"
    assert check_local_user("erin") == "erin"
    for bad in ("", "anon:x", " lead", "tab\tname", "x" * 257):
        with pytest.raises(RememberConfigurationError, match="not a usable user id"):
            check_local_user(bad)

    def no_login() -> str:
        raise OSError("no login name")

    monkeypatch.setattr("getpass.getuser", no_login)
    with pytest.raises(RememberConfigurationError, match="pass --user NAME"):
        check_local_user()


# -- flags ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--no-token", "--allow-anonymous"], "not allowed with"),
        (["--no-token", "--auth-tokens", "f"], "not allowed with"),
        (["--allow-anonymous", "--auth-tokens", "f"], "not allowed with"),
        (["--user", "bob", "--allow-anonymous"], "--user names the local user"),
        (["--user", "bob", "--auth-tokens", "f"], "--user names the local user"),
        (["--token-file", "t", "--no-token"], "--token-file is the local access token"),
        (["--user", "anon:bob"], "not a usable user id"),
        (["--host", "0.0.0.0", "--no-token"], "--no-token is only allowed on a loopback"),
        (["--cors-origin", "ftp://x"], "must be a browser origin"),
        (["--cors-origin", "http://x/path"], "must be a browser origin"),
    ],
)
def test_conflicting_flags_are_usage_errors(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flags that cannot go together stop argparse with exit 2 before anything starts."""
    assert cli_main(["serve", *args]) == 2
    assert expected in capsys.readouterr().err


def test_non_loopback_without_auth_refuses_to_start(tmp_path: Path) -> None:
    """0.0.0.0 without --auth-tokens/--allow-anonymous: exit 2 naming both, nothing bound."""
    done = refused(tmp_path, "--host", "0.0.0.0")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--auth-tokens" in done.stderr and "--allow-anonymous" in done.stderr
    assert not token_path(tmp_path).exists()


@pytest.mark.parametrize("case", ["group-readable", "symlink", "short"])
def test_serve_refuses_a_bad_token_file(tmp_path: Path, case: str) -> None:
    """serve with an unusable token file exits 1 naming the file; it never listens."""
    path = token_path(tmp_path)
    path.parent.mkdir(parents=True, mode=0o700)
    if case == "symlink":
        real = tmp_path / "real-token"
        real.write_text("x" * 43 + "\n")
        real.chmod(0o600)
        path.symlink_to(real)
    else:
        path.write_text("x" * 43 + "\n" if case == "group-readable" else "short\n")
        path.chmod(0o640 if case == "group-readable" else 0o600)
    done = refused(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"serve token file {path}" in done.stderr
    assert "x" * 43 not in done.stdout + done.stderr


# -- the banner -----------------------------------------------------------------------------------

#: The client packages the banner's commands pin: the versions the client tests install.
PINNED = json.loads((REPO / "tests" / "package.json").read_text())["dependencies"]
MCP_REMOTE = f"mcp-remote@{PINNED['mcp-remote']}"
INSPECTOR = f"@modelcontextprotocol/inspector@{PINNED['@modelcontextprotocol/inspector']}"


def banner(tmp_path: Path, *args: str) -> str:
    """Everything ``serve --port 0 ARGS`` prints until it is ready (its output a pipe), after
    which it is stopped (exit 0)."""
    served = start_serve(tmp_path, *args, env=home_env(tmp_path))
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "Press Ctrl-C to stop." not in served.output and served.proc.poll() is None:
            assert time.monotonic() < deadline, served.output
            time.sleep(0.05)
        assert "Press Ctrl-C to stop." in served.output, served.output
    finally:
        code = served.stop()
    assert code == 0, served.output
    return served.output


def test_banner_shows_the_token_only_on_a_terminal(tmp_path: Path) -> None:
    """Its output a pipe, serve's client configs carry placeholders naming the token's file,
    never the token (on a terminal: the next test)."""
    text = banner(tmp_path, "--user", "alice")
    path = token_path(tmp_path)
    token = path.read_text().strip()
    assert token not in text
    assert f"$(cat {path})" in text and f"<the token in {path}>" in text


def test_banner_per_mode(tmp_path: Path) -> None:
    """Each mode says who callers are and what the allowed scopes mean; no header when none."""
    text = banner(tmp_path, "--no-token", "--user", "alice")
    assert "--no-token" in text and "every process" in text
    assert "scope user: the local user 'alice', across all sessions" in text
    assert "for stateless (2026-07-28) clients, the local user 'alice'" in text
    assert "global" not in text
    assert "Authorization" not in text
    # mcp-remote needs --allow-http for plain http beyond 127.0.0.1/localhost.
    assert "--allow-http" not in text
    beyond = banner(tmp_path, "--no-token", "--user", "alice", "--host", "::1")
    assert "http://[::1]:" in beyond and "--allow-http" in beyond
    assert "Authorization" not in beyond
    anonymous = banner(tmp_path, "--allow-anonymous",
                       "--allowed-scopes", "session,user,tool,global")  # fmt: skip
    assert "scope user: refused (REMEMBER_IDENTITY_REQUIRED)" in anonymous
    assert "scope global: shared by every caller" in anonymous
    tokens = write_tokens(tmp_path / "tokens", {"a" * 43: "ann", "b" * 43: "bob"})
    by_token = banner(tmp_path, "--auth-tokens", str(tokens))
    assert "each caller is its token's principal" in by_token
    assert f"<your token from {tokens}>" in by_token
    assert "a" * 43 not in by_token and "b" * 43 not in by_token


def test_banner_on_a_real_terminal_shows_the_token(tmp_path: Path) -> None:
    """serve with its stdout on a pty prints the token in the client configs."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0"],
        cwd=tmp_path,
        env={**os.environ, "REMEMBER_SECRET": TEST_SECRET, "PYTHONPATH": str(REPO),
             **home_env(tmp_path)},
        stdout=slave,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while b"Press Ctrl-C to stop." not in output and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    output += os.read(master, 65536)
                except OSError:  # the child closed the terminal (it exited)
                    break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        os.close(master)
    text = output.decode()
    token = token_path(tmp_path).read_text().strip()
    assert "Press Ctrl-C to stop." in text, text + err
    assert f'"REMEMBER_TOKEN": "Bearer {token}"' in text
    assert token not in err
    url = re.findall(r"listening on (http://127\.0\.0\.1:\d+/mcp)", text)[0]
    desktop = [line.strip() for line in text.splitlines() if '{"mcpServers"' in line]
    assert [json.loads(line) for line in desktop] == [{
        "mcpServers": {
            "remember": {
                "command": "npx",
                "args": ["-y", MCP_REMOTE, url, "--header", "Authorization:${REMEMBER_TOKEN}"],
                "env": {"REMEMBER_TOKEN": f"Bearer {token}"},
            }
        }
    }]
    assert (
        f"npx -y {INSPECTOR} --cli {url} --transport http "
        f'--header "Authorization: Bearer {token}" --method tools/list'
    ) in text


# -- real servers and the official client ---------------------------------------------------------


def test_token_mode_end_to_end(tmp_path: Path, serve: Any) -> None:
    """Default serve: token file 0600/0700, 401 without it, the user's memory across sessions,
    the stateless session fallback, the same token after a restart; never in the output."""
    first = serve("-v", "--user", "alice")
    path = token_path(tmp_path)
    token = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "created a new access token in" in first.output
    assert "auth: local token (holders are the user 'alice')" in first.output
    assert f"$(cat {path})" in first.output  # a pipe: placeholders, never the token

    assert requests.post(first.url, json=INIT, headers=ACCEPT, timeout=10).status_code == 401
    wrong = {**ACCEPT, "Authorization": "Bearer " + "w" * 43}
    reply = requests.post(first.url, json=INIT, headers=wrong, timeout=10)
    assert reply.status_code == 401 and "invalid_token" in reply.headers["WWW-Authenticate"]

    async def remember(url: str) -> None:
        async with connect(url, token=token) as one:
            await structured(one, "remember_this", {"key": "k", "value": "v", "scope": "user"})
        async with connect(url, token=token, mode=MODERN) as modern:
            assert modern.protocol_version == MODERN
            await structured(modern, "remember_this", {"key": "s", "value": 1, "scope": "session"})

    async def recall(url: str) -> None:
        async with connect(url, token=token) as two:  # another session, the same user
            found = await structured(two, "recall", {"key": "k", "scope": "user"})
            assert found["found"] is True and found["value"] == "v"
        async with connect(url, token=token, mode=MODERN) as modern:  # stateless fallback
            found = await structured(modern, "recall", {"key": "s", "scope": "session"})
            assert found["found"] is True and found["value"] == 1

    run(lambda: remember(first.url))
    run(lambda: recall(first.url))
    assert first.stop() == 0

    again = serve("-v", "--user", "alice")  # a restart reuses the token (memory is in-process)
    assert path.read_text().strip() == token
    assert "using the access token in" in again.output
    run(lambda: remember(again.url))
    run(lambda: recall(again.url))
    assert again.stop() == 0
    for served in (first, again):
        assert token not in served.output  # stdout and the -v access log on stderr


def test_no_token_mode_makes_every_caller_the_local_user(tmp_path: Path, serve: Any) -> None:
    """--no-token: no header needed, no token file, and user scope works across sessions."""
    served = serve("--no-token", "--user", "carol")
    assert not token_path(tmp_path).exists()
    assert "every local caller is the user 'carol'" in served.output
    assert "Authorization" not in served.output

    async def main() -> None:
        async with connect(served.url) as one:
            await structured(one, "remember_this", {"key": "k", "value": 7, "scope": "user"})
        async with connect(served.url, mode=MODERN) as two:
            found = await structured(two, "recall", {"key": "k", "scope": "user"})
            assert found["value"] == 7

    run(main)


def test_allow_anonymous_keeps_callers_anonymous(tmp_path: Path, serve: Any) -> None:
    """--allow-anonymous on 127.0.0.1: no token file, and user scope is refused."""
    served = serve("--allow-anonymous")
    assert not token_path(tmp_path).exists()
    assert "auth: none (anonymous callers)" in served.output

    async def main() -> None:
        async with connect(served.url) as client:
            args = {"key": "k", "value": 1, "scope": "user"}
            assert await error_code(client, "remember_this", args) == "REMEMBER_IDENTITY_REQUIRED"

    run(main)
