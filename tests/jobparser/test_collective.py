"""Collective TrainingJobs: rules (every bad field named), defaults, allowed sizes, children."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.api.jobfile import load_trainingjob
from edl.jobparser import JobParser, JobValidationError
from edl.jobparser.collective import (
    COLLECTIVE_ENV_NAMES,
    DEFAULT_LIVE_RESIZE_COOLDOWN_S,
    DEFAULT_RESIZE_COOLDOWN_S,
    allowed_trainer_counts,
    job_allowed_counts,
    resize_cooldown_s,
    resize_pause_s,
)

REPO = Path(__file__).resolve().parents[2]
parser = JobParser()
Check = Callable[[dict[str, Any]], None]


def collective_job(**spec: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "ddp", "namespace": "team-a", "uid": "u-1"},
        "spec": {
            "mode": "collective",
            "fault_tolerant": True,
            "trainer": {
                "entrypoint": "python train.py --epochs 3",
                "min-instance": 2,
                "max-instance": 8,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
        },
    }
    job["spec"].update(spec)
    return job


def problems(obj: Any) -> list[tuple[str, str]]:
    with pytest.raises(JobValidationError) as caught:
        parser.validate(obj)
    return caught.value.problems


def test_defaults_have_no_pserver_fields_and_fill_the_collective_section() -> None:
    job = parser.validate(collective_job())
    assert job.collective() and job.elastic()
    data = job.to_dict()["spec"]
    assert "pserver" not in data and "passes" not in data and "ports_num" not in data
    assert data["collective"] == {
        "nproc-per-node": 1, "resize-cooldown": 60, "max-restarts": 100, "live": False}
    assert data["port"] == 7164
    assert parser.validate(job) == job  # idempotent


def test_a_live_job_gets_the_short_cooldown_and_its_agents_are_told() -> None:
    spec = collective_job()
    spec["spec"]["collective"] = {"live": True}
    job = parser.validate(spec)
    assert job.spec.collective is not None and job.spec.collective.live is True
    assert job.spec.collective.resize_cooldown == DEFAULT_LIVE_RESIZE_COOLDOWN_S
    assert DEFAULT_LIVE_RESIZE_COOLDOWN_S < DEFAULT_RESIZE_COOLDOWN_S
    assert resize_pause_s(job) < resize_pause_s(parser.validate(collective_job()))
    env = {e["name"]: e.get("value") for e in parser.parse_to_trainer(job)["spec"]["template"][
        "spec"]["containers"][0]["env"]}
    assert env["EDL_LIVE"] == "1"
    assert env["EDL_WORLD_SIZES"] == ",".join(str(n) for n in job_allowed_counts(job))
    spec["spec"]["collective"]["resize-cooldown"] = 0  # the user's own value wins
    assert resize_cooldown_s(parser.validate(spec)) == 0
    spec["spec"]["collective"]["live"] = "yes"
    assert tuple(f for f, _ in problems(spec))[:1] == ("spec.collective.live", )


def test_parameter_server_stays_the_default() -> None:
    job = collective_job()
    del job["spec"]["mode"]
    job["spec"]["pserver"] = {"min-instance": 1}
    valid = parser.validate(job)
    assert not valid.collective()
    assert [m["metadata"]["name"] for m in parser.parse_all(valid)] == [
        "ddp-master", "ddp-master", "ddp-pserver", "ddp-trainer"]


def test_every_bad_collective_field_is_named_at_once() -> None:
    job = collective_job(
        pserver={"min-instance": 2},
        passes=3,
        ports_num=2,
        ports_num_for_sparse=1,  # the default the CRD fills in on Kubernetes: harmless
        collective={
            "nproc-per-node": 2,
            "world-sizes": [4, 5, 0],
            "world-size-multiple": 4,
            "resize-cooldown": -1,
            "max-restarts": -2,
        },
    )
    found = dict(problems(job))
    assert set(found) == {
        "spec.pserver",
        "spec.passes",
        "spec.ports_num",
        "spec.collective.world-sizes[1]",
        "spec.collective.world-sizes[2]",
        "spec.collective.world-size-multiple",
        "spec.collective.resize-cooldown",
        "spec.collective.max-restarts",
    }, found
    assert "multiple of nproc-per-node (2)" in found["spec.collective.world-sizes[1]"]
    assert "not both" in found["spec.collective.world-size-multiple"]


def test_unknown_collective_field_gets_a_hint_and_a_section_without_mode_is_an_error() -> None:
    found = dict(problems(collective_job(collective={"world-size": [2]})))
    assert "did you mean 'world-sizes'" in found["spec.collective.world-size"]
    job = collective_job(collective={"world-sizes": [2]})
    del job["spec"]["mode"]
    assert ("spec.collective", "only for spec.mode: collective") in problems(job)
    assert "spec.mode" in dict(problems(collective_job(mode="ring")))


def test_min_instance_must_give_an_allowed_world_size() -> None:
    found = dict(problems(collective_job(collective={"world-sizes": [4, 8]})))
    message = found["spec.trainer.min-instance"]
    assert "2 trainers x 1 workers = 2 is not one of world-sizes [4, 8]" in message
    assert "[4, 8]" in message.split("allowed trainer counts")[1]
    found = dict(problems(collective_job(collective={"world-size-multiple": 3})))
    assert "is not a multiple of 3" in found["spec.trainer.min-instance"]
    # fine: 2 trainers x 2 workers = 4
    parser.validate(collective_job(collective={"nproc-per-node": 2, "world-sizes": [4, 16]}))


def test_allowed_counts_of_a_job() -> None:
    rules = {"nproc-per-node": 2, "world-sizes": [4, 8, 12]}
    job = parser.validate(collective_job(collective=rules))
    assert job_allowed_counts(job) == (2, 4, 6)
    job = parser.validate(collective_job(collective={"world-size-multiple": 2}))
    assert job_allowed_counts(job) == (2, 4, 6, 8)
    assert job_allowed_counts(parser.validate(collective_job())) == tuple(range(2, 9))


@given(
    st.integers(1, 12), st.integers(0, 12), st.integers(1, 4),
    st.one_of(st.none(), st.lists(st.integers(1, 40), max_size=5)),
    st.one_of(st.none(), st.integers(1, 6)),
)
def test_allowed_counts_are_exactly_the_sizes_the_rules_allow(
    minimum: int, extra: int, nproc: int, sizes: list[int] | None, multiple: int | None
) -> None:
    maximum = minimum + extra
    counts = allowed_trainer_counts(minimum, maximum, nproc, sizes, multiple)
    assert list(counts) == sorted(set(counts))
    for trainers in range(minimum, maximum + 1):
        world = trainers * nproc
        ok = (not sizes or world in sizes) and (not multiple or world % multiple == 0)
        assert (trainers in counts) == ok


def test_children_no_pservers_and_an_agent_per_trainer(assert_valid_manifest: Check) -> None:
    children = parser.parse_all(collective_job())
    assert [(m["kind"], m["metadata"]["name"]) for m in children] == [
        ("Service", "ddp-master"), ("ReplicaSet", "ddp-master"), ("Job", "ddp-trainer")]
    for manifest in children:
        assert_valid_manifest(manifest)
    service, master, trainer = children
    assert service["spec"]["ports"][0] == {"name": "rendezvous", "port": 7164, "targetPort": 7164}
    containers = master["spec"]["template"]["spec"]["containers"]
    assert containers[0]["command"] == ["edl", "rendezvous"]
    assert containers[0]["ports"][0]["containerPort"] == 7164
    assert containers[1]["name"] == "etcd"
    pod = trainer["spec"]["template"]["spec"]
    agent = pod["containers"][0]
    assert agent["command"] == ["edl", "agent"] and pod["restartPolicy"] == "Never"
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["EDL_MODE"] == "collective"
    assert env["EDL_RDZV_ENDPOINT"] == "ddp-master.team-a.svc:7164"
    assert (env["EDL_TRAINERS"], env["EDL_TRAINERS_MAX"]) == ("2", "8")
    assert env["EDL_NPROC_PER_NODE"] == "1" and env["EDL_MAX_RESTARTS"] == "100"
    assert "EDL_PSERVERS" not in env
    assert trainer["spec"]["parallelism"] == 2
    rules = trainer["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["onExitCodes"]["values"] == [143], "a drained agent is not a failure"
    with pytest.raises(ValueError, match="no pservers"):
        parser.parse_to_pserver(collective_job())


def test_external_etcd_drops_the_sidecar(assert_valid_manifest: Check) -> None:
    job = collective_job(master={"etcd-endpoint": "http://etcd.infra:2379"})
    service, master, _ = parser.parse_all(job)
    assert [p["name"] for p in service["spec"]["ports"]] == ["rendezvous"]
    assert [c["name"] for c in master["spec"]["template"]["spec"]["containers"]] == ["master"]
    assert_valid_manifest(master)


def test_the_example_is_valid_and_allows_only_its_world_sizes(assert_valid_manifest: Check) -> None:
    job = parser.validate(load_trainingjob(REPO / "examples" / "digits-ddp" / "job.yaml"))
    assert job.collective() and job_allowed_counts(job) == (1, 2, 4)
    for manifest in parser.parse_all(copy.deepcopy(job)):
        assert_valid_manifest(manifest)


def _trainer_env(job: dict[str, Any]) -> list[dict[str, Any]]:
    trainer = parser.parse_all(job)[-1]
    return list(trainer["spec"]["template"]["spec"]["containers"][0]["env"])


def test_every_trainer_defines_the_checkpoint_dir_before_its_entrypoint_expands_it() -> None:
    """Kubernetes expands $(VAR) in an env value only with the variables listed before it:
    EDL_CHECKPOINT_DIR comes before EDL_ENTRYPOINT, on the job's first volume mount."""
    entrypoint = "python train.py --checkpoint $(EDL_CHECKPOINT_DIR)/model.pt"
    plain = collective_job(trainer={**collective_job()["spec"]["trainer"],
                                    "entrypoint": entrypoint})
    names = [e["name"] for e in _trainer_env(plain)]
    assert names.index("EDL_CHECKPOINT_DIR") < names.index("EDL_ENTRYPOINT")
    values = {e["name"]: e.get("value") for e in _trainer_env(plain)}
    assert values["EDL_CHECKPOINT_DIR"] == "/tmp/edl-checkpoints/ddp"
    shared = {**plain["spec"], "volumes": [{"name": "ckpt", "emptyDir": {}}],
              "volumeMounts": [{"name": "ckpt", "mountPath": "/shared/"}]}
    values = {e["name"]: e.get("value") for e in _trainer_env({**plain, "spec": shared})}
    assert values["EDL_CHECKPOINT_DIR"] == "/shared/edl-checkpoints/ddp"
    chosen = copy.deepcopy(plain)
    chosen["spec"]["trainer"]["env"] = [{"name": "EDL_CHECKPOINT_DIR", "value": "/nfs/ddp"}]
    values = {e["name"]: e.get("value") for e in _trainer_env(chosen)}
    assert values["EDL_CHECKPOINT_DIR"] == "/nfs/ddp"
    # once, in edl's place (server-side apply refuses a Job listing a name twice: the
    # real plane's 500 "duplicate entries for key [name=\"EDL_CHECKPOINT_DIR\"]")
    names = [e["name"] for e in _trainer_env(chosen)]
    assert names.count("EDL_CHECKPOINT_DIR") == 1
    assert names.index("EDL_CHECKPOINT_DIR") < names.index("EDL_ENTRYPOINT")
    assert set(COLLECTIVE_ENV_NAMES) == {e["name"] for e in _trainer_env(plain)}


