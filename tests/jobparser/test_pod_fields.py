"""Per-role pod fields reach the pods in Kubernetes' form; every pod passes Pod Security
`restricted` by default; wrong fields are named (issues 20 and 21)."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edl.api.errors import JobValidationError
from edl.jobparser import JobParser, PodDefaults
from edl.jobparser.collective import USER_SETTABLE_ENV
from edl.jobparser.manifests import EDL_ENV_NAMES, ETCD_IMAGE
from pod_security import restricted_violations

ROOT = Path(__file__).resolve().parents[2]
Check = Callable[[dict[str, Any]], None]
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ZONE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]}]}}}
SPREAD = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
           "whenUnsatisfiable": "ScheduleAnyway",
           "labelSelector": {"matchLabels": {"edl.dev/job": "mnist", "edl.dev/role": "trainer"}}}]


def job(mode: str = "parameter-server", **roles: dict[str, Any]) -> dict[str, Any]:
    """A small valid job; `roles` are merged into spec.master / pserver / trainer."""
    spec: dict[str, Any] = {
        "fault_tolerant": True,
        "trainer": {"entrypoint": "python train.py", "min-instance": 2, "max-instance": 4,
                    "resources": {"requests": {"cpu": "1"}}},
    }
    if mode == "collective":
        spec["mode"] = "collective"
    else:
        spec["pserver"] = {"min-instance": 1}
    for role, fields in roles.items():
        spec.setdefault(role, {}).update(copy.deepcopy(fields))
    return {"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
            "metadata": {"name": "mnist", "namespace": "team-a"}, "spec": spec}


def templates(obj: dict[str, Any], parser: JobParser | None = None) -> dict[str, dict[str, Any]]:
    """Each role's pod template, by role (from the ReplicaSets and the trainer Job)."""
    found = {}
    for manifest in (parser or JobParser()).parse_all(obj):
        if manifest["kind"] != "Service":
            template = manifest["spec"]["template"]
            found[template["metadata"]["labels"]["edl.dev/role"]] = template
    return found


def problems(obj: dict[str, Any], parser: JobParser | None = None) -> dict[str, str]:
    with pytest.raises(JobValidationError) as error:
        (parser or JobParser()).validate(obj)
    return dict(error.value.problems)


