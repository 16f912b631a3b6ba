"""Self-made TLS for the admission webhook: a private CA and a serving certificate.

The apiserver only calls webhooks over HTTPS and checks the certificate against the
configuration's caBundle. Generating both here means the webhook works with no extra
components installed (cert-manager is optional in the chart).
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

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class ServingCertificate:
    """PEM files of a CA and a serving certificate it signed."""

    ca_cert: Path
    cert: Path
    key: Path


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def certificate_builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    """A certificate valid from five minutes ago (clock skew) for VALIDITY; shared with the sandbox PKI."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _cn(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def serving_certificate(
    directory: Path, hosts: list[str], name: str = "specdeploy-webhook"
) -> ServingCertificate:
    """Write ca.crt, tls.crt and tls.key valid for ``hosts`` (IP addresses or DNS names)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _cn(f"{name}-ca")
    ca = (
        certificate_builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        certificate_builder(_cn(hosts[0]), ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    result = ServingCertificate(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    result.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    result.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    result.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    result.key.chmod(0o600)
    return result
