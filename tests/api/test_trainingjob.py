"""The TrainingJob model: both API groups, original spellings, methods, errors at once."""

from pathlib import Path

import pytest

from edl.api.errors import JobValidationError
from edl.api.jobfile import JobLoadError, load_trainingjob
from edl.api.trainingjob import TrainingJob

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def job_dict(**spec: object) -> dict:
    return {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "trainer": {"entrypoint": "python train.py", "min-instance": 1, "max-instance": 1},
            **spec,
        },
    }


def problems_of(obj: object) -> list[tuple[str, str]]:
    with pytest.raises(JobValidationError) as caught:
        TrainingJob.from_dict(obj)
    return caught.value.problems


def test_original_spellings_load_into_snake_case_attributes() -> None:
    job = load_trainingjob(EXAMPLES / "paddle-original.yaml")
    assert job.api_version == "paddlepaddle.org/v1"
    spec = job.spec
    assert (spec.port, spec.ports_num, spec.ports_num_for_sparse, spec.passes) == (7164, 1, 1, 10)
    assert spec.fault_tolerant is True and spec.host_network is False
    assert spec.image_pull_secrets == [{"name": "job-registry-secret"}]
    assert spec.volume_mounts == [{"name": "data", "mountPath": "/data"}]
    assert spec.volumes == [{"name": "data", "hostPath": {"path": "/home/work/data"}}]
    assert (spec.trainer.min_instance, spec.trainer.max_instance) == (2, 6)
    assert spec.trainer.entrypoint == "python train.py" and spec.trainer.workspace == "/home/job-1/"
    assert (spec.pserver.min_instance, spec.pserver.max_instance) == (2, 2)
    assert spec.master.etcd_endpoint == "http://etcd.paddle.svc:2379"
    assert spec.trainer.resources.limits == {
        "alpha.kubernetes.io/nvidia-gpu": "1",
        "cpu": "800m",
        "memory": "1Gi",
    }


def test_edl_group_and_snake_case_names_are_accepted() -> None:
    obj = job_dict(volume_mounts=[], host_network=True)
    obj["spec"]["trainer"] = {"entrypoint": "x", "min_instance": 1, "max_instance": 3}
    job = TrainingJob.from_dict(obj)
    assert job.api_version == "edl.dev/v1"
    assert job.spec.host_network is True and job.spec.trainer.max_instance == 3


def test_to_dict_round_trips_with_original_spellings() -> None:
    obj = job_dict(
        ports_num=2, fault_tolerant=True, imagePullSecrets=[{"name": "s"}], volumeMounts=[]
    )
    obj["spec"]["master"] = {"etcd-endpoint": "http://e:2379"}
    obj["status"] = {"state": "Running", "message": "ok"}
    obj["metadata"]["labels"] = {"team": "a"}
    obj["metadata"]["resourceVersion"] = "12"
    assert TrainingJob.from_dict(obj).to_dict() == obj
    for path in EXAMPLES.glob("*.yaml"):
        job = load_trainingjob(path)
        assert TrainingJob.from_dict(job.to_dict()) == job


def test_methods() -> None:
    obj = job_dict()
    assert not TrainingJob.from_dict(obj).elastic()
    obj["spec"]["trainer"].update(
        {"max-instance": 4, "resources": {"limits": {"nvidia.com/gpu": 2}}}
    )
    job = TrainingJob.from_dict(obj)
    assert job.elastic() and job.gpu() == 2 and job.need_gpu()
    obj["spec"]["trainer"]["resources"] = {"limits": {"alpha.kubernetes.io/nvidia-gpu": "1"}}
    assert TrainingJob.from_dict(obj).gpu() == 1
    obj["spec"]["trainer"]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    assert not TrainingJob.from_dict(obj).need_gpu()  # the original reads limits only


def test_status_states() -> None:
    for state in ("Created", "Running", "Failed", "Succeeded"):
        assert (
            TrainingJob.from_dict({**job_dict(), "status": {"state": state}}).status.state == state
        )
    assert problems_of({**job_dict(), "status": {"state": "Done"}}) == [
        ("status.state", "must be 'Created', 'Running', 'Failed' or 'Succeeded' (got 'Done')")
    ]


def test_every_schema_problem_at_once_in_the_users_spelling() -> None:
    obj = job_dict(ports_num="2", VolumeMounts="x", bogus=1)
    obj["apiVersion"] = "paddlepaddle.org/v2"
    obj["extra"] = True
    obj["spec"]["trainer"] = {
        "entrypoint": "x",
        "min_instance": "1",
        "max-instance": 2.5,
        "resources": {"limits": {"cpu": "abc", "nvidia.com/gpu": -1}},
    }
    assert problems_of(obj) == [
        ("apiVersion", "must be 'edl.dev/v1' or 'paddlepaddle.org/v1' (got 'paddlepaddle.org/v2')"),
        ("spec.ports_num", "must be a valid integer (got '2')"),
        ("spec.VolumeMounts", "must be a valid list (got 'x')"),
        ("spec.trainer.min_instance", "must be a valid integer (got '1')"),
        ("spec.trainer.max-instance", "must be a valid integer (got 2.5)"),
        ("spec.trainer.resources.limits.cpu", "invalid quantity 'abc'"),
        ("spec.trainer.resources.limits[nvidia.com/gpu]", "must not be negative (got -1)"),
        ("spec.bogus", "unknown field"),
        ("extra", "unknown field"),
    ]


def test_required_and_non_mapping() -> None:
    assert problems_of({"metadata": {}}) == [("apiVersion", "required"), ("kind", "required")]
    assert problems_of([1]) == [("", "a TrainingJob must be a mapping, not a list")]


def test_load_errors() -> None:
    with pytest.raises(JobLoadError) as caught:
        load_trainingjob(EXAMPLES / "invalid" / "not-yaml.yaml")
    assert caught.value.exit_code == 1 and "not valid YAML at line" in str(caught.value)
    with pytest.raises(JobLoadError) as caught:
        load_trainingjob(Path("/nonexistent/job.yaml"))
    assert caught.value.exit_code == 1 and "cannot read /nonexistent/job.yaml" in str(caught.value)
    with pytest.raises(JobLoadError, match="found 2"):
        load_trainingjob("a: 1\n---\nb: 2\n")
    assert load_trainingjob("apiVersion: edl.dev/v1\nkind: TrainingJob\n").metadata.name is None


def test_status_keeps_controller_bookkeeping() -> None:
    status = {
        "state": "Running",
        "replicas": 3,
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    obj = {**job_dict(), "status": status}
    job = TrainingJob.from_dict(obj)
    assert job.to_dict()["status"] == status


def test_empty_sections_and_wrong_shapes() -> None:
    obj = job_dict()
    obj["spec"].update({"master": None, "pserver": {"resources": None}})
    job = TrainingJob.from_dict(obj)
    assert job.spec.master.etcd_endpoint is None and job.spec.pserver.resources.limits is None
    bad = job_dict(volumes=[1], master="etcd")
    bad["spec"]["trainer"]["resources"] = {"limits": {"cpu": [1]}}
    assert problems_of(bad) == [
        ("spec.volumes[0]", "must be a mapping (got 1)"),
        ("spec.master", "must be a mapping (got 'etcd')"),
        ("spec.trainer.resources.limits.cpu", "must be a quantity such as 500m or 1Gi, not a list"),
    ]
