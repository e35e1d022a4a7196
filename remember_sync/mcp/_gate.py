"""Sessions and the rate limit of :class:`~remember_sync.mcp.McpServer`.

:class:`SessionGate` issues signed session ids, lets a request on only with a live
session of its own caller, ends sessions (``DELETE``) and counts requests against
the rate limit.  It answers with a :class:`~._wsgi._Response` when it refuses.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import _metrics
from .._clock import Clock
from .._sessions import SessionSigner
from ..errors import RememberStoreError, RememberUnavailableError
from ..identity import is_anonymous, principal_of
from ._ratelimit import RateLimiter
from ._wsgi import McpRequest, _Response
from .revocations import FULL_CODE, EndedSessions

log = logging.getLogger("remember_sync.mcp")


class SessionGate:
    """Session ids (signed, bound to the caller, ended in the store) and the rate limit."""

    def __init__(
        self,
        session_signer: SessionSigner,
        ended: EndedSessions,
        rate_limiter: RateLimiter | None,
        clock: Clock,
    ) -> None:
        self.session_signer = session_signer
        self.ended = ended
        self.rate_limiter = rate_limiter
        self.clock = clock

    def issue(self, principal: str | None) -> str:
        """A new session id for *principal* (``initialize``)."""
        session_id = self.session_signer.issue(principal, now_ms=self.clock())
        _metrics.SESSIONS_OPENED.add()
        return session_id

    def refuse(
        self, session_id: str, principal: str | None, request_id: Any = None
    ) -> _Response | None:
        """``None`` when *session_id* is live and was issued to *principal*; else the reply.

        The signature is checked first: a store read happens only for an id this
        server issued to this caller, never for whatever a client sends.
        """
        if not self.session_signer.verify(session_id, principal, now_ms=self.clock()):
            return _Response.error(404, "Session not found", request_id=request_id)
        try:
            ended = self.ended.is_ended(session_id)
        except RememberStoreError as exc:
            # Fail closed: a session whose end cannot be checked is not served.
            log.warning("remember-sync MCP: cannot check for ended sessions: %s", exc.message)
            return _Response.unavailable(
                "the store could not be read to check the session", request_id=request_id
            )
        if ended:
            return _Response.error(404, "Session not found", request_id=request_id)
        return None

    def require(self, request: McpRequest, request_id: Any = None) -> _Response | None:
        """``None`` when the request may go on: it names a live session of its caller."""
        if request.session_id is None:
            return _Response.error(
                400, "Bad Request: Mcp-Session-Id header is required", request_id=request_id
            )
        return self.refuse(request.session_id, request.principal, request_id)

    def end(self, request: McpRequest) -> _Response:
        """``DELETE``: end the caller's session named by the request."""
        session_id, principal = request.session_id, request.principal
        if session_id is None:
            return _Response.error(400, "Bad request: DELETE needs the Mcp-Session-Id to end")
        refused = self.refuse(session_id, principal)
        if refused is not None:
            return refused
        now = self.clock()
        try:
            deadline = self.session_signer.deadline_ms(session_id)
            self.ended.end(session_id, deadline, now, principal)
        except RememberStoreError as exc:
            log.warning("remember-sync MCP: cannot end a session: %s", exc.message)
            # The store's own message can name hosts: only the cap's is shown.
            why = exc.message if exc.code == FULL_CODE else "the store could not be written"
            return _Response.unavailable(f"the session was not ended ({why})", 60)
        _metrics.SESSIONS_ENDED.add()
        return _Response(204)

    def rate_check(self, request: McpRequest, cost: int = 1) -> _Response | None:
        """``None`` when the caller is within the rate limit (counting *cost*); else ``429``."""
        limiter = self.rate_limiter
        if limiter is None or cost < 1:
            return None
        try:
            for caller in self.rate_callers(request):
                wait = limiter.retry_after(caller, cost)
                if wait is not None:
                    break
        except RememberUnavailableError as exc:
            log.warning("remember-sync MCP: %s", exc.message)
            return _Response.unavailable("the rate limit could not be checked")
        if wait is None:
            return None
        _metrics.RATE_LIMITED.add()
        return _Response.too_many(limiter.rate, wait)

    def rate_callers(self, request: McpRequest) -> tuple[str, ...]:
        """Whom a request counts against, each with the whole budget.

        A signed-in caller: its principal (:func:`~remember_sync.identity.principal_of`),
        the one its quota is charged to, wherever it connects from.  An anonymous
        caller: its network address (``REMOTE_ADDR``: behind a reverse proxy, the
        address the proxy forwards, once the server trusts it -- ``serve
        --trusted-proxy``, werkzeug's ``ProxyFix``), so opening sessions never adds
        to its budget; and, once it
        has a verified session, that session's principal too, so a session shared
        between addresses has no more than one budget either.
        """
        principal = request.principal
        if not is_anonymous(principal):
            return (str(principal_of(principal, None)),)
        address = "address\x00" + request.remote_addr
        sent, now = request.session_id, self.clock()
        if sent is not None and self.session_signer.verify(sent, principal, now_ms=now):
            session = principal_of(principal, sent)
            if session is not None:
                return (address, session)
        return (address,)
