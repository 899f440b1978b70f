"""The dev stack's certificates: a CA clients can trust, leaf certificates for the addresses
servers are reached at, checked by a real TLS handshake in memory, and a kubeconfig that
carries the CA."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from app.devstack import pki
from app.devstack.kubeconfig import kubeconfig

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _handshake(ca_pem: bytes, issued: pki.Issued, tmp: Path, host: str) -> None:
    """A client trusting ``ca_pem`` completes a handshake with a server holding ``issued``
    for ``host``, or raises ``ssl.SSLCertVerificationError``."""
    (tmp / "c.pem").write_bytes(issued.cert_pem)
    (tmp / "k.pem").write_bytes(issued.key_pem)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    client_ctx = ssl.create_default_context(cadata=ca_pem.decode())
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=host)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for name, end, out, peer_in in (("c", client, c_out, s_in), ("s", server, s_out, c_in)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


def test_a_leaf_names_every_host_and_chains_to_the_ca(tmp_path: Path) -> None:
    ca = pki.new_authority(NOW)
    issued = pki.issue(ca, "api", ["127.0.0.1", "localhost", "::1", "127.0.0.1"], NOW)
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.issuer == ca.cert.subject
    assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for host in ("127.0.0.1", "localhost", "::1"):
        _handshake(ca.cert_pem(), issued, tmp_path, host)


def test_a_client_refuses_a_host_not_named_or_another_ca(tmp_path: Path) -> None:
    ca = pki.new_authority(NOW)
    issued = pki.issue(ca, "agent", ["127.0.0.2"], NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(ca.cert_pem(), issued, tmp_path, "127.0.0.3")
    other = pki.new_authority(NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(other.cert_pem(), issued, tmp_path, "127.0.0.2")


def test_a_leaf_never_outlives_its_ca_and_needs_a_host() -> None:
    ca = pki.new_authority(NOW)
    long = pki.issue(ca, "x", ["h"], NOW, days=pki.CA_DAYS * 2)
    cert = x509.load_pem_x509_certificate(long.cert_pem)
    assert cert.not_valid_after_utc == ca.cert.not_valid_after_utc
    with pytest.raises(ValueError):
        pki.issue(ca, "x", [], NOW)


def test_the_ca_is_kept_across_runs_and_replaced_near_its_end(tmp_path: Path) -> None:
    first = pki.cluster_pki(tmp_path, ["127.0.0.1"], {"a": ["127.0.0.2"]}, NOW)
    ca_pem = first.ca.read_bytes()
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0
    assert first.apiserver.key.stat().st_mode & 0o077 == 0
    assert first.agents["a"].cert.exists()
    later = NOW + dt.timedelta(days=100)
    again = pki.cluster_pki(tmp_path, ["127.0.0.1"], {}, later)
    assert again.ca.read_bytes() == ca_pem
    near_end = NOW + dt.timedelta(days=pki.CA_DAYS) - pki.RENEW_BEFORE
    assert pki.cluster_pki(tmp_path, ["127.0.0.1"], {}, near_end).ca.read_bytes() != ca_pem
    (tmp_path / "ca.key").write_text("not a key")
    assert pki.cluster_pki(tmp_path, ["127.0.0.1"], {}, NOW).ca.read_bytes() != ca_pem


def test_the_kubeconfig_carries_the_ca_the_token_and_the_server() -> None:
    config = kubeconfig("https://127.0.0.1:8080", b"PEM", "tok")
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:8080"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"PEM"
    assert config["users"][0]["user"] == {"token": "tok"}
    context = config["contexts"][0]
    assert config["current-context"] == context["name"]
    assert context["context"]["namespace"] == "default"
