"""Certificates and keys for the test bed: a CA, the API server's serving cert, an admin client,
and serving certs for webhooks the API server calls on 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

_VALID = datetime.timedelta(days=365)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _sign(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
          sans: list[x509.GeneralName] | None = None, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALID)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False), critical=True)
    else:
        usage = x509.oid.ExtendedKeyUsageOID
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([usage.SERVER_AUTH if server else usage.CLIENT_AUTH]),
            critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: Path) -> None:
    """Write ca.crt, apiserver.{crt,key}, admin.{crt,key} and sa.{key,pub} into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("sunk-testbed-ca")
    ca = _sign(ca_name, ca_key, ca_name, ca_key, ca=True)
    (directory / "ca.crt").write_bytes(_pem(ca))
    _write_key(ca_key, directory / "ca.key")

    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"), x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
    ]
    server = _sign(_name("kube-apiserver"), server_key, ca_name, ca_key, ca=False, sans=sans,
                   server=True)
    (directory / "apiserver.crt").write_bytes(_pem(server))
    _write_key(server_key, directory / "apiserver.key")

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _sign(_name("sunk-testbed-admin", "system:masters"), admin_key, ca_name, ca_key,
                  ca=False)
    (directory / "admin.crt").write_bytes(_pem(admin))
    _write_key(admin_key, directory / "admin.key")

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(sa_key, directory / "sa.key")
    (directory / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def webhook_cert(pki: Path, directory: Path, name: str) -> None:
    """A serving cert for 127.0.0.1 signed by the test bed's CA, as ``tls.crt`` and ``tls.key``
    in ``directory`` (the names controller-runtime's webhook server reads): the API server
    reaches webhooks by ``url: https://127.0.0.1:<port>/...`` with ca.crt as the CA bundle."""
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki / 'ca.key'} is not the EC key make_pki writes")
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                    x509.DNSName("localhost")]
    cert = _sign(_name(name), key, ca.subject, ca_key, ca=False, sans=sans, server=True)
    (directory / "tls.crt").write_bytes(_pem(cert))
    _write_key(key, directory / "tls.key")


def kubeconfig(server: str, pki: Path, *, user: str = "admin", token: str | None = None) -> str:
    """A kubeconfig for ``server``: the admin client cert, or a bearer ``token`` if given."""
    if token is not None:
        cred = f"    token: {token}\n"
    else:
        cred = (f"    client-certificate: {pki / 'admin.crt'}\n"
                f"    client-key: {pki / 'admin.key'}\n")
    return (
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: sunk-testbed\n  cluster:\n"
        f"    server: {server}\n    certificate-authority: {pki / 'ca.crt'}\n"
        f"users:\n- name: {user}\n  user:\n{cred}"
        "contexts:\n- name: sunk-testbed\n  context:\n"
        f"    cluster: sunk-testbed\n    user: {user}\n    namespace: default\n"
        "current-context: sunk-testbed\n"
    )
