"""The child manifests: valid for current Kubernetes, shaped as the cross-team contract says."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edl.api.jobfile import load_trainingjob
from edl.api.quantity import parse_quantity
from edl.api.trainingjob import TrainingJob
from edl.jobparser import JobParser
from edl.jobparser.manifests import ETCD_IMAGE, trainer_backoff_limit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
VALID_EXAMPLES = sorted(EXAMPLES.glob("*.yaml"))
ENV_NAMES = [
    "EDL_JOB_NAME",
    "EDL_NAMESPACE",
    "EDL_TRAINERS",
    "EDL_TRAINERS_MAX",
    "EDL_PSERVERS",
    "EDL_ENTRYPOINT",
    "EDL_WORKSPACE",
    "EDL_PORT",
    "EDL_PORTS_NUM",
    "EDL_PORTS_NUM_FOR_SPARSE",
    "EDL_PASSES",
    "EDL_USE_GPU",
    "EDL_ETCD_ENDPOINTS",
    "EDL_POD_IP",
    "EDL_POD_NAME",
]
parser = JobParser()
Check = Callable[[dict[str, Any]], None]


def base_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "mnist", "namespace": "team-a", "uid": "6a1d-uid"},
        "spec": {
            "fault_tolerant": True,
            "trainer": {
                "entrypoint": "python train.py",
                "workspace": "/ws",
                "min-instance": 3,
                "max-instance": 8,
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            },
            "pserver": {"min-instance": 2, "max-instance": 2},
            **spec,
        },
    }


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]


VARIANTS: dict[str, dict[str, Any]] = {
    "plain": base_job(),
    "no-namespace-no-uid": {**base_job(), "metadata": {"name": "mnist"}},
    "external-etcd": base_job(master={"etcd-endpoint": "http://etcd-0:2379,http://etcd-1:2379"}),
    "legacy-gpu": base_job(
        trainer={
            "entrypoint": "x",
            "min-instance": 1,
            "max-instance": 1,
            "resources": {
                "requests": {"alpha.kubernetes.io/nvidia-gpu": 2, "cpu": 1},
                "limits": {"alpha.kubernetes.io/nvidia-gpu": 2},
            },
        }
    ),
    "gpu-request-only": base_job(
        trainer={
            "entrypoint": "x",
            "min-instance": 1,
            "resources": {"requests": {"nvidia.com/gpu": "1"}},
        }
    ),
    "host-network-volumes-secrets": base_job(
        hostNetwork=True,
        volumes=[{"name": "data", "hostPath": {"path": "/data"}}],
        volumeMounts=[{"name": "data", "mountPath": "/data", "readOnly": True}],
        imagePullSecrets=[{"name": "registry"}],
    ),
    "many-ports-no-sparse": base_job(port=30000, ports_num=40, ports_num_for_sparse=0),
    "paddle-group": {**base_job(), "apiVersion": "paddlepaddle.org/v1"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_manifest_passes_kubernetes_validation(
    variant: str, assert_valid_manifest: Check
) -> None:
    manifests = parser.parse_all(VARIANTS[variant])
    assert [m["kind"] for m in manifests] == ["Service", "ReplicaSet", "ReplicaSet", "Job"]
    for manifest in manifests:
        assert_valid_manifest(manifest)


@pytest.mark.parametrize("path", VALID_EXAMPLES, ids=lambda p: p.name)
def test_examples_render_to_valid_manifests(path: Path, assert_valid_manifest: Check) -> None:
    for manifest in parser.parse_all(load_trainingjob(path)):
        assert_valid_manifest(manifest)


def test_the_checker_itself_rejects_bad_manifests(assert_valid_manifest: Check) -> None:
    bad = copy.deepcopy(parser.parse_to_trainer(base_job()))
    bad["spec"]["parallelism"] = "three"
    with pytest.raises(pytest.fail.Exception):
        assert_valid_manifest(bad)
    unknown = copy.deepcopy(parser.parse_to_service(base_job()))
    unknown["spec"]["portz"] = []
    with pytest.raises(pytest.fail.Exception):
        assert_valid_manifest(unknown)


def test_names_labels_and_selectors() -> None:
    service, master, pserver, trainer = parser.parse_all(base_job())
    expected = {
        "master": (master, "mnist-master"),
        "pserver": (pserver, "mnist-pserver"),
        "trainer": (trainer, "mnist-trainer"),
    }
    for role, (manifest, name) in expected.items():
        labels = {"edl.dev/job": "mnist", "edl.dev/role": role}
        assert manifest["metadata"]["name"] == name
        assert manifest["metadata"]["namespace"] == "team-a"
        assert manifest["metadata"]["labels"] == labels
        assert manifest["spec"]["template"]["metadata"]["labels"] == labels
        if manifest["kind"] == "ReplicaSet":
            assert manifest["spec"]["selector"] == {"matchLabels": labels}
    assert service["metadata"]["name"] == "mnist-master"
    assert service["spec"]["selector"] == {"edl.dev/job": "mnist", "edl.dev/role": "master"}
    assert "selector" not in trainer["spec"]  # the Job controller generates its own


def test_owner_references_only_with_uid() -> None:
    for manifest in parser.parse_all(base_job()):
        assert manifest["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "edl.dev/v1",
                "kind": "TrainingJob",
                "name": "mnist",
                "uid": "6a1d-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    for manifest in parser.parse_all(VARIANTS["paddle-group"]):
        assert manifest["metadata"]["ownerReferences"][0]["apiVersion"] == "paddlepaddle.org/v1"
    for manifest in parser.parse_all(VARIANTS["no-namespace-no-uid"]):
        assert "ownerReferences" not in manifest["metadata"]
        assert "namespace" not in manifest["metadata"]


def test_trainer_job_is_elastic_and_survives_scale_down() -> None:
    trainer = parser.parse_to_trainer(base_job())
    spec = trainer["spec"]
    assert (trainer["apiVersion"], trainer["kind"]) == ("batch/v1", "Job")
    assert spec["parallelism"] == 3
    assert "completions" not in spec
    # finite, so a crashing script fails the Job; drained trainers (143) and evictions don't count
    assert spec["backoffLimit"] == trainer_backoff_limit(8) == 16
    assert spec["podFailurePolicy"]["rules"] == [
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]},
        },
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {  # EX_CONFIG: `edl trainer` found its configuration wrong; retrying cannot help
            "action": "FailJob",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [78]},
        },
    ]
    pod = pod_spec(trainer)
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] == ["edl", "trainer"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}}
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"  # the error's text


@pytest.mark.parametrize(("max_instance", "limit"), [(1, 6), (3, 6), (4, 8), (50, 100)])
def test_trainer_backoff_limit_is_a_small_multiple_of_max_instance(max_instance, limit) -> None:
    assert trainer_backoff_limit(max_instance) == limit


def test_pserver_replicas_and_ports() -> None:
    pserver = parser.parse_to_pserver(base_job(port=9000, ports_num=2, ports_num_for_sparse=3))
    assert (pserver["apiVersion"], pserver["kind"]) == ("apps/v1", "ReplicaSet")
    assert pserver["spec"]["replicas"] == 2
    (container,) = pod_spec(pserver)["containers"]
    assert container["command"] == ["edl", "pserver"]
    assert [p["containerPort"] for p in container["ports"]] == [9000, 9001, 9002, 9003, 9004]


def test_master_with_etcd_sidecar() -> None:
    job = base_job(port=7000)
    master = parser.parse_to_master(job)
    assert master["spec"]["replicas"] == 1
    main, etcd = pod_spec(master)["containers"]
    assert main["command"] == ["edl", "master"] and main["ports"][0]["containerPort"] == 7000
    assert etcd["image"] == ETCD_IMAGE
    assert "--listen-client-urls=http://0.0.0.0:2379" in etcd["command"]
    assert "--advertise-client-urls=http://$(EDL_POD_IP):2379" in etcd["command"]
    assert env_of(etcd)["EDL_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env_of(main)["EDL_ETCD_ENDPOINTS"] == "http://mnist-master.team-a.svc:2379"
    service = parser.parse_to_service(job)
    assert service["spec"]["ports"] == [
        {"name": "master", "port": 7000, "targetPort": 7000},
        {"name": "etcd", "port": 2379, "targetPort": 2379},
    ]


def test_master_with_external_etcd_has_no_sidecar() -> None:
    job = VARIANTS["external-etcd"]
    (main,) = pod_spec(parser.parse_to_master(job))["containers"]
    assert env_of(main)["EDL_ETCD_ENDPOINTS"] == "http://etcd-0:2379,http://etcd-1:2379"
    assert "volumes" not in pod_spec(parser.parse_to_master(job))
    assert [p["name"] for p in parser.parse_to_service(job)["spec"]["ports"]] == ["master"]
    default_ns = parser.parse_to_master(VARIANTS["no-namespace-no-uid"])
    assert env_of(pod_spec(default_ns)["containers"][0])["EDL_ETCD_ENDPOINTS"] == (
        "http://mnist-master.default.svc:2379"
    )


def test_environment_follows_the_contract() -> None:
    for manifest in parser.parse_all(base_job(passes=4))[1:]:
        container = pod_spec(manifest)["containers"][0]
        env = env_of(container)
        assert list(env) == ENV_NAMES
        assert env["EDL_JOB_NAME"] == "mnist"
        assert env["EDL_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["EDL_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["EDL_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert (env["EDL_TRAINERS"], env["EDL_TRAINERS_MAX"], env["EDL_PSERVERS"]) == (
            "3",
            "8",
            "2",
        )
        assert (env["EDL_ENTRYPOINT"], env["EDL_WORKSPACE"]) == ("python train.py", "/ws")
        assert (env["EDL_PORT"], env["EDL_PORTS_NUM"], env["EDL_PORTS_NUM_FOR_SPARSE"]) == (
            "7164",
            "1",
            "1",
        )
        assert (env["EDL_PASSES"], env["EDL_USE_GPU"]) == ("4", "0")
        assert all("value" in e or "valueFrom" in e for e in container["env"])


def test_a_job_adapting_its_batch_tells_its_pods_the_initial_batch() -> None:
    """spec.batch: pservers sum pushes into updates of the batch (EDL_BATCH_INITIAL)."""
    job = base_job(passes=4)
    job["spec"]["batch"] = {"initial": 96, "max": 512}
    for manifest in parser.parse_all(job)[1:]:
        env = env_of(pod_spec(manifest)["containers"][0])
        assert list(env) == [*ENV_NAMES[:-2], "EDL_BATCH_INITIAL", *ENV_NAMES[-2:]]
        assert env["EDL_BATCH_INITIAL"] == "96"


def test_gpu_limits_use_the_current_resource_name() -> None:
    trainer = parser.parse_to_trainer(VARIANTS["legacy-gpu"])
    container = pod_spec(trainer)["containers"][0]
    assert container["resources"] == {
        "limits": {"nvidia.com/gpu": "2"},
        "requests": {"nvidia.com/gpu": "2", "cpu": "1", "memory": "256Mi"},
    }
    assert env_of(container)["EDL_USE_GPU"] == "1"
    only_request = pod_spec(parser.parse_to_trainer(VARIANTS["gpu-request-only"]))["containers"][0]
    assert only_request["resources"]["limits"] == {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_requests_cpu_and_memory(variant: str) -> None:
    """requests.* quotas and a LimitRange's min refuse a container that leaves them out or 0."""
    for manifest in parser.parse_all(VARIANTS[variant])[1:]:
        for container in pod_spec(manifest)["containers"]:
            resources = container["resources"]
            for name in ("cpu", "memory"):
                given = resources.get("requests", {}).get(name) or resources["limits"][name]
                assert parse_quantity(given) > 0, (variant, container["name"], name)


