"""Where the CLI and the agent find the cluster CA and the agent its serving certificate, and
what ``make up`` writes for them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent import config as agent_config
from app.cli.config import ConfigError, load_config, tls_hint
from app.devstack import up


def test_the_cli_trusts_the_ca_its_config_names(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: https://127.0.0.1:8080\ntoken: t\ncertificate-authority: pki/ca.crt\n")
    env = {"QM_CONFIG": str(path)}
    assert load_config(env=env).ca_file == str(tmp_path / "pki" / "ca.crt")  # beside the file
    assert load_config(env=env | {"QM_CA_FILE": "/elsewhere/ca.crt"}).ca_file == (
        "/elsewhere/ca.crt"
    )
    path.write_text("server: https://127.0.0.1:8080\ntoken: t\n")
    assert load_config(env=env).ca_file is None  # the system's authorities
    path.write_text("token: t\ncertificate-authority: 3\n")
    with pytest.raises(ConfigError):
        load_config(env=env)


def test_the_agent_takes_a_ca_and_a_serving_pair() -> None:
    env = {"QM_CA_FILE": "/pki/ca.crt", "QM_API_URL": "https://127.0.0.1:1"}
    cfg = agent_config.parse(
        ["--node-name", "n", "--tls-cert-file", "a.crt", "--tls-key-file", "a.key"], env
    )
    assert (cfg.ca_file, cfg.tls_cert_file, cfg.tls_key_file) == ("/pki/ca.crt", "a.crt", "a.key")
    plain = agent_config.parse(["--node-name", "n"], {})
    assert (plain.ca_file, plain.tls_cert_file) == (None, None)
    with pytest.raises(agent_config.ConfigError):
        agent_config.parse(["--node-name", "n", "--tls-cert-file", "a.crt"], {})


def test_make_up_writes_the_ca_into_the_cli_config_and_a_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QM_CONFIG", str(tmp_path / "qm.yaml"))
    pki = up.stack_pki(tmp_path / "state")
    written = yaml.safe_load(
        up.write_cli_config("https://127.0.0.1:8080", "tok", pki.ca).read_text()
    )
    assert written == {
        "server": "https://127.0.0.1:8080",
        "token": "tok",
        "certificate-authority": str(pki.ca),
    }
    kube = up.write_kubeconfig(tmp_path / "state", "https://127.0.0.1:8080", pki, "tok")
    assert kube.stat().st_mode & 0o077 == 0
    assert yaml.safe_load(kube.read_text())["users"][0]["user"]["token"] == "tok"
    assert set(pki.agents) == {"a", "b", "c"}
    agent_a = next(c for c in up.COMPONENTS if c.name == "agent-a")
    assert "{state}/pki/agent-a.crt" in agent_a.argv


def test_an_untrusted_certificate_gets_a_hint() -> None:
    failed = "GET https://x/apis: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
    hint = tls_hint(failed)
    assert hint is not None and "certificate-authority:" in hint and "QM_CA_FILE" in hint
    assert tls_hint("GET https://x/apis: [Errno 111] Connection refused") is None
