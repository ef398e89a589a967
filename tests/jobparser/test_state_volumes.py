"""The job's state on volumes it names (`spec.master.etcd-volume`,
`spec.pserver.checkpoint-volume`): how the master and pserver pods mount them, what is
refused, and that the sidecar's etcd, as rendered, reopens its data after a new pod IP."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from edl.api.errors import JobValidationError
from edl.coord.embedded import find_etcd_binary
from edl.jobparser import JobParser
from edl.jobparser.statevolumes import STATE_FS_GROUP, STATE_MOUNT
from edl.procs import free_port
from edl.runtime.config import from_env
from pod_security import restricted_violations
from polling import wait_until

CLAIM = {"name": "state", "persistentVolumeClaim": {"claimName": "digits-state"}}
UID = "0f6e-uid"


def job(mode: str = "parameter-server", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "volumes": [copy.deepcopy(CLAIM)],
        "master": {"etcd-volume": "state"},
        "trainer": {"entrypoint": "python train.py", "min-instance": 1},
    }
    if mode == "collective":
        body["mode"] = "collective"
    else:
        body["pserver"] = {"min-instance": 2, "checkpoint-volume": "state"}
    for key, value in spec.items():
        if value is None:
            body.pop(key, None)
        elif isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return {"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
            "metadata": {"name": "digits", "namespace": "team", "uid": UID}, "spec": body}


def pods(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each role's pod spec."""
    return {m["metadata"]["labels"]["edl.dev/role"]: m["spec"]["template"]["spec"]
            for m in JobParser().parse_all(obj) if m["kind"] != "Service"}


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == name)


def env(c: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v.get("value", "") for v in c["env"]}


def problems(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(JobValidationError) as caught:
        JobParser().validate(obj)
    return dict(caught.value.problems)


@pytest.mark.parametrize("mode", ["parameter-server", "collective"])
def test_the_etcd_sidecar_keeps_its_data_on_the_named_volume(mode: str) -> None:
    master = pods(job(mode))["master"]
    etcd = container(master, "etcd")
    assert etcd["volumeMounts"] == [{"name": "state", "mountPath": STATE_MOUNT}]
    assert f"--data-dir={STATE_MOUNT}/edl-etcd/digits-{UID}" in etcd["command"]
    assert master["volumes"] == [CLAIM]  # no emptyDir beside it
    # both etcd (65532) and, on the pservers' volume, the runtime (10001) may write
    assert master["securityContext"]["fsGroup"] == STATE_FS_GROUP
    assert master["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert not restricted_violations({"spec": master})


def test_the_pservers_checkpoint_to_the_named_volume() -> None:
    obj = job(pserver={"env": [{"name": "CKPT", "value": "$(EDL_CHECKPOINT_DIR)/x"}]})
    pserver = pods(obj)["pserver"]
    edl = container(pserver, "pserver")
    directory = f"{STATE_MOUNT}/edl-checkpoints/digits-{UID}"
    assert env(edl)["EDL_CHECKPOINT_DIR"] == directory
    names = [v["name"] for v in edl["env"]]  # defined before a variable that refers to it
    assert names.index("EDL_CHECKPOINT_DIR") < names.index("CKPT")
    assert {"name": "state", "mountPath": STATE_MOUNT} in edl["volumeMounts"]
    assert pserver["securityContext"]["fsGroup"] == STATE_FS_GROUP
    assert not restricted_violations({"spec": pserver})
    # what the pserver process makes of its environment
    config = from_env({k: v for k, v in env(edl).items() if v and not v.startswith("$")})
    assert config.checkpoint_path == directory


def test_without_the_fields_the_state_stays_in_the_pods() -> None:
    roles = pods(job(master={"etcd-volume": None}, pserver={"checkpoint-volume": None}))
    master, pserver = roles["master"], roles["pserver"]
    assert {"name": "edl-etcd-data", "emptyDir": {}} in master["volumes"]
    assert "--data-dir=/var/lib/etcd" in container(master, "etcd")["command"]
    assert "EDL_CHECKPOINT_DIR" not in env(container(pserver, "pserver"))
    for pod in (master, pserver):
        assert "fsGroup" not in pod["securityContext"]


def test_the_jobs_own_fs_group_wins() -> None:
    obj = job(master={"securityContext": {"fsGroup": 2000}})
    master = pods(obj)["master"]
    assert master["securityContext"]["fsGroup"] == 2000
    assert master["securityContext"]["runAsNonRoot"] is True


def test_a_job_created_again_under_its_name_gets_new_directories() -> None:
    first = container(pods(job())["master"], "etcd")["command"]
    again = job()
    again["metadata"]["uid"] = "another-uid"
    assert container(pods(again)["master"], "etcd")["command"] != first


@pytest.mark.parametrize(("spec", "path", "words"), [
    ({"master": {"etcd-volume": "data"}}, "spec.master.etcd-volume",
     "no volume named 'data' in spec.volumes (it has 'state')"),
    ({"volumes": None, "pserver": {"checkpoint-volume": "data"}},
     "spec.pserver.checkpoint-volume", "no volume named 'data' in spec.volumes (it has none)"),
    ({"volumes": [{"name": "state", "emptyDir": {}}]}, "spec.master.etcd-volume",
     "volume 'state' is an emptyDir, deleted with the pod"),
    ({"volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": "c",
                                                              "readOnly": True}}]},
     "spec.pserver.checkpoint-volume", "volume 'state' is read-only"),
    ({"master": {"etcd-endpoint": "http://etcd:2379"}}, "spec.master.etcd-volume",
     "no etcd sidecar with spec.master.etcd-endpoint"),
    ({"pserver": {"env": [{"name": "EDL_CHECKPOINT_DIR", "value": "/x"}]}},
     "spec.pserver.checkpoint-volume", "spec.pserver.env sets EDL_CHECKPOINT_DIR too"),
    ({"volumeMounts": [{"name": "state", "mountPath": STATE_MOUNT + "/"}]},
     "spec.volumeMounts[0].mountPath", "is where spec.pserver.checkpoint-volume is mounted"),
])
def test_a_wrong_state_volume_is_named_by_its_field(
        spec: dict[str, Any], path: str, words: str) -> None:
    found = problems(job(**spec))
    assert words in found.get(path, ""), found


