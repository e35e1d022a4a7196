"""The development secret file under attack (issue 18, item 10), with real processes.

* Processes starting together against an invalid file all end on one secret,
  and exactly one copy is moved aside (the old code moved aside, by path, the
  valid file a faster process had just created).
* A file group or others may read, or one reached through a symlink (file or
  ``.frontmcp`` directory), is refused with a message naming the file and the fix.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from remember_sync import Identity, RememberConfigurationError, RememberPlugin
from remember_sync.stores.memory import MemoryStore

VALID = json.dumps({"secret": "v" * 43, "createdAt": 1_700_000_000_000, "version": 1})

_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from remember_sync import Identity, RememberPlugin
    path, ready, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    ready.touch()
    deadline = time.monotonic() + 60
    while not go.exists():  # spin: all workers leave the barrier within microseconds
        if time.monotonic() > deadline:
            sys.exit("never released")
    plugin = RememberPlugin.init(encryption={"secret_file": str(path)}, skip_legacy_purge=True)
    plugin.accessor(Identity(session_id="s")).set("k", "sealed")
    print(plugin.store.get("remember:v2:session:s:k"))  # the envelope as stored
    """
)


def file_plugin(path: Path) -> RememberPlugin:
    """A plugin whose secret is the development file at *path*."""
    return RememberPlugin.init(encryption={"secret_file": str(path)}, skip_legacy_purge=True)


def sealed(plugin: RememberPlugin) -> str:
    """A session entry *plugin* writes, as its store holds it: sealed with its secret."""
    plugin.accessor(Identity(session_id="s")).set("k", "sealed")
    envelope = plugin.store.get("remember:v2:session:s:k")
    assert envelope is not None
    return envelope


def opens_with(secret: str, envelope: str) -> bool:
    """Whether a plugin holding only *secret* reads *envelope* (the worker's session entry)."""
    with RememberPlugin.init(store=MemoryStore(), encryption={"secrets": [secret]},
                             skip_legacy_purge=True) as plugin:  # fmt: skip
        plugin.store.set("remember:v2:session:s:k", envelope)
        return plugin.accessor(Identity(session_id="s")).get("k") == "sealed"


