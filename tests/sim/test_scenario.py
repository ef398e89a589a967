"""Scenario validation: good files load, every bad field is named by its path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from edl.sim.scenario import (
    ScenarioError,
    expand_jobs,
    load_scenario,
    parse_scenario,
    shipped_scenarios,
)

MINIMAL = {
    "name": "tiny",
    "duration_s": 60,
    "measure": {"steady_state": {"start": 20, "end": 50}},
    "cluster": {
        "node_groups": [{"name": "n", "count": 2, "allocatable": {"cpu": "8", "memory": "16Gi"}}]
    },
    "training": {
        "jobs": [
            {
                "name": "job-{i}",
                "count": 3,
                "submit_at": 1,
                "submit_every": 4,
                "delete_at": 40,
                "delete_every": 2,
                "trainer": {
                    "min": 1, "max": 4, "static": 3,
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                },
                "pserver": {"count": 1, "resources": {"requests": {"cpu": "500m"}}},
                "master": {"resources": {"requests": {"cpu": "100m"}}},
            }
        ]
    },
}


def problems_of(data: object) -> dict[str, str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    return dict(caught.value.problems)


def test_shipped_scenarios_load_and_match_the_original_cluster() -> None:
    assert {"case1", "case2"} <= set(shipped_scenarios())
    case1 = load_scenario("case1")
    groups = case1.cluster.node_groups
    assert sum(g.count for g in groups) == 133
    assert sum(g.count * int(g.allocatable.cpu) for g in groups) == 2348
    jobs = expand_jobs(case1)
    assert [j.submit_at for j in jobs] == [5 + 10 * i for i in range(20)]
    assert all(j.static_trainers == 60 and j.start_trainers == 2 for j in jobs)
    case2 = load_scenario("case2")
    steps = [(s.at, s.replicas) for s in case2.workloads[0].schedule]
    assert steps[:3] == [(0, 400), (115, 300), (210, 200)] and steps[-1] == (700, 0)
    assert [j.start_trainers for j in expand_jobs(case2)] == [15] * 6


def test_compact_group_expands_names_and_times() -> None:
    jobs = expand_jobs(parse_scenario(MINIMAL))
    assert [(j.name, j.submit_at, j.delete_at) for j in jobs] == [
        ("job-1", 1, 40), ("job-2", 5, 42), ("job-3", 9, 44)
    ]
    assert jobs[0].static_trainers == 3 and jobs[0].start_trainers is None


def test_every_bad_field_is_named() -> None:
    data = copy.deepcopy(MINIMAL)
    data["duration_s"] = "60"  # strict: no string coercion
    data["cluster"]["node_groups"][0]["allocatable"]["cpu"] = "8 cores"
    data["cluster"]["node_groups"][0]["count"] = 0
    data["training"]["jobs"][0]["trainer"]["max"] = 0
    data["training"]["jobs"][0]["pserver"]["colour"] = "red"
    data["placement"] = "random"
    found = problems_of(data)
    assert set(found) == {
        "duration_s",
        "cluster.node_groups[0].allocatable.cpu",
        "cluster.node_groups[0].count",
        "training.jobs[0].trainer.max",
        "training.jobs[0].pserver.colour",
        "placement",
    }
    assert "8 cores" in found["cluster.node_groups[0].allocatable.cpu"]
    # in plain words, not pydantic's ("Input should be", "Extra inputs are not permitted")
    assert found["training.jobs[0].pserver.colour"] == "unknown field"
    assert found["training.jobs[0].trainer.max"] == "must be greater than or equal to 1 (got 0)"
    assert found["duration_s"] == "must be a valid number (got '60')"
    wording = " ".join(found.values())
    for raw in ("Input should", "Extra inputs", "Field required", "Value error"):
        assert raw not in wording, found


def test_a_misspelt_field_gets_a_hint_and_a_missing_one_is_required() -> None:
    data = copy.deepcopy(MINIMAL)
    data["duraton_s"] = data.pop("duration_s")
    found = problems_of(data)
    assert found == {"duration_s": "required",
                     "duraton_s": "unknown field (did you mean 'duration_s'?)"}


def test_cross_field_rules() -> None:
    data = copy.deepcopy(MINIMAL)
    data["training"]["jobs"][0]["name"] = "job"  # count 3 without {i}
    assert "{i}" in problems_of(data)["training.jobs[0]"]
    data = copy.deepcopy(MINIMAL)
    data["training"]["jobs"][0]["trainer"]["min"] = 5
    assert "below min" in problems_of(data)["training.jobs[0].trainer"]
    data = copy.deepcopy(MINIMAL)
    data["workloads"] = [{
        "name": "web", "resources": {"requests": {"cpu": "1"}},
        "schedule": [{"at": 10, "replicas": 2}, {"at": 5, "replicas": 1}],
    }]
    assert "increase" in problems_of(data)["workloads[0]"]
    data = copy.deepcopy(MINIMAL)
    data["cluster"]["background_pods"] = [
        {"name": "sys", "per_node": True, "count": 3, "resources": {"requests": {"cpu": "1"}}}
    ]
    assert "exactly one" in problems_of(data)["cluster.background_pods[0]"]
    data = copy.deepcopy(MINIMAL)
    data["training"]["jobs"][0]["name"] = "Job_{i}"
    assert "'Job_1' is not a DNS label" in problems_of(data)["(top level)"]
    data = copy.deepcopy(MINIMAL)
    data["measure"]["steady_state"]["end"] = 100
    assert "duration_s" in problems_of(data)["(top level)"]


def test_files_and_names(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    assert load_scenario(path).name == "tiny"
    with pytest.raises(ScenarioError, match="shipped: bursty, case1, case2, churn"):
        load_scenario("no-such-case")
    path.write_text("name: [unclosed")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(path)
    path.write_text("- a list")
    with pytest.raises(ScenarioError, match="mapping"):
        load_scenario(path)


def test_full_trainingjob_spec_form() -> None:
    from edl.sim.jobs import training_job_manifest

    data = copy.deepcopy(MINIMAL)
    spec = {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "ignored"},
        "spec": {
            "image": "img",
            "fault_tolerant": True,
            "trainer": {"entrypoint": "python train.py", "workspace": "/w",
                        "min-instance": 1, "max-instance": 5,
                        "resources": {"requests": {"cpu": "1"}}},
            "pserver": {"min-instance": 1, "max-instance": 1},
        },
    }
    data["training"]["jobs"] = [{"name": "full", "spec": spec, "static_trainers": 2}]
    plan = expand_jobs(parse_scenario(data))[0]
    elastic = training_job_manifest(plan, "img", elastic=True)
    assert elastic["metadata"]["name"] == "full"
    assert elastic["spec"]["trainer"]["max-instance"] == 5
    static = training_job_manifest(plan, "img", elastic=False)
    trainer = static["spec"]["trainer"]
    assert trainer["min-instance"] == trainer["max-instance"] == 2

    bad = copy.deepcopy(spec)
    bad["spec"]["trainer"]["min-instance"] = "one"
    bad["spec"]["trainer"]["max-instance"] = 5
    data["training"]["jobs"] = [{"name": "full", "spec": bad}]
    found = problems_of(data)
    assert any(path.startswith("training.jobs[0].spec.spec.trainer.min-instance") for path in found)

    # checked as the Controller will check it (JobParser.validate), not only the schema
    incomplete = copy.deepcopy(spec)
    del incomplete["spec"]["trainer"]["entrypoint"]
    data["training"]["jobs"] = [{"name": "full", "spec": incomplete}]
    assert "training.jobs[0].spec.spec.trainer.entrypoint" in problems_of(data)


def test_compact_manifest_static_collapses_the_range() -> None:
    from edl.sim.jobs import training_job_manifest

    plan = expand_jobs(load_scenario("case1"))[0]
    elastic = training_job_manifest(plan, "img", elastic=True)["spec"]
    assert (elastic["trainer"]["min-instance"], elastic["trainer"]["max-instance"]) == (2, 60)
    assert elastic["trainer"]["resources"]["limits"]["cpu"] == "7.5"
    assert elastic["pserver"]["min-instance"] == 10
    static = training_job_manifest(plan, "img", elastic=False)["spec"]
    assert (static["trainer"]["min-instance"], static["trainer"]["max-instance"]) == (60, 60)


def test_the_documented_example_is_a_valid_scenario() -> None:
    """docs/simulation.md's format example must stay loadable."""
    text = (Path(__file__).parents[2] / "docs" / "simulation.md").read_text(encoding="utf-8")
    start = text.index("```yaml\nname: my-cluster") + len("```yaml\n")
    example = yaml.safe_load(text[start:text.index("```", start)])
    scenario = parse_scenario(example)
    assert [job.name for job in expand_jobs(scenario)][:2] == ["job-1", "job-2"]
    assert "resnet" in [job.name for job in expand_jobs(scenario)]