def _kv(port: int, verb: str, body: dict[str, str]) -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/kv/{verb}",
                                     data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:
        reply: dict[str, Any] = json.loads(answer.read())
    return reply


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_the_sidecar_as_rendered_reopens_its_data_with_a_new_pod_ip(tmp_path: Path) -> None:
    """A new master pod has a new IP: its etcd, started with the rendered flags on the same
    data dir, is the same single member (its peer URL, left at etcd's localhost default,
    does not change) and holds what the first one stored."""
    command = container(pods(job())["master"], "etcd")["command"]
    assert not any(a.startswith(("--initial-", "--listen-peer", "--force-new")) for a in command)
    volume = tmp_path / "volume"
    volume.mkdir()
    port = free_port()

    def start(pod_ip: str) -> subprocess.Popen[bytes]:
        args = [str(find_etcd_binary())]
        for arg in command[1:]:
            arg = arg.replace("$(EDL_POD_IP)", pod_ip).replace(STATE_MOUNT, str(volume))
            if arg.startswith("--listen-client-urls="):  # loopback only, on a free port
                arg = f"--listen-client-urls=http://127.0.0.1:{port}"
            args.append(arg)
        # a free peer port here: in a pod, localhost:2380 is the pod's own
        args.append(f"--listen-peer-urls=http://127.0.0.1:{free_port()}")
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def answers() -> bool:
        try:
            return "header" in _kv(port, "range", {"key": _b64("k")})
        except OSError:
            return False

    first = start("10.0.0.5")
    try:
        wait_until(answers, 30, "the first etcd answering")
        _kv(port, "put", {"key": _b64("k"), "value": _b64("queue")})
    finally:
        first.terminate()
        first.wait(30)
    second = start("10.0.0.9")
    try:
        wait_until(answers, 30, "the second etcd answering")
        kvs = _kv(port, "range", {"key": _b64("k")})["kvs"]
        assert base64.b64decode(kvs[0]["value"]) == b"queue"
    finally:
        second.terminate()
        second.wait(30)
    assert (volume / "edl-etcd" / f"digits-{UID}" / "member").is_dir()


def _claims(pod: dict[str, Any]) -> set[str]:
    return {v["name"] for v in pod.get("volumes") or []}


def test_a_state_volume_goes_only_to_the_pods_that_write_on_it() -> None:
    """A ReadWriteOnce claim is attached to one node: the trainers' pods (and, with two
    claims, the other role's) must not list it, or they would all be tied to its node."""
    etcd = {"name": "etcd", "persistentVolumeClaim": {"claimName": "digits-etcd"}}
    roles = pods(job(volumes=[copy.deepcopy(CLAIM), etcd], master={"etcd-volume": "etcd"}))
    assert _claims(roles["master"]) == {"etcd"}
    assert _claims(roles["pserver"]) == {"state"}
    assert _claims(roles["trainer"]) == set()
    assert _claims(pods(job("collective"))["trainer"]) == set()
    # a volume the job also mounts everywhere (spec.volumeMounts) stays in every pod
    shared = pods(job(volumeMounts=[{"name": "state", "mountPath": "/data"}]))
    assert all(_claims(pod) == {"state"} for pod in shared.values())
