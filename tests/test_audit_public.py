"""Public verification: Ed25519-signed blocks, checkpoint and head, checked with the public
key only -- in a fresh process with no secret configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin
from remember_sync._audit_sign import RawTrail, load_public_keys, verify_public
from tests.conftest import TEST_SECRET

OTHER_SECRET = "other-secret-0123456789abcdef0123456789"


def _cli(args: list[str], *, secret: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEMBER_")}
    if secret is not None:
        env["REMEMBER_SECRET"] = secret
    return subprocess.run([sys.executable, "-m", "remember_sync", *args], env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def _filled(make_plugin: Callable[..., RememberPlugin], n: int = 14, **audit: Any
            ) -> RememberPlugin:
    plugin = make_plugin(audit={"batch": 3, "flush_ms": 600_000, **audit})
    mem = plugin.accessor(Identity("s-1", "alice", "notes"))
    for i in range(n):
        mem.set(f"k{i}", {"secret value": i})
    trail = plugin.audit
    assert trail is not None
    trail.flush()
    return plugin


@pytest.mark.parametrize("store_kind", ["redis"])
def test_an_export_verifies_with_the_public_key_in_a_process_without_the_secret(
    make_plugin: Callable[..., RememberPlugin], redis_url: str, tmp_path: Path,
    store_kind: str,
) -> None:
    plugin = _filled(make_plugin, max_events=6)  # trimmed: starts at a signed checkpoint
    pem = tmp_path / "audit.pub"
    out = _cli(["audit", "public-key", "--redis-url", redis_url, "-o", str(pem)],
               secret=TEST_SECRET)
    assert out.returncode == 0, out.stderr
    trail = plugin.audit
    assert trail is not None
    assert pem.read_text() == trail.public_key() and "PUBLIC KEY" in pem.read_text()
    export = tmp_path / "trail.jsonl"
    out = _cli(["audit", "export", "--signed", "--redis-url", redis_url, "-o", str(export)],
               secret=TEST_SECRET)
    assert out.returncode == 0, out.stderr
    text = export.read_text()
    assert "secret value" not in text and "alice" not in text and '"checkpoint": "{' in text
    # A fresh process, no secret anywhere in its environment.
    out = _cli(["audit", "verify", "--public-key", str(pem), "--export", str(export)],
               secret=None)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified" in out.stdout
    # The live store too, still without the secret.
    out = _cli(["audit", "verify", "--public-key", str(pem), "--redis-url", redis_url],
               secret=None)
    assert out.returncode == 0, out.stdout + out.stderr
    # An edited export fails in that process too (exit 1, the problem on stderr).
    lines = text.splitlines()
    record = json.loads(lines[-1])
    record["text"] = record["text"].replace('"op":"set"', '"op":"get"', 1)
    lines[-1] = json.dumps(record)
    assert lines[-1] != text.splitlines()[-1]
    export.write_text("\n".join(lines) + "\n")
    out = _cli(["audit", "verify", "--public-key", str(pem), "--export", str(export)],
               secret=None)
    assert out.returncode == 1 and "signature does not verify" in out.stderr


def _blocks(raw: RawTrail) -> list[dict[str, Any]]:
    return [json.loads(text) for _, text in raw.blocks]


def _with(raw: RawTrail, blocks: list[dict[str, Any]], **changes: Any) -> RawTrail:
    texts = [(int(b["block"]), json.dumps(b)) for b in blocks]
    return RawTrail(changes.get("checkpoint", raw.checkpoint), changes.get("head", raw.head),
                    changes.get("blocks", texts))


def _edited(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    blocks[1]["events"][0]["outcome"] = "missing"
    return _with(raw, blocks)


def _deleted(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    del blocks[1]["events"][1]
    return _with(raw, blocks)


def _deleted_block(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    del blocks[2]
    return _with(raw, blocks)


def _swapped(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    events = blocks[1]["events"]
    events[0], events[1] = events[1], events[0]
    return _with(raw, blocks)


def _reordered(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    blocks[1]["events"], blocks[2]["events"] = blocks[2]["events"], blocks[1]["events"]
    blocks[1]["sig"], blocks[2]["sig"] = blocks[2]["sig"], blocks[1]["sig"]
    return _with(raw, blocks)


def _forged(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    fake = dict(blocks[1]["events"][-1])
    fake["seq"] += 100
    fake["id"] = "forged"
    blocks[-1]["events"].append(fake)
    return _with(raw, blocks)


def _truncated(raw: RawTrail) -> RawTrail:
    blocks = _blocks(raw)
    return _with(raw, blocks[:-1])


def _forged_checkpoint(raw: RawTrail) -> RawTrail:
    checkpoint = json.loads(raw.checkpoint or "{}")
    checkpoint["block"] += 1
    checkpoint["seq"] += 3
    return _with(raw, _blocks(raw), checkpoint=json.dumps(checkpoint))


def _forged_head(raw: RawTrail) -> RawTrail:
    head = json.loads(raw.head or "{}")
    head["seq"] -= 1
    return _with(raw, _blocks(raw), head=json.dumps(head))


TAMPERING = {f.__name__.strip("_"): f for f in (
    _edited, _deleted, _deleted_block, _swapped, _reordered, _forged, _truncated,
    _forged_checkpoint, _forged_head,
)}


def _public(plugin: RememberPlugin, tmp_path: Path) -> dict[str, Any]:
    trail = plugin.audit
    assert trail is not None
    pem = tmp_path / f"{id(plugin)}.pub"
    pem.write_text(trail.public_key())
    return load_public_keys([str(pem)])


@pytest.mark.parametrize("kind", sorted(TAMPERING))
def test_public_verification_reports_tampering(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path, kind: str
) -> None:
    plugin = _filled(make_plugin, 24, max_events=12)  # trimmed: a signed checkpoint
    trail = plugin.audit
    assert trail is not None
    keys = _public(plugin, tmp_path)
    raw = trail._raw()
    assert raw.checkpoint is not None and len(raw.blocks) >= 4
    untouched = _with(raw, _blocks(raw))  # re-spelled, same content: still verifies
    assert verify_public(untouched, keys)[3] == []
    problems = verify_public(TAMPERING[kind](raw), keys)[3]
    assert problems, kind


def test_a_trail_signed_by_another_key_is_refused(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path
) -> None:
    plugin = _filled(make_plugin, 9, max_events=3)
    trail = plugin.audit
    assert trail is not None
    raw = trail._raw()
    assert verify_public(raw, _public(plugin, tmp_path))[3] == []
    other = make_plugin(encryption={"secrets": [OTHER_SECRET]}, audit=True,
                        key_prefix="other:")
    count, _, _, problems = verify_public(raw, _public(other, tmp_path))
    assert count > 0 and any("another key" in p for p in problems)
    assert any("checkpoint" in p for p in problems) and any("head" in p for p in problems)


def test_a_configured_signing_key_signs_instead_of_the_derived_one(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path
) -> None:
    """``audit={"signing_key": path}``: a key apart from the encryption secret; its public
    key verifies the trail, the derived key's does not."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    path = tmp_path / "signing.pem"
    path.write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    plugin = _filled(make_plugin, 5, signing_key=str(path))
    trail = plugin.audit
    assert trail is not None
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    assert trail.public_key() == public
    assert verify_public(trail._raw(), _public(plugin, tmp_path))[3] == []
    derived = make_plugin(audit=True, key_prefix="derived:")
    assert verify_public(trail._raw(), _public(derived, tmp_path))[3]


@pytest.mark.parametrize("bad", [123, "/nonexistent/key.pem", "ec"])
def test_a_bad_signing_key_is_refused_at_init(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path, bad: Any
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from remember_sync import RememberConfigurationError

    if bad == "ec":  # a private key of another kind
        bad = str(tmp_path / "ec.pem")
        key = ec.generate_private_key(ec.SECP256R1())
        Path(bad).write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ))
    with pytest.raises(RememberConfigurationError, match="signing_key"):
        make_plugin(audit={"signing_key": bad})
