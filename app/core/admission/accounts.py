"""Admission of ServiceAccounts: the references a service account carries.

A ServiceAccount holds no credential itself (its tokens are records of ``qm_tokens``, minted by
the tokens API); it names the Secrets its pods may mount and pull images with, as Kubernetes'.
"""

from __future__ import annotations

from app.core.admission._util import Errs, Obj
from app.core.names import validate_dns1123_subdomain

MAX_REFERENCES = 256


def _references(e: Errs, obj: Obj, key: str) -> None:
    items = e.get_list(obj, key, "")
    if items is None:
        return
    if len(items) > MAX_REFERENCES:
        e.too_many(key, MAX_REFERENCES)
        return
    for path, ref in e.objects(items, key):
        name = e.get_str(ref, "name", path, required=True)
        if name:
            e.each_error(f"{path}.name", name, validate_dns1123_subdomain(name))


def check_serviceaccount(e: Errs, obj: Obj, old: Obj | None) -> None:
    _references(e, obj, "secrets")
    _references(e, obj, "imagePullSecrets")
    e.get_bool(obj, "automountServiceAccountToken", "")
