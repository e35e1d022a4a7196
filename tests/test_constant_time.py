"""HMAC and tag comparisons are constant-time, and verification rejects every altered id.

By inspection (the AST of the package):

* session MACs are checked by :meth:`Keyring.verify_hmac` with
  :func:`hmac.compare_digest`, and :class:`SessionSigner` verifies through it;
* AEAD tags are checked inside ``cryptography``'s ``AESGCM.decrypt`` only;
* nowhere in ``remember_sync`` is a MAC, tag, digest, signature, token or
  secret compared with ``==`` / ``!=`` (lengths and constants aside).

By behaviour: every single-bit flip of a valid session id, and of a sealed
envelope's IV, tag and ciphertext, is rejected.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import remember_sync
from remember_sync import _crypto as crypto
from remember_sync import _sessions as sessions
from remember_sync._crypto import Keyring, b64url_decode, b64url_encode, parse_envelope, seal
from remember_sync._sessions import SessionSigner
from remember_sync.errors import RememberDecryptionError
from remember_sync.mcp import auth
from remember_sync.types import Namespace

PACKAGE = Path(remember_sync.__file__).parent
SECRETISH = re.compile(r"(mac|tag|digest|signature|hmac|token|secret|nonce)", re.IGNORECASE)
#: Calls whose result says nothing about the bytes of their argument's content.
_NEUTRAL_CALLS = {"len", "isinstance", "type", "bool", "callable", "id"}
NOW = 1_800_000_000_000


def _function(module: ModuleType, dotted: str) -> ast.FunctionDef:
    """The AST of ``Class.method`` or ``function`` in *module*'s source file, found by name."""
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    *owners, name = dotted.split(".")
    scope: list[ast.stmt] = tree.body
    for owner in owners:
        cls = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner)
        scope = cls.body
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


def _calls(node: ast.AST) -> list[str]:
    """Dotted names of every call inside *node* (``hmac.compare_digest``, ``self._keyring.x``)."""
    found = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            found.append(ast.unparse(n.func))
    return found


def _names(node: ast.AST) -> list[str]:
    """Identifiers an operand is built from, skipping arguments of len()/isinstance()/..."""
    out: list[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_Call(self, n: ast.Call) -> None:
            if isinstance(n.func, ast.Name) and n.func.id in _NEUTRAL_CALLS:
                return
            self.generic_visit(n)

        def visit_Name(self, n: ast.Name) -> None:
            if not n.id.isupper():  # TAG_BYTES and friends are public constants
                out.append(n.id)

        def visit_Attribute(self, n: ast.Attribute) -> None:
            out.append(n.attr)
            self.generic_visit(n)

    Visitor().visit(node)
    return out


def _secret_comparisons(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``==``/``!=`` comparisons of a secret-looking value with anything but a constant."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        secretish = [o for o in operands if any(SECRETISH.search(n) for n in _names(o))]
        others = [o for o in operands if o not in secretish]
        if not secretish:
            continue
        # Comparing against a literal or another "is it set" flag leaks nothing secret.
        if others and all(isinstance(o, ast.Constant) for o in others):
            continue
        if all(_is_presence_test(o) for o in operands):
            continue
        yield node.lineno, ast.unparse(node)


def _is_presence_test(node: ast.AST) -> bool:
    """``(x is None)``: a comparison of whether two things are set, not of their content."""
    return isinstance(node, ast.Compare) and all(
        isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops
    )


def test_session_macs_are_compared_with_compare_digest() -> None:
    """Keyring.verify_hmac uses hmac.compare_digest, over every secret, with no early exit."""
    fn = _function(crypto, "Keyring.verify_hmac")
    calls = _calls(fn)
    assert "hmac.compare_digest" in calls
    # No return inside the loop: every secret is tried whatever matched.
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)]
    assert loops and not any(isinstance(n, ast.Return) for loop in loops for n in ast.walk(loop))


def test_session_signer_verifies_through_the_keyring() -> None:
    """SessionSigner.verify delegates the MAC check to Keyring.verify_hmac (never ==)."""
    fn = _function(sessions, "SessionSigner.verify")
    assert "self._keyring.verify_hmac" in _calls(fn)
    assert list(_secret_comparisons(fn)) == []


def test_aead_tags_are_only_checked_by_cryptography() -> None:
    """Envelopes are opened with cryptography's AESGCM.decrypt; no tag is compared by hand."""
    assert crypto.__file__ is not None
    source = Path(crypto.__file__).read_text(encoding="utf-8")
    assert "from cryptography.hazmat.primitives.ciphers.aead import AESGCM" in source
    assert any(c.endswith(".decrypt") for c in _calls(_function(crypto, "Keyring.open")))
    # The InvalidTag cryptography raises is what turns a bad tag into our error.
    assert "except InvalidTag" in source
    assert list(_secret_comparisons(ast.parse(source))) == []


def test_static_tokens_are_compared_with_compare_digest_over_the_whole_table() -> None:
    """StaticTokenVerifier compares token digests with compare_digest and walks every entry."""
    fn = _function(auth, "StaticTokenVerifier.__call__")
    assert "hmac.compare_digest" in _calls(fn)
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)]
    assert loops and not any(
        isinstance(n, (ast.Return, ast.Break)) for loop in loops for n in ast.walk(loop)
    )


