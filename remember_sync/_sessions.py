"""Session ids a server can verify: HMAC-signed with a key derived from the master secret.

An id is ``rs2.<random>.<issued-at>.<mac>`` where the MAC covers the random
part, the issue time and the principal the session was issued to.  A server
binds a session only after :meth:`SessionSigner.verify` accepts it for the
*same* principal, so a client cannot choose its session (or replay another
user's) and ids issued under another secret are refused.  Comparison is
constant-time.  Nothing is stored: any instance sharing the secret verifies.

The MAC key is ``HKDF-SHA256(secret, salt="remember-plugin-v1",
info="remember:session-id-signing:v1")`` (:meth:`~remember_sync._crypto.Keyring.hmac`),
never the master secret itself.  Ids of the earlier form, ``rs1.``..., were
MACed with the raw secret; they are still accepted until their signed
lifetime runs out (at most :data:`LEGACY_MAX_AGE_MS` when ids never expire),
and never issued again.

Ending a session is not recorded here: the MCP server keeps the ended ones
(:mod:`remember_sync.mcp.revocations`) under :func:`session_digest`, for the
rest of their signed lifetime (:meth:`SessionSigner.deadline_ms`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as _random

from ._clock import Clock, system_clock
from ._crypto import Keyring, b64url_decode, b64url_encode
from .errors import RememberInputTypeError
from .types import MasterSecrets

_VERSION = "rs2"
#: Ids MACed with the raw master secret (before the signing key was derived).
_LEGACY_VERSION = "rs1"
_MAX_ID_LENGTH = 256
#: How far in the future an issue time may lie (clocks of two workers differ).
_FUTURE_SKEW_MS = 60_000
#: The longest an ``rs1`` id is accepted after it was issued when ``max_age_ms`` is
#: ``None``: the old form is retired, so it never lives forever (the default lifetime).
LEGACY_MAX_AGE_MS = 7 * 86_400_000


def session_digest(session_id: str) -> str:
    """A public name for *session_id* that does not grant it: SHA-256, base64url.

    What the server records about an ended session.  It is a plain hash, not an
    HMAC, so it stays the same across a secret rotation (an HMAC under the new
    primary secret would forget every session ended before it); the 144 random
    bits of an id make it impossible to recover from its digest.
    """
    return b64url_encode(
        hashlib.sha256(b"remember_sync ended session\x00" + session_id.encode("utf-8")).digest()
    )


class SessionSigner:
    """Issues and verifies signed session ids.

    :param keyring: the master secrets (``plugin.keyring``); the first signs,
        every one verifies (so a rotation does not end live sessions).
    :param max_age_ms: how long an id stays valid (``None``: forever).
    :param clock: the time ids are issued and checked at, when a call gives no ``now_ms``.
    """

    def __init__(
        self,
        keyring: MasterSecrets,
        *,
        max_age_ms: int | None = 7 * 86_400_000,
        clock: Clock = system_clock,
    ) -> None:
        if not isinstance(keyring, Keyring):
            raise RememberInputTypeError(
                f"keyring must be a plugin's master secrets (plugin.keyring); "
                f"got {type(keyring).__name__}"
            )
        self._keyring = keyring
        self.max_age_ms = max_age_ms
        self._clock = clock

    def __repr__(self) -> str:
        return f"SessionSigner(max_age_ms={self.max_age_ms})"

    @staticmethod
    def _message(nonce: str, issued: str, principal: str | None) -> bytes:
        return f"remember_sync session\x00{nonce}\x00{issued}\x00{principal or ''}".encode()

    def issue(self, principal: str | None = None, *, now_ms: int | None = None) -> str:
        """A new session id bound to *principal* (``None`` for an anonymous caller)."""
        nonce = b64url_encode(_random.token_bytes(18))
        issued = format(now_ms if now_ms is not None else self._clock(), "x")
        mac = b64url_encode(self._keyring.hmac(self._message(nonce, issued, principal)))
        return f"{_VERSION}.{nonce}.{issued}.{mac}"

    def _lifetime_ms(self, version: str) -> int | None:
        if version == _LEGACY_VERSION:
            return self.max_age_ms if self.max_age_ms is not None else LEGACY_MAX_AGE_MS
        return self.max_age_ms

    def verify(
        self, session_id: object, principal: str | None = None, *, now_ms: int | None = None
    ) -> bool:
        """Whether *session_id* was issued by this secret to *principal* and has not expired."""
        if not isinstance(session_id, str) or len(session_id) > _MAX_ID_LENGTH:
            return False
        parts = session_id.split(".")
        if len(parts) != 4 or parts[0] not in (_VERSION, _LEGACY_VERSION):
            return False
        version, nonce, issued, mac_text = parts
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
        # The issue time is public: an expired id (an ``rs1`` one above all, whose MAC
        # is keyed by the raw master secret) is refused before any MAC is computed.
        lifetime = self._lifetime_ms(version)
        now = now_ms if now_ms is not None else self._clock()
        if issued_ms > now + _FUTURE_SKEW_MS:
            return False
        if lifetime is not None and now - issued_ms > lifetime:
            return False
        return self._keyring.verify_hmac(
            self._message(nonce, issued, principal), mac, legacy=version == _LEGACY_VERSION
        )

    def signed_for(self, session_id: str, principal: str | None) -> bool:
        """Whether a configured secret issued *session_id* to *principal*, whatever its age.

        For operator tools telling whose a stored session namespace is (an entry
        outlives its session's lifetime); never for admitting a request, which
        :meth:`verify` decides.
        """
        parts = session_id.split(".")
        try:
            issued_ms = int(parts[2], 16) if len(parts) == 4 else None
        except ValueError:
            issued_ms = None
        return issued_ms is not None and self.verify(session_id, principal, now_ms=issued_ms)

    def deadline_ms(self, session_id: str) -> int | None:
        """The epoch millisecond after which *session_id* no longer verifies (``None``: never).

        Only meaningful for an id :meth:`verify` accepted.
        """
        version, _, issued, _ = session_id.split(".")
        lifetime = self._lifetime_ms(version)
        return None if lifetime is None else int(issued, 16) + lifetime
