"""Commands end to end against a small in-memory API on ``httpx.MockTransport``."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.cli import main as cli_main
from app.cli.client import ApiClient
from app.cli.context import Context
from app.cli.get import watch
from app.core import errors
from app.core.errors import Cause
from app.core.kinds import BY_KIND, BY_PLURAL

PREFIX = "/apis/quaymaster.io/v1/"


class FakeApi:
    """Just enough of the REST contract: CRUD, label selectors, resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 100
        self.log: list[tuple[str, str]] = []
        self.conflicts_to_inject = 0
        self.events: list[dict[str, Any]] = []

    def fail(self, err: errors.StatusError) -> httpx.Response:
        return httpx.Response(err.code, json=err.to_status())

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.log.append((request.method, request.url.path))
        if request.url.path == "/version":
            return httpx.Response(200, json={"major": "0", "minor": "1", "gitVersion": "v0.1.0"})
        segs = request.url.path[len(PREFIX) :].split("/")
        if segs[0] == "namespaces" and len(segs) >= 3:
            ns, plural, name = segs[1], segs[2], (segs[3] if len(segs) > 3 else None)
        else:
            ns, plural, name = "", segs[0], (segs[1] if len(segs) > 1 else None)
        kind = BY_PLURAL[plural]
        body: dict[str, Any] = json.loads(request.content) if request.content else {}
        if request.method == "GET" and name is None:
            return self.list(kind.plural, ns, request.url.params)
        if request.method == "POST":
            return self.create(kind.kind, plural, ns, body)
        key = (plural, ns, name or "")
        current = self.objects.get(key)
        if current is None:
            return self.fail(errors.NotFound(f'{plural} "{name}" not found', plural, name))
        if request.method == "GET":
            return httpx.Response(200, json=current)
        if request.method == "PUT":
            return self.replace(key, current, body)
        if request.method == "DELETE":
            del self.objects[key]
            return httpx.Response(200, json={"kind": "Status", "status": "Success"})
        raise AssertionError(request.method)

    def list(self, plural: str, ns: str, params: httpx.QueryParams) -> httpx.Response:
        if plural == "events":
            return httpx.Response(200, json={"metadata": {}, "items": self.events})
        selector = dict(
            part.split("=", 1) for part in (params.get("labelSelector") or "").split(",") if part
        )
        items = [
            obj
            for (p, o_ns, _), obj in sorted(self.objects.items())
            if p == plural
            and (not ns or o_ns == ns)
            and all(obj["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
        ]
        meta = {"resourceVersion": str(self.rv)}
        return httpx.Response(200, json={"kind": "List", "metadata": meta, "items": items})

    def create(self, kind: str, plural: str, ns: str, body: dict[str, Any]) -> httpx.Response:
        if kind == "Pod":
            bad = [
                Cause(f"spec.containers[{i}].image", "FieldValueRequired", "Required value")
                for i, c in enumerate(body["spec"]["containers"])
                if not c.get("image")
            ]
            if bad:
                return self.fail(errors.invalid("Pod", body["metadata"]["name"], bad))
        key = (plural, ns, body["metadata"]["name"])
        if key in self.objects:
            return self.fail(errors.AlreadyExists("exists", kind, key[2]))
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"].update(
            uid=f"uid-{self.rv}",
            resourceVersion=str(self.rv),
            creationTimestamp="2024-01-01T00:00:00Z",
        )
        self.objects[key] = obj
        return httpx.Response(201, json=obj)

    def replace(self, key: tuple[str, str, str], current: dict, body: dict) -> httpx.Response:
        if self.conflicts_to_inject:
            self.conflicts_to_inject -= 1
            self.rv += 1
            current["metadata"]["resourceVersion"] = str(self.rv)
            return self.fail(errors.Conflict("the object has been modified"))
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return self.fail(errors.Conflict("the object has been modified"))
        if body == current:
            return httpx.Response(200, json=current)
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = body
        return httpx.Response(200, json=body)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


class Run:
    def __init__(self, api: FakeApi) -> None:
        self.api = api

    def __call__(self, *argv: str, stdin: str = "") -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        args = cli_main.build_parser().parse_args(argv)
        client = ApiClient("http://qm.test", "t", transport=httpx.MockTransport(self.api))
        ctx = Context(
            client,
            namespace=getattr(args, "namespace", None) or "default",
            all_namespaces=bool(getattr(args, "all_namespaces", False)),
            out=out,
            err=err,
            stdin=io.StringIO(stdin),
        )
        try:
            code = cli_main.COMMANDS[args.command](ctx, args)
        except cli_main.UsageError as exc:
            err.write(f"error: {exc}\n")
            code = 2
        except errors.StatusError as exc:
            ctx.report(exc)
            code = 1
        return code, out.getvalue(), err.getvalue()


@pytest.fixture
def run(api: FakeApi) -> Run:
    return Run(api)


CM = """\
apiVersion: quaymaster.io/v1
kind: ConfigMap
metadata:
  name: web
  labels: {app: web}
data:
  k: v
"""


class TestApply:
    def test_created_unchanged_configured(self, run: Run, tmp_path: Path) -> None:
        f = tmp_path / "cm.yaml"
        f.write_text(CM)
        assert run("apply", "-f", str(f)) == (0, "configmap/web created\n", "")
        assert run("apply", "-f", str(f)) == (0, "configmap/web unchanged\n", "")
        f.write_text(CM.replace("k: v", "k: v2"))
        assert run("apply", "-f", str(f)) == (0, "configmap/web configured\n", "")
        stored = run.api.objects[("configmaps", "default", "web")]
        assert stored["data"] == {"k": "v2"}
        assert stored["metadata"]["uid"] == "uid-101"

    def test_stdin_namespace_flag_and_list(self, run: Run) -> None:
        docs = {"kind": "List", "items": [yaml.safe_load(CM), yaml.safe_load(CM)]}
        docs["items"][1]["metadata"]["name"] = "other"
        code, out, _ = run("apply", "-n", "prod", "-f", "-", stdin=json.dumps(docs))
        assert code == 0
        assert out.splitlines() == ["configmap/web created", "configmap/other created"]
        assert ("configmaps", "prod", "other") in run.api.objects

    def test_conflict_is_retried(self, run: Run, tmp_path: Path) -> None:
        f = tmp_path / "cm.yaml"
        f.write_text(CM)
        run("apply", "-f", str(f))
        run.api.conflicts_to_inject = 2
        f.write_text(CM.replace("k: v", "k: v3"))
        assert run("apply", "-f", str(f)) == (0, "configmap/web configured\n", "")

    def test_persistent_conflict_fails(self, run: Run, tmp_path: Path) -> None:
        f = tmp_path / "cm.yaml"
        f.write_text(CM)
        run("apply", "-f", str(f))
        run.api.conflicts_to_inject = 100
        f.write_text(CM.replace("k: v", "k: v3"))
        code, _, err = run("apply", "-f", str(f))
        assert code == 1
        assert "Error from server (Conflict)" in err

    def test_bad_documents_are_reported_and_the_rest_applied(
        self, run: Run, tmp_path: Path
    ) -> None:
        bad_pod = """\
kind: Pod
metadata: {name: broken}
spec:
  containers:
  - name: a
  - name: b
    image: nginx
"""
        (tmp_path / "a.yaml").write_text(bad_pod + "---\nkind: Gizmo\nmetadata: {name: g}\n")
        (tmp_path / "b.yaml").write_text(CM)
        (tmp_path / "c.yml").write_text("kind: [oops\n")
        code, out, err = run("apply", "-f", str(tmp_path))
        assert code == 1
        assert out == "configmap/web created\n"
        lines = err.splitlines()
        assert lines[0].startswith("error: ") and "c.yml: invalid YAML" in lines[0]
        assert lines[1].startswith("Error from server (Invalid): error when applying")
        assert lines[2] == "  - spec.containers[0].image: Required value"
        assert "unknown kind 'Gizmo'" in lines[3]

    def test_nothing_to_apply(self, run: Run) -> None:
        assert run("apply", "-f", "-", stdin="---\n")[0] == 1


class TestGet:
    @pytest.fixture(autouse=True)
    def objects(self, run: Run) -> None:
        docs = []
        for ns, name, app in [("default", "a", "web"), ("default", "b", "db"), ("x", "c", "web")]:
            docs.append(
                {
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
                    "data": {},
                }
            )
        assert run("apply", "-f", "-", stdin=json.dumps(docs))[0] == 0

    def test_table_and_selector(self, run: Run) -> None:
        code, out, _ = run("get", "cm")
        assert code == 0
        assert [line.split()[0] for line in out.splitlines()] == ["NAME", "a", "b"]
        code, out, _ = run("get", "configmaps", "-l", "app=web", "-A")
        assert [line.split()[:2] for line in out.splitlines()] == [
            ["NAMESPACE", "NAME"],
            ["default", "a"],
            ["x", "c"],
        ]

    def test_outputs(self, run: Run) -> None:
        _, out, _ = run("get", "configmap", "a", "-o", "json")
        assert json.loads(out)["metadata"]["name"] == "a"
        _, out, _ = run("get", "cm", "-o", "yaml")
        doc = yaml.safe_load(out)
        assert doc["kind"] == "List" and len(doc["items"]) == 2
        assert run("get", "cm", "-o", "name")[1] == "configmap/a\nconfigmap/b\n"

    def test_not_found_and_empty(self, run: Run) -> None:
        code, out, err = run("get", "cm", "nope")
        assert code == 1
        assert err.startswith('Error from server (NotFound): configmaps "nope" not found')
        code, out, err = run("get", "pods")
        assert (code, out) == (0, "")
        assert "No resources found in default namespace." in err

    def test_usage_errors(self, run: Run) -> None:
        assert run("get", "gizmos")[0] == 2
        assert run("get", "cm,pods", "a")[0] == 2
        assert run("get", "cm", "a", "-l", "x=y")[0] == 2

    def test_several_kinds(self, run: Run) -> None:
        code, out, _ = run("get", "cm,pods,ns")
        assert code == 0
        assert "configmap/a" in out


class TestDescribeDeleteVersion:
    def test_describe_with_events(self, run: Run) -> None:
        run("apply", "-f", "-", stdin=CM)
        run.api.events = [
            {"type": "Warning", "reason": "Odd", "message": "hm", "source": {"component": "x"}}
        ]
        code, out, _ = run("describe", "cm", "web")
        assert code == 0
        assert "Labels:         app=web" in out
        assert "Warning   Odd" in out
        assert ("GET", PREFIX + "namespaces/default/events") in run.api.log

    def test_delete(self, run: Run) -> None:
        run("apply", "-f", "-", stdin=CM)
        assert run("delete", "cm", "web", "--cascade", "foreground") == (
            0,
            'configmap "web" deleted\n',
            "",
        )
        code, _, err = run("delete", "cm", "web")
        assert code == 1 and "(NotFound)" in err
        assert run("delete", "cm", "web", "--ignore-not-found")[0] == 0
        assert run("delete")[0] == 2

    def test_delete_from_file_and_selector(self, run: Run) -> None:
        run("apply", "-f", "-", stdin=CM)
        assert run("delete", "-f", "-", stdin=CM)[1] == 'configmap "web" deleted\n'
        run("apply", "-f", "-", stdin=CM)
        assert run("delete", "cm", "-l", "app=web")[1] == 'configmap "web" deleted\n'

    def test_version(self, run: Run) -> None:
        code, out, _ = run("version")
        assert code == 0
        assert out.splitlines()[1] == "Server Version: v0.1.0"


class ScriptedWatch:
    """Serves one list per relist and one scripted stream per watch request."""

    def __init__(self, lists: list[dict], streams: list[Any]) -> None:
        self.lists = iter(lists)
        self.streams: Iterator[Any] = iter(streams)
        self.watch_versions: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") != "1":
            return httpx.Response(200, json=next(self.lists))
        self.watch_versions.append(request.url.params.get("resourceVersion"))
        step = next(self.streams, KeyboardInterrupt)
        if isinstance(step, type) and issubclass(step, BaseException):
            raise step()
        if isinstance(step, BaseException):
            raise step
        return httpx.Response(200, content=b"".join(json.dumps(e).encode() + b"\n" for e in step))


def pod(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}


def test_watch_resumes_and_relists() -> None:
    gone = {"type": "ERROR", "object": errors.Gone("too old resource version").to_status()}
    script = ScriptedWatch(
        lists=[
            {"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9"), pod("b", "9")]},
            {"metadata": {"resourceVersion": "30"}, "items": [pod("a", "25"), pod("c", "29")]},
        ],
        streams=[
            [{"type": "ADDED", "object": pod("d", "11")}],
            httpx.ReadError("connection reset"),
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}, gone],
            [{"type": "DELETED", "object": pod("c", "31")}],
        ],
    )
    out = io.StringIO()
    client = ApiClient("http://qm.test", "t", transport=httpx.MockTransport(script))
    ctx = Context(client, out=out, err=io.StringIO())
    args = cli_main.build_parser().parse_args(["get", "pods", "-w"])
    assert watch(ctx, BY_KIND["Pod"], args, sleep=lambda s: None) == 0
    assert script.watch_versions == ["10", "11", "11", "30", "31"]
    rows = [line.split()[:2] for line in out.getvalue().splitlines()]
    assert rows == [
        ["EVENT", "NAME"],
        ["a", "<none>"],
        ["b", "<none>"],
        ["ADDED", "d"],
        ["MODIFIED", "a"],
        ["ADDED", "c"],
        ["DELETED", "b"],
        ["DELETED", "d"],
        ["DELETED", "c"],
    ]


def test_main_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QM_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.delenv("QM_TOKEN", raising=False)
    monkeypatch.delenv("QM_SERVER", raising=False)
    assert cli_main.main(["get"]) == 2
    assert cli_main.main([]) == 2
    assert cli_main.main(["get", "pods"]) == 2  # no token configured
    assert cli_main.main(["--server", "http://127.0.0.1:9", "--token", "t", "get", "x"]) == 2
    assert cli_main.main(["get", "pods", "--server", "http://127.0.0.1:9", "--token", "t"]) == 1