def test_no_secret_is_compared_with_equality_anywhere_in_the_package() -> None:
    """An AST scan of remember_sync finds no ==/!= on MACs, tags, digests, tokens or secrets."""
    found = []
    files = sorted(PACKAGE.rglob("*.py"))
    for path in files:
        for line, text in _secret_comparisons(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text}")
    # One deliberate exception: `doctor` writes a random probe value and checks that
    # the store hands back what it was given -- a store health check, not a credential.
    # And the search cache recognising an unchanged stored text by its fingerprint: a
    # hash of the ciphertext the store hands to every reader, no secret.
    allowed = {
        "remember_sync/_ops/inspect.py: back != token",
        "remember_sync/_search.py: doc.digest != digest",
    }
    assert {re.sub(r":\d+:", ":", f) for f in found} <= allowed, found
    assert len(files) > 20  # the scan really walked the package


def test_the_scan_would_catch_an_equality_on_a_mac() -> None:
    """The AST scan flags `mac == expected` and `tag != other` (it is not vacuous)."""
    bad = ast.parse("ok = mac == expected\nif env.tag != other: pass\nx = token_a == token_b")
    assert len(list(_secret_comparisons(bad))) == 3
    fine = ast.parse(
        "n = len(tag) != 16\nk = kid is None\nm = (a is None) != (token is None)\n"
        "t = len(raw_tag) != TAG_BYTES"
    )
    assert list(_secret_comparisons(fine)) == []


# -- behaviour: single-bit flips ------------------------------------------------------------------


def _signer() -> SessionSigner:
    return SessionSigner(
        Keyring(["constant-time-secret-0123456789abcdef"], source="explicit"), max_age_ms=None
    )


def _ids(signer: SessionSigner, count: int) -> list[str]:
    """Deterministic ids (fixed nonces and times), signed exactly as SessionSigner.issue signs."""
    out = []
    for i in range(count):
        nonce = b64url_encode(bytes([i]) * 18)
        issued = format(NOW + i, "x")
        mac = b64url_encode(signer._keyring.hmac(signer._message(nonce, issued, "alice")))
        out.append(f"rs2.{nonce}.{issued}.{mac}")
    return out


def _flips(text: str) -> Iterator[str]:
    raw = text.encode("ascii")
    for i in range(len(raw)):
        for bit in range(8):
            flipped = bytearray(raw)
            flipped[i] ^= 1 << bit
            yield flipped.decode("latin-1")


def _same_mac_alias(original: str, candidate: str) -> bool:
    """Whether *candidate* only re-spells the original's MAC (non-canonical base64 bits)."""
    a, b = original.split("."), candidate.split(".")
    if len(b) != 4 or a[:3] != b[:3]:
        return False
    try:
        return b64url_decode(a[3]) == b64url_decode(b[3])
    except ValueError:
        return False


def test_every_bit_flip_that_changes_a_session_id_is_rejected() -> None:
    """Each single-bit flip of 64 ids is refused, unless it only re-spells the same MAC bytes."""
    signer = _signer()
    checked = aliases = 0
    for session_id in _ids(signer, 64):
        assert signer.verify(session_id, "alice", now_ms=NOW)
        for flipped in _flips(session_id):
            if _same_mac_alias(session_id, flipped):
                aliases += 1
                continue
            checked += 1
            assert not signer.verify(flipped, "alice", now_ms=NOW), flipped
    print(
        f"\n[constant-time] session-id bit flips rejected: {checked} (aliases skipped: {aliases})"
    )
    assert checked > 64 * 80 * 7


def test_every_single_bit_flip_of_a_session_id_is_rejected() -> None:
    """No altered spelling of a valid session id verifies: every single-bit flip, and added '='."""
    signer = _signer()
    accepted = []
    for session_id in _ids(signer, 64):
        accepted += [f for f in _flips(session_id) if signer.verify(f, "alice", now_ms=NOW)]
        accepted += [
            s
            for s in (session_id + "=", session_id + "==")
            if signer.verify(s, "alice", now_ms=NOW)
        ]
    assert accepted == []


def test_every_bit_flip_of_an_envelope_fails_authentication() -> None:
    """Flipping any single bit of the IV, tag or ciphertext makes opening fail (AEAD tag check)."""
    keyring = Keyring(["constant-time-secret-0123456789abcdef"], source="explicit")
    ns = Namespace("user", user="alice")
    key = keyring.key(ns)
    aad = b"v2:user:alice:k"
    stored = seal(
        b'{"value":"secret","createdAt":1,"updatedAt":1}',
        key,
        kid=keyring.primary_kid,
        aad=aad,
        iv=bytes(range(12)),
    )
    env = parse_envelope(stored)
    assert keyring.open(stored, ns, aad)
    rejected = 0
    for field_name in ("iv", "tag", "data"):
        raw = getattr(env, field_name)
        for i in range(len(raw)):
            for bit in range(8):
                flipped = bytearray(raw)
                flipped[i] ^= 1 << bit
                obj = json.loads(stored)
                obj[field_name] = b64url_encode(bytes(flipped))
                with pytest.raises(RememberDecryptionError):
                    keyring.open(json.dumps(obj), ns, aad)
                rejected += 1
    # A different associated data (the value moved to another key) fails too.
    with pytest.raises(RememberDecryptionError):
        keyring.open(stored, ns, b"v2:user:alice:other")
    assert rejected == 8 * (12 + 16 + len(env.data))


def test_signer_module_imports_no_equality_helpers() -> None:
    """sessions.py has no ==/!= on secret-looking names at all (module-wide scan)."""
    assert sessions.__file__ is not None
    tree = ast.parse(Path(sessions.__file__).read_text(encoding="utf-8"))
    assert list(_secret_comparisons(tree)) == []
