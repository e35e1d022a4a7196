"""How the Redis store reads a TLS failure from redis-py's exception chain, and how it parses
a ``redis+sentinel://`` URL (no server needed).

The real failures -- wrong CA, expired certificate, missing client certificate
-- are produced against TLS servers in tests/test_redis_tls_acl.py; these pin
the cases those servers cannot show cheaply: a host name mismatch, and which
closed connections get the client-certificate hint.
"""

from __future__ import annotations

import ssl

import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.stores._redis_connect import connection_retry, parse_sentinel_url
from remember_sync.stores._redis_tls import CLIENT_CERT_HINT, sends_no_client_cert, tls_cause
from remember_sync.stores.redis import _mapped


def _wrapped(error: BaseException) -> RedisConnectionError:
    """What redis-py raises: a ConnectionError whose ``__context__`` is the OSError."""
    try:
        try:
            raise error
        except OSError:
            raise RedisConnectionError("Error 1 connecting to db.internal:6380.")  # noqa: B904
    except RedisConnectionError as wrapped:
        return wrapped


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_code, error.verify_message = code, message
    return error


def test_verify_failures_are_configuration_errors_with_their_own_hint() -> None:
    """Wrong CA, expired, host name mismatch: each says what to check; none is retried."""
    cases = {
        19: "check ssl_ca_certs",  # self-signed certificate in the chain
        10: "renew it on the server",  # expired
        62: "ssl_check_hostname=False",  # host name mismatch
    }
    for code, hint in cases.items():
        exc = _wrapped(_verify_error(code, "x"))
        error = _mapped("GET", exc)
        assert isinstance(error, RememberConfigurationError), code
        assert hint in str(error) and "db.internal:6380" in str(error), str(error)
        cause = tls_cause(exc)
        assert cause is not None and cause.configuration


def test_a_certificate_error_is_tried_once() -> None:
    """connection_retry gives up at once on a rejected certificate, retries a refused port."""
    for error, attempts in ((_verify_error(19, "x"), 1), (ConnectionRefusedError(111, "no"), 3)):
        calls: list[int] = []

        def attempt(error: OSError = error) -> None:
            calls.append(1)
            raise _wrapped(error)

        try:
            connection_retry(2).call_with_retry(attempt, lambda _error: None)
        except RedisConnectionError:
            pass
        assert len(calls) == attempts, error


def test_closed_tls_connection_hint_only_without_a_client_certificate() -> None:
    """EOF or reset: a retried store error; the hint only when no client certificate is sent."""
    for closed in (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
                   ConnectionResetError(104, "reset")):
        exc = _wrapped(closed)
        hinted = _mapped("SET", exc, no_client_cert=True)
        plain = _mapped("SET", exc)
        assert type(hinted) is RememberStoreError and CLIENT_CERT_HINT in str(hinted)
        assert type(plain) is RememberStoreError and "client certificate" not in str(plain)
        cause = tls_cause(exc, no_client_cert=True)
        assert cause is not None and not cause.configuration


def test_sends_no_client_cert_reads_every_kind_of_client() -> None:
    """Plain, TLS with and without a certificate, and URL-built clients."""
    assert not sends_no_client_cert(redis.Redis())
    assert sends_no_client_cert(redis.Redis(ssl=True))
    assert not sends_no_client_cert(redis.Redis(ssl=True, ssl_certfile="c.pem", ssl_keyfile="k"))
    assert sends_no_client_cert(redis.Redis.from_url("rediss://h:1/0"))


def test_encoded_sentinel_passwords_decode() -> None:
    """``%2F`` etc. in a redis+sentinel:// password decode to the characters they stand for."""
    parsed = parse_sentinel_url("redis+sentinel://app:ab%2Fcd%3F%23%40SECRET@h:1/svc")
    assert parsed.password == "ab/cd?#@SECRET"


def test_sentinel_url_parts() -> None:
    """Users, passwords (percent-decoded), IPv6, default port, db and TLS from the URL."""
    parsed = parse_sentinel_url("rediss+sentinel://app:p%40ss@[::1]:5000,s2/svc/3")
    assert parsed.sentinels == [("::1", 5000), ("s2", 26379)]
    assert (parsed.service_name, parsed.db, parsed.ssl) == ("svc", 3, True)
    assert (parsed.username, parsed.password) == ("app", "p@ss")
    plain = parse_sentinel_url("redis+sentinel://s1:1/svc")
    assert (plain.db, plain.username, plain.password, plain.ssl) == (None, None, None, False)
