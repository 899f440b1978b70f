from __future__ import annotations

import base64
import copy

import pytest

# ---------------------------------------------------------------------------- Service


def test_service_defaults(valid, accept) -> None:
    out = accept("Service", valid("Service"))
    assert out["spec"]["type"] == "ClusterIP"
    assert out["spec"]["sessionAffinity"] == "None"
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]


def test_service_target_port_defaults_to_port(valid, edit, accept) -> None:
    out = accept("Service", edit(valid("Service"), ("spec", "ports"), [{"port": 443}]))
    assert out["spec"]["ports"][0]["targetPort"] == 443


def test_headless_service_needs_no_ports(valid, edit, accept) -> None:
    obj = valid("Service")
    obj["spec"] = {"clusterIP": "None", "selector": {"app": "web"}}
    assert accept("Service", obj)["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec", "ports"), [], "spec.ports"),
        (("spec", "ports"), {"port": 80}, "spec.ports"),
        (("spec", "ports"), [{}], "spec.ports[0].port"),
        (("spec", "ports"), [{"port": 0}], "spec.ports[0].port"),
        (("spec", "ports"), [{"port": 65536}], "spec.ports[0].port"),
        (("spec", "ports"), [{"port": 80, "targetPort": "Bad_Name"}], "spec.ports[0].targetPort"),
        (("spec", "ports"), [{"port": 80, "targetPort": 0}], "spec.ports[0].targetPort"),
        (("spec", "ports"), [{"port": 80, "protocol": "ICMP"}], "spec.ports[0].protocol"),
        (("spec", "ports"), [{"port": 80, "name": "a"}, {"port": 81}], "spec.ports[1].name"),
        (("spec", "ports"), [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}],
         "spec.ports[1].name"),
        (("spec", "selector"), {"app": 1}, "spec.selector.app"),
        (("spec", "selector"), "app=web", "spec.selector"),
        (("spec", "type"), "Internal", "spec.type"),
        (("spec", "clusterIP"), "10.0.0.300", "spec.clusterIP"),
        (("spec", "type"), "ExternalName", "spec.externalName"),
    ],
)  # fmt: skip
def test_service_errors(path, value, field, valid, edit, fields_of) -> None:
    assert field in fields_of("Service", edit(valid("Service"), path, value))


def test_cluster_ip_is_kept_and_immutable(valid, edit, accept, fields_of) -> None:
    old = accept("Service", edit(valid("Service"), ("spec", "clusterIP"), "10.96.0.10"))
    fresh = valid("Service")
    assert accept("Service", fresh, old)["spec"]["clusterIP"] == "10.96.0.10"
    changed = edit(valid("Service"), ("spec", "clusterIP"), "10.96.0.11")
    assert fields_of("Service", changed, old) == {"spec.clusterIP"}


# ---------------------------------------------------------------------------- EndpointSlice


@pytest.mark.parametrize(
    ("field_path", "value", "field"),
    [
        (("addressType",), "IPv5", "addressType"),
        (("endpoints",), {}, "endpoints"),
        (("endpoints",), [{}], "endpoints[0].addresses"),
        (("endpoints",), [{"addresses": []}], "endpoints[0].addresses"),
        (("endpoints",), [{"addresses": ["::1"]}], "endpoints[0].addresses[0]"),
        (("endpoints",), [{"addresses": ["10.0.0.1"], "conditions": {"ready": "yes"}}],
         "endpoints[0].conditions.ready"),
        (("endpoints",), [{"addresses": ["10.0.0.1"], "targetRef": "pod"}],
         "endpoints[0].targetRef"),
        (("endpoints",), [{"addresses": ["10.0.0.1"]}] * 1001, "endpoints"),
        (("ports",), [{"port": 0}], "ports[0].port"),
        (("ports",), [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}], "ports[1].name"),
    ],
)  # fmt: skip
def test_endpointslice_errors(field_path, value, field, valid, edit, fields_of) -> None:
    assert field in fields_of("EndpointSlice", edit(valid("EndpointSlice"), field_path, value))


def test_endpointslice_address_types(valid, accept, fields_of) -> None:
    obj = valid("EndpointSlice")
    obj["addressType"] = "IPv6"
    obj["endpoints"] = [{"addresses": ["fd00::5"]}]
    accept("EndpointSlice", obj)
    obj["addressType"] = "FQDN"
    obj["endpoints"] = [{"addresses": ["web.example.com"]}]
    accept("EndpointSlice", obj)
    del obj["addressType"]
    assert fields_of("EndpointSlice", obj) == {"addressType"}


