"""Where the server URL and token come from, and in which order."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.config import DEFAULT_SERVER, ConfigError, config_path, load_config


def write(path: Path, text: str) -> dict[str, str]:
    path.write_text(text)
    return {"QM_CONFIG": str(path)}


def test_defaults_when_only_token_given(tmp_path: Path) -> None:
    env = {"QM_CONFIG": str(tmp_path / "missing.yaml")}
    config = load_config(token="t", env=env)
    assert config.server == DEFAULT_SERVER
    assert config.token == "t"


def test_file_over_defaults(tmp_path: Path) -> None:
    env = write(tmp_path / "c.yaml", "server: http://file:1/\ntoken: file-token\n")
    config = load_config(env=env)
    assert (config.server, config.token) == ("http://file:1", "file-token")


def test_env_over_file(tmp_path: Path) -> None:
    env = write(tmp_path / "c.yaml", "server: http://file:1\ntoken: file-token\n")
    env |= {"QM_SERVER": "http://env:2", "QM_TOKEN": "env-token"}
    config = load_config(env=env)
    assert (config.server, config.token) == ("http://env:2", "env-token")


def test_flags_over_env(tmp_path: Path) -> None:
    env = write(tmp_path / "c.yaml", "server: http://file:1\ntoken: file-token\n")
    env |= {"QM_SERVER": "http://env:2", "QM_TOKEN": "env-token"}
    config = load_config("http://flag:3", "flag-token", env=env)
    assert (config.server, config.token) == ("http://flag:3", "flag-token")


def test_mixed_sources(tmp_path: Path) -> None:
    env = write(tmp_path / "c.yaml", "token: file-token\n") | {"QM_SERVER": "http://env:2"}
    config = load_config(env=env)
    assert (config.server, config.token) == ("http://env:2", "file-token")


def test_default_path_uses_home_and_xdg(tmp_path: Path) -> None:
    assert config_path({"HOME": "/home/u"}) == Path("/home/u/.config/quaymaster/config.yaml")
    xdg = config_path({"HOME": "/home/u", "XDG_CONFIG_HOME": "/x"})
    assert xdg == Path("/x/quaymaster/config.yaml")
    assert config_path({"QM_CONFIG": str(tmp_path / "q.yaml")}) == tmp_path / "q.yaml"


def test_missing_token_is_a_clear_error(tmp_path: Path) -> None:
    env = {"QM_CONFIG": str(tmp_path / "none.yaml")}
    with pytest.raises(ConfigError, match=r"no token configured.*QM_TOKEN"):
        load_config(env=env)
    assert load_config(env=env, require_token=False).token is None


def test_empty_server_is_a_clear_error(tmp_path: Path) -> None:
    env = {"QM_CONFIG": str(tmp_path / "none.yaml"), "QM_SERVER": ""}
    with pytest.raises(ConfigError, match="no server configured"):
        load_config(token="t", env=env)


def test_server_must_be_a_url(tmp_path: Path) -> None:
    env = {"QM_CONFIG": str(tmp_path / "none.yaml")}
    with pytest.raises(ConfigError, match="must be a URL"):
        load_config("localhost:8080", "t", env=env)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("server: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("server: 8080\n", "'server' must be a string"),
    ],
)
def test_bad_file(tmp_path: Path, text: str, fragment: str) -> None:
    env = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError, match=fragment):
        load_config(token="t", env=env)


def test_empty_file_is_fine(tmp_path: Path) -> None:
    env = write(tmp_path / "c.yaml", "")
    assert load_config(token="t", env=env).server == DEFAULT_SERVER
