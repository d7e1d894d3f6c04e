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


def _write_cert(path: Path, crt: x509.Certificate) -> None:
    path.write_bytes(crt.public_bytes(serialization.Encoding.PEM))


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key,
    signing_key,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    """A certificate for ``public_key`` signed by ``signing_key`` (SHA-256), valid from five minutes
    ago (clock skew between the lab's processes) for :data:`VALIDITY`, with ``extensions``
    (``(extension, critical)`` pairs)."""
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256())


def _leaf(
    usage: x509.ObjectIdentifier, sans: list[x509.GeneralName] | None = None
) -> list[tuple[x509.ExtensionType, bool]]:
    """The extensions of an end-entity certificate: not a CA, extended key usage ``usage``
    (server or client authentication), and the subject alternative names ``sans`` if given."""
    out: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([usage]), False),
    ]
    if sans:
        out.append((x509.SubjectAlternativeName(sans), False))
    return out


def issue_client_cert(pki: Path, stem: str, cn: str, org: str | None = None) -> tuple[Path, Path]:
    """Issue a client certificate signed by the lab CA in ``pki``; returns (crt, key) paths.

    Used for the lab's components and by tests that need an identity with no RBAC rights.
    """
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    ca_crt = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    crt = _certificate(
        _name(cn, org), ca_crt.subject, key.public_key(), ca_key, _leaf(ExtendedKeyUsageOID.CLIENT_AUTH)
    )
    crt_path, key_path = pki / f"{stem}.crt", pki / f"{stem}.key"
    _write_cert(crt_path, crt)
    _write_key(key_path, key)
    return crt_path, key_path


def generate(pki: Path) -> None:
    """Create the CA, the apiserver serving cert, every client cert in CLIENTS and the SA key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("noderemedy-lab-ca")
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    ca = _certificate(
        ca_name,
        ca_name,
        ca_key.public_key(),
        ca_key,
        [(x509.BasicConstraints(ca=True, path_length=None), True), (usage, True)],
    )
    _write_cert(pki / "ca.crt", ca)
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
    srv = _certificate(
        _name("kube-apiserver"),
        ca_name,
        srv_key.public_key(),
        ca_key,
        _leaf(ExtendedKeyUsageOID.SERVER_AUTH, sans),
    )
    _write_cert(pki / "apiserver.crt", srv)
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


def write_kubeconfig(
    path: Path, server: str, pki: Path, stem: str, user: str | None = None, tls_server_name: str | None = None
) -> Path:
    """Write a kubeconfig for client ``stem`` (cert/key files in ``pki``, user ``user``, default
    ``stem``) against ``server``; mode 0600. With ``tls_server_name`` the server's certificate is
    checked for that name instead of the host in ``server`` (a real node reaches the apiserver
    through a relay)."""
    user = user or stem
    cluster = {"server": server, "certificate-authority": str(pki / "ca.crt")}
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "noderemedy-lab", "cluster": cluster}],
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
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{cn}-ca")
    ca = _certificate(
        ca_name, ca_name, ca_key.public_key(), ca_key, [(x509.BasicConstraints(ca=True, path_length=0), True)]
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    crt = _certificate(
        _name(cn), ca_name, key.public_key(), ca_key, _leaf(ExtendedKeyUsageOID.SERVER_AUTH, sans)
    )
    paths = {"ca": directory / "ca.crt", "cert": directory / "server.crt", "key": directory / "server.key"}
    _write_cert(paths["ca"], ca)
    _write_cert(paths["cert"], crt)
    _write_key(paths["key"], key)
    return paths


def device_endpoint(port: int, username: str, password: str, tls: dict[str, Path], **more: object) -> dict:
    """What a test needs to reach an HTTPS device of the lab on 127.0.0.1:``port`` with basic
    authentication, its server certificate from :func:`issue_device_pki` (``tls``)::

        {"host": "127.0.0.1", "port": port, "username": username, "password": password,
         "ca_file": str (the device's CA), **more}
    """
    base = {"host": "127.0.0.1", "port": port, "username": username, "password": password}
    return {**base, "ca_file": str(tls["ca"]), **more}
