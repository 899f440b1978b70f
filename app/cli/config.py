"""Where ``qm`` finds the server and its credentials.

The server URL and bearer token come from, in increasing precedence: built-in defaults, a YAML
file (``$QM_CONFIG`` or ``~/.config/quaymaster/config.yaml``), the ``QM_SERVER`` / ``QM_TOKEN``
environment variables, and the ``--server`` / ``--token`` flags. Resolving them in one pure
function keeps that order testable without touching the real home directory. An ``https``
server is checked against the CA file named by ``certificate-authority`` in the file or
``QM_CA_FILE`` (``make up`` writes its cluster CA there; ADR 0050), else the system's CAs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SERVER = "http://127.0.0.1:8080"
CONFIG_ENV = "QM_CONFIG"
SERVER_ENV = "QM_SERVER"
TOKEN_ENV = "QM_TOKEN"
CA_ENV = "QM_CA_FILE"
CA_KEY = "certificate-authority"


class ConfigError(Exception):
    """The configuration is missing or unreadable; the message says what to set."""


@dataclass(frozen=True)
class Config:
    server: str
    token: str | None
    ca_file: str | None = None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The config file to read: ``$QM_CONFIG`` if set, else the per-user default."""
    env = os.environ if env is None else env
    explicit = env.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "quaymaster" / "config.yaml"


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's mapping, or ``{}`` when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping with 'server' and 'token' keys")
    for key in ("server", "token", CA_KEY):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"config file {path}: '{key}' must be a string")
    return data


def tls_hint(error: str) -> str | None:
    """What to do when a connection failed because the server's certificate is not trusted."""
    if "CERTIFICATE_VERIFY_FAILED" not in error:
        return None
    return (
        f"hint: the server's certificate is not signed by a CA qm trusts; name the CA file in "
        f"'{CA_KEY}:' of the config or {CA_ENV} (make up's is .qm/pki/ca.crt)"
    )


def _first(*values: str | None) -> str | None:
    for value in values:
        if value is not None:
            return value
    return None


def load_config(
    server: str | None = None,
    token: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    require_token: bool = True,
) -> Config:
    """Resolve the effective settings; ``server`` / ``token`` are the command-line flags."""
    env = os.environ if env is None else env
    path = config_path(env)
    data = read_config_file(path)
    resolved_server = _first(server, env.get(SERVER_ENV), data.get("server"), DEFAULT_SERVER)
    resolved_token = _first(token, env.get(TOKEN_ENV), data.get("token"))
    if not resolved_server or not resolved_server.strip():
        raise ConfigError(
            f"no server configured: pass --server, set {SERVER_ENV}, or add 'server:' to {path}"
        )
    resolved_server = resolved_server.strip().rstrip("/")
    if "://" not in resolved_server:
        raise ConfigError(f"server {resolved_server!r} must be a URL such as http://127.0.0.1:8080")
    if require_token and not (resolved_token and resolved_token.strip()):
        raise ConfigError(
            f"no token configured: pass --token, set {TOKEN_ENV}, or add 'token:' to {path}"
        )
    ca_file = _first(env.get(CA_ENV) or None, data.get(CA_KEY))
    if ca_file:
        ca_file = str((path.parent / Path(ca_file).expanduser()).resolve())
    return Config(
        server=resolved_server, token=(resolved_token or "").strip() or None, ca_file=ca_file
    )
