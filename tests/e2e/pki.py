"""Certificates and keys for a loopback control plane, made fresh per test session.

One CA signs the API server's serving certificate (SANs 127.0.0.1, localhost and the
`kubernetes` service names) and one admin client certificate (O=system:masters) used by
the test code, the controller-manager, the scheduler and kwok. A separate RSA key pair
signs and verifies ServiceAccount tokens. Short-lived (2 days): these never leave the
session's temporary directory.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class Pki:
    """Paths of the files the components are started with."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public: Path
    sa_private: Path


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> (
        x509.CertificateBuilder):
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY))


def make_pki(directory: Path) -> Pki:
    """Write a CA, a serving and an admin certificate and a ServiceAccount key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("edl-e2e-ca")
    ca = (_builder(ca_name, ca_name, ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    serving_key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default",
                                      "kubernetes.default.svc")]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.0.0.1")]
    serving = (_builder(_name("kube-apiserver"), ca_name, serving_key)
               .add_extension(x509.SubjectAlternativeName(sans), critical=False)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                              critical=False)
               .sign(ca_key, hashes.SHA256()))

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = (_builder(_name("edl-e2e-admin", "system:masters"), ca_name, admin_key)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                            critical=False)
             .sign(ca_key, hashes.SHA256()))

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(*(directory / n for n in ("ca.crt", "apiserver.crt", "apiserver.key", "admin.crt",
                                         "admin.key", "sa.pub", "sa.key")))
    pki.ca_cert.write_bytes(_pem_cert(ca))
    pki.serving_cert.write_bytes(_pem_cert(serving))
    pki.serving_key.write_bytes(_pem_key(serving_key))
    pki.admin_cert.write_bytes(_pem_cert(admin))
    pki.admin_key.write_bytes(_pem_key(admin_key))
    pki.sa_private.write_bytes(_pem_key(sa_key))
    pki.sa_public.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for key in (pki.serving_key, pki.admin_key, pki.sa_private):
        key.chmod(0o600)
    return pki
