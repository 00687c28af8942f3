"""The cluster's certificate authority: `xce ca init` and `xce ca issue`.

Every gRPC connection is TLS with certificates from one cluster CA, and
every party presents one (mutual TLS). A certificate says what its holder
is in the subject: the organization is the role, the common name the name.

| role | common name | proves |
|---|---|---|
| `replica` | replica id | a controller replica (server certificate; also its client one) |
| `worker` | host name | that host's worker: it may join only as that host |
| `scheduler` | scheduler id | a scheduler: it may hold the lease under that id |
| `client` | anything | admits the connection, proves nothing: people use a token or MUNGE |

Keys are ECDSA P-256 (fast handshakes), written 0600; certificates 0644.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from xce.private import write_private

ROLES = ("replica", "worker", "scheduler", "client")
CA_DAYS = 3650
LEAF_DAYS = 825
# Valid from this long before issue (as Let's Encrypt backdates): a host whose clock is behind by up to
# an hour still accepts a certificate issued just now (soak/README.md: clock faults).
BACKDATE = datetime.timedelta(hours=1)


class PkiError(Exception):
    """A missing CA, a bad role or name, an unreadable certificate."""


@dataclass(frozen=True)
class Identity:
    role: str
    name: str


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def init_ca(directory: Path, cluster_id: str) -> Path:
    """Create ca.crt and ca.key in `directory` unless they exist; return ca.crt's path."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "ca.crt", directory / "ca.key"
    if cert_path.exists() and key_path.exists():
        return cert_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "xce"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"xce cluster {cluster_id} CA")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    write_private(key_path, _key_pem(key))
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return cert_path


def issue(directory: Path, role: str, name: str, sans: Sequence[str] = (), days: int = LEAF_DAYS,
          out: Path | None = None) -> tuple[Path, Path]:
    """Sign a certificate for `role`/`name` with the CA in `directory`; (cert path, key path).

    `sans`: the host names and IP addresses a server certificate answers for."""
    if role not in ROLES:
        raise PkiError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if not name or "/" in name or len(name) > 64:
        raise PkiError("the name must be 1-64 characters without '/'")
    try:
        ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    except (OSError, ValueError) as exc:
        raise PkiError(f"no usable CA in {directory} ({exc}); run `xce ca init` first") from None
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if role == "replica":
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, role),
                                        x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE)
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(s) for s in sans]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    out = out or directory
    out.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out / f"{role}-{name}.crt", out / f"{role}-{name}.key"
    write_private(key_path, _key_pem(key))
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return cert_path, key_path


def _san(value: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        return x509.DNSName(value)


def identity(pem: bytes) -> Identity:
    """Role and name from a certificate the TLS layer already verified against the cluster CA."""
    cert = x509.load_pem_x509_certificate(pem)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    role = str(orgs[0].value) if orgs else ""
    name = str(names[0].value) if names else ""
    return Identity(role if role in ROLES else "", name)
