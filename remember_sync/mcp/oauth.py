"""OAuth 2.1 resource server: JWT access tokens from an issuer, RFC 9728 metadata.

:class:`OAuthVerifier` is a token verifier (``token -> principal | None``, see
:mod:`remember_sync.mcp.auth`) for JWT access tokens signed by an
authorization server (the *issuer*).  ``remember-sync serve --oauth-issuer URL
--oauth-audience AUD`` and ``create_app`` (``REMEMBER_OAUTH_ISSUER``,
``REMEMBER_OAUTH_AUDIENCE``) build one; pass your own to
``McpServer(token_verifier=...)``.  It needs the ``oauth`` extra
(``pip install 'remember-sync[oauth]'``: PyJWT with ``cryptography``), which
the rest of the package never imports.

A token is accepted when, checked by PyJWT:

* its header names an algorithm of the allow-list (asymmetric only:
  ``none`` and every ``HS*`` are refused, so a token "signed" with the
  issuer's public key as an HMAC secret is refused) and a key of the issuer's
  JWKS of that algorithm's type (by ``kid``);
* its signature verifies with that key;
* ``iss`` is the issuer, ``aud`` names the audience, ``exp`` is in the future
  and ``nbf`` (if any) in the past, both with a small leeway (30 s);
* ``sub`` is a non-empty principal that is not anonymous (``anon:``); it
  becomes the caller's ``user_id``.

The JWKS comes from ``jwks_url`` or from the issuer's metadata
(``/.well-known/oauth-authorization-server``, RFC 8414, then
``/.well-known/openid-configuration``); every URL fetched, redirects included,
must be ``https://`` (``http://`` only on loopback), and each fetch ends within
``timeout_s`` as a whole.  It is cached; a token naming an
unknown ``kid`` triggers a refetch (the issuer rotated its keys), at most once
per ``refresh_cooldown_s`` so that a flood of made-up ``kid`` values cannot
hammer the issuer.  When the keys cannot be fetched the verifier raises
:class:`~remember_sync.errors.RememberUnavailableError` and the server answers
``503`` -- never ``401`` and never an anonymous caller -- and the next fetch is
tried after a short backoff (``failure_backoff_s``, doubling up to
``failure_backoff_max_s``), so the server is back within seconds of the
issuer, while failures still cost the issuer at most one request per backoff.
Cached keys older than ``cache_ttl_s`` are refetched; if that fails, the cached ones keep verifying
until the issuer answers again (a key the issuer withdrew stays trusted that
long: an outage of the issuer is not a reason to refuse every user).

The verifier also describes the protected resource (:class:`ProtectedResource`):
:class:`~remember_sync.mcp.McpServer` serves its RFC 9728 metadata at
``/.well-known/oauth-protected-resource`` (and the path-suffixed form, e.g.
``/.well-known/oauth-protected-resource/mcp``) and links it from every ``401``
(``WWW-Authenticate: Bearer resource_metadata="..."``).  See
``docs/authentication.rst``.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from .. import _metrics
from .._config import OAUTH_ENV
from ..errors import RememberConfigurationError, RememberUnavailableError
from ..identity import is_anonymous

__all__ = [
    "DEFAULT_ALGORITHMS",
    "METADATA_PATH",
    "OAUTH_ENV",
    "OAuthVerifier",
    "ProtectedResource",
    "metadata_url",
    "oauth_verifier_from_env",
    "well_known_resource",
]

log = logging.getLogger("remember_sync.mcp.oauth")

#: The well-known path of RFC 9728 protected resource metadata.
METADATA_PATH = "/.well-known/oauth-protected-resource"
#: Algorithms accepted by default: every asymmetric one PyJWT verifies.
DEFAULT_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
)
# The key type (and EC curve / OKP curves) each asymmetric algorithm verifies with.
_KEY_TYPES: dict[str, tuple[str, frozenset[str] | None]] = {
    **{a: ("RSA", None) for a in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")},
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_MAX_DOCUMENT_BYTES = 1024 * 1024
_MAX_TOKEN_CHARS = 16 * 1024
_MAX_PRINCIPAL_CHARS = 256
_INSTALL_HINT = "pip install 'remember-sync[oauth]'"


@runtime_checkable
class ProtectedResource(Protocol):
    """A token verifier that also describes the resource it protects (RFC 9728).

    :class:`~remember_sync.mcp.McpServer` serves :meth:`resource_metadata` at
    the well-known paths and links it from its ``401`` replies when its
    ``token_verifier`` has these two members.
    """

    #: The resource identifier (the MCP endpoint's URL); ``None``: from each request.
    resource: str | None

    def resource_metadata(self, resource: str) -> dict[str, Any]:
        """The RFC 9728 metadata document for *resource*."""
        ...  # pragma: no cover - a protocol


def _jwt() -> Any:
    """PyJWT, imported on first use (the ``oauth`` extra)."""
    try:
        import jwt
        from jwt.algorithms import has_crypto
    except ImportError as exc:
        raise RememberConfigurationError(
            f"OAuth access tokens need PyJWT with cryptography: {_INSTALL_HINT}"
        ) from exc
    if not has_crypto:  # pragma: no cover - cryptography is a core dependency
        raise RememberConfigurationError(
            f"OAuth access tokens need PyJWT's cryptography support: {_INSTALL_HINT}"
        )
    return jwt


def _check_url(url: object, what: str) -> str:
    """*url* if ``https://`` (``http://`` on a loopback host); else a configuration error."""
    text = url.strip() if isinstance(url, str) else ""
    parts = urlsplit(text)
    secure = parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)
    if not secure or not parts.hostname or parts.fragment or parts.username is not None:
        raise RememberConfigurationError(
            f"{what} must be an https:// URL (http:// only on localhost, 127.0.0.1 or ::1), "
            f"without a fragment or credentials; got {url!r}"
        )
    return text


