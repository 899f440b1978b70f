"""Admission policies on the API's writes: review an admitted object against the policies in
the watch cache, refuse it (403 naming the policy and rule) or send its warnings.

``Objects`` (:mod:`app.api.service`) calls :func:`police` after admission (and after the
priority class was resolved, so ``maxPriority`` sees the number) on create, update and patch,
never on a status write: a policy judges what is asked for, not what a component reports. An
update that leaves the pod spec as it was is not judged again, so a policy added later never
blocks labelling or deleting what already runs. Policies are parsed once per version.
"""

from __future__ import annotations

from typing import Any

from app.api.warning_headers import warn
from app.core.kinds import BY_KIND, Kind
from app.core.policy import POD_SPECS, Policy, forbidden, pod_spec, review
from app.stream.cache import WatchCache

POLICY = BY_KIND["AdmissionPolicy"]
NAMESPACE = BY_KIND["Namespace"]
_parsed: dict[tuple[str, int], Policy] = {}


def policies(cache: WatchCache) -> list[Policy]:
    """Every policy in the cache, parsed (each version once)."""
    out = []
    seen = set()
    for c in cache.iter(POLICY, None):
        key = (c.uid, c.revision)
        seen.add(key)
        if key not in _parsed:
            _parsed[key] = Policy.of(c.obj())
        out.append(_parsed[key])
    for key in [k for k in _parsed if k not in seen]:
        del _parsed[key]
    return out


def police(cache: WatchCache, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise ``Forbidden`` if an enforcing policy refuses ``obj``; otherwise send the warnings."""
    if kind.kind not in POD_SPECS:
        return
    found = policies(cache)
    if not found or (old is not None and pod_spec(kind.kind, obj) == pod_spec(kind.kind, old)):
        return
    meta = obj.get("metadata") or {}
    ns = cache.get(NAMESPACE, "", str(meta.get("namespace", "")))
    verdict = review(found, kind.kind, obj, ns.labels if ns is not None else {})
    if verdict.denied:
        raise forbidden(
            kind.plural, str(meta.get("name") or meta.get("generateName") or ""), verdict.denied
        )
    warn(*verdict.warnings)
