from __future__ import annotations

import copy

import pytest

TPL = ("spec", "template")


def test_deployment_defaults(valid, accept) -> None:
    spec = accept("Deployment", valid("Deployment"))["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
    }
    assert spec["minReadySeconds"] == 0
    assert spec["revisionHistoryLimit"] == 10
    assert spec["progressDeadlineSeconds"] == 600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Always" and pod["schedulerName"] == "default-scheduler"


def test_deployment_keeps_explicit_values(valid, edit, accept) -> None:
    obj = valid("Deployment")
    obj["spec"].update(replicas=0, strategy={"type": "Recreate"}, paused=True)
    spec = accept("Deployment", obj)["spec"]
    assert spec["replicas"] == 0 and spec["strategy"] == {"type": "Recreate"}
    assert spec["paused"] is True


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec",), None, "spec"),
        (("spec", "replicas"), -1, "spec.replicas"),
        (("spec", "replicas"), "3", "spec.replicas"),
        (("spec", "replicas"), 2**31, "spec.replicas"),
        (("spec", "selector"), None, "spec.selector"),
        (("spec", "selector"), {}, "spec.selector"),
        (("spec", "selector"), "app=web", "spec.selector"),
        (("spec", "selector"), {"matchLabels": {"app": "db"}}, "spec.template.metadata.labels"),
        (("spec", "selector"), {"matchExpressions": [{"key": "app", "operator": "In"}]},
         "spec.selector.matchExpressions[0].values"),
        (("spec", "selector"), {"matchExpressions": [{"key": "app", "operator": "Like",
                                                      "values": ["x"]}]},
         "spec.selector.matchExpressions[0].operator"),
        (("spec", "selector"), {"matchExpressions": [{"key": "app", "operator": "Exists",
                                                      "values": ["x"]}]},
         "spec.selector.matchExpressions[0].values"),
        (("spec", "template"), None, "spec.template"),
        (("spec", "template"), [], "spec.template"),
        ((*TPL, "spec"), None, "spec.template.spec"),
        ((*TPL, "metadata", "labels"), ["app"], "spec.template.metadata.labels"),
        ((*TPL, "spec", "containers"), [], "spec.template.spec.containers"),
        ((*TPL, "spec", "containers", 0, "resources"), {"requests": {"cpu": "x"}},
         "spec.template.spec.containers[0].resources.requests.cpu"),
        ((*TPL, "spec", "restartPolicy"), "Never", "spec.template.spec.restartPolicy"),
        (("spec", "strategy"), "Recreate", "spec.strategy"),
        (("spec", "strategy", "type"), "BlueGreen", "spec.strategy.type"),
        (("spec", "strategy"), {"type": "Recreate", "rollingUpdate": {}},
         "spec.strategy.rollingUpdate"),
        (("spec", "strategy"), {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}},
         "spec.strategy.rollingUpdate.maxUnavailable"),
        (("spec", "strategy"), {"rollingUpdate": {"maxSurge": "x%"}},
         "spec.strategy.rollingUpdate.maxSurge"),
        (("spec", "strategy"), {"rollingUpdate": {"maxUnavailable": "150%"}},
         "spec.strategy.rollingUpdate.maxUnavailable"),
        (("spec", "strategy"), {"rollingUpdate": {"maxSurge": -1}},
         "spec.strategy.rollingUpdate.maxSurge"),
        (("spec", "minReadySeconds"), -1, "spec.minReadySeconds"),
        (("spec", "revisionHistoryLimit"), -1, "spec.revisionHistoryLimit"),
        (("spec", "progressDeadlineSeconds"), 0, "spec.progressDeadlineSeconds"),
        (("spec", "paused"), "yes", "spec.paused"),
    ],
)  # fmt: skip
def test_deployment_errors(path, value, field, valid, edit, remove, fields_of) -> None:
    obj = valid("Deployment")
    if value is None:
        remove(obj, path)
    else:
        edit(obj, path, value)
    assert field in fields_of("Deployment", obj)


def test_progress_deadline_must_exceed_min_ready(valid, fields_of) -> None:
    obj = valid("Deployment")
    obj["spec"].update(minReadySeconds=600)
    assert fields_of("Deployment", obj) == {"spec.progressDeadlineSeconds"}


def test_deployment_selector_is_immutable(valid, accept, fields_of) -> None:
    old = accept("Deployment", valid("Deployment"))
    new = copy.deepcopy(old)
    new["spec"]["selector"] = {"matchLabels": {"app": "web", "v": "2"}}
    new["spec"]["template"]["metadata"]["labels"]["v"] = "2"
    assert fields_of("Deployment", new, old) == {"spec.selector"}
    omitted = copy.deepcopy(old)
    del omitted["spec"]["selector"]
    assert accept("Deployment", omitted, old)["spec"]["selector"] == old["spec"]["selector"]
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 5
    assert accept("Deployment", scaled, old)["spec"]["replicas"] == 5


def test_replicaset(valid, accept, edit, fields_of) -> None:
    spec = accept("ReplicaSet", valid("ReplicaSet"))["spec"]
    assert spec["replicas"] == 1 and spec["minReadySeconds"] == 0
    obj = edit(valid("ReplicaSet"), ("spec", "selector", "matchLabels"), {"app": "other"})
    assert fields_of("ReplicaSet", obj) == {"spec.template.metadata.labels"}


