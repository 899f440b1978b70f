"""The local cluster's certificates: one CA, the API server's certificate, each agent's.

``make up`` serves the API over HTTPS and the API server calls the agents' log servers over
HTTPS (ADR 0050). Both sides need certificates a client can check, and a laptop has no
authority to ask, so the dev stack is its own: an ECDSA P-256 CA made once in the state
directory (kept across runs, so a CLI config or kubeconfig written earlier stays valid), and
leaf certificates issued from it on every start with the addresses they are reached at as
subject alternative names. Clients trust the CA file, never "any certificate".

Issuing is pure apart from key generation: :func:`new_authority` and :func:`issue` take the
time as an argument; :func:`cluster_pki` is the shell that reads and writes files.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 365
# A CA this close to its end is replaced (and every client config rewritten with it).
RENEW_BEFORE = dt.timedelta(days=30)
BACKDATE = dt.timedelta(minutes=5)  # clocks of the processes that check may lag a little

Key = ec.EllipticCurvePrivateKey
CA_USAGE = x509.KeyUsage(
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


@dataclass(frozen=True)
class Authority:
    """A CA: its certificate and key."""

    cert: x509.Certificate
    key: Key

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class Issued:
    """A leaf certificate and its key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Paths:
    """Where one certificate and its key are written."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPki:
    """The files :func:`cluster_pki` wrote: the CA certificate (what clients trust), the API
    server's pair and each agent's pair by name."""

    ca: Path
    apiserver: Paths
    agents: dict[str, Paths]


def _key_pem(key: Key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Quaymaster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def new_authority(now: dt.datetime, common_name: str = "quaymaster-ca") -> Authority:
    """A self-signed CA valid from ``now`` for :data:`CA_DAYS` days."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """Each host as an IP address SAN when it is one, else as a DNS name; duplicates dropped."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(h.strip() for h in hosts if h.strip()):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def issue(
    ca: Authority, common_name: str, hosts: Sequence[str], now: dt.datetime,
    days: int = LEAF_DAYS,
) -> Issued:  # fmt: skip
    """A server certificate for ``hosts`` (IP addresses and DNS names), signed by ``ca``."""
    if not hosts:
        raise ValueError("a server certificate needs at least one host")
    key = ec.generate_private_key(ec.SECP256R1())
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names(hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def usable(ca: Authority, now: dt.datetime) -> bool:
    """Whether ``ca`` is still valid for longer than :data:`RENEW_BEFORE`."""
    return ca.cert.not_valid_before_utc <= now and now + RENEW_BEFORE < ca.cert.not_valid_after_utc


# -- the shell: files in the state directory ----------------------------------------------------


def _write(path: Path, data: bytes, private: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    path.chmod(0o600 if private else 0o644)


def load_or_create_authority(directory: Path, now: dt.datetime) -> Authority:
    """The CA kept in ``directory`` (``ca.crt``, ``ca.key``), made anew when missing, unreadable
    or near its end."""
    cert_path, key_path = directory / "ca.crt", directory / "ca.key"
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            ca = Authority(cert, key)
            if usable(ca, now):
                return ca
    except (OSError, ValueError):
        pass
    ca = new_authority(now)
    _write(key_path, _key_pem(ca.key), private=True)
    _write(cert_path, ca.cert_pem(), private=False)
    return ca


def write_issued(issued: Issued, paths: Paths) -> Paths:
    _write(paths.key, issued.key_pem, private=True)
    _write(paths.cert, issued.cert_pem, private=False)
    return paths


def cluster_pki(
    directory: Path,
    api_hosts: Sequence[str],
    agent_hosts: Mapping[str, Sequence[str]],
    now: dt.datetime | None = None,
) -> ClusterPki:
    """The dev stack's certificates under ``directory``: the CA (kept), the API server's for
    ``api_hosts`` and one per agent for its hosts (both issued anew)."""
    now = now or dt.datetime.now(dt.UTC)
    ca = load_or_create_authority(directory, now)
    api = write_issued(
        issue(ca, "quaymaster-apiserver", api_hosts, now),
        Paths(directory / "apiserver.crt", directory / "apiserver.key"),
    )
    agents = {
        name: write_issued(
            issue(ca, f"quaymaster-agent-{name}", hosts, now),
            Paths(directory / f"agent-{name}.crt", directory / f"agent-{name}.key"),
        )
        for name, hosts in agent_hosts.items()
    }
    return ClusterPki(directory / "ca.crt", api, agents)