def test_a_role_that_states_a_resource_keeps_it_and_the_sidecar_has_its_own() -> None:
    job = base_job(
        master={"resources": {"requests": {"cpu": "2"}}},
        pserver={"min-instance": 1, "max-instance": 1,
                 "resources": {"limits": {"cpu": "3", "memory": "4Gi"}}},
    )
    _service, master, pserver, trainer = parser.parse_all(job)
    main, etcd = pod_spec(master)["containers"]
    assert main["resources"] == {"requests": {"cpu": "2", "memory": "128Mi"}}
    assert etcd["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}}
    # a limit alone is the request (Kubernetes' default): no default request beside it
    assert pod_spec(pserver)["containers"][0]["resources"] == {
        "limits": {"cpu": "3", "memory": "4Gi"}}
    assert pod_spec(trainer)["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"}}


def test_pod_options_reach_every_role() -> None:
    for manifest in parser.parse_all(VARIANTS["host-network-volumes-secrets"])[1:]:
        pod = pod_spec(manifest)
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert pod["imagePullSecrets"] == [{"name": "registry"}]
        assert {"name": "data", "hostPath": {"path": "/data"}} in pod["volumes"]
        mounts = pod["containers"][0]["volumeMounts"]
        assert mounts == [{"name": "data", "mountPath": "/data", "readOnly": True}]


