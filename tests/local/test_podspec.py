"""The pure rules that turn a pod manifest into local processes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.local.podspec import (
    LocalContext,
    PodSpecError,
    expand,
    ports_needed,
    process_specs,
)

CTX = LocalContext(
    edl_executable="/venv/bin/edl",
    python_executable="/venv/bin/python",
    etcd_endpoints="http://127.0.0.1:23790",
    node_name="this-machine",
    base_env={"PATH": "/usr/bin", "EDL_JOB_NAME": "from-parent", "HOME": "/home/x"},
)


def field_env(name: str, field_path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def master_pod() -> dict:
    return {
        "metadata": {
            "name": "mnist-master-abcde",
            "namespace": "team-a",
            "uid": "u-1",
            "labels": {"edl.dev/job": "mnist", "edl.dev/role": "master"},
        },
        "spec": {
            "containers": [
                {
                    "name": "master",
                    "command": ["edl", "master"],
                    "args": ["--job", "$(EDL_JOB_NAME)", "$$(literal)"],
                    "env": [
                        {"name": "EDL_JOB_NAME", "value": "mnist"},
                        {"name": "EDL_PORTS_NUM", "value": "2"},
                        {"name": "EDL_ETCD_ENDPOINTS",
                         "value": "http://mnist-master.team-a.svc:2379"},
                        field_env("EDL_POD_IP", "status.podIP"),
                        field_env("EDL_POD_NAME", "metadata.name"),
                        field_env("EDL_NAMESPACE", "metadata.namespace"),
                        field_env("ROLE", "metadata.labels['edl.dev/role']"),
                        field_env("NODE", "spec.nodeName"),
                        {"name": "GREETING", "value": "job $(EDL_JOB_NAME) in $(EDL_NAMESPACE)"},
                    ],
                },
                {"name": "etcd", "command": ["etcd"], "env": []},
            ]
        },
    }


def test_master_pod_becomes_one_process_with_local_overrides() -> None:
    specs = process_specs(master_pod(), CTX, {"master": 31000})
    assert [s.container for s in specs] == ["master"], "the etcd sidecar is not run locally"
    spec = specs[0]
    assert spec.argv == ["/venv/bin/edl", "master", "--job", "mnist", "$(literal)"]
    env = spec.env
    assert env["EDL_ETCD_ENDPOINTS"] == "http://127.0.0.1:23790"
    assert env["EDL_POD_IP"] == "127.0.0.1"
    assert env["EDL_POD_NAME"] == "mnist-master-abcde"
    assert env["EDL_NAMESPACE"] == "team-a"
    assert env["EDL_PORT"] == "31000"
    assert env["ROLE"] == "master"
    assert env["NODE"] == "this-machine"
    assert env["EDL_JOB_NAME"] == "mnist", "parent EDL_* variables never leak into a pod"
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/home/x"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_env_is_resolved_in_order_like_kubernetes() -> None:
    # GREETING is declared after EDL_NAMESPACE, so $(EDL_NAMESPACE) is known there
    env = process_specs(master_pod(), CTX, {})[0].env
    assert env["GREETING"] == "job mnist in team-a"


def test_python_resolves_to_this_interpreter() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "command": ["python", "-c", "print(1)"]}]}}
    assert process_specs(pod, CTX, {})[0].argv[0] == "/venv/bin/python"


def test_unsupported_downward_field_names_its_path() -> None:
    pod = master_pod()
    pod["spec"]["containers"][0]["env"].append(
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    )
    with pytest.raises(PodSpecError) as info:
        process_specs(pod, CTX, {})
    assert info.value.field_path == "spec.containers[0].env[9].valueFrom"


def test_container_without_command_is_rejected() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(PodSpecError, match=r"spec.containers\[0\].command"):
        process_specs(pod, CTX, {})


def test_ports_needed_sums_dense_and_sparse_ports() -> None:
    env = [
        {"name": "EDL_PORTS_NUM", "value": "2"},
        {"name": "EDL_PORTS_NUM_FOR_SPARSE", "value": "3"},
    ]
    assert ports_needed({"env": env}) == 5
    assert ports_needed({"env": []}) == 1
    assert ports_needed({"env": [{"name": "EDL_PORTS_NUM", "value": "bad"}]}) == 1


names = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True)


@given(st.dictionaries(names, st.text(alphabet="abc$()", max_size=8), max_size=4),
       st.lists(names, max_size=4))
def test_expand_substitutes_known_and_keeps_unknown(env: dict, refs: list) -> None:
    text = " ".join(f"$({r})" for r in refs)
    expected = " ".join(env.get(r, f"$({r})") for r in refs)
    assert expand(text, env) == expected


def test_expand_escapes_double_dollar() -> None:
    assert expand("$$(A) $(A)", {"A": "x"}) == "$(A) x"


def test_relative_workspace_is_next_to_the_job_file_and_defaults_apply() -> None:
    from dataclasses import replace

    ctx = replace(CTX, workspace_base="/jobs/digits", default_env={"EDL_CHECKPOINT_DIR": "/r/ck"})
    pod = master_pod()
    pod["spec"]["containers"][0]["env"].append({"name": "EDL_WORKSPACE", "value": "."})
    env = process_specs(pod, ctx, {})[0].env
    assert env["EDL_WORKSPACE"] == "/jobs/digits"
    assert env["EDL_CHECKPOINT_DIR"] == "/r/ck"
    pod["spec"]["containers"][0]["env"].append({"name": "EDL_CHECKPOINT_DIR", "value": "/mine"})
    assert process_specs(pod, ctx, {})[0].env["EDL_CHECKPOINT_DIR"] == "/mine"
