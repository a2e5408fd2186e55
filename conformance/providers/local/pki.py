"""The cluster's certificate authority, component certificates and kubeconfigs.

Real TLS everywhere the API server is involved: every component authenticates with a
client certificate whose subject maps to its built-in RBAC identity, and the kubelet
serves with a certificate the API server verifies.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's subject: CN is the user, O the groups."""

    component: str
    user: str
    groups: tuple[str, ...] = ()


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class CertificateAuthority:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cert_path = directory / "ca.crt"
        self.key_path = directory / "ca.key"

    def ensure(self) -> None:
        """Create the CA once; an existing one is kept so that issued certificates stay valid."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.cert_path.exists() and self.key_path.exists():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name("kuberay-conformance-ca"))
            .issuer_name(_name("kuberay-conformance-ca"))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY * 10)
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
            .sign(key, hashes.SHA256())
        )
        _write_key(key, self.key_path)
        _write_cert(cert, self.cert_path)

    def issue(
        self,
        name: str,
        subject: x509.Name,
        *,
        client: bool,
        server: bool,
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:
        """Issue (or reuse) `name.crt`/`name.key` signed by this CA."""
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        if cert_path.exists() and key_path.exists():
            return cert_path, key_path
        ca_key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] * client + [ExtendedKeyUsageOID.SERVER_AUTH] * server
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        _write_key(key, key_path)
        _write_cert(cert, cert_path)
        return cert_path, key_path

    def issue_client(self, identity: ClientIdentity) -> tuple[Path, Path]:
        return self.issue(
            identity.component, _name(identity.user, identity.groups), client=True, server=False
        )


def ensure_service_account_key(directory: Path) -> tuple[Path, Path]:
    """The key pair that signs and verifies ServiceAccount tokens."""
    private, public = directory / "service-account.key", directory / "service-account.pub"
    if private.exists() and public.exists():
        return private, public
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(key, private)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def write_kubeconfig(
    path: Path, *, server: str, ca: Path, cert: Path, key: Path, user: str, cluster: str
) -> None:
    """A kubeconfig with the certificates inlined, so it can be copied elsewhere and still work."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [
            {"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
