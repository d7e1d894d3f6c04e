"""Certificates and kubeconfigs for the lab's control plane, generated per lab with ``cryptography``.

Files written under ``<dir>`` (keys mode 0600):
``ca.crt/ca.key`` (the cluster CA), ``apiserver.crt/.key`` (serving: 127.0.0.1, localhost,
kubernetes.default.svc...), ``admin.crt/.key`` (CN=lab-admin, O=system:masters),
``kube-controller-manager.crt/.key``, ``kube-scheduler.crt/.key``, ``kwok.crt/.key``,
``sa.key/sa.pub`` (service-account token signing).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=30)

#: client identities: file stem -> (CN, O)
CLIENTS = {
    "admin": ("lab-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok-controller", "system:masters"),
}


def _write_key(path: Path, key) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.chmod(path, 0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def issue_client_cert(pki: Path, stem: str, cn: str, org: str | None = None) -> tuple[Path, Path]:
    """Issue a client certificate signed by the lab CA in ``pki``; returns (crt, key) paths.

    Used for the lab's components and by tests that need an identity with no RBAC rights.
    """
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    ca_crt = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    crt = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca_crt.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    crt_path, key_path = pki / f"{stem}.crt", pki / f"{stem}.key"
    crt_path.write_bytes(crt.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return crt_path, key_path


def generate(pki: Path) -> None:
    """Create the CA, the apiserver serving cert, every client cert in CLIENTS and the SA key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("noderemedy-lab-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
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
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki / "ca.key", ca_key)

    srv_key = ec.generate_private_key(ec.SECP256R1())
    sans = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    srv = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "apiserver.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    _write_key(pki / "apiserver.key", srv_key)

    for stem, (cn, org) in CLIENTS.items():
        issue_client_cert(pki, stem, cn, org)

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki / "sa.key", sa)
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def write_kubeconfig(path: Path, server: str, pki: Path, stem: str, user: str | None = None) -> Path:
    """Write a kubeconfig for client ``stem`` (cert/key files in ``pki``) against ``server``; mode 0600."""
    user = user or stem
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "noderemedy-lab",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{stem}.crt"),
                    "client-key": str(pki / f"{stem}.key"),
                },
            }
        ],
        "contexts": [{"name": "noderemedy-lab", "context": {"cluster": "noderemedy-lab", "user": user}}],
        "current-context": "noderemedy-lab",
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    os.chmod(path, 0o600)
    return path


def issue_device_pki(directory: Path, cn: str) -> dict[str, Path]:
    """A device's own CA and its HTTPS serving certificate for 127.0.0.1 / localhost.

    Writes ``ca.crt``, ``server.crt`` and ``server.key`` (0600) under ``directory`` (created) and
    returns ``{"ca": path, "cert": path, "key": path}``. A client verifies the device by ``ca.crt``,
    as an admin would with the CA that signed a BMC's certificate.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{cn}-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    crt = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": directory / "ca.crt", "cert": directory / "server.crt", "key": directory / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(crt.public_bytes(serialization.Encoding.PEM))
    _write_key(paths["key"], key)
    return paths