# ---------------------------------------------------------------------------- Job


def test_job_defaults(valid, accept) -> None:
    spec = accept("Job", valid("Job"))["spec"]
    assert spec["parallelism"] == 1 and spec["completions"] == 1
    assert spec["backoffLimit"] == 6
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False


def test_job_with_parallelism_only_leaves_completions_unset(valid, edit, accept) -> None:
    spec = accept("Job", edit(valid("Job"), ("spec", "parallelism"), 4))["spec"]
    assert spec["parallelism"] == 4 and "completions" not in spec


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec", "parallelism"), -1, "spec.parallelism"),
        (("spec", "completions"), -1, "spec.completions"),
        (("spec", "backoffLimit"), -1, "spec.backoffLimit"),
        (("spec", "activeDeadlineSeconds"), 0, "spec.activeDeadlineSeconds"),
        (("spec", "ttlSecondsAfterFinished"), -5, "spec.ttlSecondsAfterFinished"),
        (("spec", "completionMode"), "Sometimes", "spec.completionMode"),
        ((*TPL, "spec", "restartPolicy"), "Always", "spec.template.spec.restartPolicy"),
        (("spec", "selector"), {"matchLabels": {"job": "other"}}, "spec.template.metadata.labels"),
        (("spec", "template"), "pod", "spec.template"),
    ],
)
def test_job_errors(path, value, field, valid, edit, fields_of) -> None:
    assert field in fields_of("Job", edit(valid("Job"), path, value))


def test_job_requires_an_explicit_restart_policy(valid, remove, reject) -> None:
    obj = remove(valid("Job"), (*TPL, "spec", "restartPolicy"))
    (cause,) = reject("Job", obj)
    assert cause.field == "spec.template.spec.restartPolicy"
    assert cause.reason == "FieldValueRequired"


def test_indexed_job_needs_completions(valid, edit, fields_of) -> None:
    obj = valid("Job")
    obj["spec"].update(completionMode="Indexed", parallelism=2)
    assert fields_of("Job", obj) == {"spec.completions"}


def test_job_selector_is_immutable(valid, edit, accept, fields_of) -> None:
    old = accept("Job", edit(valid("Job"), ("spec", "selector"), {"matchLabels": {"job": "batch"}}))
    new = copy.deepcopy(old)
    new["spec"]["selector"] = {"matchLabels": {"job": "batch", "x": "y"}}
    new["spec"]["template"]["metadata"]["labels"]["x"] = "y"
    assert fields_of("Job", new, old) == {"spec.selector"}


# ---------------------------------------------------------------------------- CronJob


def test_cronjob_defaults(valid, accept) -> None:
    spec = accept("CronJob", valid("CronJob"))["spec"]
    assert spec["concurrencyPolicy"] == "Allow"
    assert spec["successfulJobsHistoryLimit"] == 3 and spec["failedJobsHistoryLimit"] == 1
    assert spec["suspend"] is False
    job = spec["jobTemplate"]["spec"]
    assert "backoffLimit" not in job, "Job defaults apply when the Job is created"
    assert job["template"]["spec"]["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec", "schedule"), "", "spec.schedule"),
        (("spec", "schedule"), "* * *", "spec.schedule"),
        (("spec", "schedule"), "61 * * * *", "spec.schedule"),
        (("spec", "schedule"), "@fortnightly", "spec.schedule"),
        (("spec", "schedule"), "TZ=UTC 0 * * * *", "spec.schedule"),
        (("spec", "schedule"), 5, "spec.schedule"),
        (("spec", "timeZone"), "Not a zone", "spec.timeZone"),
        (("spec", "concurrencyPolicy"), "Sometimes", "spec.concurrencyPolicy"),
        (("spec", "startingDeadlineSeconds"), -1, "spec.startingDeadlineSeconds"),
        (("spec", "successfulJobsHistoryLimit"), -1, "spec.successfulJobsHistoryLimit"),
        (("spec", "failedJobsHistoryLimit"), "1", "spec.failedJobsHistoryLimit"),
        (("spec", "suspend"), "no", "spec.suspend"),
        (("spec", "jobTemplate"), [], "spec.jobTemplate"),
        (("spec", "jobTemplate", "spec"), {}, "spec.jobTemplate.spec.template"),
        (("spec", "jobTemplate", "spec", "template", "spec", "restartPolicy"), "Always",
         "spec.jobTemplate.spec.template.spec.restartPolicy"),
        (("spec", "jobTemplate", "spec", "template", "spec", "containers", 0, "image"), "",
         "spec.jobTemplate.spec.template.spec.containers[0].image"),
        (("spec", "jobTemplate", "spec", "backoffLimit"), -1,
         "spec.jobTemplate.spec.backoffLimit"),
    ],
)  # fmt: skip
def test_cronjob_errors(path, value, field, valid, edit, fields_of) -> None:
    assert field in fields_of("CronJob", edit(valid("CronJob"), path, value))


def test_cronjob_time_zone(valid, edit, accept) -> None:
    out = accept("CronJob", edit(valid("CronJob"), ("spec", "timeZone"), "Europe/Paris"))
    assert out["spec"]["timeZone"] == "Europe/Paris"
