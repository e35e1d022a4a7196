"""The one runner of server subprocesses (``remember-sync serve``, gunicorn) the tests use.

A :class:`Served` reads what the process prints on a thread, so a test can wait for the
startup banner and quote the whole output in an assertion.  :func:`serving` is the body of
the ``serve`` fixtures: it starts servers in a working directory and stops them (checking
the clean shutdown) at teardown.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import TEST_SECRET

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
#: ``python -m remember_sync serve`` on a port the kernel picks (the banner names it).
SERVE = (sys.executable, "-m", "remember_sync", "serve", "--port", "0")


class Served:
    """A server subprocess, its URL and everything it printed.

    *env* is added to this process's environment, the test secret and this checkout's
    ``PYTHONPATH``; with ``exact_env=True`` it is the child's whole environment.
    """

    def __init__(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None, *,
        exact_env: bool = False,
    ) -> None:
        if exact_env:
            full_env = dict(env or {})
        else:
            full_env = {**os.environ, "REMEMBER_SECRET": TEST_SECRET, "PYTHONPATH": str(REPO)}
            full_env.update(env or {})
        self.proc = subprocess.Popen(
            list(argv), cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = ""

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "listening on http://" in line or "Listening at: http://" in line:
                self._ready.set()
        self._ready.set()  # it exited: wait_ready reports what it printed

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def port(self) -> int:
        return int(self.url.split(":")[2].split("/")[0])

    def wait_ready(self, timeout: float = START_TIMEOUT) -> str:
        """Block until the banner names the URL (``/mcp`` unless it names a path)."""
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise AssertionError(f"the server did not start:\n{self.output}")
        found = re.search(r"(http://127\.0\.0\.1:\d+)(/\S*)?", self.output)
        assert found is not None, self.output
        self.url = found.group(1) + (found.group(2) or "/mcp")
        return self.url

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send *sig* and return the exit status; fail if it is still running 15 s later."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the server ignored signal {sig}:\n{self.output}") from None
        self._reader.join(5)
        return code

    def close(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop within 15 s (no verdict)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def serve(cwd: Path, *args: str, env: Mapping[str, str] | None = None,
          exact_env: bool = False) -> Served:
    """``python -m remember_sync serve --port 0 ARGS`` (not yet waited for)."""
    return Served([*SERVE, *args], cwd, env, exact_env=exact_env)


ServeFactory = Callable[..., Served]


@contextmanager
def serving(
    cwd: Path,
    *,
    anonymous_unless: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    stopped_banner: bool = False,
) -> Iterator[ServeFactory]:
    """Start ``serve`` processes that are ready to answer; each exits 0 at teardown.

    Without any of the *anonymous_unless* flags ``--allow-anonymous`` is added (when that
    tuple is not empty). *env* is every process's environment overrides, merged under the
    ones a call passes. With *stopped_banner* the shutdown line is checked too.
    """
    started: list[Served] = []
    base_env = env

    def start(*args: str, env: Mapping[str, str] | None = None) -> Served:
        if anonymous_unless and not set(anonymous_unless) & set(args):
            args = ("--allow-anonymous", *args)
        served = serve(cwd, *args, env={**(base_env or {}), **(env or {})})
        started.append(served)
        served.wait_ready()
        return served

    yield start
    for served in started:
        if served.proc.poll() is None:
            assert served.stop() == 0, served.output
            if stopped_banner:
                assert "remember-sync: stopped" in served.output


def write_tokens(path: Path, tokens: Mapping[str, str], header: str = "") -> Path:
    """A 0600 ``--auth-tokens`` file: one ``token principal`` a line."""
    path.write_text(header + "".join(f"{t} {p}\n" for t, p in tokens.items()), encoding="utf-8")
    path.chmod(0o600)
    return path
