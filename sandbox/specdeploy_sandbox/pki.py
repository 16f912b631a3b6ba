"""Certificates and keys for one sandbox control plane.

The apiserver is served over TLS with client-certificate authentication so that RBAC is real:
the admin identity is a client certificate in ``system:masters``, and every other identity
(service accounts) is authorized by RBAC rules. Everything is generated locally per sandbox.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specdeploy.controller.certs import certificate_builder

ADMIN_USER = "specdeploy-admin"
ADMIN_GROUP = "system:masters"
# The identity the apiserver presents to admission webhooks (an operator started with
# --webhook-client-ca refuses every other client).
WEBHOOK_CLIENT = "kube-apiserver-webhook-client"
# Names the in-cluster `kubernetes` Service answers to, plus loopback where the apiserver listens.
_APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files of one sandbox."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    webhook_client_cert: Path
    webhook_client_key: Path
    service_account_key: Path
    service_account_pub: Path

    @classmethod
    def in_dir(cls, directory: Path) -> Pki:
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            apiserver_cert=directory / "apiserver.crt",
            apiserver_key=directory / "apiserver.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            webhook_client_cert=directory / "webhook-client.crt",
            webhook_client_key=directory / "webhook-client.key",
            service_account_key=directory / "sa.key",
            service_account_pub=directory / "sa.pub",
        )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs; a leaf signs and enciphers keys (TLS)."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _ec_key()
    builder = (
        certificate_builder(subject, ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage(ca=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def generate(directory: Path) -> Pki:
    """Write a fresh CA, apiserver serving cert, admin and webhook client certs and the
    service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki.in_dir(directory)

    ca_key = _ec_key()
    ca_name = _name("specdeploy-sandbox-ca")
    ca_cert = (
        certificate_builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            _key_usage(ca=True),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.ca_key, _key_pem(ca_key), private=True)

    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    sans += [x509.DNSName(name) for name in _APISERVER_DNS]
    server_cert, server_key = _leaf(
        ca_key, ca_name, _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans
    )
    _write(pki.apiserver_cert, server_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.apiserver_key, _key_pem(server_key), private=True)

    admin_cert, admin_key = _leaf(
        ca_key, ca_name, _name(ADMIN_USER, ADMIN_GROUP), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    _write(pki.admin_cert, admin_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.admin_key, _key_pem(admin_key), private=True)

    client_cert, client_key = _leaf(ca_key, ca_name, _name(WEBHOOK_CLIENT), ExtendedKeyUsageOID.CLIENT_AUTH)
    _write(pki.webhook_client_cert, client_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.webhook_client_key, _key_pem(client_key), private=True)

    # Service-account tokens are signed RS256, the algorithm every Kubernetes client expects.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki.service_account_key, _key_pem(sa_key), private=True)
    _write(
        pki.service_account_pub,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return pki


def loopback_serving_certificate(keys: Pki, common_name: str, directory: Path) -> None:
    """``tls.crt`` and ``tls.key`` for a server on 127.0.0.1, signed by the sandbox CA (which the
    apiserver is given as a webhook's ``caBundle``)."""
    ca_cert = x509.load_pem_x509_certificate(keys.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(keys.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{keys.ca_key} is not the sandbox's EC CA key")
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert, key = _leaf(ca_key, ca_cert.subject, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory / "tls.crt", cert.public_bytes(serialization.Encoding.PEM))
    _write(directory / "tls.key", _key_pem(key), private=True)