def _wait_for(predicate: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def race(tmp: Path, workers: int, content: str | None) -> tuple[list[str], Path]:
    """Start *workers* processes at a barrier, release them together, return the envelopes
    each sealed with the secret it ended on."""
    path = tmp / ".frontmcp" / "remember-secret.json"
    if content is not None:
        path.parent.mkdir(mode=0o700, parents=True)
        path.write_text(content)
        path.chmod(0o600)
    tmp.mkdir(exist_ok=True)
    go = tmp / "go"
    readies = [tmp / f"ready{i}" for i in range(workers)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(ready), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for ready in readies
    ]
    try:
        _wait_for(lambda: all(r.exists() for r in readies), "every worker at the barrier")
        go.touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    return [out.strip() for out, _ in outputs], path


#: Invalid only at its end (version 2) and large, so checking it takes each process tens
#: of milliseconds: the window in which the old code moved aside, by path, whatever file
#: was there by then -- a valid one another process had just created.
SLOW_INVALID = '{"secret": "' + "x" * 5_000_000 + '", "createdAt": 1, "version": 2}'


@pytest.mark.parametrize("content", [SLOW_INVALID, "not json"], ids=["slow-to-check", "not-json"])
def test_processes_repairing_an_invalid_file_together_agree(tmp_path: Path, content: str) -> None:
    """N processes released together on an invalid file: one secret, one file moved aside."""
    for round_ in range(3):
        envelopes, path = race(tmp_path / f"round{round_}", 6, content)
        secret = json.loads(path.read_text())["secret"]
        opened = [opens_with(secret, envelope) for envelope in envelopes]
        assert all(opened), f"round {round_}: {opened.count(False)} processes used another secret"
        aside = sorted(path.parent.glob("remember-secret.json.invalid-*"))
        assert len(aside) == 1 and aside[0].read_text() == content
        assert sorted(p.name for p in path.parent.iterdir()) == sorted(
            [path.name, aside[0].name]
        )  # no temporary file left, nothing else moved aside


def test_processes_creating_the_file_together_agree(tmp_path: Path) -> None:
    """N processes released together in an empty directory: one 0600 file, one secret."""
    envelopes, path = race(tmp_path, 6, None)
    secret = json.loads(path.read_text())["secret"]
    assert len(envelopes) == 6 and all(opens_with(secret, envelope) for envelope in envelopes)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(path.parent.iterdir()) == [path]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    """A valid secret file with group/other permission bits is refused, naming `chmod 600`."""
    path = tmp_path / "remember-secret.json"
    path.write_text(VALID)
    path.chmod(mode)
    with pytest.raises(RememberConfigurationError) as caught:
        file_plugin(path)
    assert f"chmod 600 {path}" in caught.value.message
    assert f"{mode:04o}" in caught.value.message
    assert path.read_text() == VALID and stat.S_IMODE(path.stat().st_mode) == mode
    assert list(tmp_path.iterdir()) == [path]  # nothing moved aside or created


def test_symlinked_file_is_refused(tmp_path: Path) -> None:
    """A secret file that is a symlink (even to a valid 0600 file) is refused, never followed."""
    target = tmp_path / "elsewhere.json"
    target.write_text(VALID)
    target.chmod(0o600)
    directory = tmp_path / ".frontmcp"
    directory.mkdir(mode=0o700)
    link = directory / "remember-secret.json"
    link.symlink_to(target)
    with pytest.raises(RememberConfigurationError, match="symlink") as caught:
        file_plugin(link)
    assert str(link) in caught.value.message
    assert link.is_symlink() and target.read_text() == VALID


def test_dangling_symlink_is_not_created_through(tmp_path: Path) -> None:
    """A dangling symlink at the secret file's path is refused; nothing is created at its target."""
    directory = tmp_path / ".frontmcp"
    directory.mkdir(mode=0o700)
    target = tmp_path / "planted.json"
    link = directory / "remember-secret.json"
    link.symlink_to(target)
    with pytest.raises(RememberConfigurationError, match="symlink"):
        file_plugin(link)
    assert not target.exists()


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    """A .frontmcp directory that is a symlink is refused; nothing is created in its target."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / ".frontmcp").symlink_to(real)
    path = tmp_path / ".frontmcp" / "remember-secret.json"
    with pytest.raises(RememberConfigurationError, match="symlink") as caught:
        file_plugin(path)
    assert str(tmp_path / ".frontmcp") in caught.value.message
    assert list(real.iterdir()) == []


def test_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    """A .frontmcp directory writable by group or others (who could swap the file) is refused."""
    directory = tmp_path / ".frontmcp"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(RememberConfigurationError, match="chmod 700"):
        file_plugin(directory / "remember-secret.json")
    assert list(directory.iterdir()) == []


def _as_root() -> None:
    from tests.conftest import require_component

    require_component("root", os.geteuid() == 0, "only root can give a file to another user")


def test_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """A 0600 secret file another account owns (and so chose) is refused, naming `chown`."""
    _as_root()
    directory = tmp_path / ".frontmcp"
    directory.mkdir(mode=0o700)
    path = directory / "remember-secret.json"
    path.write_text(VALID)
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(RememberConfigurationError, match="belongs to another user") as caught:
        file_plugin(path)
    assert "chown" in caught.value.message and str(path) in caught.value.message
    assert path.read_text() == VALID and list(directory.iterdir()) == [path]


def test_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """A 0700 .frontmcp another account owns (it could swap the file at will) is refused."""
    _as_root()
    directory = tmp_path / ".frontmcp"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    with pytest.raises(RememberConfigurationError, match="belongs to another user"):
        file_plugin(directory / "remember-secret.json")
    assert list(directory.iterdir()) == []


def test_file_created_in_the_future_keeps_its_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A valid file whose createdAt is ahead of the clock (the clock moved back) is used, not
    moved aside: every entry sealed with it stays readable; one warning says why."""
    path = tmp_path / "remember-secret.json"
    future = int(time.time() * 1000) + 30 * 86_400_000
    secret = "f" * 43
    path.write_text(json.dumps({"secret": secret, "createdAt": future, "version": 1}))
    path.chmod(0o600)
    with file_plugin(path) as plugin:
        assert opens_with(secret, sealed(plugin))
    assert list(tmp_path.iterdir()) == [path]
    assert any("in the future" in r.getMessage() for r in caplog.records)