def test_scheduling_sections_taints_selectors_priorities_quotas() -> None:
    data = copy.deepcopy(MINIMAL)
    group = data["cluster"]["node_groups"][0]
    group["labels"] = {"pool": "gpu"}
    group["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    data["priority_classes"] = [{"name": "low", "value": -10}]
    data["quotas"] = [{"name": "cap", "namespace": "team", "hard": {"requests.cpu": "4"},
                       "priority_classes": ["low"]}]
    data["training"]["jobs"][0]["scheduling"] = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "node_selector": {"pool": "gpu"}, "priority_class": "low"}
    scenario = parse_scenario(data)
    fields = scenario.training.jobs[0].scheduling.pod_fields()
    assert fields == {"tolerations": [{"operator": "Exists", "key": "nvidia.com/gpu"}],
                      "nodeSelector": {"pool": "gpu"}, "priorityClassName": "low"}
    assert scenario.quotas[0].manifest()["spec"]["scopeSelector"]["matchExpressions"][0][
        "values"] == ["low"]

    bad = copy.deepcopy(data)
    bad["cluster"]["node_groups"][0]["taints"][0]["effect"] = "Sometimes"
    bad["training"]["jobs"][0]["scheduling"]["tolerations"][0]["value"] = "x"
    bad["quotas"][0]["hard"]["requests.cpu"] = "lots"
    found = problems_of(bad)
    assert {"cluster.node_groups[0].taints[0].effect",
            "training.jobs[0].scheduling.tolerations[0]",
            "quotas[0].hard.requests.cpu"} <= set(found)
    unknown = copy.deepcopy(data)
    unknown["training"]["jobs"][0]["scheduling"]["priority_class"] = "nope"
    assert "'nope' is not in priority_classes" in problems_of(unknown)["(top level)"]
