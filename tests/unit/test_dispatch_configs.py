"""The dispatcher wakes a Deployment when a ConfigMap or Secret its template references
changes, and stops once the template no longer does (config rollouts)."""

from __future__ import annotations

from typing import Any

from app.stream.informer import Change
from workers.dispatch import NamespaceIndex, keys_of


def change(kind: str, name: str, op: str = "M", **body: Any) -> Change:
    obj = {"kind": kind, "metadata": {"namespace": "web", "name": name}, **body}
    return Change(1, kind, op, "u-" + name, "web", name, 1, obj)


def deployment(name: str, *refs: str) -> Change:
    env = [{"configMapRef": {"name": r}} for r in refs if not r.startswith("s:")]
    volumes = [{"name": f"v{i}", "secret": {"secretName": r[2:]}}
               for i, r in enumerate(refs) if r.startswith("s:")]  # fmt: skip
    spec = {"volumes": volumes, "containers": [{"name": "c", "image": "x", "envFrom": env}]}
    return change("Deployment", name, spec={"template": {"spec": spec}})


def test_a_config_change_wakes_the_deployments_that_reference_it() -> None:
    index = NamespaceIndex()
    keys_of([deployment("a", "settings", "s:creds"), deployment("b", "settings")], index)
    assert keys_of([change("ConfigMap", "settings")], index) == [
        ("Deployment", "web", "a"),
        ("Deployment", "web", "b"),
    ]
    assert keys_of([change("Secret", "creds")], index) == [("Deployment", "web", "a")]
    assert keys_of([change("ConfigMap", "other")], index) == []


def test_a_template_that_drops_the_reference_or_a_deleted_deployment_is_not_woken() -> None:
    index = NamespaceIndex()
    keys_of([deployment("a", "settings"), deployment("b", "settings")], index)
    keys_of([deployment("a", "other"), change("Deployment", "b", op="D")], index)
    assert keys_of([change("ConfigMap", "settings")], index) == []
    assert ("Deployment", "web", "a") in keys_of([change("ConfigMap", "other", op="D")], index)
