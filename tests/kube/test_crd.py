"""The generated CRD: structural schema, CEL rule, subresources, and it matches deploy/crd.yaml.

The schema is checked with a JSON-schema validator (jsonschema) after dropping the
x-kubernetes-* extensions, and the CEL rules are evaluated with cel-python over the
object as the API server would present it (field names escaped as Kubernetes does).
Neither is the API server; both check what the API server would check.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml

from edl.api.errors import JobValidationError
from edl.jobparser import JobParser
from edl.jobparser.validation import INT_BOUNDS
from edl.kube.crd import CRD_NAME, build_crd, openapi_schema
from int_bounds import bound_cases

ROOT = Path(__file__).resolve().parents[2]


def _plain_json_schema(node: Any) -> Any:
    """Drop Kubernetes extensions so a standard validator can run the schema."""
    if isinstance(node, dict):
        return {
            k: _plain_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")
        }
    if isinstance(node, list):
        return [_plain_json_schema(v) for v in node]
    return node


def _cel_escape(name: str) -> str:
    """Kubernetes' escaping of property names for CEL (the subset edl's fields need)."""
    return name.replace("__", "__underscores__").replace("-", "__dash__").replace(".", "__dot__")


def _cel_value(schema: dict[str, Any], obj: Any) -> Any:
    """`obj` as CEL sees it: property names escaped, map keys (additionalProperties) not."""
    if isinstance(obj, dict) and "properties" in schema:
        props = schema["properties"]
        return {_cel_escape(k): _cel_value(props.get(k, {}), v) for k, v in obj.items()}
    if isinstance(obj, dict):
        values = schema.get("additionalProperties")
        return {k: _cel_value(values if isinstance(values, dict) else {}, v)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cel_value(schema.get("items") or {}, v) for v in obj]
    return obj


def _apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Fill `default`s the way the API server does before validation (objects only)."""
    if not isinstance(obj, dict) or schema.get("type") != "object":
        return obj
    for prop, sub in (schema.get("properties") or {}).items():
        if prop not in obj and "default" in sub:
            obj[prop] = copy.deepcopy(sub["default"])
        if prop in obj:
            obj[prop] = _apply_defaults(sub, obj[prop])
    return obj


def _cel_failures(schema: dict[str, Any], obj: Any, path: str = "") -> list[str]:
    """Evaluate every x-kubernetes-validations rule in `schema` against `obj`, recursively
    (objects, maps, list items and scalars alike), plus list-type map key uniqueness."""
    failures: list[str] = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.json_to_cel(_cel_value(schema, obj))}):
            failures.append(f"{path}: {rule['message']}")
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        values = schema.get("additionalProperties")
        for key, value in obj.items():
            sub = props.get(key) if props else values if isinstance(values, dict) else None
            if sub:
                failures += _cel_failures(sub, value, f"{path}.{key}")
    if isinstance(obj, list):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"])
                    for item in obj if isinstance(item, dict)]
            if len(keys) != len(set(keys)):
                failures.append(f"{path}: Duplicate value")
        for index, item in enumerate(obj):
            failures += _cel_failures(schema.get("items") or {}, item, f"{path}[{index}]")
    return failures


def admit(obj: dict[str, Any]) -> list[str]:
    """What the API server would say about `obj`: defaulting, schema, then CEL rules."""
    schema = openapi_schema()
    obj = _apply_defaults(schema, copy.deepcopy(obj))
    validator = jsonschema.Draft7Validator(_plain_json_schema(schema))
    problems = [
        ".".join(str(p) for p in err.absolute_path) + ": " + err.message
        for err in validator.iter_errors(obj)
    ]
    return problems or _cel_failures(schema, obj)


def load(path: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / path).read_text())


def test_deploy_crd_is_the_generated_one() -> None:
    # deploy/crd.yaml must be regenerated (`edl crd > deploy/crd.yaml`) when the model changes.
    assert load("deploy/crd.yaml") == build_crd()


