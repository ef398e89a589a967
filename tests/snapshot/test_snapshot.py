"""Snapshot loading and `edl plan`: a Kubernetes List in, one plan line per elastic job out."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edl.cli.main import cli
from edl.snapshot import SnapshotError, parse_snapshot, plan_inputs, selector_matches

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "snapshots"


def _node(name: str, cpu: str = "8") -> dict:
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi"}},
    }


def _training_job(name: str, lo: int = 1, hi: int = 4, cpu: str = "1") -> dict:
    return {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "trainer": {
                "entrypoint": "python train.py",
                "min-instance": lo,
                "max-instance": hi,
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
            }
        },
    }


def _job(name: str, parallelism: int, selector: dict | None = None, namespace: str = "ns") -> dict:
    spec: dict = {"parallelism": parallelism}
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": spec,
    }


def _pod(
    name: str, labels: dict, phase: str = "Running", node: str | None = "n1", owner=None
) -> dict:
    metadata: dict = {"name": name, "namespace": "ns", "labels": labels}
    if owner:
        metadata["ownerReferences"] = [{"kind": "Job", "name": owner, "uid": f"uid-{owner}"}]
    spec: dict = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def _list(*items: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


def test_pods_belong_by_selector_or_owner_and_are_counted_by_phase() -> None:
    selector = {"matchLabels": {"edl.dev/job": "a", "edl.dev/role": "trainer"}}
    items = parse_snapshot(
        _list(
            _node("n1"),
            _training_job("a"),
            _job("a-trainer", 3, selector),
            _pod("a-0", {"edl.dev/job": "a", "edl.dev/role": "trainer"}),
            _pod("a-1", {}, owner="a-trainer", phase="Pending", node="n1"),
            _pod("a-2", {"edl.dev/job": "a", "edl.dev/role": "trainer"}, "Pending", None),
            _pod("a-done", {"edl.dev/job": "a", "edl.dev/role": "trainer"}, "Succeeded"),
            _pod("other", {"edl.dev/job": "b"}, "Pending", None),
        )
    )
    inputs = plan_inputs(items)
    (view,) = inputs.jobs
    assert (view.parallelism, view.total, view.running, view.pending, view.unscheduled) == (
        3, 3, 1, 2, 1,
    )  # fmt: skip
    assert (view.min_instance, view.max_instance, view.cpu_request_milli) == (1, 4, 1000)
    # the owner-referenced pod is a trainer although unlabelled; "other" is a pending non-trainer
    assert len(inputs.resources.pending) == 1
    assert inputs.resources.cpu_request_milli == 4000


def test_trainer_job_is_found_by_suffix_in_the_same_namespace_only() -> None:
    inputs = plan_inputs(
        parse_snapshot(
            _list(_node("n1"), _training_job("a"), _job("a-trainer", 1, namespace="other"))
        )
    )
    assert inputs.jobs == []
    assert [u.reason for u in inputs.unplannable] == ["no trainer Job a-trainer yet"]


def test_a_bad_training_job_is_reported_not_fatal() -> None:
    bad = _training_job("bad", cpu="lots")
    unknown_field = _training_job("typo")
    unknown_field["spec"]["trainr"] = {}
    inputs = plan_inputs(parse_snapshot(_list(_node("n1"), bad, unknown_field)))
    reasons = {u.name: u.reason for u in inputs.unplannable}
    assert "spec.trainer.resources.requests.cpu" in reasons["bad"]
    assert "spec.trainr" in reasons["typo"]


def test_selector_expressions() -> None:
    labels = {"app": "x", "tier": "web"}
    assert selector_matches(
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, labels
    )
    assert not selector_matches(
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}, labels
    )
    assert selector_matches(
        {"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]}, labels
    )
    assert not selector_matches(
        {"matchExpressions": [{"key": "gone", "operator": "Exists"}]}, labels
    )
    assert not selector_matches({}, labels)  # an empty selector claims no pods


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json: [", "not JSON or YAML"),
        ("[1, 2]", "expected a Kubernetes List"),
        ("", "empty: expected a Kubernetes List"),
        ("---\n---\n", "empty: expected a Kubernetes List"),
        (
            '{"kind": "List", "items": [{"metadata": {"name": "x"}}]}',
            "items[0]: not a Kubernetes object",
        ),
        (
            '{"kind": "List", "items": [{"kind": "Pod", "metadata": {}}]}',
            "items[0] (Pod): metadata.name",
        ),
    ],
)
def test_bad_snapshots_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=re.escape(message)):
        parse_snapshot(text)


def test_cli_plans_the_example_with_both_policies() -> None:
    runner = CliRunner()
    for policy in ("default", "reference"):
        for name in ("training-and-service.json", "training-and-service.yaml"):
            result = runner.invoke(cli, ["plan", "-o", "json", "--policy", policy,
                                         str(EXAMPLES / name)])
            assert result.exit_code == 0, result.output
            output = json.loads(result.output)
            assert output["policy"] == policy
            jobs = {job["name"]: job for job in output["jobs"]}
            assert set(jobs) == {"broken", "early", "just-submitted", "late-a", "late-b"}
            assert jobs["broken"]["target"] is None and "invalid" in jobs["broken"]["reason"]
            assert all(
                set(job) == {"namespace", "name", "parallelism", "target", "reason"}
                for job in jobs.values()
            )
    default = json.loads(
        runner.invoke(cli, ["plan", "-o", "json",
                            str(EXAMPLES / "training-and-service.json")]).output
    )
    early = next(job for job in default["jobs"] if job["name"] == "early")
    assert early["target"] < early["parallelism"]  # the early job gives room back


def test_cli_bad_state_exits_1_with_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}, '
                     '"status": {"allocatable": {"cpu": "many"}}}]}')  # fmt: skip
    empty = tmp_path / "empty.json"
    empty.write_text("")
    for args in (
        ["plan", str(state)],
        ["plan", str(tmp_path / "missing.json")],
        ["plan", "--max-load", "2", str(state)],
        ["plan", str(tmp_path)],
        ["plan", str(empty)],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "edl.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "edl.cli.main", "plan", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "node n: status.allocatable.cpu" in result.stderr


def test_generator_reproduces_the_example(tmp_path: Path) -> None:
    build = runpy.run_path(str(EXAMPLES / "generate.py"))["build"]
    assert json.loads((EXAMPLES / "training-and-service.json").read_text()) == build()


@pytest.mark.parametrize("text, message", [
    ('{"kind": "List", "items": "x"}', "items: must be a list of Kubernetes objects (got 'x')"),
    ('{"kind": "List"}', "items: must be a list of Kubernetes objects (got nothing)"),
    ('{"apiVersion": "v1", "items": {"a": 1}}', "items: must be a list"),
])  # fmt: skip
def test_a_list_whose_items_are_not_a_list_says_so(text: str, message: str) -> None:
    """Defect 11: this read as `items[0] (List): metadata.name is missing`."""
    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(text)
    assert message in str(caught.value) and "metadata.name" not in str(caught.value)


def test_a_snapshot_with_nodes_only_says_there_is_nothing_to_plan(tmp_path: Path) -> None:
    """Issue 24: `TypeError: 'int' object is not iterable` from the table printer."""
    state = tmp_path / "nodes.json"
    state.write_text(_list(_node("n1"), _node("n2", cpu="4")))
    result = subprocess.run([sys.executable, "-m", "edl.cli.main", "plan", str(state)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.strip() == (
        f"policy default: no TrainingJob in {state} (2 nodes, 12000m CPU allocatable): "
        "nothing to plan")
    as_json = CliRunner().invoke(cli, ["plan", "-o", "json", str(state)])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["jobs"] == []


def test_a_snapshot_plans_with_taints_selectors_quotas_and_priorities() -> None:
    """`edl plan` on a cluster with a tainted GPU pool, a selector, a namespace quota and
    a PriorityClass gives the same decisions the live controller would."""
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    gpu_nodes = [
        {"kind": "Node", "metadata": {"name": f"g{i}", "labels": {"pool": "a100"}},
         "spec": {"taints": [gpu_taint]},
         "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}}}
        for i in (1, 2)
    ]
    template = {"spec": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "nodeSelector": {"pool": "a100"}, "priorityClassName": "batch",
        "containers": [{"name": "trainer", "resources": {"requests": {"cpu": "1"}}}]}}
    tolerant = _job("gpu-trainer", 1, {"matchLabels": {"job": "gpu"}})
    tolerant["spec"]["template"] = template
    plain = _job("cpu-trainer", 1, {"matchLabels": {"job": "cpu"}})
    quota = {"kind": "ResourceQuota", "metadata": {"name": "cap", "namespace": "ns"},
             "spec": {"hard": {"count/pods": "6"}},
             "status": {"hard": {"count/pods": "6"}, "used": {"count/pods": "3"}}}
    preemptor = {"kind": "Pod", "metadata": {"name": "web", "namespace": "web"},
                 "spec": {"priorityClassName": "high", "containers": [
                     {"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                 "status": {"phase": "Pending"}}
    items = [
        _node("n1"), *gpu_nodes,
        _training_job("gpu", hi=20), tolerant,
        _training_job("cpu", hi=20), plain,
        _pod("gpu-0", {"job": "gpu"}, node="g1"), _pod("cpu-0", {"job": "cpu"}),
        _pod("other", {}, node="n1"),
        quota, preemptor,
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
    ]
    inputs = plan_inputs(parse_snapshot(json.dumps({"items": items})))
    by_name = {v.name: v for v in inputs.jobs}
    assert by_name["gpu"].constraints.node_selector == (("pool", "a100"),)
    assert by_name["gpu"].priority_class == "batch"
    assert by_name["cpu"].constraints.tolerations == ()
    assert [q.name for q in inputs.resources.quotas] == ["cap"]
    assert [p.priority for p in inputs.resources.pending] == [1000]
    from edl.policy import get_policy

    decisions = {d.name: d for d in get_policy("default").plan(
        inputs.jobs, inputs.resources, 1.0)}
    # 3 pods used of 6: three more trainers between the two jobs, the GPU job only on g1/g2
    assert decisions["gpu"].target + decisions["cpu"].target == 2 + 3
    assert set(decisions["gpu"].placement) <= {"g1", "g2"}
    assert set(decisions["cpu"].placement) <= {"n1"}
    assert "namespace quota ns/cap" in decisions["cpu"].reason


def test_a_bare_trainingjob_says_what_state_must_hold(tmp_path: Path) -> None:
    """Issue 33: `edl plan job.yaml` exited 0 with 'no trainer Job … yet' and no hint."""
    job = EXAMPLES.parents[1] / "examples" / "digits" / "job.yaml"
    result = subprocess.run([sys.executable, "-m", "edl.cli.main", "plan", str(job)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result
    assert "no trainer Job digits-trainer yet" in result.stdout
    notes = result.stderr.strip().splitlines()
    assert notes == [
        f"edl plan: {job} holds no Node, so nothing can be placed: STATE is the cluster's "
        "objects, as `kubectl get nodes,pods,trainingjobs,jobs,resourcequotas,priorityclasses "
        "-A -o json` prints, not a job file",
        "edl plan: a TrainingJob is planned with its trainer Job (<job>-trainer, which the "
        "controller creates): STATE must hold the jobs too"]
