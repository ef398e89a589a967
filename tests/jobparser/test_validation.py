"""JobParser.validate: the original defaults, and every problem at once with its field path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import edl
from edl.api.trainingjob import TrainingJob
from edl.jobparser import DEFAULT_IMAGE, JobParser, JobValidationError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
parser = JobParser()


def minimal(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "mnist"},
        "spec": {"trainer": {"entrypoint": "python train.py", "min-instance": 2}, **spec},
    }


def problems(obj: Any) -> list[tuple[str, str]]:
    with pytest.raises(JobValidationError) as caught:
        parser.validate(obj)
    return caught.value.problems


def with_trainer(**trainer: Any) -> dict[str, Any]:
    job = minimal()
    job["spec"]["trainer"].update(trainer)
    return job


def test_defaults_are_filled() -> None:
    job = parser.validate(minimal())
    spec = job.spec
    assert (spec.port, spec.ports_num, spec.ports_num_for_sparse, spec.passes) == (7164, 1, 1, 1)
    assert spec.image == DEFAULT_IMAGE == f"ghcr.io/edl-dev/edl-runtime:{edl.__version__}"
    assert spec.fault_tolerant is False and spec.host_network is False
    assert (spec.trainer.min_instance, spec.trainer.max_instance) == (2, 2)
    assert (spec.pserver.min_instance, spec.pserver.max_instance) == (1, 1)
    assert spec.trainer.workspace == ""
    shown = job.to_dict()["spec"]
    assert shown["port"] == 7164 and shown["trainer"]["max-instance"] == 2


def test_given_values_are_kept_and_validate_is_idempotent() -> None:
    obj = minimal(port=8000, ports_num=3, ports_num_for_sparse=0, passes=7, image="img:1")
    job = parser.validate(obj)
    assert (job.spec.port, job.spec.ports_num, job.spec.ports_num_for_sparse) == (8000, 3, 0)
    assert (job.spec.passes, job.spec.image) == (7, "img:1")
    assert parser.validate(job) == job
    assert parser.validate(job.to_dict()) == job


def test_examples_are_valid_in_both_api_groups() -> None:
    for path in EXAMPLES.glob("*.yaml"):
        job = parser.validate(yaml.safe_load(path.read_text()))
        assert job.api_version in ("edl.dev/v1", "paddlepaddle.org/v1")


def test_many_problems_are_reported_at_once() -> None:
    obj = yaml.safe_load((EXAMPLES / "invalid" / "many-problems.yaml").read_text())
    assert problems(obj) == [
        ("spec.trainer.resources.requests.memory", "invalid quantity 'lots'"),
        (
            "metadata.name",
            "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
            "with a letter or digit (got 'Bad_Name')",
        ),
        ("spec.pserver.min-instance", "must be >= 1 (got 0)"),
        ("spec.trainer.max-instance", "must be >= min-instance (5)"),
        (
            "spec.port",
            "port + ports_num + ports_num_for_sparse - 1 must be <= 65535: the pserver ports "
            "65535..65537 do not fit",
        ),
        ("spec.trainer.entrypoint", "must not be empty"),
        ("spec.trainer.resources.requests.cpu", "must be <= limits.cpu (1)"),
    ]


def test_schema_and_semantic_problems_together() -> None:
    obj = yaml.safe_load((EXAMPLES / "invalid" / "unknown-fields.yaml").read_text())
    assert problems(obj) == [
        ("apiVersion", "must be 'edl.dev/v1' or 'paddlepaddle.org/v1' (got 'kubeflow.org/v1')"),
        ("spec.passes", "must be a valid integer (got 'ten')"),
        ("spec.trainer.min-instances", "unknown field (did you mean 'min-instance'?)"),
        ("spec.fault-tolerant", "unknown field (did you mean 'fault_tolerant'?)"),
        ("replicas", "unknown field"),
        ("spec.trainer.min-instance", "required"),
    ]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            with_trainer(**{"max-instance": 4}),
            [
                (
                    "spec.trainer.max-instance",
                    "must equal min-instance (2) unless spec.fault_tolerant is true",
                )
            ],
        ),
        (
            minimal(
                fault_tolerant=True,
                trainer={"entrypoint": "x", "min-instance": 3, "max-instance": 2},
            ),
            [("spec.trainer.max-instance", "must be >= min-instance (3)")],
        ),
        (
            with_trainer(**{"min-instance": 0, "max-instance": 0}),
            [
                ("spec.trainer.min-instance", "must be >= 1 (got 0)"),
                ("spec.trainer.max-instance", "must be >= 1 (got 0)"),
            ],
        ),
        (
            minimal(pserver={"min-instance": 3, "max-instance": 1}),
            [("spec.pserver.max-instance", "must be >= min-instance (3)")],
        ),
        (with_trainer(entrypoint="  "), [("spec.trainer.entrypoint", "must not be empty")]),
        (
            minimal(trainer={"min-instance": 1}),
            [("spec.trainer.entrypoint", "required")],
        ),
        (minimal(port=0), [("spec.port", "must be between 1 and 65535 (got 0)")]),
        (minimal(port=70000), [("spec.port", "must be between 1 and 65535 (got 70000)")]),
        (minimal(ports_num=0), [("spec.ports_num", "must be >= 1 (got 0)")]),
        (
            minimal(ports_num_for_sparse=-1),
            [("spec.ports_num_for_sparse", "must be >= 0 (got -1)")],
        ),
        (minimal(passes=0), [("spec.passes", "must be >= 1 (got 0)")]),
        (
            minimal(image=""),
            [("spec.image", "must not be empty (leave it out for the default image)")],
        ),
        (
            with_trainer(resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}),
            [("spec.trainer.resources.requests.memory", "must be <= limits.memory (1Gi)")],
        ),
        (
            minimal(master={"resources": {"requests": {"cpu": 2}, "limits": {"cpu": "1500m"}}}),
            [("spec.master.resources.requests.cpu", "must be <= limits.cpu (1500m)")],
        ),
        (
            with_trainer(resources={"limits": {"nvidia.com/gpu": "0.5"}}),
            [
                (
                    "spec.trainer.resources.limits[nvidia.com/gpu]",
                    "must be a whole number of GPUs (got 1/2)",
                )
            ],
        ),
        (
            with_trainer(
                resources={"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 1}}
            ),
            [
                (
                    "spec.trainer.resources.requests[nvidia.com/gpu]",
                    "must equal limits[nvidia.com/gpu] (2)",
                )
            ],
        ),
        (
            minimal(master={"etcd-endpoint": "etcd:2379"}),
            [
                (
                    "spec.master.etcd-endpoint",
                    "must be comma-separated http(s)://host:port URLs (got 'etcd:2379')",
                )
            ],
        ),
        (
            minimal(volumes=[{"name": "a", "emptyDir": {}}], volumeMounts=[{"name": "b"}]),
            [
                ("spec.volumeMounts[0].name", "no volume named 'b' in spec.volumes"),
                ("spec.volumeMounts[0].mountPath", "required"),
            ],
        ),
        (
            minimal(volumes=[{"name": "edl-etcd-data", "emptyDir": {}}]),
            [("spec.volumes[0].name", "'edl-etcd-data' is reserved for etcd")],
        ),
        (
            {**minimal(), "metadata": {"name": "9lives"}},
            [
                (
                    "metadata.name",
                    "must start with a letter: the master Service '9lives-master' must be a "
                    "DNS-1035 label (got '9lives')",
                )
            ],
        ),
        ({**minimal(), "metadata": {}}, [("metadata.name", "required")]),
        (
            {**minimal(), "metadata": {"name": "a", "namespace": "Team_A"}},
            [("metadata.namespace", "must be a DNS-1123 label (got 'Team_A')")],
        ),
    ],
)
def test_each_rule(obj: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert problems(obj) == expected


def test_name_length_leaves_room_for_the_role_suffix() -> None:
    assert parser.validate({**minimal(), "metadata": {"name": "a" * 55}})
    assert problems({**minimal(), "metadata": {"name": "a" * 56}}) == [
        (
            "metadata.name",
            f"must be at most 55 characters so that '{'a' * 56}-trainer' fits Kubernetes' "
            "63-character limit (got 56)",
        )
    ]


def test_port_range_edges() -> None:
    assert parser.validate(minimal(port=65534, ports_num=1, ports_num_for_sparse=1))
    assert parser.validate(minimal(port=65535, ports_num=1, ports_num_for_sparse=0))
    assert problems(minimal(port=65535))[0][0] == "spec.port"


def test_paths_use_the_users_spelling() -> None:
    obj = minimal(fault_tolerant=True)
    obj["spec"]["trainer"] = {"entrypoint": "x", "min_instance": 4, "max_instance": 3}
    assert problems(obj) == [("spec.trainer.max_instance", "must be >= min-instance (4)")]
    legacy = minimal(volumes=[], VolumeMounts=[{"name": "x", "mountPath": "/x"}])
    assert problems(legacy) == [
        ("spec.VolumeMounts[0].name", "no volume named 'x' in spec.volumes")
    ]


def test_a_schema_error_does_not_hide_others_or_repeat() -> None:
    obj = with_trainer(**{"max-instance": "3"}, entrypoint="")
    obj["spec"]["port"] = 0
    assert problems(obj) == [
        ("spec.trainer.max-instance", "must be a valid integer (got '3')"),
        ("spec.port", "must be between 1 and 65535 (got 0)"),
        ("spec.trainer.entrypoint", "must not be empty"),
    ]


def test_input_is_not_mutated_and_non_mappings_are_rejected() -> None:
    obj = with_trainer(**{"max-instance": "x"})
    before = copy.deepcopy(obj)
    problems(obj)
    assert obj == before
    assert problems("just text") == [("", "a TrainingJob must be a mapping, not 'just text'")]


@given(
    st.integers(-5, 10),
    st.integers(-5, 10),
    st.booleans(),
)
def test_instance_rules_match_their_definition(minimum: int, maximum: int, ft: bool) -> None:
    obj = minimal(fault_tolerant=ft)
    obj["spec"]["trainer"].update({"min-instance": minimum, "max-instance": maximum})
    ok = minimum >= 1 and maximum >= minimum and (ft or maximum == minimum)
    if ok:
        job = parser.validate(obj)
        assert isinstance(job, TrainingJob) and job.elastic() == (maximum > minimum)
    else:
        assert all(path.startswith("spec.trainer.") for path, _ in problems(obj))


def _field_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _field_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _field_paths(value, (*prefix, index))
    return found


_ORIGINAL = yaml.safe_load((EXAMPLES / "paddle-original.yaml").read_text())
_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70000) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_field_paths(_ORIGINAL)[1:]), _ANY_JSON),
                min_size=1, max_size=3))
def test_any_value_anywhere_is_a_validation_error_never_a_crash(mutations) -> None:
    # The controller turns JobValidationError into a Failed status; any other exception
    # would leave a job without status (found: a list as a volume's name was a TypeError).
    job = copy.deepcopy(_ORIGINAL)
    for path, value in mutations:
        node: Any = job
        try:
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced the parent
    parser = JobParser()
    try:
        parser.validate(job)
    except JobValidationError as error:
        assert error.problems
        return
    for parse in (parser.parse_to_master, parser.parse_to_pserver, parser.parse_to_trainer,
                  parser.parse_to_service):
        assert parse(job)["metadata"]["name"].startswith(job["metadata"]["name"])


def test_one_runtime_image_name_everywhere_and_examples_that_run() -> None:
    """The parser's and the controller's default, the shipped examples and the Dockerfile's
    tag name one image, tagged with the package version; the CRD has no image default (the
    controller's --image decides for a job that names none); each example's trainer script
    exists in the repo (the runtime image copies examples/ to /home/edl/examples)."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    assert f"-t {DEFAULT_IMAGE} ." in (root / "deploy/Dockerfile.runtime").read_text()
    crd = yaml.safe_load((root / "deploy/crd.yaml").read_text())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "default" not in spec_schema["properties"]["image"]
    from edl.cli.controller import controller
    options = {o.name: o.default for o in controller.params}
    assert options["image"] == DEFAULT_IMAGE
    for path in ("deploy/example-trainingjob.yaml", "examples/jobs/mnist.yaml"):
        job = yaml.safe_load((root / path).read_text())
        assert job["spec"]["image"] == DEFAULT_IMAGE, path
        trainer = job["spec"]["trainer"]
        workspace = trainer["workspace"].removeprefix("/home/edl/")
        script = trainer["entrypoint"].split()[-1]
        assert (root / workspace / script).is_file(), path
