from __future__ import annotations

import copy

import pytest

C0 = ("spec", "containers", 0)


def test_pod_defaults(valid, accept) -> None:
    out = accept("Pod", valid("Pod"))
    spec = out["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert "priority" not in spec, "admission does not resolve priorities"
    assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize(
    ("image", "policy"),
    [("nginx", "Always"), ("nginx:latest", "Always"), ("nginx:1.25", "IfNotPresent"),
     ("reg:5000/nginx", "Always"), ("reg:5000/nginx:2", "IfNotPresent"),
     ("nginx@sha256:abc", "IfNotPresent")],
)  # fmt: skip
def test_image_pull_policy_default(image, policy, valid, edit, accept) -> None:
    out = accept("Pod", edit(valid("Pod"), (*C0, "image"), image))
    assert out["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_limits_default_requests(valid, edit, accept) -> None:
    obj = edit(
        valid("Pod"),
        (*C0, "resources"),
        {"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 1}, "requests": {"cpu": "1"}},
    )
    res = accept("Pod", obj)["spec"]["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    assert res["limits"] == {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}


def test_numeric_quantities_are_normalised(valid, edit, accept) -> None:
    obj = edit(valid("Pod"), (*C0, "resources"), {"requests": {"cpu": 0.5, "memory": 1024}})
    res = accept("Pod", obj)["spec"]["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "500m", "memory": "1024"}


@pytest.mark.parametrize(
    ("requests", "fits"),
    [
        ({"cpu": "9223372036854775807m"}, True),
        ({"cpu": "9223372036854775808m"}, False),
        ({"cpu": "1e16"}, False),
        ({"memory": "7Ei"}, True),
        ({"memory": "8Ei"}, False),
        ({"memory": 1e19}, False),
        ({"cpu": "1.", "memory": "8."}, True),
    ],
)  # fmt: skip
def test_amounts_must_fit_the_database(requests, fits, valid, edit, accept, fields_of) -> None:
    obj = edit(valid("Pod"), (*C0, "resources"), {"requests": requests})
    if fits:
        assert accept("Pod", obj)["spec"]["containers"][0]["resources"]["requests"] == requests
    else:
        (name,) = requests
        assert fields_of("Pod", obj) == {f"spec.containers[0].resources.requests.{name}"}


def test_summed_requests_must_fit_the_database(valid, accept, reject) -> None:
    obj = valid("Pod")
    big = {"requests": {"memory": "5Ei"}, "limits": {"memory": "5Ei"}}
    obj["spec"]["containers"] = [
        {"name": n, "image": "nginx", "resources": copy.deepcopy(big)} for n in ("a", "b")
    ]
    causes = reject("Pod", obj)
    assert {c.field for c in causes} == {"spec.containers"}
    assert {c.message.split(": ")[1] for c in causes} == {
        '"limits.memory = 11529215046068469760"',
        '"requests.memory = 11529215046068469760"',
    }
    obj["spec"]["containers"][1]["resources"] = {}
    accept("Pod", obj)


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ([], "resources"),
        ({"requests": []}, "resources.requests"),
        ({"requests": {"cpu": "abc"}}, "resources.requests.cpu"),
        ({"requests": {"cpu": "-1"}}, "resources.requests.cpu"),
        ({"requests": {"cpu": "1.2.3"}}, "resources.requests.cpu"),
        ({"requests": {"memory": "5Zi"}}, "resources.requests.memory"),
        ({"requests": {"memory": True}}, "resources.requests.memory"),
        ({"requests": {"memory": {"v": 1}}}, "resources.requests.memory"),
        ({"requests": {"memory": "1" * 70}}, "resources.requests.memory"),
        ({"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}, "resources.requests.cpu"),
        ({"limits": {"ephemeral-storage": "1Gi"}, "requests": {"ephemeral-storage": "2Gi"}},
         "resources.requests.ephemeral-storage"),
        ({"requests": {"gpu": "1"}}, "resources.requests.gpu"),
        ({"requests": {"nvidia.com/gpu": "1"}}, "resources.limits[nvidia.com/gpu]"),
        ({"limits": {"nvidia.com/gpu": "0.5"}}, "resources.limits[nvidia.com/gpu]"),
        ({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}},
         "resources.requests[nvidia.com/gpu]"),
        ({"limits": {"Bad/x/y": "2"}}, "resources.limits[Bad/x/y]"),
    ],
)  # fmt: skip
def test_resource_errors(resources, field, valid, edit, fields_of) -> None:
    obj = edit(valid("Pod"), (*C0, "resources"), resources)
    assert f"spec.containers[0].{field}" in fields_of("Pod", obj)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec",), [], "spec"),
        (("spec", "containers"), [], "spec.containers"),
        (("spec", "containers"), {}, "spec.containers"),
        (("spec", "containers"), ["nginx"], "spec.containers[0]"),
        ((*C0, "name"), "Web", "spec.containers[0].name"),
        ((*C0, "name"), "", "spec.containers[0].name"),
        ((*C0, "image"), "", "spec.containers[0].image"),
        ((*C0, "image"), 5, "spec.containers[0].image"),
        ((*C0, "image"), " nginx", "spec.containers[0].image"),
        ((*C0, "command"), "sleep 1", "spec.containers[0].command"),
        ((*C0, "args"), ["a", 1], "spec.containers[0].args[1]"),
        ((*C0, "env"), {"A": "1"}, "spec.containers[0].env"),
        ((*C0, "env"), [{"value": "1"}], "spec.containers[0].env[0].name"),
        ((*C0, "env"), [{"name": "A=B"}], "spec.containers[0].env[0].name"),
        ((*C0, "env"), [{"name": "A", "value": 1}], "spec.containers[0].env[0].value"),
        ((*C0, "env"), [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "a"}}}],
         "spec.containers[0].env[0].valueFrom"),
        ((*C0, "env"), [{"name": "A", "valueFrom": {}}], "spec.containers[0].env[0].valueFrom"),
        ((*C0, "env"), [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}],
         "spec.containers[0].env[0].valueFrom.secretKeyRef.key"),
        ((*C0, "envFrom"), [{}], "spec.containers[0].envFrom[0]"),
        ((*C0, "ports"), [{}], "spec.containers[0].ports[0].containerPort"),
        ((*C0, "ports"), [{"containerPort": 0}], "spec.containers[0].ports[0].containerPort"),
        ((*C0, "ports"), [{"containerPort": 70000}], "spec.containers[0].ports[0].containerPort"),
        ((*C0, "ports"), [{"containerPort": "80"}], "spec.containers[0].ports[0].containerPort"),
        ((*C0, "ports"), [{"containerPort": 80, "hostPort": -1}],
         "spec.containers[0].ports[0].hostPort"),
        ((*C0, "ports"), [{"containerPort": 80, "protocol": "HTTP"}],
         "spec.containers[0].ports[0].protocol"),
        ((*C0, "ports"), [{"containerPort": 80, "name": "Http"}],
         "spec.containers[0].ports[0].name"),
        ((*C0, "ports"), [{"containerPort": 80, "name": "web"},
                          {"containerPort": 81, "name": "web"}],
         "spec.containers[0].ports[1].name"),
        ((*C0, "volumeMounts"), [{"name": "nope", "mountPath": "/x"}],
         "spec.containers[0].volumeMounts[0].name"),
        ((*C0, "volumeMounts"), [{"name": "nope"}], "spec.containers[0].volumeMounts[0].mountPath"),
        ((*C0, "imagePullPolicy"), "Sometimes", "spec.containers[0].imagePullPolicy"),
        ((*C0, "restartPolicy"), "Always", "spec.containers[0].restartPolicy"),
        (("spec", "restartPolicy"), "Sometimes", "spec.restartPolicy"),
        (("spec", "restartPolicy"), 1, "spec.restartPolicy"),
        (("spec", "terminationGracePeriodSeconds"), -1, "spec.terminationGracePeriodSeconds"),
        (("spec", "terminationGracePeriodSeconds"), "30", "spec.terminationGracePeriodSeconds"),
        (("spec", "activeDeadlineSeconds"), 0, "spec.activeDeadlineSeconds"),
        (("spec", "nodeName"), "Node_1", "spec.nodeName"),
        (("spec", "nodeSelector"), {"zone": 1}, "spec.nodeSelector.zone"),
        (("spec", "nodeSelector"), ["zone"], "spec.nodeSelector"),
        (("spec", "nodeSelector"), {"bad key": "x"}, "spec.nodeSelector"),
        (("spec", "priority"), "high", "spec.priority"),
        (("spec", "priority"), 2**40, "spec.priority"),
        (("spec", "priority"), True, "spec.priority"),
        (("spec", "priorityClassName"), "High", "spec.priorityClassName"),
        (("spec", "schedulerName"), 1, "spec.schedulerName"),
        (("spec", "initContainers"), [{"name": "app", "image": "x"}],
         "spec.containers[0].name"),
        (("spec", "initContainers"), [{"name": "init", "image": "x", "livenessProbe": {}}],
         "spec.initContainers[0].livenessProbe"),
        (("status",), [], "status"),
    ],
)  # fmt: skip
def test_pod_spec_errors(path, value, field, valid, edit, fields_of) -> None:
    assert field in fields_of("Pod", edit(valid("Pod"), path, value))