def test_endpointslice_address_type_is_immutable(valid, accept, fields_of) -> None:
    old = accept("EndpointSlice", valid("EndpointSlice"))
    new = copy.deepcopy(old)
    new["addressType"] = "FQDN"
    new["endpoints"] = []
    assert fields_of("EndpointSlice", new, old) == {"addressType"}


# ---------------------------------------------------------------------------- PriorityClass


def test_priority_class(valid, accept, edit, fields_of) -> None:
    out = accept("PriorityClass", valid("PriorityClass"))
    assert out["globalDefault"] is False
    assert out["preemptionPolicy"] == "PreemptLowerPriority"
    for value in (1_000_000_001, -(2**31) - 1, "1000", 1.5, None):
        obj = valid("PriorityClass")
        if value is None:
            del obj["value"]
        else:
            obj["value"] = value
        assert fields_of("PriorityClass", obj) == {"value"}
    assert accept("PriorityClass", edit(valid("PriorityClass"), ("value",), -(2**31)))
    bad = edit(valid("PriorityClass"), ("preemptionPolicy",), "Sometimes")
    assert fields_of("PriorityClass", bad) == {"preemptionPolicy"}


def test_priority_class_value_is_immutable(valid, accept, fields_of) -> None:
    old = accept("PriorityClass", valid("PriorityClass"))
    new = copy.deepcopy(old)
    new["value"] = 5
    assert fields_of("PriorityClass", new, old) == {"value"}


# ---------------------------------------------------------------------------- ResourceQuota


@pytest.mark.parametrize("number", [1e64, 10**70])
def test_a_number_too_big_for_a_quantity_is_refused_at_once(valid, fields_of, number) -> None:
    # Its exact text would exceed 64 characters, or need an exponent beyond 30: accepting it
    # would store text that admission itself refuses on the next update.
    obj = valid("ResourceQuota")
    obj["spec"]["hard"]["requests.cpu"] = number
    assert fields_of("ResourceQuota", obj) == {"spec.hard[requests.cpu]"}


def test_a_big_number_is_stored_as_text_that_admits_again(valid, accept) -> None:
    obj = valid("ResourceQuota")
    obj["spec"]["hard"]["requests.cpu"] = 1e40
    out = accept("ResourceQuota", obj)
    assert out["spec"]["hard"]["requests.cpu"] == "1" + "0" * 40
    assert accept("ResourceQuota", copy.deepcopy(out)) == out


def test_resource_quota(valid, edit, accept, fields_of) -> None:
    obj = valid("ResourceQuota")
    obj["spec"]["hard"].update(
        {"nvidia.com/gpu": 4, "requests.nvidia.com/gpu": "4", "count/deployments.apps": "10",
         "cpu": "20", "memory": "64Gi"}
    )  # fmt: skip
    obj["spec"]["scopeSelector"] = {
        "matchExpressions": [
            {"scopeName": "PriorityBand", "operator": "In", "values": ["production"]},
            {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["low"]},
            {"scopeName": "BestEffort", "operator": "DoesNotExist"},
        ]
    }
    out = accept("ResourceQuota", obj)
    assert out["spec"]["hard"]["nvidia.com/gpu"] == "4"
    bad = valid("ResourceQuota")
    bad["spec"]["hard"] = {"cpus": "1", "memory": "-1Gi", "pods": "x", "limits.cpu": []}
    bad["spec"]["scopes"] = ["Sometimes"]
    bad["spec"]["scopeSelector"] = {
        "matchExpressions": [
            {"scopeName": "PriorityBand", "operator": "In", "values": ["urgent"]},
            {"scopeName": "Terminating", "operator": "In", "values": ["x"]},
            {"scopeName": "Nope", "operator": "Exists"},
            {"scopeName": "PriorityClass", "operator": "In"},
        ]
    }
    assert fields_of("ResourceQuota", bad) == {
        "spec.hard.cpus",
        "spec.hard.memory",
        "spec.hard.pods",
        "spec.hard[limits.cpu]",
        "spec.scopes[0]",
        "spec.scopeSelector.matchExpressions[0].values[0]",
        "spec.scopeSelector.matchExpressions[1].operator",
        "spec.scopeSelector.matchExpressions[2].scopeName",
        "spec.scopeSelector.matchExpressions[3].values",
    }


