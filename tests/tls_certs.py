"""Throw-away TLS certificates for the Redis TLS tests, made with ``cryptography``.

:func:`make_certs` writes PEM files into a directory:

* a test CA, and a second, unrelated CA (a client trusting only the second must
  refuse the server);
* a server certificate for ``127.0.0.1`` and ``localhost`` signed by the CA (also
  used by every server of a cluster or Sentinel set, and for their own links);
* a client certificate signed by the CA (for ``tls-auth-clients yes``);
* an EXPIRED server certificate signed by the CA (valid for a day, a week ago).

Keys are P-256 (fast to make; Redis and Python's ``ssl`` both accept them).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TlsFiles", "make_certs"]


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the PEM files :func:`make_certs` wrote."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    expired_cert: Path
    expired_key: Path
    other_ca_cert: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "remember_sync tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


_Pair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def _ca(common_name: str, now: datetime.datetime) -> _Pair:
    key = _key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=30))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    *,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = _key()
    # Every leaf may serve and connect: a cluster node or replica is a TLS client of
    # its peers with the same certificate.
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_certs(directory: Path) -> TlsFiles:
    """Write a CA, server, client, expired-server and unrelated-CA certificate into *directory*."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca = _ca("remember_sync test CA", now)
    other_ca = _ca("an unrelated CA", now)
    day = datetime.timedelta(days=1)
    valid = {"not_before": now - day, "not_after": now + 7 * day}
    server = _leaf("127.0.0.1", ca, server=True, **valid)
    client = _leaf("remember client", ca, server=False, **valid)
    expired = _leaf(
        "127.0.0.1",
        ca,
        server=True,
        not_before=now - datetime.timedelta(days=8),
        not_after=now - datetime.timedelta(days=7),
    )
    return TlsFiles(
        ca_cert=_write_cert(directory / "ca.crt", ca[0]),
        server_cert=_write_cert(directory / "server.crt", server[0]),
        server_key=_write_key(directory / "server.key", server[1]),
        client_cert=_write_cert(directory / "client.crt", client[0]),
        client_key=_write_key(directory / "client.key", client[1]),
        expired_cert=_write_cert(directory / "expired.crt", expired[0]),
        expired_key=_write_key(directory / "expired.key", expired[1]),
        other_ca_cert=_write_cert(directory / "other-ca.crt", other_ca[0]),
    )