ALL_FIELDS = {
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [GPU_TAINT],
    "affinity": ZONE_AFFINITY,
    "priorityClassName": "edl-elastic-trainer",
    "serviceAccountName": "trainer-sa",
    "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
    "containerSecurityContext": {"readOnlyRootFilesystem": True},
    "env": [{"name": "NCCL_DEBUG", "value": "INFO"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    "labels": {"team": "vision"},
    "annotations": {"example.com/owner": "alice"},
    "topologySpreadConstraints": SPREAD,
    "imagePullSecrets": [{"name": "gpu-registry"}],
    "image": "registry.example.com/edl-cuda:1",
}
VARIANTS = {
    "parameter-server": job(),
    "external-etcd": job(master={"etcd-endpoint": "http://etcd:2379"}),
    "collective": job("collective"),
    "collective-external-etcd": job("collective", master={"etcd-endpoint": "http://etcd:2379"}),
    "gpu": job(trainer={"resources": {"limits": {"nvidia.com/gpu": 1, "amd.com/gpu": 2}}}),
    "every-field": job(trainer=ALL_FIELDS, master=ALL_FIELDS, pserver=ALL_FIELDS),
    "collective-every-field": job("collective", trainer=ALL_FIELDS, master=ALL_FIELDS),
    "user-run-as": job(master={"containerSecurityContext": {"runAsUser": 5000}}),
}
EXAMPLES = ["deploy/example-trainingjob.yaml", "examples/jobs/mnist.yaml",
            "examples/digits/job.yaml", "examples/diabetes/job.yaml",
            "examples/digits-ddp/job.yaml"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_pod_edl_creates_passes_pod_security_restricted(
        variant: str, assert_valid_manifest: Check) -> None:
    found = templates(VARIANTS[variant])
    expected = {"master", "trainer"} if "collective" in variant else {"master", "pserver",
                                                                       "trainer"}
    assert set(found) == expected
    for role, template in found.items():
        assert restricted_violations(template) == {}, (variant, role)
    for manifest in JobParser().parse_all(VARIANTS[variant]):
        assert_valid_manifest(manifest)  # kubernetes-validate, strict, newest schema


@pytest.mark.parametrize("path", EXAMPLES)
def test_the_shipped_jobs_pass_pod_security_restricted(path: str) -> None:
    obj = yaml.safe_load((ROOT / path).read_text())
    for role, template in templates(obj).items():
        assert restricted_violations(template) == {}, (path, role)


@pytest.mark.parametrize("mutate, rule", [
    (lambda t: t["spec"]["containers"][0]["securityContext"].update(privileged=True),
     "privileged"),
    (lambda t: t["spec"]["containers"][0]["securityContext"].pop("capabilities"),
     "capabilities (restricted)"),
    (lambda t: t["spec"]["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
     "privilege escalation"),
    (lambda t: t["spec"]["securityContext"].pop("runAsNonRoot"), "running as non-root"),
    (lambda t: t["spec"]["securityContext"].update(runAsUser=0), "running as non-root user"),
    (lambda t: t["spec"]["securityContext"].pop("seccompProfile"), "seccomp (restricted)"),
    (lambda t: t["spec"].update(hostNetwork=True), "host namespaces"),
    (lambda t: t["spec"].update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
     "volume types"),
])
def test_the_restricted_checker_catches_each_rule(mutate: Any, rule: str) -> None:
    template = copy.deepcopy(templates(job())["trainer"])
    mutate(template)
    assert rule in restricted_violations(template)


def test_edl_options_outside_restricted_are_the_users_choice() -> None:
    """hostNetwork and a hostPath volume, or a user's securityContext, may leave restricted:
    the namespace's Pod Security level decides, as for any pod."""
    host = templates(job(**{"trainer": {}}) | {"spec": {**job()["spec"], "hostNetwork": True}})
    assert "host namespaces" in restricted_violations(host["trainer"])
    escalate = templates(job(trainer={"containerSecurityContext": {
        "allowPrivilegeEscalation": True}}))
    assert "privilege escalation" in restricted_violations(escalate["trainer"])
    assert restricted_violations(escalate["master"]) == {}  # other roles keep the defaults


restricted_contexts = st.fixed_dictionaries({}, optional={
    "runAsUser": st.integers(1, 2**31 - 1), "runAsGroup": st.integers(0, 2**31 - 1),
    "fsGroup": st.integers(0, 2**31 - 1),
    "seccompProfile": st.just({"type": "Localhost", "localhostProfile": "profiles/edl.json"}),
})
restricted_container_contexts = st.fixed_dictionaries({}, optional={
    "runAsUser": st.integers(1, 2**31 - 1), "readOnlyRootFilesystem": st.booleans(),
    "capabilities": st.just({"add": ["NET_BIND_SERVICE"]}),
    "seccompProfile": st.just({"type": "RuntimeDefault"}),
})
role_fields = st.fixed_dictionaries({}, optional={
    "securityContext": restricted_contexts,
    "containerSecurityContext": restricted_container_contexts,
    "serviceAccountName": st.just("runner"),
    "nodeSelector": st.just({"pool": "gpu"}), "tolerations": st.just([GPU_TAINT]),
    "labels": st.just({"app.kubernetes.io/part-of": "research"}),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["parameter-server", "collective"]), master=role_fields,
       pserver=role_fields, trainer=role_fields, external=st.booleans())
def test_any_restricted_compatible_fields_keep_every_pod_restricted(
        mode: str, master: dict[str, Any], pserver: dict[str, Any], trainer: dict[str, Any],
        external: bool) -> None:
    roles = {"master": master, "trainer": trainer}
    if mode != "collective":
        roles["pserver"] = pserver
    if external:
        master = {**master, "etcd-endpoint": "http://etcd:2379"}
        roles["master"] = master
    for role, template in templates(job(mode, **roles)).items():
        assert restricted_violations(template) == {}, role


def test_security_contexts_merge_over_the_restricted_defaults() -> None:
    found = templates(job(master={
        "securityContext": {"runAsUser": 1000,
                            "seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
        "containerSecurityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]},
                                     "readOnlyRootFilesystem": True}}))
    master = found["master"]["spec"]
    assert master["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 1000,
        "seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}
    edl_container, etcd = master["containers"]
    assert edl_container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    # the etcd image declares no user: the sidecar runs as distroless' nonroot
    assert etcd["name"] == "etcd" and etcd["securityContext"]["runAsUser"] == 65532
    assert found["trainer"]["spec"]["securityContext"] == {
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    user = templates(VARIANTS["user-run-as"])["master"]["spec"]["containers"]
    assert [c["securityContext"]["runAsUser"] for c in user] == [5000, 5000]


@pytest.mark.parametrize("fields, expected", [
    ({}, False),
    ({"serviceAccountName": "reader"}, None),  # the ServiceAccount's own setting applies
    ({"automountServiceAccountToken": True}, True),
    ({"serviceAccountName": "reader", "automountServiceAccountToken": False}, False),
])
def test_job_pods_get_no_api_token_unless_asked(fields: dict[str, Any], expected: Any) -> None:
    for mode in ("parameter-server", "collective"):
        roles = {"trainer": fields, "master": fields}
        for role, template in templates(job(mode, **roles)).items():
            if role in roles:
                assert template["spec"].get("automountServiceAccountToken") == expected, role


def test_each_role_gets_its_own_fields_in_kubernetes_form() -> None:
    obj = job(trainer=ALL_FIELDS, pserver={"nodeSelector": {"pool": "cpu"}},
              master={"tolerations": [{"key": "dedicated", "operator": "Equal",
                                       "value": "edl", "effect": "NoSchedule"}]})
    obj["spec"]["imagePullSecrets"] = [{"name": "shared"}]
    found = templates(obj)
    trainer = found["trainer"]
    spec = trainer["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName",
                "serviceAccountName", "topologySpreadConstraints"):
        assert spec[key] == ALL_FIELDS[key], key
    assert spec["imagePullSecrets"] == [{"name": "shared"}, {"name": "gpu-registry"}]
    assert trainer["metadata"]["labels"] == {
        "team": "vision", "edl.dev/job": "mnist", "edl.dev/role": "trainer"}
    assert trainer["metadata"]["annotations"] == {"example.com/owner": "alice"}
    container = spec["containers"][0]
    assert container["image"] == "registry.example.com/edl-cuda:1"
    assert container["env"][-2:] == ALL_FIELDS["env"]
    assert found["pserver"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert "tolerations" not in found["pserver"]["spec"]
    assert found["master"]["spec"]["tolerations"][0]["key"] == "dedicated"
    assert found["master"]["spec"]["imagePullSecrets"] == [{"name": "shared"}]
    assert found["master"]["spec"]["containers"][0]["image"] == found["pserver"]["spec"][
        "containers"][0]["image"]


def test_collective_pods_take_the_master_and_trainer_sections() -> None:
    found = templates(job("collective", trainer={"tolerations": [GPU_TAINT]},
                          master={"nodeSelector": {"pool": "cpu"}}))
    assert found["trainer"]["spec"]["containers"][0]["command"] == ["edl", "agent"]
    assert found["trainer"]["spec"]["tolerations"] == [GPU_TAINT]
    assert found["master"]["spec"]["containers"][0]["command"] == ["edl", "rendezvous"]
    assert found["master"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert "spec.pserver" in problems(job("collective", pserver={"nodeSelector": {"a": "b"}}))


def test_images_per_job_per_role_and_per_controller() -> None:
    defaults = PodDefaults(image="mirror.local/edl:1", etcd_image="mirror.local/etcd:3")
    mirrored = JobParser(defaults=defaults)
    found = templates(job(), mirrored)
    assert [c["image"] for c in found["master"]["spec"]["containers"]] == [
        "mirror.local/edl:1", "mirror.local/etcd:3"]
    assert mirrored.validate(job()).spec.master.etcd_image == "mirror.local/etcd:3"
    own = job(master={"etcd-image": "own/etcd:1", "image": "own/master:1"})
    own["spec"]["image"] = "own/edl:2"
    images = {role: [c["image"] for c in t["spec"]["containers"]]
              for role, t in templates(own, mirrored).items()}
    assert images == {"master": ["own/master:1", "own/etcd:1"], "pserver": ["own/edl:2"],
                      "trainer": ["own/edl:2"]}
    assert [c["image"] for c in templates(job())["master"]["spec"]["containers"]][1] == ETCD_IMAGE
    external = JobParser().validate(job(master={"etcd-endpoint": "http://etcd:2379"}))
    assert external.spec.master.etcd_image is None  # no sidecar, no sidecar image


def test_the_trainer_priority_class_default_is_the_controllers() -> None:
    parser = JobParser(defaults=PodDefaults(trainer_priority_class="edl-elastic-trainer"))
    found = templates(job(), parser)
    assert found["trainer"]["spec"]["priorityClassName"] == "edl-elastic-trainer"
    assert "priorityClassName" not in found["master"]["spec"]
    assert "priorityClassName" not in found["pserver"]["spec"]
    own = templates(job(trainer={"priorityClassName": "research"}), parser)
    assert own["trainer"]["spec"]["priorityClassName"] == "research"
    assert "priorityClassName" not in templates(job())["trainer"]["spec"]  # no flag: no class


def test_every_extended_resource_reaches_the_pods() -> None:
    obj = job(trainer={"resources": {"requests": {"cpu": "1", "amd.com/gpu": 2,
                                                  "example.com/fpga": "1"},
                                     "limits": {"hugepages-2Mi": "1Gi"}}})
    container = templates(obj)["trainer"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {
        "hugepages-2Mi": "1Gi", "amd.com/gpu": "2", "example.com/fpga": "1"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EDL_USE_GPU"] == "1"  # a GPU of any vendor


def test_extended_resources_follow_kubernetes_rules() -> None:
    found = problems(job(trainer={"resources": {
        "requests": {"amd.com/gpu": "0.5", "example.com/fpga": 1, "gpu": 1},
        "limits": {"example.com/fpga": 2, "kubernetes.io/foo": 1}}}))
    assert set(found) == {
        "spec.trainer.resources.requests[amd.com/gpu]",
        "spec.trainer.resources.requests[example.com/fpga]",
        "spec.trainer.resources.requests.gpu",
        "spec.trainer.resources.limits[kubernetes.io/foo]",
    }, found
    assert "whole number of GPUs" in found["spec.trainer.resources.requests[amd.com/gpu]"]
    assert "must equal limits" in found["spec.trainer.resources.requests[example.com/fpga]"]


WRONG = job(trainer={
    "tolerations": [{"key": "gpu", "operator": "Equals"},
                    {"operator": "Exists", "value": "x"},
                    {"key": "k", "tolerationSeconds": 5, "effect": "NoSchedule"}],
    "nodeSelector": {"pool": "x" * 64, "bad key!": "v"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "Near", "values": ["a"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 101, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
    "labels": {"edl.dev/role": "pserver", "-x": "y"},
    "priorityClassName": "High_Priority",
    "env": [{"name": "EDL_PORT", "value": "1"}, {"name": "1X", "value": "1"},
            {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
    "securityContext": {"runAsUser": -1, "seccompProfile": {"type": "Strict"}},
    "containerSecurityContext": {"privileged": True, "allowPrivilegeEscalation": False},
    "topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                   "whenUnsatisfiable": "Wait"}],
    "imagePullSecrets": [{"name": "Not A Name"}],
    "tolerationz": [],
}, master={"etcd-image": " ", "image": ""})
WRONG_PATHS = {
    "spec.trainer.tolerations[0].operator",
    "spec.trainer.tolerations[1]",
    "spec.trainer.tolerations[2]",
    "spec.trainer.nodeSelector.pool",
    "spec.trainer.nodeSelector.bad key!",
    "spec.trainer.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    ".nodeSelectorTerms[0].matchExpressions[0].operator",
    "spec.trainer.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
    ".weight",
    "spec.trainer.labels[edl.dev/role]",
    "spec.trainer.labels.-x",
    "spec.trainer.priorityClassName",
    "spec.trainer.env[1].name",
    "spec.trainer.env[2]",
    "spec.trainer.securityContext.runAsUser",
    "spec.trainer.securityContext.seccompProfile.type",
    "spec.trainer.containerSecurityContext",
    "spec.trainer.topologySpreadConstraints[0].maxSkew",
    "spec.trainer.topologySpreadConstraints[0].whenUnsatisfiable",
    "spec.trainer.imagePullSecrets[0].name",
    "spec.trainer.tolerationz",
    "spec.master.etcd-image",
    "spec.master.image",
}


def test_every_wrong_field_is_named_at_once() -> None:
    found = problems(WRONG)
    assert set(found) == WRONG_PATHS, sorted(set(found) ^ WRONG_PATHS)
    assert found["spec.trainer.tolerationz"] == "unknown field (did you mean 'tolerations'?)"
    assert "must be at most 63 characters" in found["spec.trainer.nodeSelector.pool"]
    assert "operator must be Exists" not in found["spec.trainer.tolerations[1]"]
    assert found["spec.trainer.tolerations[1]"] == "value must be empty when operator is Exists"
    assert "edl's own" in found["spec.trainer.labels[edl.dev/role]"]
    assert "'Near'" in found["spec.trainer.affinity.nodeAffinity.requiredDuring"
                             "SchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                             ".matchExpressions[0].operator"]


def test_edl_env_is_reserved_the_rest_is_appended() -> None:
    found = problems(job(trainer={"env": [{"name": "EDL_PORT", "value": "1"},
                                          {"name": "X", "value": "1"},
                                          {"name": "X", "value": "2"}]}))
    assert found == {"spec.trainer.env[0].name": "EDL_PORT is set by edl from the TrainingJob; "
                                                 "set the spec field instead",
                     "spec.trainer.env[2].name": "X is set twice"}
    for variant in ("parameter-server", "collective"):
        for template in templates(VARIANTS[variant]).values():
            for container in template["spec"]["containers"]:
                names = {e["name"] for e in container["env"]}
                assert {n for n in names if n.startswith("EDL_")} <= (EDL_ENV_NAMES
                                                                      | USER_SETTABLE_ENV)


def _edl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edl.cli.main", *args], capture_output=True,
                          text=True, timeout=120)


def test_render_shows_the_fields_and_validate_names_the_wrong_ones(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(job(trainer=ALL_FIELDS)))
    rendered = _edl("render", str(good))
    assert rendered.returncode == 0, rendered.stderr
    trainer = list(yaml.safe_load_all(rendered.stdout))[-1]
    spec = trainer["spec"]["template"]["spec"]
    assert spec["tolerations"] == [GPU_TAINT] and spec["nodeSelector"] == ALL_FIELDS[
        "nodeSelector"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(WRONG))
    checked = _edl("validate", str(bad))
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    text = checked.stdout + checked.stderr
    for path in ("spec.trainer.tolerations[0].operator", "spec.trainer.labels[edl.dev/role]",
                 "spec.trainer.nodeSelector.pool"):
        assert path in text, text


def test_the_gpu_example_in_the_docs_is_valid_and_restricted() -> None:
    text = (ROOT / "docs/kubernetes.md").read_text()
    section = text[text.index("**A GPU job on tainted GPU nodes.**"):]
    snippet = section[section.index("```yaml") + 7:section.index("```", section.index("```yaml")
                                                                 + 7)]
    obj = {"apiVersion": "edl.dev/v1", "kind": "TrainingJob", "metadata": {"name": "gpu"},
           **yaml.safe_load(snippet)}
    trainer = templates(obj)["trainer"]
    assert trainer["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert trainer["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert restricted_violations(trainer) == {}