def _discovery_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be: RFC 8414 first, then OpenID Connect's forms."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    urls = [
        urlunsplit(parts._replace(path="/.well-known/oauth-authorization-server" + path)),
        urlunsplit(parts._replace(path="/.well-known/openid-configuration" + path)),
        urlunsplit(parts._replace(path=path + "/.well-known/openid-configuration")),
    ]
    return list(dict.fromkeys(urls))


class _NotFound(Exception):
    """The URL answered 404 (try the next discovery URL)."""


class _FetchFailed(Exception):
    """The issuer's keys could not be fetched; the message says why."""


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to a URL :func:`_check_url` accepts (no https -> http, no ftp)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            _check_url(newurl, "a redirect")
        except RememberConfigurationError:
            raise OSError(f"refused a redirect to {newurl[:200]!r}") from None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_CheckedRedirects)


def _read_body(response: Any, deadline: float) -> bytes:
    """The body, at most ``_MAX_DOCUMENT_BYTES + 1`` bytes, read before *deadline* (monotonic).

    The socket timeout bounds each read; a server trickling bytes would pass it
    for ever, so the whole body gets the same time.
    """
    chunks: list[bytes] = []
    size = 0
    while size <= _MAX_DOCUMENT_BYTES:
        if time.monotonic() > deadline:
            raise OSError("timed out reading the reply")
        chunk = response.read1(min(65536, _MAX_DOCUMENT_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _fetch_json(url: str, timeout_s: float) -> dict[str, Any]:
    """GET *url* as a JSON object; ``_NotFound`` for 404, ``OSError``/``ValueError`` otherwise.

    The whole exchange takes at most about *timeout_s* (twice that when the
    connection and the reply are both slow); redirects are followed only to
    URLs :func:`_check_url` accepts.
    """
    # Every URL fetched passed _check_url (http or https), and so does every redirect.
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310
    deadline = time.monotonic() + timeout_s
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            body = _read_body(response, deadline)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404:
            raise _NotFound(url) from None
        raise OSError(f"HTTP {exc.code}") from None
    except http.client.HTTPException as exc:  # a broken reply (not an OSError)
        raise OSError(f"bad HTTP reply: {type(exc).__name__}") from None
    if len(body) > _MAX_DOCUMENT_BYTES:
        raise ValueError(f"larger than {_MAX_DOCUMENT_BYTES} bytes")
    try:
        document = json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


class OAuthVerifier:
    """Verify JWT access tokens of one issuer; the principal is their ``sub``.

    :param issuer: the authorization server's issuer identifier (an
        ``https://`` URL; ``http://`` only on a loopback host), compared
        exactly with the tokens' ``iss``.
    :param audience: the audience this server accepts in ``aud`` (a string,
        or several: any one matches), typically the MCP endpoint's URL.
    :param jwks_url: the issuer's JWKS; default: the ``jwks_uri`` of the
        issuer's metadata (RFC 8414, then OpenID Connect discovery).
    :param resource: this server's resource identifier for the RFC 9728
        metadata (the MCP endpoint's public URL); default: derived from each
        request's ``Host`` and the server's path (right on loopback; set it
        behind a proxy).
    :param algorithms: accepted signature algorithms; asymmetric ones only
        (default :data:`DEFAULT_ALGORITHMS`).
    :param leeway_s: clock skew allowed on ``exp`` and ``nbf`` (default 30).
    :param timeout_s: timeout of each request to the issuer (default 5).
    :param refresh_cooldown_s: the JWKS is fetched at most once per this many
        seconds for unknown ``kid`` values (default 30).
    :param failure_backoff_s: after a failed fetch, the next one is tried after
        this many seconds, doubling with each further failure (default 0.5) ...
    :param failure_backoff_max_s: ... up to this many (default 4): the server
        answers again at most this long after the issuer is back.
    :param cache_ttl_s: cached keys are refetched after this long (default 3600).
    :raises RememberConfigurationError: a bad argument, or the ``oauth``
        extra is not installed.
    """

    def __init__(
        self,
        issuer: str,
        audience: str | Sequence[str],
        *,
        jwks_url: str | None = None,
        resource: str | None = None,
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway_s: float = 30,
        timeout_s: float = 5,
        refresh_cooldown_s: float = 30,
        cache_ttl_s: float = 3600,
        failure_backoff_s: float = 0.5,
        failure_backoff_max_s: float = 4,
    ) -> None:
        self._jwt = _jwt()
        self.issuer = _check_url(issuer, "the OAuth issuer")
        audiences = [audience] if isinstance(audience, str) else list(audience)
        if not audiences or not all(isinstance(a, str) and a.strip() for a in audiences):
            raise RememberConfigurationError(
                f"the OAuth audience must be a non-empty string (or several); got {audience!r}"
            )
        self.audience = audiences
        self.jwks_url = None if jwks_url is None else _check_url(jwks_url, "the OAuth JWKS URL")
        self.resource = None if resource is None else _check_url(resource, "the OAuth resource")
        if isinstance(algorithms, str) or not algorithms:
            raise RememberConfigurationError("algorithms must be a non-empty list of names")
        bad = [a for a in algorithms if a not in _KEY_TYPES]
        if bad:
            raise RememberConfigurationError(
                f"algorithm(s) {', '.join(map(repr, bad))} not allowed for access tokens: only "
                f"asymmetric ones ({', '.join(DEFAULT_ALGORITHMS)}); never none or HS*"
            )
        self.algorithms = tuple(dict.fromkeys(algorithms))
        for name, value in (("leeway_s", leeway_s), ("timeout_s", timeout_s),
                            ("refresh_cooldown_s", refresh_cooldown_s),
                            ("cache_ttl_s", cache_ttl_s),
                            ("failure_backoff_s", failure_backoff_s),
                            ("failure_backoff_max_s", failure_backoff_max_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise RememberConfigurationError(f"{name} must be a number >= 0; got {value!r}")
        self.leeway_s = leeway_s
        self.timeout_s = timeout_s
        self.refresh_cooldown_s = refresh_cooldown_s
        self.cache_ttl_s = cache_ttl_s
        self.failure_backoff_s = failure_backoff_s
        self.failure_backoff_max_s = failure_backoff_max_s
        self._clock: Callable[[], float] = time.monotonic
        self._fetch_lock = threading.Lock()
        self._jwks_uri = self.jwks_url
        self._keys: list[dict[str, Any]] | None = None  # the JWKS's usable signing keys
        self._prepared: dict[tuple[str | None, str], Any] = {}
        self._fetched_at = 0.0  # when the keys were last fetched (clock)
        self._attempted_at: float | None = None  # when a fetch was last tried
        self._failed = False  # the last fetch failed
        self._failures = 0  # fetches failed in a row
        self._error = ""  # why it failed
        self._generation = 0  # fetches completed
        self.fetches = 0  # JWKS fetch attempts so far (for monitoring)

    def __repr__(self) -> str:
        return f"OAuthVerifier(issuer={self.issuer!r}, audience={self.audience!r})"

    # -- ProtectedResource ------------------------------------------------------------------

    def resource_metadata(self, resource: str) -> dict[str, Any]:
        """The RFC 9728 document: *resource*, the issuer, header bearer tokens, algorithms."""
        return {
            "resource": resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": list(self.algorithms),
        }

    # -- verification -----------------------------------------------------------------------

    def __call__(self, token: str) -> str | None:
        """The token's ``sub`` when it is valid; ``None`` when it is not.

        :raises RememberUnavailableError: the issuer's keys cannot be fetched now.
        """
        jwt = self._jwt
        if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return self._refuse("not a JWT")
        alg = header.get("alg")
        if alg not in self.algorithms:
            return self._refuse(f"algorithm {str(alg)[:20]!r} is not allowed")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            return self._refuse("kid is not a string")
        key = self._key(kid, alg)
        if key is None:
            return self._refuse("no key of the issuer's JWKS matches its kid and algorithm")
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as exc:
            return self._refuse(type(exc).__name__)
        subject = claims.get("sub")
        if (
            not isinstance(subject, str)
            or not subject.strip()
            or subject != subject.strip()
            or len(subject) > _MAX_PRINCIPAL_CHARS
            or is_anonymous(subject)
            or any(ord(c) < 32 or ord(c) == 127 for c in subject)
        ):
            return self._refuse("sub is not a usable principal")
        return subject

    @staticmethod
    def _refuse(why: str) -> None:
        log.debug("OAuth access token refused: %s", why)  # never the token itself
        return None

    def _key(self, kid: str | None, alg: str) -> Any:
        """The verification key for (*kid*, *alg*), fetching the JWKS when needed.

        :raises RememberUnavailableError: the keys cannot be had and none cached fits.
        """
        generation = self._generation  # before looking: a fetch after this one counts
        now = self._clock()
        fresh = self._keys is not None and now - self._fetched_at < self.cache_ttl_s
        cooled = self._cooled_down(now)
        if fresh or not cooled:
            found = self._match(kid, alg)
            if found is not None:
                return found
            if not cooled:  # at most one fetch per cooldown, whatever the kids sent
                if self._failed:
                    raise self._unavailable(self._error)
                return None
        if not self._refresh(generation):
            found = self._match(kid, alg)  # the cached keys, however old
            if found is not None:
                return found
            raise self._unavailable(self._error)
        return self._match(kid, alg)

    def _cooled_down(self, now: float) -> bool:
        return self._attempted_at is None or now - self._attempted_at >= self._pause()

    def _pause(self) -> float:
        """Seconds between a fetch and the next: the cooldown, or after failures the backoff."""
        if not self._failed:
            return self.refresh_cooldown_s
        doubled = self.failure_backoff_s * 2.0 ** min(self._failures - 1, 30)
        return min(doubled, self.failure_backoff_max_s, self.refresh_cooldown_s)

    def _refresh(self, generation: int) -> bool:
        """Fetch the JWKS unless a fetch ended since *generation*; whether the keys are new."""
        with self._fetch_lock:
            if self._generation != generation:
                return not self._failed  # another thread fetched while this one waited
            self.fetches += 1
            try:
                keys = self._fetch_keys()
            except _FetchFailed as exc:
                self._failed = True
                self._failures += 1
                self._error = str(exc)
                _metrics.OAUTH_KEY_FETCHES.add("error")
                log.warning("cannot fetch the signing keys of the OAuth issuer %s: %s",
                            self.issuer, self._error)
            else:
                self._keys = keys
                self._prepared = {}
                self._failed = False
                self._failures = 0
                _metrics.OAUTH_KEY_FETCHES.add("ok")
            # Set when the fetch ends: callers arriving meanwhile see no cooldown, wait for the
            # lock above and use this fetch's keys instead of being refused.
            self._attempted_at = self._clock()
            if not self._failed:
                self._fetched_at = self._attempted_at
            self._generation += 1
            return not self._failed

    def _unavailable(self, why: str) -> RememberUnavailableError:
        """The error for keys that cannot be had; ``Retry-After`` is the wait left."""
        retry = 1
        if self._attempted_at is not None:
            left = self._pause() - (self._clock() - self._attempted_at)
            retry = max(1, int(left + 0.999))
        return RememberUnavailableError(
            f"cannot fetch the signing keys of the OAuth issuer {self.issuer}: {why}",
            retry_after_s=retry,
        )

    def _fetch_keys(self) -> list[dict[str, Any]]:
        if self._jwks_uri is None:
            self._jwks_uri = self._discover()
        try:
            document = _fetch_json(self._jwks_uri, self.timeout_s)
        except (_NotFound, OSError, ValueError) as exc:
            raise _FetchFailed(f"{self._jwks_uri}: {_reason(exc)}") from exc
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise _FetchFailed(f"{self._jwks_uri} is not a JWK set (no 'keys' list)")
        return [
            k for k in keys
            if isinstance(k, dict) and k.get("kty") in ("RSA", "EC", "OKP")
            and k.get("use", "sig") == "sig"  # never a symmetric ("oct") key
        ]

    def _discover(self) -> str:
        """The issuer's ``jwks_uri``, from its RFC 8414 or OpenID Connect metadata."""
        problems: list[str] = []
        for url in _discovery_urls(self.issuer):
            try:
                metadata = _fetch_json(url, self.timeout_s)
            except (_NotFound, OSError, ValueError) as exc:
                problems.append(f"{url}: {_reason(exc)}")
                continue
            if metadata.get("issuer") != self.issuer:
                # RFC 8414 section 3.3: the metadata must name the issuer it was fetched for.
                problems.append(f"{url}: names issuer {str(metadata.get('issuer'))[:200]!r}")
                continue
            try:
                return _check_url(metadata.get("jwks_uri"), f"jwks_uri of {url}")
            except RememberConfigurationError as exc:
                problems.append(exc.message)
        raise _FetchFailed("no usable issuer metadata (" + "; ".join(problems) + ")")

    def _match(self, kid: str | None, alg: str) -> Any:
        """The prepared public key of the JWKS for (*kid*, *alg*); ``None`` when there is none."""
        cache_key = (kid, alg)
        if cache_key in self._prepared:
            return self._prepared[cache_key]
        kty, curves = _KEY_TYPES[alg]
        candidates = [
            k for k in (self._keys or [])
            if k.get("kty") == kty
            and (curves is None or k.get("crv") in curves)
            and k.get("alg", alg) == alg
            and (kid is None or k.get("kid") == kid)
        ]
        if len(candidates) != 1:  # without a kid, only an unambiguous key
            return None
        try:
            key = self._jwt.PyJWK(candidates[0], algorithm=alg).key
        except self._jwt.PyJWTError:
            return None
        self._prepared[cache_key] = key  # only keys of the JWKS: bounded by its size
        return key


def _reason(exc: Exception) -> str:
    if isinstance(exc, _NotFound):
        return "404 Not Found"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


# -- used by McpServer ------------------------------------------------------------------------


def well_known_resource(request_path: str, mcp_path: str | None) -> bool | None:
    """Whether *request_path* asks for protected resource metadata.

    ``True`` for ``/.well-known/oauth-protected-resource`` and its form suffixed
    with the MCP path (RFC 9728 section 3.1); ``None`` for any other path.
    """
    if request_path in (METADATA_PATH, METADATA_PATH + "/"):
        return True
    if mcp_path and request_path in (METADATA_PATH + mcp_path, METADATA_PATH + mcp_path + "/"):
        return True
    return None


def metadata_url(resource: str) -> str:
    """Where the metadata of *resource* is: the well-known path inserted before its path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit(parts._replace(path=METADATA_PATH + path, query="", fragment=""))


def request_resource(environ: Mapping[str, Any], mcp_path: str | None) -> str:
    """The resource identifier seen by this request: scheme, ``Host``, mount point and path."""
    scheme = str(environ.get("wsgi.url_scheme") or "http")
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "localhost")
    base = str(environ.get("SCRIPT_NAME") or "").rstrip("/")
    return f"{scheme}://{host}{base}{mcp_path or ''}"


def oauth_verifier_from_env(env: Mapping[str, str]) -> OAuthVerifier | None:
    """An :class:`OAuthVerifier` from ``REMEMBER_OAUTH_*`` (:data:`OAUTH_ENV`); ``None`` if unset.

    :raises RememberConfigurationError: only some of issuer and audience are
        set, or a value is invalid.
    """
    given = {arg: env.get(name, "").strip() or None for name, arg in OAUTH_ENV.items()}
    if not any(given.values()):
        return None
    if not given["issuer"] or not given["audience"]:
        raise RememberConfigurationError(
            "OAuth needs both REMEMBER_OAUTH_ISSUER and REMEMBER_OAUTH_AUDIENCE "
            "(REMEMBER_OAUTH_JWKS_URL and REMEMBER_OAUTH_RESOURCE are optional)"
        )
    return OAuthVerifier(
        given["issuer"], given["audience"], jwks_url=given["jwks_url"], resource=given["resource"]
    )
