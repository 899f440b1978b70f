"""The Secret envelope (app.core.secretbox) and the keys file (app.store.secret_keys)."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from app.core import secretbox
from app.core.secretbox import Keyring, SecretKeyError
from app.store import secret_keys

DATA = {"password": base64.b64encode(b"hunter2-MARKER").decode(), "user": "YWRtaW4="}


def ring(*ids: str, active: str | None = None) -> Keyring:
    keys = {kid: secretbox.new_key() for kid in ids}
    return Keyring(keys, active or ids[-1], b"d" * 32)


def test_round_trip_and_no_plaintext_in_envelope() -> None:
    r = ring("k1")
    env = secretbox.seal(DATA, r, "team-a", "db")
    assert env.startswith("qm1.k1.")
    assert "hunter2" not in env and DATA["password"] not in env
    assert secretbox.open_envelope(env, r, "team-a", "db") == DATA
    assert secretbox.seal(DATA, r, "team-a", "db") != env  # fresh data key and nonce


@pytest.mark.parametrize("part", [2, 3])
def test_tampered_envelope_refused(part: int) -> None:
    r = ring("k1")
    parts = secretbox.seal(DATA, r, "ns", "s").split(".")
    raw = bytearray(base64.urlsafe_b64decode(parts[part] + "=" * (-len(parts[part]) % 4)))
    raw[-1] ^= 1
    parts[part] = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(SecretKeyError, match="does not authenticate"):
        secretbox.open_envelope(".".join(parts), r, "ns", "s")


def test_envelope_bound_to_its_object_and_key_id() -> None:
    r = ring("k1", "k2", active="k1")
    env = secretbox.seal(DATA, r, "ns", "a")
    with pytest.raises(SecretKeyError):
        secretbox.open_envelope(env, r, "ns", "b")  # copied onto another Secret
    with pytest.raises(SecretKeyError):
        secretbox.open_envelope(env.replace("qm1.k1.", "qm1.k2."), r, "ns", "a")
    with pytest.raises(SecretKeyError, match="unknown"):
        secretbox.open_envelope(env, ring("k9"), "ns", "a")


def test_old_keys_open_new_key_seals() -> None:
    old = ring("k1")
    env = secretbox.seal(DATA, old, "ns", "s")
    both = Keyring({**old.keys, "k2": secretbox.new_key()}, "k2", old.digest_key)
    assert secretbox.open_envelope(env, both, "ns", "s") == DATA
    assert secretbox.key_id(secretbox.seal_spec({"data": DATA}, both, "ns", "s")["data"]) == "k2"


def test_seal_spec_keeps_type_and_drops_string_data() -> None:
    spec = secretbox.seal_spec(
        {"type": "Opaque", "data": DATA, "stringData": {"x": "y"}}, ring("k1"), "n", "s"
    )
    assert spec["type"] == "Opaque" and "stringData" not in spec
    assert secretbox.is_envelope(spec["data"])


def test_open_fields_and_redact() -> None:
    r = ring("k1")
    obj = {"kind": "Secret", "metadata": {"namespace": "n", "name": "s"}, "type": "Opaque"}
    sealed = {**obj, "data": secretbox.seal(DATA, r, "n", "s")}
    assert secretbox.open_fields(sealed, r)["data"] == DATA
    empty = {**obj, "data": secretbox.seal({}, r, "n", "s")}
    assert "data" not in secretbox.open_fields(empty, r)
    shown = secretbox.redact(sealed)
    assert "data" not in shown
    assert shown["metadata"]["annotations"] == {secretbox.REDACTED_ANNOTATION: "true"}


def test_digest_stable_across_keys_and_order() -> None:
    a, b = ring("k1"), ring("k2")
    b = Keyring(b.keys, b.active, a.digest_key)
    d = secretbox.digest(DATA, a)
    assert d == secretbox.digest(dict(reversed(list(DATA.items()))), b)
    assert d != secretbox.digest({**DATA, "user": "cm9vdA=="}, a)
    assert d != secretbox.digest(DATA, a, "kubernetes.io/basic-auth")
    assert d != secretbox.digest(DATA, Keyring(a.keys, a.active, b"e" * 32))


def test_keys_file_created_0600_rotated_and_pruned(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert secret_keys.ensure_keys_file(path)
    assert not secret_keys.ensure_keys_file(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    first, _ = secret_keys.parse(path.read_text())
    kid = secret_keys.add_key(path)
    second, _ = secret_keys.parse(path.read_text())
    assert second.active == kid and set(second.keys) == {first.active, kid}
    assert second.digest_key == first.digest_key  # digests survive rotations
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert secret_keys.remove_keys(path, {first.active, kid}) == [first.active]
    third, _ = secret_keys.parse(path.read_text())
    assert set(third.keys) == {kid}


def test_key_source_reloads_on_change_and_on_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    secret_keys.ensure_keys_file(path)
    now = [0.0]
    source = secret_keys.KeySource(path, monotonic=lambda: now[0])
    before = source.ring().active
    kid = secret_keys.add_key(path)
    assert source.ring().active == before  # not yet looked again
    env = secretbox.seal(DATA, secret_keys.parse(path.read_text())[0], "n", "s")
    assert source.open(env, "n", "s") == DATA  # an unknown key id forces a reload
    assert source.ring().active == kid
    secret_keys.add_key(path)
    now[0] += secret_keys.RELOAD_S
    assert source.ring().active != kid


def test_no_keys_file_refuses() -> None:
    with pytest.raises(SecretKeyError, match="QM_SECRET_KEYS"):
        secret_keys.KeySource(None).ring()
    with pytest.raises(SecretKeyError, match="no active"):
        secretbox.seal(DATA, Keyring(), "n", "s")


def test_store_seal_refuses_an_envelope_of_another_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.json"
    secret_keys.ensure_keys_file(path)
    monkeypatch.setenv(secret_keys.ENV, str(path))
    sealed = secret_keys.seal_spec({"data": DATA}, "ns", "a")
    assert secret_keys.seal_spec(sealed, "ns", "a") == sealed  # written back as read
    with pytest.raises(SecretKeyError):
        secret_keys.seal_spec(sealed, "ns", "copy-of-a")
    opened = secret_keys.open_object({"metadata": {"namespace": "ns", "name": "a"}, **sealed})
    assert secret_keys.open_object(
        {"metadata": {"namespace": "ns", "name": "b"},
         **secret_keys.seal_spec({"data": opened["data"]}, "ns", "b")}
    )["data"] == DATA  # fmt: skip