def test_crd_names_subresources_and_columns() -> None:
    crd = build_crd()
    assert crd["metadata"]["name"] == CRD_NAME == "trainingjobs.edl.dev"
    assert crd["spec"]["names"]["shortNames"] == ["tj"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.trainer.min-instance",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",  # an HPA needs it
    }
    assert crd["spec"]["names"]["categories"] == ["edl"]  # not in `kubectl delete all`
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "State": ".status.state",
        "Running": ".status.trainers.running",
        "Desired": ".status.trainers.desired",
        "Min": ".spec.trainer.min-instance",
        "Max": ".spec.trainer.max-instance",
        "Waiting": ".status.waiting",
        "Age": ".metadata.creationTimestamp",
        "Pending": ".status.trainers.pending",
        "Image": ".spec.image",
        "Message": ".status.message",
    }
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Pending", "Image", "Message"]  # `kubectl get tj -o wide` adds these


def _properties(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every (path, schema) under `properties`, array items included."""
    found = []
    for prop, sub in (node.get("properties") or {}).items():
        found.append((f"{path}.{prop}", sub))
        found += _properties(sub, f"{path}.{prop}")
    if isinstance(node.get("items"), dict):
        found += _properties(node["items"], f"{path}[]")
    return found


def test_every_schema_property_has_a_description() -> None:
    """What `kubectl explain trainingjob.spec.trainer` shows comes from these."""
    schema = openapi_schema()
    assert schema["description"]
    undocumented = [path for path, sub in _properties(schema)
                    # the API server forbids anything on metadata but name/generateName
                    # (kubectl explain shows ObjectMeta's own descriptions there)
                    if not path.startswith(".metadata") and not sub.get("description")]
    assert undocumented == []
    assert ".spec.trainer.min-instance" in dict(_properties(schema))
    assert "\n" not in str(schema)  # one paragraph each, as kubectl explain wraps it
    trainer = schema["properties"]["spec"]["properties"]["trainer"]["properties"]
    assert "kubectl scale" in trainer["min-instance"]["description"]


def test_the_model_documents_every_field() -> None:
    """Descriptions come from the pydantic model (`Field(description=...)`), so a new field
    without one fails here before it reaches the CRD."""
    from pydantic import BaseModel

    from edl.api import trainingjob as model

    missing = [f"{cls.__name__}.{name}"
               for cls in vars(model).values()
               if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ ==
               model.__name__ and cls is not model.ObjectMeta
               for name, field in cls.model_fields.items()
               if name != "metadata" and not field.description]
    assert missing == []


def test_every_rule_names_its_field_and_reason() -> None:
    """Without a fieldPath a root rule is reported at `<nil>`; the reason makes it a 422
    FieldValueInvalid like the schema's own errors. A rule on a map or list as a whole (its
    keys, its items) is reported at that field's own path, so it needs no fieldPath; every
    other rule names the field it is about."""
    def rules(node: dict[str, Any]) -> list[dict[str, Any]]:
        found = list(node.get("x-kubernetes-validations") or [])
        for sub in (node.get("properties") or {}).values():
            found += rules(sub)
        return found

    found = rules(openapi_schema())
    assert len(found) > 5  # the TrainingJob's own five and the pod fields' rules
    for rule in found:
        on_whole_field = rule["rule"].startswith("self.all(")
        assert on_whole_field or rule["fieldPath"].startswith("."), rule
        assert rule["reason"] == "FieldValueInvalid", rule
    name_rule = openapi_schema()["x-kubernetes-validations"][0]
    assert name_rule["fieldPath"] == ".metadata.name"


def test_schema_is_structural() -> None:
    """Every node has a type (or is int-or-string); no type/default inside anyOf branches."""

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            return
        assert "type" in node, f"{path} has no type"
        for prop, sub in (node.get("properties") or {}).items():
            walk(sub, f"{path}.{prop}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(openapi_schema(), "")


def test_cel_rule_min_le_max_is_present() -> None:
    trainer = openapi_schema()["properties"]["spec"]["properties"]["trainer"]
    rules = [r["rule"] for r in trainer["x-kubernetes-validations"]]
    assert rules == [
        "!has(self.max__dash__instance) || self.min__dash__instance <= self.max__dash__instance"
    ]
    assert trainer["required"] == ["entrypoint", "min-instance"]


@pytest.mark.parametrize("path", [
    "deploy/example-trainingjob.yaml", "examples/jobs/mnist.yaml",
    "examples/digits/job.yaml", "examples/diabetes/job.yaml", "examples/digits-ddp/job.yaml",
])
def test_examples_are_admitted(path: str) -> None:
    assert admit(load(path)) == []


def _job(**trainer: Any) -> dict[str, Any]:
    job = load("deploy/example-trainingjob.yaml")
    job["spec"]["trainer"].update(trainer)
    return job


def test_min_greater_than_max_is_rejected_by_the_cel_rule() -> None:
    problems = admit(_job(**{"min-instance": 5, "max-instance": 3}))
    assert problems == [
        ".spec.trainer: spec.trainer.min-instance must be <= spec.trainer.max-instance"
        " (kubectl scale --replicas sets spec.trainer.min-instance)"
    ]


def test_fixed_size_unless_fault_tolerant() -> None:
    job = _job(**{"min-instance": 2, "max-instance": 4})
    job["spec"]["fault_tolerant"] = False
    (problem,) = admit(job)
    assert problem.startswith(".spec: spec.trainer.max-instance must equal min-instance"
                              " unless spec.fault_tolerant is true")
    # the refusal a `kubectl scale` of such a job meets says what replicas means
    assert "kubectl scale --replicas (which sets min-instance)" in problem
    job["spec"]["trainer"]["max-instance"] = 2
    assert admit(job) == []


@pytest.mark.parametrize("name, ok", [
    ("mnist", True), ("a" * 55, True), ("a" * 56, False), ("Bad_Name", False), ("1job", False),
])
def test_job_names_must_leave_room_for_child_names(name: str, ok: bool) -> None:
    job = _job()
    job["metadata"]["name"] = name
    assert (admit(job) == []) is ok


def test_scale_above_max_is_rejected_and_within_range_admitted() -> None:
    # `kubectl scale --replicas=N` writes spec.trainer.min-instance (the scale subresource).
    assert admit(_job(**{"min-instance": 6})) == []
    assert admit(_job(**{"min-instance": 7}))
    assert admit(_job(**{"min-instance": 0}))


@pytest.mark.parametrize("mutate, where", [
    (lambda j: j["spec"].update(port=-1), "spec.port"),
    (lambda j: j["spec"].update(port=70000), "spec.port"),
    (lambda j: j["spec"].update(ports_num=0), "spec.ports_num"),
    (lambda j: j["spec"]["trainer"]["resources"]["requests"].update(memory="lots"),
     "spec.trainer.resources.requests.memory"),
    (lambda j: j["spec"]["trainer"]["resources"]["limits"].update(cpu="-1"),
     "spec.trainer.resources.limits.cpu"),
    (lambda j: j["spec"]["trainer"]["resources"]["limits"].update(cpu=-2),
     "spec.trainer.resources.limits.cpu"),
    (lambda j: j["spec"]["trainer"].pop("min-instance"), "spec.trainer"),
    (lambda j: j["spec"]["trainer"].update({"min-instance": "two"}), "spec.trainer.min-instance"),
    (lambda j: j["spec"]["trainer"].pop("entrypoint"), "spec.trainer"),
    (lambda j: j["spec"]["trainer"].update(entrypoint=" "), "spec.trainer.entrypoint"),
    (lambda j: j["spec"]["pserver"].update({"min-instance": 0}), "spec.pserver.min-instance"),
])
def test_bad_jobs_are_rejected_naming_the_field(mutate: Any, where: str) -> None:
    job = load("deploy/example-trainingjob.yaml")
    mutate(job)
    problems = admit(job)
    assert problems, "the schema admitted a bad job"
    assert any(p.startswith(where) for p in problems), problems


def test_the_many_problems_example_is_rejected() -> None:
    problems = admit(load("examples/jobs/invalid/many-problems.yaml"))
    assert problems  # an empty entrypoint, min > max, a bad quantity, ...


def test_defaults_are_filled() -> None:
    job = load("deploy/example-trainingjob.yaml")
    for key in ("port", "ports_num", "passes"):
        job["spec"].pop(key)
    filled = _apply_defaults(openapi_schema(), job)
    spec = filled["spec"]
    assert (spec["port"], spec["ports_num"], spec["passes"]) == (7164, 1, 1)


def test_a_collective_job_defaulted_by_the_api_server_is_still_valid() -> None:
    from edl.jobparser import JobParser

    job = load("examples/digits-ddp/job.yaml")
    filled = _apply_defaults(openapi_schema(), job)
    assert filled["spec"]["passes"] == 1 and filled["spec"]["collective"]["max-restarts"] == 100
    valid = JobParser().validate(filled)  # the CRD's defaults are not "pserver fields"
    assert valid.collective() and valid.spec.collective.resize_cooldown == 30
    bad = copy.deepcopy(job)
    bad["spec"]["collective"]["nproc-per-node"] = 0
    assert any("nproc-per-node" in problem for problem in admit(bad))


def test_quantity_pattern_matches_kubernetes_forms() -> None:
    pattern = re.compile(openapi_schema()["properties"]["spec"]["properties"]["trainer"]
                         ["properties"]["resources"]["properties"]["limits"]
                         ["additionalProperties"]["pattern"])
    for good in ["1", "500m", "1.5", "1Gi", "512Mi", "1e3", ".5", "2k"]:
        assert pattern.match(good), good
    for bad in ["-1", "lots", "1GB", "", "1.2.3"]:
        assert not pattern.match(bad), bad


# -- one source of truth: the schema and JobParser.validate agree ------------------------------

def _parser_accepts(obj: Any) -> bool:
    try:
        JobParser().validate(obj)
    except JobValidationError:
        return False
    return True


EXAMPLE_JOBS = [
    "deploy/example-trainingjob.yaml", "examples/jobs/mnist.yaml",
    "examples/jobs/paddle-original.yaml", "examples/digits/job.yaml",
    "examples/diabetes/job.yaml", "examples/jobs/invalid/many-problems.yaml",
    "examples/jobs/invalid/unknown-fields.yaml",
]


@pytest.mark.parametrize("path", EXAMPLE_JOBS)
def test_schema_and_parser_agree_on_the_example_jobs(path: str) -> None:
    job = load(path)
    assert (admit(job) == []) is _parser_accepts(job), admit(job)


def _set(path: str, value: Any) -> Any:
    """A mutation of the example job: set (or, with value=DROP, remove) a dotted field."""
    def mutate(job: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = job
        for part in parents:
            node = node.setdefault(part, {})
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return mutate


DROP = object()
AGREEING_MUTATIONS = {
    # fields the parser defaults and the schema must therefore not require (issue: b, c)
    "no image": _set("spec.image", DROP),
    "no trainer max": _set("spec.trainer.max-instance", DROP),
    "no pserver": _set("spec.pserver", DROP),
    "no pserver min": _set("spec.pserver.min-instance", DROP),
    "no ports": lambda j: [j["spec"].pop(k, None) for k in ("port", "ports_num", "passes")],
    # rules both sides enforce
    "pserver min 0": _set("spec.pserver.min-instance", 0),  # issue: a
    "pserver min > max": _set("spec.pserver.min-instance", 3),
    "trainer min 0": _set("spec.trainer.min-instance", 0),
    "trainer max 0": _set("spec.trainer.max-instance", 0),
    "trainer min > max": _set("spec.trainer.min-instance", 9),
    "no trainer min": _set("spec.trainer.min-instance", DROP),
    "not fault tolerant, min < max": _set("spec.fault_tolerant", False),
    "empty image": _set("spec.image", ""),
    "blank image": _set("spec.image", "  "),
    "blank entrypoint": _set("spec.trainer.entrypoint", " "),
    "no entrypoint": _set("spec.trainer.entrypoint", DROP),
    "port 0": _set("spec.port", 0),
    "port 65536": _set("spec.port", 65536),
    "ports overflow": _set("spec.port", 65534),
    "ports fit": _set("spec.port", 65000),
    "ports_num 0": _set("spec.ports_num", 0),
    "sparse -1": _set("spec.ports_num_for_sparse", -1),
    "sparse 0": _set("spec.ports_num_for_sparse", 0),
    "passes 0": _set("spec.passes", 0),
    "passes text": _set("spec.passes", "ten"),
    "bad quantity": _set("spec.trainer.resources.requests.memory", "lots"),
    "negative quantity": _set("spec.trainer.resources.limits.cpu", "-1"),
    "exponent quantity": _set("spec.trainer.resources.limits.memory", "1e9"),
    "bad name": _set("metadata.name", "Bad_Name"),
    "digit-first name": _set("metadata.name", "1job"),
    "longest name": _set("metadata.name", "a" * 55),
    "too long name": _set("metadata.name", "a" * 56),
    "etcd ok": _set("spec.master.etcd-endpoint", "http://etcd:2379,https://e2:2379"),
    "etcd not a URL": _set("spec.master.etcd-endpoint", "etcd:2379"),
    "etcd empty": _set("spec.master.etcd-endpoint", ""),
    "etcd trailing comma": _set("spec.master.etcd-endpoint", "http://etcd:2379,"),
}


def _role(role: str, **fields: Any) -> Any:
    """A mutation setting pod fields of one role (spec.master|pserver|trainer)."""
    def mutate(job: dict[str, Any]) -> None:
        job["spec"].setdefault(role, {}).update(copy.deepcopy(fields))
    return mutate


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NODE_TERM = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
POD_FIELD_MUTATIONS = {
    # valid fields, admitted by both
    "every pod field": _role(
        "trainer", nodeSelector={"nvidia.com/gpu.present": "true"}, tolerations=[GPU_TAINT],
        affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_TERM]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "preference": NODE_TERM}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname",
                 # the job's own trainers: the planner models rules among them only
                 "labelSelector": {"matchLabels": {"edl.dev/job": "digits-cluster"}}}]}},
        priorityClassName="edl-elastic-trainer", serviceAccountName="runner",
        automountServiceAccountToken=True,
        securityContext={"runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"},
                         "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
        containerSecurityContext={"readOnlyRootFilesystem": True,
                                  "capabilities": {"add": ["NET_BIND_SERVICE"]}},
        env=[{"name": "NCCL_DEBUG", "value": "INFO"},
             {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        labels={"team": "vision"}, annotations={"example.com/note": "any text at all"},
        topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                    "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2,
                                    "labelSelector": {"matchLabels": {
                                        "edl.dev/job": "digits-cluster"}}}],
        imagePullSecrets=[{"name": "registry"}], image="registry.example.com/edl:1"),
    "master etcd image": _role("master", **{"etcd-image": "mirror.local/etcd:v3.5.17"}),
    "Gt one integer": _role("pserver", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}]}}}),
    "toleration Exists without key": _role("trainer", tolerations=[{"operator": "Exists"}]),
    "amd gpu": _role("trainer", resources={"limits": {"amd.com/gpu": 1}}),
    "hugepages": _role("trainer", resources={"limits": {"hugepages-2Mi": "1Gi"}}),
    # wrong fields, refused by both
    "bad toleration operator": _role("trainer", tolerations=[{"key": "a", "operator": "In"}]),
    "toleration Exists with value": _role(
        "trainer", tolerations=[{"key": "a", "operator": "Exists", "value": "b"}]),
    "toleration without key, Equal": _role("trainer", tolerations=[{"value": "b"}]),
    "tolerationSeconds without NoExecute": _role(
        "trainer", tolerations=[{"key": "a", "tolerationSeconds": 5}]),
    "bad toleration effect": _role("trainer", tolerations=[{"key": "a", "effect": "Never"}]),
    "selector value too long": _role("trainer", nodeSelector={"pool": "x" * 64}),
    "selector value bad": _role("trainer", nodeSelector={"pool": "a b"}),
    "selector key bad": _role("trainer", nodeSelector={"a b": "x"}),
    "selector key prefix too long": _role("trainer", nodeSelector={"a" * 254 + "/x": "y"}),
    "selector key name too long": _role("trainer", nodeSelector={"x" * 64: "y"}),
    "too many selector keys": _role("trainer", nodeSelector={f"k{i}": "v" for i in range(65)}),
    "unknown affinity operator": _role("trainer", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}]}}}),
    "In without values": _role("trainer", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "In"}]}]}}}),
    "Exists with values": _role("trainer", affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "zone", "labelSelector": {"matchExpressions": [
                {"key": "a", "operator": "Exists", "values": ["b"]}]}}]}}),
    "Gt not an integer": _role("trainer", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["--5"]}]}]}}}),
    "no node selector terms": _role("trainer", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
    "weight 0": _role("trainer", affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": NODE_TERM}]}}),
    "matchFields not metadata.name": _role("trainer", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "spec.x", "operator": "In", "values": ["n"]}]}]}}}),
    "pod affinity without topologyKey": _role("trainer", affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}),
    "edl label": _role("trainer", labels={"edl.dev/role": "pserver"}),
    "bad label key": _role("master", labels={"-x": "y"}),
    "bad annotation key": _role("pserver", annotations={"a b": "y"}),
    "bad priority class": _role("trainer", priorityClassName="High_Priority"),
    "bad service account": _role("trainer", serviceAccountName="-sa"),
    "edl env": _role("trainer", env=[{"name": "EDL_PORT", "value": "1"}]),
    "duplicate env": _role("trainer", env=[{"name": "A", "value": "1"},
                                           {"name": "A", "value": "2"}]),
    "bad env name": _role("trainer", env=[{"name": "1A", "value": "1"}]),
    "env value and valueFrom": _role("trainer", env=[
        {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]),
    "env valueFrom with two sources": _role("trainer", env=[{"name": "A", "valueFrom": {
        "fieldRef": {"fieldPath": "x"}, "secretKeyRef": {"name": "s", "key": "k"}}}]),
    "negative runAsUser": _role("trainer", securityContext={"runAsUser": -1}),
    "bad seccomp type": _role("trainer", securityContext={"seccompProfile": {"type": "x"}}),
    "Localhost without profile": _role(
        "trainer", securityContext={"seccompProfile": {"type": "Localhost"}}),
    "privileged without escalation": _role("trainer", containerSecurityContext={
        "privileged": True, "allowPrivilegeEscalation": False}),
    "maxSkew 0": _role("trainer", topologySpreadConstraints=[
        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
    "minDomains with ScheduleAnyway": _role("trainer", topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
         "minDomains": 2}]),
    "bad pull secret": _role("trainer", imagePullSecrets=[{"name": "Not A Name"}]),
    "empty role image": _role("trainer", image=" "),
    "empty etcd image": _role("master", **{"etcd-image": ""}),
    "unprefixed resource": _role("trainer", resources={"limits": {"gpu": 1}}),
    "kubernetes.io resource": _role("trainer", resources={"limits": {"kubernetes.io/x": 1}}),
}
AGREEING_MUTATIONS.update(POD_FIELD_MUTATIONS)
# Rules the parser enforces that a structural schema with CEL cannot state (quantities
# compared as numbers, cross-list references); the API server admits these jobs and
# the controller marks them Failed with the parser's message.
SCHEMA_CANNOT_EXPRESS = {
    "requests above limits": _set("spec.trainer.resources.requests.cpu", "2"),
    "fractional GPU": lambda j: j["spec"]["trainer"]["resources"]["limits"].update(
        {"nvidia.com/gpu": "0.5"}),
    "mount of a missing volume": _set("spec.volumeMounts", [{"name": "x", "mountPath": "/x"}]),
    "fractional extended resource": _role("trainer", resources={"limits": {"amd.com/gpu": "0.5"}}),
    "extended request != limit": _role("trainer", resources={
        "requests": {"example.com/fpga": 1}, "limits": {"example.com/fpga": 2}}),
}


def test_the_pod_field_mutations_cover_both_verdicts() -> None:
    """Not a vacuous agreement: some pod-field mutations are admitted, most are refused."""
    verdicts = {}
    for name, mutate in POD_FIELD_MUTATIONS.items():
        job = load("deploy/example-trainingjob.yaml")
        mutate(job)
        verdicts[name] = _parser_accepts(job)
    accepted = {name for name, ok in verdicts.items() if ok}
    assert accepted == {"every pod field", "master etcd image", "Gt one integer",
                        "toleration Exists without key", "amd gpu", "hugepages"}


@pytest.mark.parametrize("mutation", sorted(AGREEING_MUTATIONS))
def test_schema_and_parser_agree_where_the_schema_can_express_the_rule(mutation: str) -> None:
    job = load("deploy/example-trainingjob.yaml")
    AGREEING_MUTATIONS[mutation](job)
    assert (admit(job) == []) is _parser_accepts(job), admit(job)


@pytest.mark.parametrize("mutation", sorted(SCHEMA_CANNOT_EXPRESS))
def test_rules_only_the_parser_enforces(mutation: str) -> None:
    job = load("deploy/example-trainingjob.yaml")
    SCHEMA_CANNOT_EXPRESS[mutation](job)
    assert admit(job) == [] and not _parser_accepts(job)


@pytest.mark.parametrize("path", sorted(INT_BOUNDS))
def test_integer_bounds_match_the_job_parser(path: str) -> None:
    """Defect 5: the CRD admits exactly the integers JobParser.validate accepts."""
    for obj, ok in bound_cases(path):
        rejected = [p for p in admit(obj) if p.split(":")[0] == path]  # the field's own bound
        assert (not rejected) is ok, (obj, rejected)
    schema = openapi_schema()
    node = schema
    for key in path.split("."):
        node = node["properties"][key]
    assert node["format"] == "int32" and node["maximum"] <= 2**31 - 1