# ---------------------------------------------------------------------------- PDB


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        ({"minAvailable": "50%"}, set()),
        ({"maxUnavailable": 0}, set()),
        ({"maxUnavailable": "100%"}, set()),
        ({}, {"spec.minAvailable"}),
        ({"minAvailable": 1, "maxUnavailable": 1}, {"spec.maxUnavailable"}),
        ({"minAvailable": -1}, {"spec.minAvailable"}),
        ({"minAvailable": "101%"}, {"spec.minAvailable"}),
        ({"minAvailable": "half"}, {"spec.minAvailable"}),
        ({"minAvailable": [1]}, {"spec.minAvailable"}),
        ({"minAvailable": 1, "selector": None}, {"spec.selector"}),
        ({"minAvailable": 1, "selector": {"matchLabels": {"a": "b!"}}},
         {"spec.selector.matchLabels"}),
    ],
)  # fmt: skip
def test_pdb(spec, fields, valid, accept, fields_of) -> None:
    obj = valid("PodDisruptionBudget")
    obj["spec"] = {"selector": {"matchLabels": {"app": "web"}}, **spec}
    if obj["spec"]["selector"] is None:
        del obj["spec"]["selector"]
    if fields:
        assert fields_of("PodDisruptionBudget", obj) == fields
    else:
        accept("PodDisruptionBudget", obj)


# ---------------------------------------------------------------------------- ConfigMap / Secret


@pytest.mark.parametrize(
    ("edit_path", "value", "field"),
    [
        (("data",), ["a"], "data"),
        (("data",), {"a": 1}, "data.a"),
        (("data",), {"bad key": "v"}, "data[bad key]"),
        (("data",), {"..x": "v"}, "data[..x]"),
        (("data",), {"k" * 254: "v"}, "data." + "k" * 254),
        (("data",), {"big": "x" * (1024 * 1024 + 1)}, "data"),
        (("binaryData",), {"bin": "not base64!"}, "binaryData.bin"),
        (("binaryData",), {"key": "AAE="}, "data.key"),
        (("immutable",), "true", "immutable"),
    ],
)
def test_configmap_errors(edit_path, value, field, valid, edit, reject) -> None:
    from app.core.admission import admit
    from app.core.errors import Invalid
    from app.core.kinds import BY_KIND

    obj = edit(valid("ConfigMap"), edit_path, value)
    with pytest.raises(Invalid) as info:
        admit(BY_KIND["ConfigMap"], obj, None, max_bytes=10 * 1024 * 1024)
    assert field in {c.field for c in info.value.causes}


def test_immutable_configmap(valid, edit, accept, fields_of) -> None:
    old = accept("ConfigMap", edit(valid("ConfigMap"), ("immutable",), True))
    same = copy.deepcopy(old)
    same["metadata"]["labels"] = {"x": "y"}
    accept("ConfigMap", same, old)
    changed = copy.deepcopy(old)
    changed["data"]["key"] = "other"
    assert fields_of("ConfigMap", changed, old) == {"data"}
    unset = copy.deepcopy(old)
    unset["immutable"] = False
    assert fields_of("ConfigMap", unset, old) == {"immutable"}


def test_secret_string_data_is_folded_into_data(valid, accept) -> None:
    obj = valid("Secret")
    obj["stringData"] = {"user": "admin", "password": "s3cret"}
    out = accept("Secret", obj)
    assert "stringData" not in out
    assert out["type"] == "Opaque"
    assert base64.b64decode(out["data"]["user"]) == b"admin"
    assert base64.b64decode(out["data"]["password"]) == b"s3cret"  # stringData wins


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"data": {"k": "%%%"}}, "data.k"),
        ({"data": {"k": "YQ"}}, "data.k"),
        ({"data": {"bad key": "YQ=="}}, "data[bad key]"),
        ({"stringData": {"k": 1}}, "stringData.k"),
        ({"stringData": "k=v"}, "stringData"),
        ({"type": 5}, "type"),
        ({"type": "kubernetes.io/tls"}, "data[tls.crt]"),
    ],
)
def test_secret_errors(changes, field, valid, fields_of) -> None:
    obj = valid("Secret")
    obj.update(changes)
    assert field in fields_of("Secret", obj)


def test_secret_type_and_immutable_data(valid, edit, accept, fields_of) -> None:
    old = accept("Secret", edit(valid("Secret"), ("immutable",), True))
    new = copy.deepcopy(old)
    new["type"] = "kubernetes.io/basic-auth"
    new["stringData"] = {"x": "y"}
    assert fields_of("Secret", new, old) == {"type", "data"}


# ---------------------------------------------------------------------------- Event


