"""Session ids a server can verify: HMAC-signed with the master secret.

An id is ``rs1.<random>.<issued-at>.<mac>`` where the MAC covers the random
part, the issue time and the principal the session was issued to.  A server
binds a session only after :meth:`SessionSigner.verify` accepts it for the
*same* principal, so a client cannot choose its session (or replay another
user's) and ids issued under another secret are refused.  Comparison is
constant-time.  Nothing is stored: any instance sharing the secret verifies.
"""

from __future__ import annotations

import hmac
import secrets as _random
import time

from .crypto import Keyring, b64url_decode, b64url_encode

__all__ = ["SessionSigner"]

_VERSION = "rs1"
_MAX_ID_LENGTH = 256


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SessionSigner:
    """Issues and verifies signed session ids.

    :param keyring: the master secrets; the first signs, every one verifies
        (so a rotation does not end live sessions).
    :param max_age_ms: how long an id stays valid (``None``: forever).
    """

    def __init__(self, keyring: Keyring, *, max_age_ms: int | None = 7 * 86_400_000) -> None:
        self._keyring = keyring
        self.max_age_ms = max_age_ms

    def __repr__(self) -> str:
        return f"SessionSigner(max_age_ms={self.max_age_ms})"

    @staticmethod
    def _message(nonce: str, issued: str, principal: str | None) -> bytes:
        return f"remember_sync session\x00{nonce}\x00{issued}\x00{principal or ''}".encode()

    def issue(self, principal: str | None = None, *, now_ms: int | None = None) -> str:
        """A new session id bound to *principal* (``None`` for an anonymous caller)."""
        nonce = b64url_encode(_random.token_bytes(18))
        issued = format(now_ms if now_ms is not None else _now_ms(), "x")
        mac = b64url_encode(self._keyring.hmac(self._message(nonce, issued, principal)))
        return f"{_VERSION}.{nonce}.{issued}.{mac}"

    def verify(
        self, session_id: object, principal: str | None = None, *, now_ms: int | None = None
    ) -> bool:
        """Whether *session_id* was issued by this secret to *principal* and has not expired."""
        if not isinstance(session_id, str) or len(session_id) > _MAX_ID_LENGTH:
            return False
        parts = session_id.split(".")
        if len(parts) != 4 or parts[0] != _VERSION:
            return False
        _, nonce, issued, mac_text = parts
        try:
            mac = b64url_decode(mac_text)
            issued_ms = int(issued, 16)
        except ValueError:
            return False
        # One spelling per id: base64 ignores the spare low bits of the last character
        # and padding, so a re-spelled id would verify yet name another session.  The
        # caller's own text is compared with its canonical form: nothing secret leaks.
        if not hmac.compare_digest(b64url_encode(mac), mac_text):
            return False
        if not self._keyring.verify_hmac(self._message(nonce, issued, principal), mac):
            return False
        if self.max_age_ms is not None:
            now = now_ms if now_ms is not None else _now_ms()
            if now - issued_ms > self.max_age_ms or issued_ms > now + 60_000:
                return False
        return True
