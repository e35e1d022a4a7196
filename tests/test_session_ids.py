"""Session ids are signed with an HKDF-derived key of their own (issue 18 item 11)."""

from __future__ import annotations

import hashlib
import hmac
import io
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from remember_sync._crypto import Keyring, b64url_decode, b64url_encode
from remember_sync._sessions import LEGACY_MAX_AGE_MS, SessionSigner
from remember_sync.mcp import McpServer
from remember_sync.plugin import RememberPlugin
from tests.conftest import TEST_SECRET

NOW = 1_800_000_000_000
DAY = 86_400_000


def _keyring(*secrets: str) -> Keyring:
    return Keyring(list(secrets) or [TEST_SECRET], source="explicit")


def _message(session_id: str, principal: str | None) -> tuple[bytes, bytes]:
    """The signed message of *session_id* and its MAC, as SessionSigner builds them."""
    _, nonce, issued, mac = session_id.split(".")
    message = f"remember_sync session\x00{nonce}\x00{issued}\x00{principal or ''}".encode()
    return message, b64url_decode(mac)


def _old_style(secret: str, principal: str | None, issued_ms: int) -> str:
    """An id as SessionSigner issued it before: ``rs1``, HMAC keyed by the raw secret."""
    nonce = b64url_encode(b"\x07" * 18)
    issued = format(issued_ms, "x")
    message = f"remember_sync session\x00{nonce}\x00{issued}\x00{principal or ''}".encode()
    mac = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return f"rs1.{nonce}.{issued}.{b64url_encode(mac)}"


def test_new_ids_are_macd_with_the_derived_key_not_the_raw_secret() -> None:
    """An issued id's MAC is HMAC under HKDF(secret, info=session-id-signing), not the secret."""
    signer = SessionSigner(_keyring())
    sid = signer.issue("alice", now_ms=NOW)
    assert sid.startswith("rs2.")
    message, mac = _message(sid, "alice")
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"remember-plugin-v1",
        info=b"remember:session-id-signing:v1",
    ).derive(TEST_SECRET.encode())
    assert hmac.compare_digest(hmac.new(derived, message, hashlib.sha256).digest(), mac)
    raw = hmac.new(TEST_SECRET.encode(), message, hashlib.sha256).digest()
    assert not hmac.compare_digest(raw, mac)
    assert signer.verify(sid, "alice", now_ms=NOW)
    # The raw-secret MAC under the new version tag is refused, and so is the new MAC
    # relabelled as an old-style id: each form is checked with its own key only.
    _, nonce, issued, _ = sid.split(".")
    assert not signer.verify(f"rs2.{nonce}.{issued}.{b64url_encode(raw)}", "alice", now_ms=NOW)
    assert not signer.verify("rs1." + sid[4:], "alice", now_ms=NOW)


def test_old_style_ids_verify_within_their_lifetime_only() -> None:
    """An rs1 id (raw-secret MAC) verifies until max_age after it was issued, then never."""
    signer = SessionSigner(_keyring(), max_age_ms=2 * DAY)
    old = _old_style(TEST_SECRET, "alice", NOW)
    assert signer.verify(old, "alice", now_ms=NOW + DAY)
    assert signer.verify(old, "alice", now_ms=NOW + 2 * DAY)
    assert not signer.verify(old, "alice", now_ms=NOW + 2 * DAY + 1)
    assert not signer.verify(old, "bob", now_ms=NOW + DAY)
    assert not signer.verify(_old_style("another-secret-0123456789", "alice", NOW), "alice",
                             now_ms=NOW + DAY)
    assert signer.deadline_ms(old) == NOW + 2 * DAY


def test_old_style_ids_never_live_forever() -> None:
    """With max_age_ms=None, new ids never expire but rs1 ids stop after LEGACY_MAX_AGE_MS."""
    signer = SessionSigner(_keyring(), max_age_ms=None)
    old = _old_style(TEST_SECRET, None, NOW)
    new = signer.issue(None, now_ms=NOW)
    later = NOW + LEGACY_MAX_AGE_MS
    assert signer.verify(old, None, now_ms=later) and signer.verify(new, None, now_ms=later)
    assert not signer.verify(old, None, now_ms=later + 1)
    assert signer.verify(new, None, now_ms=later + 365 * DAY)
    assert signer.deadline_ms(new) is None and signer.deadline_ms(old) == later


def test_an_expired_old_style_id_never_computes_the_raw_secret_mac(monkeypatch) -> None:
    """The issue time is checked first: an expired rs1 id costs no MAC keyed by the secret."""
    keyring = _keyring()
    signer = SessionSigner(keyring, max_age_ms=2 * DAY)
    calls: list[bool] = []
    real = Keyring.verify_hmac

    def counting(self: Keyring, message: bytes, mac: bytes, *, legacy: bool = False) -> bool:
        calls.append(legacy)
        return real(self, message, mac, legacy=legacy)

    monkeypatch.setattr(Keyring, "verify_hmac", counting)
    old = _old_style(TEST_SECRET, "alice", NOW)
    assert not signer.verify(old, "alice", now_ms=NOW + 30 * DAY)
    assert not signer.verify(old, "alice", now_ms=NOW - DAY)  # issued in the future
    assert calls == []
    assert signer.verify(old, "alice", now_ms=NOW + DAY) and calls == [True]


def test_a_rotated_secret_still_verifies_both_forms() -> None:
    """After a rotation (new secret first), ids of the previous secret verify in both forms."""
    before = SessionSigner(_keyring("previous-secret-0123456789abcdef"))
    after = SessionSigner(
        _keyring("new-secret-0123456789abcdef01", "previous-secret-0123456789abcdef")
    )
    sid = before.issue("u")
    old = _old_style("previous-secret-0123456789abcdef", "u", NOW)
    assert after.verify(sid, "u") and after.verify(old, "u", now_ms=NOW + DAY)


def test_the_mcp_server_accepts_an_old_style_session_id() -> None:
    """A client holding an rs1 id from before the upgrade keeps its session on the server."""
    plugin = RememberPlugin.init(tools={"enabled": True}, skip_legacy_purge=True,
                                 encryption={"secrets": [TEST_SECRET]})
    server = McpServer(plugin, owns_plugin=True)
    old = _old_style(TEST_SECRET, None, time.time_ns() // 1_000_000 - DAY)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    statuses: list[str] = []

    def call(method: str) -> None:
        environ = {
            "REQUEST_METHOD": method, "PATH_INFO": "/mcp", "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
            "HTTP_MCP_SESSION_ID": old, "HTTP_ACCEPT": "application/json",
        }
        server(environ, lambda status, headers: statuses.append(status))

    call("POST")
    call("DELETE")
    call("POST")
    assert statuses == ["200 OK", "204 No Content", "404 Not Found"]
    server.close()