def test_an_entrypoint_naming_an_undefined_variable_is_refused_with_its_name() -> None:
    trainer = collective_job()["spec"]["trainer"]
    bad = collective_job(trainer={**trainer, "entrypoint": "python t.py $(CKPT_DIR)/m.pt $$(X)"})
    [(path, message)] = problems(bad)
    assert path == "spec.trainer.entrypoint" and message.startswith(
        "$(CKPT_DIR) is not defined in the trainer's environment")
    mine = collective_job(trainer={**trainer, "entrypoint": "python t.py $(CKPT_DIR)",
                                   "env": [{"name": "CKPT_DIR", "value": "/c"}]})
    parser.validate(mine)  # the agent expands with its whole environment
    ps = {**collective_job(), "spec": {"trainer": {**trainer, "entrypoint":
                                                   "python t.py $(EDL_CHECKPOINT_DIR)"}}}
    assert ("spec.trainer.entrypoint", next(
        m for p, m in problems(ps) if "EDL_CHECKPOINT_DIR" in m)) in problems(ps)


def test_every_collective_container_requests_cpu_and_memory() -> None:
    """The rendezvous pod (its etcd sidecar too) and the agents pass a requests.* quota and a
    LimitRange's min even when the job states no resources."""
    job = collective_job()
    for role in ("trainer", "master"):
        job["spec"].setdefault(role, {}).pop("resources", None)
    for manifest in parser.parse_all(job)[1:]:
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            requests = container["resources"]["requests"]
            assert requests["cpu"] not in ("0", 0) and requests["memory"] not in ("0", 0)
