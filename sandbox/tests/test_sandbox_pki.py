"""Certificates the sandbox apiserver and its admin client use."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from specdeploy_sandbox import pki


def test_serving_cert_covers_loopback_and_admin_is_a_master(tmp_path: Path) -> None:
    keys = pki.generate(tmp_path)
    server = x509.load_pem_x509_certificate(keys.apiserver_cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)

    admin = x509.load_pem_x509_certificate(keys.admin_cert.read_bytes())
    groups = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert groups == ["system:masters"]
    ca = x509.load_pem_x509_certificate(keys.ca_cert.read_bytes())
    assert admin.issuer == ca.subject == server.issuer
    assert keys.admin_key.stat().st_mode & 0o077 == 0
    assert b"PUBLIC KEY" in keys.service_account_pub.read_bytes()