def test_event_defaults_and_errors(valid, edit, accept, fields_of) -> None:
    out = accept("Event", valid("Event"))
    assert out["type"] == "Normal" and out["count"] == 1
    bad = valid("Event")
    bad.update(type="Error", count=0, message="m" * 5000, firstTimestamp="now", source="kubelet")
    bad["involvedObject"] = {"kind": "Pod", "namespace": "other"}
    assert fields_of("Event", bad) == {
        "type",
        "count",
        "message",
        "firstTimestamp",
        "source",
        "involvedObject.name",
        "involvedObject.namespace",
    }
    assert fields_of("Event", edit(valid("Event"), ("involvedObject",), "pod/web")) == {
        "involvedObject"
    }


# ---------------------------------------------------------------------------- Node / Lease / NS


def test_node(valid, accept, fields_of) -> None:
    out = accept("Node", valid("Node"))
    assert out["spec"]["unschedulable"] is False
    assert out["status"]["allocatable"]["cpu"] == "8"
    bad = valid("Node")
    bad["spec"] = {
        "unschedulable": "no",
        "taints": [{"key": "a", "effect": "Maybe"}, {"effect": "NoSchedule"},
                   {"key": "b", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"},
                   {"key": "c", "value": "bad value!", "effect": "NoExecute"}],
        "podCIDR": "10.0.0.0",
    }  # fmt: skip
    bad["status"] = "Ready"
    assert fields_of("Node", bad) == {
        "spec.unschedulable",
        "spec.taints[0].effect",
        "spec.taints[1].key",
        "spec.taints[3]",
        "spec.taints[4].value",
        "spec.podCIDR",
        "status",
    }


def test_node_amounts_are_quantities_the_database_can_store(valid, accept, fields_of) -> None:
    obj = valid("Node")
    obj["status"] = {
        "capacity": {"cpu": 8, "memory": "16.Gi", "pods": 110.0, "hugepages-2Mi": "0"},
        "allocatable": {"cpu": "8.", "memory": "+16Gi", "pods": "1k", "nvidia.com/gpu": 2},
        "batchAllocatable": {"cpu": ".5", "memory": 1.5e9},
    }
    status = accept("Node", obj)["status"]
    assert status["capacity"] == {"cpu": "8", "memory": "16.Gi", "pods": "110",
                                  "hugepages-2Mi": "0"}  # fmt: skip
    assert status["allocatable"]["nvidia.com/gpu"] == "2"
    assert status["batchAllocatable"]["memory"] == "1500000000"
    obj["status"] = {
        "capacity": {"cpu": "-1", "memory": "lots"},
        "allocatable": {"cpu": "1e16", "pods": "3e9", "memory": True},
        "batchAllocatable": [],
    }
    assert fields_of("Node", obj) == {
        "status.capacity.cpu",
        "status.capacity.memory",
        "status.allocatable.cpu",
        "status.allocatable.pods",
        "status.allocatable.memory",
        "status.batchAllocatable",
    }


def test_node_without_spec(valid, accept) -> None:
    obj = valid("Node")
    del obj["spec"]
    assert accept("Node", obj)["spec"] == {"unschedulable": False}


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        ({"leaseDurationSeconds": 0}, {"spec.leaseDurationSeconds"}),
        ({"leaseTransitions": -1}, {"spec.leaseTransitions"}),
        ({"renewTime": "2024-05-01 10:00:00"}, {"spec.renewTime"}),
        ({"acquireTime": 17}, {"spec.acquireTime"}),
        ({"holderIdentity": ["a"]}, {"spec.holderIdentity"}),
        ({"renewTime": "2024-05-01T10:00:00.123456+02:00"}, set()),
    ],
)
def test_lease(spec, fields, valid, accept, fields_of) -> None:
    obj = valid("Lease")
    obj["spec"].update(spec)
    if fields:
        assert fields_of("Lease", obj) == fields
    else:
        accept("Lease", obj)


def test_namespace(valid, accept, fields_of) -> None:
    out = accept("Namespace", valid("Namespace"))
    assert out["status"] == {"phase": "Active"}
    obj = valid("Namespace")
    obj["spec"] = {"finalizers": ["kubernetes"]}
    obj["status"] = {"phase": "Terminating"}
    assert accept("Namespace", obj)["status"]["phase"] == "Terminating"
    bad = valid("Namespace")
    bad["spec"] = {"finalizers": ["bad finalizer", 3]}
    bad["status"] = {"phase": "Gone"}
    assert fields_of("Namespace", bad) == {"spec.finalizers[1]", "status.phase"}
