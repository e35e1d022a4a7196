"""What a failed TLS connection to Redis means: a configuration mistake, or maybe one.

redis-py turns every :class:`ssl.SSLError` into a
:class:`redis.exceptions.ConnectionError` whose ``__context__`` is the
original; :func:`tls_cause` walks that chain.  A certificate the client
rejects (wrong CA, expired, wrong host name) or a client certificate the
server rejects is a configuration error: :mod:`._redis_connect` does not retry
it and :mod:`.redis` raises
:class:`~remember_sync.errors.RememberConfigurationError` saying what to check.
A TLS connection the server closes right away (``EOF occurred in violation of
protocol``, reset) is ambiguous -- a server going down looks the same -- so it
stays a retried :class:`~remember_sync.errors.RememberStoreError`, with a hint
when the store sends no client certificate.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
import redis.cluster
from redis.connection import SSLConnection

#: OpenSSL alert reasons meaning "the server refused our client certificate (or its absence)".
_CLIENT_CERT_ALERTS = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_UNKNOWN_CA",
    }
)
# X509_V_ERR_* codes of ssl.SSLCertVerificationError.verify_code.
_NOT_YET_VALID, _EXPIRED, _HOSTNAME_MISMATCH = 9, 10, 62

#: Added to a closed or reset TLS connection's error when the store sends no client certificate.
CLIENT_CERT_HINT = (
    "if this persists, the server may require a client certificate: "
    "set ssl_certfile and ssl_keyfile"
)


@dataclass(frozen=True)
class TlsCause:
    """Why a TLS connection failed, as far as the exception chain tells.

    :ivar configuration: retrying cannot help (a certificate was rejected).
    :ivar hint: what to check, for the error message.
    """

    configuration: bool
    hint: str


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """*exc*, then its causes and (unsuppressed) contexts; bounded, cycle-safe."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:
            current = None
        else:
            current = current.__context__


def _verify_hint(error: ssl.SSLCertVerificationError) -> str:
    code = error.verify_code
    if code in (_EXPIRED, _NOT_YET_VALID):
        return (
            "the server's certificate is outside its validity period: renew it on the server "
            "(a TLS configuration error, not retried)"
        )
    if code == _HOSTNAME_MISMATCH:
        return (
            "the server's certificate does not name the host connected to: connect by a name "
            "it lists, or set ssl_check_hostname=False (a TLS configuration error, not retried)"
        )
    return (
        "check ssl_ca_certs: it must hold the CA that signed the server's certificate "
        "(a TLS configuration error, not retried)"
    )


def tls_cause(exc: BaseException, *, no_client_cert: bool = False) -> TlsCause | None:
    """The TLS reason behind *exc* (a redis-py exception), or ``None`` if there is none.

    *no_client_cert*: the connection uses TLS without a client certificate; only
    then is a closed or reset connection given :data:`CLIENT_CERT_HINT`.
    """
    for error in _chain(exc):
        if isinstance(error, ssl.SSLCertVerificationError):
            return TlsCause(True, _verify_hint(error))
        reason = getattr(error, "reason", None)  # set on OpenSSL's errors, not all SSLErrors
        if isinstance(error, ssl.SSLError) and reason in _CLIENT_CERT_ALERTS:
            return TlsCause(
                True,
                "the server refused the client certificate, or its absence: check "
                "ssl_certfile and ssl_keyfile (a TLS configuration error, not retried)",
            )
        if no_client_cert and isinstance(error, (ssl.SSLEOFError, ConnectionResetError)):
            return TlsCause(False, CLIENT_CERT_HINT)
    return None


def sends_no_client_cert(client: redis.Redis | redis.cluster.RedisCluster) -> bool:
    """Whether *client* connects with TLS but without a client certificate."""
    kwargs: dict[str, Any]
    if isinstance(client, redis.cluster.RedisCluster):
        kwargs = dict(getattr(client.nodes_manager, "connection_kwargs", None) or {})
        connection_class = kwargs.get("connection_class")
    else:
        pool = client.connection_pool
        kwargs = dict(getattr(pool, "connection_kwargs", None) or {})
        connection_class = getattr(pool, "connection_class", None)
    tls = kwargs.get("ssl") is True or (
        isinstance(connection_class, type) and issubclass(connection_class, SSLConnection)
    )
    return tls and not kwargs.get("ssl_certfile")
