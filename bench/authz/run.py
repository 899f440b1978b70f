"""What an RBAC check costs as tenants grow: the policy's full build (at start or after the
cache reloads), one binding's change applied to it, and one check (allowed, refused, the
hidden-namespace test, an all-namespaces list's namespaces).

Pure CPU over ``app.core.authz.rbac.Policy`` (the API server adds only a dict lookup and a
queue check per request). Each tenant is a namespace with three users bound to ``view``,
``edit`` and ``admin`` and a group bound to ``view``; one user belongs to three tenants.

    .venv/bin/python -m bench.authz.run [--tenants 100,1000,10000]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from app.core.authz import Attributes
from app.core.authz.rbac import Policy
from bench.common import median, percentile, write_result


@dataclass(frozen=True)
class Who:
    name: str
    groups: tuple[str, ...] = ("system:authenticated",)


def binding(ns: str, name: str, role: str, kind: str, subject: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name},
        "roleRef": {"kind": "ClusterRole", "name": role},
        "subjects": [{"kind": kind, "name": subject}],
    }


def bindings(tenants: int) -> list[dict[str, Any]]:
    out = []
    for t in range(tenants):
        ns = f"team-{t}"
        for role in ("view", "edit", "admin"):
            out.append(binding(ns, role, role, "User", f"{role}-{t}"))
        out.append(binding(ns, "devs", "view", "Group", f"devs-{t}"))
        if t < 3:
            out.append(binding(ns, "roamer", "edit", "User", "roamer"))
    return out


def timed_us(fn: Any, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e6)
    return samples


def measure(tenants: int, checks: int) -> dict[str, Any]:
    objs = bindings(tenants)
    builds = []
    for _ in range(5):
        t = time.perf_counter()
        policy = Policy(role_bindings=objs)
        builds.append((time.perf_counter() - t) * 1000)
    new = binding("team-1", "late", "edit", "User", "late-1")
    changes = timed_us(lambda: policy.apply("RoleBinding", "team-1", "late", new), 2000)
    editor, stranger, roamer = Who("edit-1"), Who("stranger", ("devs-1",)), Who("roamer")
    allowed = Attributes("create", "pods", "team-1")
    refused = Attributes("delete", "roles", "team-1", "x")
    cases = {
        "allowed": lambda: policy.authorize(editor, allowed),
        "refused": lambda: policy.authorize(editor, refused),
        "visible_elsewhere": lambda: policy.visible(stranger, "team-2"),
        "all_namespaces": lambda: policy.namespaces_allowing(roamer, Attributes("list", "pods")),
    }
    result: dict[str, Any] = {"tenants": tenants, "bindings": len(objs),
                              "rebuild_ms_median": round(median(builds), 2),
                              "one_change_us_p50": round(median(changes), 2)}  # fmt: skip
    for name, fn in cases.items():
        samples = timed_us(fn, checks)
        result[f"{name}_us_p50"] = round(median(samples), 2)
        result[f"{name}_us_p99"] = round(percentile(samples, 99), 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", default="100,1000,10000")
    parser.add_argument("--checks", type=int, default=20000)
    args = parser.parse_args()
    rows = [measure(int(n), args.checks) for n in args.tenants.split(",")]
    for row in rows:
        print(row)
    print(write_result("authz", {"runs": rows}))


if __name__ == "__main__":
    main()