def test_parsers_validate_first_and_do_not_mutate_input() -> None:
    job = base_job()
    before = copy.deepcopy(job)
    parser.parse_all(job)
    assert job == before
    model = TrainingJob.from_dict(job)
    assert parser.parse_all(model) == parser.parse_all(job)
    assert yaml.safe_load(yaml.safe_dump(parser.parse_all(job))) == parser.parse_all(job)


names = st.from_regex(r"[a-z]([-a-z0-9]{0,53}[a-z0-9])?", fullmatch=True)
quantities = st.one_of(
    st.integers(1, 64).map(str),
    st.integers(1, 64000).map(lambda m: f"{m}m"),
    st.integers(1, 512).map(lambda g: f"{g}Gi"),
)


@st.composite
def valid_jobs(draw: st.DrawFn) -> dict[str, Any]:
    minimum = draw(st.integers(1, 50))
    fault_tolerant = draw(st.booleans())
    maximum = draw(st.integers(minimum, 100)) if fault_tolerant else minimum
    ports_num = draw(st.integers(1, 20))
    sparse = draw(st.integers(0, 20))
    port = draw(st.integers(1, 65535 - ports_num - sparse + 1))
    cpu_limit = draw(st.integers(1000, 8000))
    resources = {
        "limits": {"cpu": f"{cpu_limit}m", "nvidia.com/gpu": draw(st.integers(0, 8))},
        "requests": {"cpu": f"{draw(st.integers(1, cpu_limit))}m", "memory": draw(quantities)},
    }
    spec: dict[str, Any] = {
        "image": draw(
            st.sampled_from(["edl/runtime:1.0", "registry.local:5000/team/edl@sha256:" + "a" * 64])
        ),
        "port": port,
        "ports_num": ports_num,
        "ports_num_for_sparse": sparse,
        "fault_tolerant": fault_tolerant,
        "passes": draw(st.integers(1, 100)),
        "trainer": {
            "entrypoint": draw(st.text(min_size=1, max_size=40).filter(str.strip)),
            "min-instance": minimum,
            "max-instance": maximum,
            "resources": resources,
        },
        "pserver": {"min-instance": draw(st.integers(1, 10))},
    }
    if draw(st.booleans()):
        spec["master"] = {"etcd-endpoint": "https://etcd.example.com:2379"}
    metadata = {"name": draw(names), "namespace": draw(names)}
    if draw(st.booleans()):
        metadata["uid"] = draw(st.uuids()).hex
    api = draw(st.sampled_from(["edl.dev/v1", "paddlepaddle.org/v1"]))
    return {"apiVersion": api, "kind": "TrainingJob", "metadata": metadata, "spec": spec}


# The fixture is a stateless function, so sharing it across examples is safe.
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(job=valid_jobs())
def test_any_valid_job_renders_valid_manifests(
    job: dict[str, Any], assert_valid_manifest: Check
) -> None:
    manifests = parser.parse_all(job)
    for manifest in manifests:
        assert_valid_manifest(manifest)
    trainer = manifests[3]
    assert trainer["spec"]["parallelism"] == job["spec"]["trainer"]["min-instance"]
    assert manifests[2]["spec"]["replicas"] == job["spec"]["pserver"]["min-instance"]


def test_the_seed_names_parse_the_same_children() -> None:
    # The seed's DefaultJobParser implemented its JobParser interface: one class here.
    from edl.jobparser import DefaultJobParser

    job = load_trainingjob(EXAMPLES / "mnist.yaml")
    seed, ours = DefaultJobParser(), JobParser()
    assert seed.validate(job) == ours.validate(job)
    for method in ("parse_to_master", "parse_to_pserver", "parse_to_trainer", "parse_to_service"):
        assert getattr(seed, method)(job) == getattr(ours, method)(job)
        assert getattr(ours, method)(job)["metadata"]["name"].startswith("mnist-")
