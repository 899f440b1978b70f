"""Resolving a container's environment and files from its pod and the ConfigMaps and Secrets
it names: envFrom then env, every valueFrom kind, optional references, volumes with items and
subPath, and the errors that hold a container in CreateContainerConfigError."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agent.sources import SourceError, environment, expand, files, references

Obj = dict[str, Any]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


FETCHED: dict[tuple[str, str], Obj | None] = {
    ("ConfigMap", "cfg"): {
        "data": {"mode": "fast", "level": "3"},
        "binaryData": {"blob": b64("\x00")},
    },
    ("Secret", "creds"): {"data": {"user": b64("admin"), "password": b64("s3cret")}},
    ("ConfigMap", "gone"): None,
}

POD: Obj = {
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "u-1",
        "labels": {"app": "web"},
        "annotations": {"team": "payments"},
    },
    "spec": {
        "nodeName": "local-a",
        "volumes": [
            {"name": "conf", "configMap": {"name": "cfg"}},
            {
                "name": "keys",
                "secret": {"secretName": "creds", "items": [{"key": "password", "path": "db/pw"}]},
            },
            {"name": "maybe", "configMap": {"name": "gone", "optional": True}},
            {"name": "scratch", "emptyDir": {}},
        ],
        "containers": [{"name": "app"}],
    },
}


def test_references_cover_env_env_from_and_volumes() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "s1"}}]}],
            "containers": [
                {
                    "name": "c",
                    "env": [
                        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "m1", "key": "k"}}}
                    ],
                    "envFrom": [{"configMapRef": {"name": "m2"}}],
                }
            ],
            "volumes": [{"name": "v", "secret": {"secretName": "s2"}}],
        }
    }
    assert references(pod) == {
        ("Secret", "s1"),
        ("ConfigMap", "m1"),
        ("ConfigMap", "m2"),
        ("Secret", "s2"),
    }


def test_env_from_then_env_with_every_value_source() -> None:
    container = {
        "name": "app",
        "envFrom": [
            {"configMapRef": {"name": "cfg"}, "prefix": "CFG_"},
            {"secretRef": {"name": "creds"}},
        ],
        "env": [
            {"name": "CFG_mode", "value": "slow"},  # env wins over envFrom
            {"name": "USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {
                "name": "TEAM",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}},
            },
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
            {
                "name": "CPU_M",
                "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}},
            },
            {
                "name": "OPT",
                "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x", "optional": True}},
            },
        ],
        "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1536Ki"}},
    }
    env = environment(POD, container, FETCHED, host_ip="10.0.0.7")
    assert env == {
        "CFG_mode": "slow",
        "CFG_level": "3",
        "CFG_blob": "\x00",
        "user": "admin",
        "password": "s3cret",
        "USER": "admin",
        "POD": "web-1",
        "NS": "shop",
        "APP": "web",
        "TEAM": "payments",
        "NODE": "local-a",
        "IP": "10.0.0.7",
        "MEM": "2",  # 1.5 MiB rounds up
        "CPU": "1",  # a quarter core rounds up to one
        "CPU_M": "250",
    }


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ({"configMapKeyRef": {"name": "gone", "key": "x"}}, 'configmap "gone" not found'),
        (
            {"configMapKeyRef": {"name": "cfg", "key": "nope"}},
            "couldn't find key nope in ConfigMap cfg",
        ),
        ({"secretKeyRef": {"name": "absent", "key": "x"}}, 'secret "absent" not found'),
        (
            {"fieldRef": {"fieldPath": "spec.hostname"}},
            "unsupported fieldRef fieldPath 'spec.hostname'",
        ),
        (
            {"resourceFieldRef": {"resource": "limits.gpu"}},
            "unsupported resourceFieldRef resource 'limits.gpu'",
        ),
    ],
)
def test_missing_or_unsupported_sources_are_errors(var: Obj, message: str) -> None:
    container = {"name": "app", "env": [{"name": "V", "valueFrom": var}]}
    with pytest.raises(SourceError) as caught:
        environment(POD, container, FETCHED)
    assert str(caught.value) == message and caught.value.reason == "CreateContainerConfigError"


def test_a_secret_that_is_not_base64_is_an_error() -> None:
    bad = {("Secret", "creds"): {"metadata": {"name": "creds"}, "data": {"user": "not base64!"}}}
    container = {"name": "app", "envFrom": [{"secretRef": {"name": "creds"}}]}
    with pytest.raises(SourceError, match="secret 'creds'"):
        environment(POD, container, bad)


def test_volume_files_with_items_subpath_and_optional() -> None:
    container = {
        "name": "app",
        "volumeMounts": [
            {"name": "conf", "mountPath": "/etc/app"},
            {"name": "keys", "mountPath": "/run/secrets"},
            {"name": "conf", "mountPath": "/srv/mode.txt", "subPath": "mode"},
            {"name": "maybe", "mountPath": "/opt/maybe"},
            {"name": "scratch", "mountPath": "/tmp/scratch"},
        ],
    }
    assert files(POD, container, FETCHED) == {
        "etc/app/mode": b"fast",
        "etc/app/level": b"3",
        "etc/app/blob": b"\x00",
        "run/secrets/db/pw": b"s3cret",
        "srv/mode.txt": b"fast",
    }


def test_a_missing_volume_object_is_an_error_unless_optional() -> None:
    pod = {"spec": {"volumes": [{"name": "v", "secret": {"secretName": "absent"}}]}}
    container = {"name": "app", "volumeMounts": [{"name": "v", "mountPath": "/s"}]}
    with pytest.raises(SourceError, match='secret "absent" not found'):
        files(pod, container, {("Secret", "absent"): None})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--bind=$(POD_IP)", "--bind=10.0.0.7"),
        ("$(POD_IP):$(PORT)", "10.0.0.7:8000"),
        ("$(MISSING) stays", "$(MISSING) stays"),
        ("$$(POD_IP) is escaped", "$(POD_IP) is escaped"),
        ("$HOME and $(", "$HOME and $("),
    ],
)
def test_dollar_references_expand_like_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"POD_IP": "10.0.0.7", "PORT": "8000"}) == expected


def test_env_values_see_only_earlier_variables() -> None:
    container = {
        "name": "app",
        "env": [
            {"name": "URL", "value": "http://$(HOST):80"},  # HOST is defined later: kept
            {"name": "HOST", "value": "db"},
            {"name": "DSN", "value": "pg://$(HOST)/app"},
        ],
    }
    env = environment(POD, container, FETCHED)
    assert env == {"URL": "http://$(HOST):80", "HOST": "db", "DSN": "pg://db/app"}