def test_duplicate_container_names(valid, edit, fields_of) -> None:
    obj = valid("Pod")
    obj["spec"]["containers"].append({"name": "app", "image": "x"})
    assert fields_of("Pod", obj) == {"spec.containers[1].name"}


# ---------------------------------------------------------------------------- probes


@pytest.mark.parametrize(
    ("probe", "field"),
    [
        ({}, "livenessProbe"),
        ({"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}, "livenessProbe.tcpSocket"),
        ({"exec": {}}, "livenessProbe.exec.command"),
        ({"exec": {"command": []}}, "livenessProbe.exec.command"),
        ({"exec": "true"}, "livenessProbe.exec"),
        ({"httpGet": {"path": "/"}}, "livenessProbe.httpGet.port"),
        ({"httpGet": {"port": 0}}, "livenessProbe.httpGet.port"),
        ({"httpGet": {"port": "Web_Port"}}, "livenessProbe.httpGet.port"),
        ({"httpGet": {"port": 80, "scheme": "FTP"}}, "livenessProbe.httpGet.scheme"),
        ({"tcpSocket": {"port": 80}, "periodSeconds": 0}, "livenessProbe.periodSeconds"),
        ({"tcpSocket": {"port": 80}, "timeoutSeconds": 0}, "livenessProbe.timeoutSeconds"),
        ({"tcpSocket": {"port": 80}, "initialDelaySeconds": -1},
         "livenessProbe.initialDelaySeconds"),
        ({"tcpSocket": {"port": 80}, "successThreshold": 2}, "livenessProbe.successThreshold"),
        ({"tcpSocket": {"port": 80}, "failureThreshold": 0}, "livenessProbe.failureThreshold"),
    ],
)  # fmt: skip
def test_probe_errors(probe, field, valid, edit, fields_of) -> None:
    obj = edit(valid("Pod"), (*C0, "livenessProbe"), probe)
    assert f"spec.containers[0].{field}" in fields_of("Pod", obj)


def test_probe_defaults_and_readiness_thresholds(valid, edit, accept, fields_of) -> None:
    obj = edit(valid("Pod"), (*C0, "readinessProbe"), {"httpGet": {"port": "http"},
                                                      "successThreshold": 2})  # fmt: skip
    probe = accept("Pod", obj)["spec"]["containers"][0]["readinessProbe"]
    assert probe["periodSeconds"] == 10 and probe["timeoutSeconds"] == 1
    assert probe["successThreshold"] == 2 and probe["failureThreshold"] == 3
    assert probe["httpGet"]["scheme"] == "HTTP"
    startup = edit(valid("Pod"), (*C0, "startupProbe"), {"tcpSocket": {"port": 1},
                                                        "successThreshold": 3})  # fmt: skip
    assert fields_of("Pod", startup) == {"spec.containers[0].startupProbe.successThreshold"}


@pytest.mark.parametrize(
    ("hook", "ok"),
    [({"exec": {"command": ["sh", "-c", "sleep 5"]}}, True), ({"sleep": {"seconds": 5}}, True),
     ({"httpGet": {"port": 80}}, True), ({}, False), ({"sleep": {"seconds": 0}}, False),
     ({"grpc": {"port": 1}}, False)],
)  # fmt: skip
def test_pre_stop_hook(hook, ok, valid, edit, accept, reject) -> None:
    obj = edit(valid("Pod"), (*C0, "lifecycle"), {"preStop": hook})
    if ok:
        accept("Pod", obj)
    else:
        assert all(c.field.startswith("spec.containers[0].lifecycle.preStop") for c in
                   reject("Pod", obj))  # fmt: skip


# ---------------------------------------------------------------------------- volumes


def test_volumes(valid, edit, accept, fields_of) -> None:
    obj = valid("Pod")
    obj["spec"]["volumes"] = [
        {
            "name": "cfg",
            "configMap": {"name": "settings", "items": [{"key": "k", "path": "k.txt"}]},
        },
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cfg"}]
    accept("Pod", obj)
    bad = copy.deepcopy(obj)
    bad["spec"]["volumes"] = [
        {"name": "cfg", "hostPath": {"path": "/"}},
        {"name": "cfg", "emptyDir": {}},
        {"name": "x", "configMap": {}, "secret": {"secretName": "s"}},
        {"name": "y"},
        {"name": "z", "secret": {"secretName": "s", "items": [{"key": "a", "path": "../etc"}]}},
        {"name": "w", "emptyDir": {"sizeLimit": "lots"}},
    ]
    assert fields_of("Pod", bad) == {
        "spec.volumes[0].hostPath",
        "spec.volumes[1].name",
        "spec.volumes[2].secret",
        "spec.volumes[3]",
        "spec.volumes[4].secret.items[0].path",
        "spec.volumes[5].emptyDir.sizeLimit",
    }


# ---------------------------------------------------------------------------- scheduling


def test_valid_scheduling_constraints(valid, accept) -> None:
    obj = valid("Pod")
    selector = {"matchLabels": {"app": "web"}}
    obj["spec"].update(
        nodeSelector={"topology.kubernetes.io/zone": "z1"},
        tolerations=[
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
             "tolerationSeconds": 30, "value": "x"},
            {"operator": "Exists"},
        ],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]},
                                          {"key": "cores", "operator": "Gt", "values": ["8"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "preference": {"matchExpressions": [
                        {"key": "spot", "operator": "DoesNotExist"}]}}],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"labelSelector": selector,
                                                        "topologyKey": "zone"}}],
            },
        },
        topologySpreadConstraints=[
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": selector, "minDomains": 2}],
        priorityClassName="high",
        priority=1000,
    )  # fmt: skip
    out = accept("Pod", obj)
    assert out["spec"]["tolerations"][0]["effect"] == "NoSchedule"
    assert out["spec"]["tolerations"][2]["operator"] == "Exists"
    assert out["spec"]["priority"] == 1000


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("tolerations", {"key": "x"}, "spec.tolerations"),
        ("tolerations", [{"key": "x", "operator": "Maybe"}], "spec.tolerations[0].operator"),
        ("tolerations", [{"value": "x"}], "spec.tolerations[0].operator"),
        ("tolerations", [{"key": "x", "operator": "Exists", "value": "y"}],
         "spec.tolerations[0].operator"),
        ("tolerations", [{"key": "x", "effect": "Sometimes"}], "spec.tolerations[0].effect"),
        ("tolerations", [{"key": "x", "effect": "NoSchedule", "tolerationSeconds": 5}],
         "spec.tolerations[0].effect"),
        ("tolerations", [{"key": "x", "tolerationSeconds": "5", "effect": "NoExecute"}],
         "spec.tolerations[0].tolerationSeconds"),
        ("tolerations", [{"key": "bad key"}], "spec.tolerations[0].key"),
        ("affinity", [], "spec.affinity"),
        ("affinity", {"nodeAffinity": []}, "spec.affinity.nodeAffinity"),
        ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
         ".nodeSelectorTerms"),
        ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}}},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
         ".nodeSelectorTerms[0].matchExpressions[0].operator"),
        ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt",
                                                         "values": ["x"]}]}]}}},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
         ".nodeSelectorTerms[0].matchExpressions[0].values[0]"),
        ("affinity", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {}}]}},
         "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
        ("affinity", {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}},
         "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
         ".topologyKey"),
        ("affinity", {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "zone", "labelSelector": {"matchLabels": "app"}}]}},
         "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
         ".labelSelector.matchLabels"),
        ("affinity", {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10}]}},
         "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
         ".podAffinityTerm"),
        ("topologySpreadConstraints", [{}], "spec.topologySpreadConstraints[0].maxSkew"),
        ("topologySpreadConstraints", [{"maxSkew": 0, "topologyKey": "z",
                                        "whenUnsatisfiable": "DoNotSchedule"}],
         "spec.topologySpreadConstraints[0].maxSkew"),
        ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "z",
                                        "whenUnsatisfiable": "Whatever"}],
         "spec.topologySpreadConstraints[0].whenUnsatisfiable"),
        ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "z",
                                        "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}],
         "spec.topologySpreadConstraints[0].minDomains"),
        ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "z",
                                        "whenUnsatisfiable": "DoNotSchedule"}] * 2,
         "spec.topologySpreadConstraints[1].{topologyKey, whenUnsatisfiable}"),
    ],
)  # fmt: skip
def test_scheduling_errors(field, value, error, valid, edit, fields_of) -> None:
    assert error in fields_of("Pod", edit(valid("Pod"), ("spec", field), value))


