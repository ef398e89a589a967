"""Pserver processes on a real etcd: checkpoints, restore, lease loss, shutdown."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import numpy as np
import pytest

from edl.runtime import tensors
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc
from polling import wait_until


def stub_for(address: str) -> pb_grpc.PServerStub:
    return pb_grpc.PServerStub(grpc.insecure_channel(address))


def init_and_push(stub: pb_grpc.PServerStub, pushes: int) -> int:
    request = pb.InitRequest(params=[tensors.encode("w#0", np.zeros(8, np.float32))])
    request.optimizer.name = "momentum"
    request.optimizer.lr = 0.1
    request.optimizer.momentum = 0.9
    stub.Init(request, timeout=10)
    grad = pb.PushRequest(grads=[tensors.encode("w#0", np.ones(8, np.float32))])
    version = 0
    for _ in range(pushes):
        version = stub.Push(grad, timeout=10).version
    return version


@pytest.fixture
def one_pserver(job):
    job.env.update(EDL_PSERVERS="1", EDL_CHECKPOINT_INTERVAL="0.5")
    return job


def test_replacement_restores_checkpoint_and_keeps_checkpointing(one_pserver) -> None:
    job = one_pserver
    job.start("pserver", "ps-a")
    address = job.serving_pserver(0)
    pushed = init_and_push(stub_for(address), 5)
    saved = wait_until(
        lambda: (m := job.read_json("checkpoints/0")) and m["version"] == pushed and m,
        30, "a checkpoint of version 5",
    )  # fmt: skip
    job.signal("ps-a", signal.SIGKILL)
    job.start("pserver", "ps-b")
    new_address = job.serving_pserver(0, other_than=address)
    stub = stub_for(new_address)
    reply = stub.Pull(pb.PullRequest(), timeout=10)
    assert reply.initialized and reply.version == pushed
    # `edl run` reads "serving on" as "came back, restored or not": it must follow the restore
    log = wait_until(lambda: (t := job.log("ps-b")) and "serving on" in t and t, 30, "ps-b's log")
    assert log.index("restored version 5") < log.index("serving on")
    # momentum state survived too: the next step continues the same trajectory
    expected = np.zeros(8, np.float32)
    buf = np.zeros(8, np.float32)
    for _ in range(pushed + 1):
        buf = 0.9 * buf + 1.0
        expected -= 0.1 * buf
    reply = stub.Push(
        pb.PushRequest(grads=[tensors.encode("w#0", np.ones(8, np.float32))], pull=True),
        timeout=10,
    )
    assert np.allclose(tensors.decode(reply.params[0]), expected, atol=1e-5)
    later = wait_until(
        lambda: (m := job.read_json("checkpoints/0")) and m["version"] > pushed and m,
        30, "a checkpoint after the restore",
    )  # fmt: skip
    assert later["path"] != saved["path"]
    # the record is written before the files it supersedes are deleted
    left = wait_until(
        lambda: (names := sorted(p.name for p in Path(later["path"]).parent.iterdir()))
        == [Path(later["path"]).name] and names,
        30, "the superseded checkpoint files to go",
    )  # fmt: skip
    assert not Path(saved["path"]).exists(), left


def test_frozen_pserver_stops_serving_when_its_lease_is_gone(one_pserver) -> None:
    job = one_pserver
    job.start("pserver", "ps-a")
    address = job.serving_pserver(0)
    init_and_push(stub_for(address), 1)
    wait_until(lambda: job.read_json("checkpoints/0"), 30, "a first checkpoint")
    job.signal("ps-a", signal.SIGSTOP)
    job.start("pserver", "ps-b")  # takes index 0 once ps-a's lease expires
    new_address = job.serving_pserver(0, other_than=address)
    job.signal("ps-a", signal.SIGCONT)
    with pytest.raises(grpc.RpcError) as refused:
        stub_for(address).Pull(pb.PullRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert stub_for(new_address).Pull(pb.PullRequest(), timeout=10).initialized
    wait_until(lambda: "lost its lease; stopped serving" in job.log("ps-a"), 30,
               "ps-a to notice its lease is gone")  # fmt: skip
    assert job.live_pservers() == {0: new_address}  # no duplicate index


def test_sigterm_checkpoints_and_frees_the_index_at_once(one_pserver) -> None:
    job = one_pserver
    job.env["EDL_CHECKPOINT_INTERVAL"] = "3600"  # only the shutdown checkpoint
    job.start("pserver", "ps-a")
    address = job.serving_pserver(0)
    pushed = init_and_push(stub_for(address), 3)
    job.signal("ps-a", signal.SIGTERM)
    assert job.wait("ps-a", 30) == 0
    assert job.live_pservers() == {}  # lease revoked, not left to expire
    assert job.read_json("checkpoints/0")["version"] == pushed