# ---------------------------------------------------------------------------- updates


def _stored_pod(valid, accept, **spec):
    obj = valid("Pod")
    obj["spec"].update(spec)
    out = accept("Pod", obj)
    out["metadata"]["uid"] = "u1"
    return out


def test_pod_update_allows_images_deadline_tolerations_and_binding(valid, accept) -> None:
    old = _stored_pod(valid, accept, activeDeadlineSeconds=100,
                      tolerations=[{"key": "a", "operator": "Exists"}])  # fmt: skip
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "nginx:1.26"
    new["spec"]["activeDeadlineSeconds"] = 50
    new["spec"]["tolerations"].append({"key": "b", "operator": "Exists"})
    new["spec"]["nodeName"] = "node-1"
    out = accept("Pod", new, old)
    assert out["spec"]["nodeName"] == "node-1"
    assert out["spec"]["containers"][0]["image"] == "nginx:1.26"


def test_pod_update_carries_resolved_priority(valid, accept) -> None:
    old = _stored_pod(valid, accept, priority=1000, priorityClassName="high")
    new = copy.deepcopy(old)
    del new["spec"]["priority"]
    assert accept("Pod", new, old)["spec"]["priority"] == 1000


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s.update(restartPolicy="Never"), "spec"),
        (lambda s: s.update(schedulerName="other"), "spec"),
        (lambda s: s["containers"].append({"name": "b", "image": "x"}), "spec"),
        (lambda s: s["containers"][0].update(command=["sh"]), "spec"),
        (lambda s: s.update(priority=5), "spec"),
        (lambda s: s.update(activeDeadlineSeconds=200), "spec.activeDeadlineSeconds"),
        (lambda s: s.pop("activeDeadlineSeconds"), "spec.activeDeadlineSeconds"),
        (lambda s: s.update(tolerations=[]), "spec.tolerations"),
        (lambda s: s.update(nodeName="node-2"), "spec.nodeName"),
    ],
)
def test_pod_update_forbidden_changes(change, field, valid, accept, fields_of) -> None:
    old = _stored_pod(valid, accept, activeDeadlineSeconds=100, nodeName="node-1",
                      tolerations=[{"key": "a", "operator": "Exists"}])  # fmt: skip
    new = copy.deepcopy(old)
    change(new["spec"])
    assert field in fields_of("Pod", new, old)


def test_forbidden_update_names_the_changed_fields(valid, accept, reject) -> None:
    old = _stored_pod(valid, accept)
    new = copy.deepcopy(old)
    new["spec"]["restartPolicy"] = "Never"
    (cause,) = reject("Pod", new, old)
    assert cause.reason == "FieldValueForbidden"
    assert "spec.restartPolicy" in cause.message
