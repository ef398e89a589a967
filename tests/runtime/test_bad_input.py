"""Bad input: a crashing script, bad configuration, malformed gRPC messages.

Each is a clear, one-line error; servers keep serving after a malformed call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

from edl.coord import leader_address
from edl.coord.errors import EtcdUnavailableError
from edl.runtime import tensors
from edl.runtime.config import RuntimeConfig
from edl.runtime.coordination import connect
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc
from polling import run_retrying, wait_until
from serving import answers

EDL = [sys.executable, "-m", "edl.cli.main"]


def run_cli(role: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDL_")}
    return subprocess.run(
        [*EDL, role], env={**base, **env}, capture_output=True, text=True, timeout=timeout
    )


def test_crashing_script_fails_with_its_error(tmp_path) -> None:
    (tmp_path / "crash.py").write_text("raise RuntimeError('dataset missing: /data/train')\n")
    result = run_cli(
        "trainer",
        {
            "EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1",
            "EDL_ENTRYPOINT": "python crash.py",
            "EDL_WORKSPACE": str(tmp_path),
        },
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("edl trainer: entrypoint 'python crash.py' exited with status 1")
    assert "RuntimeError: dataset missing: /data/train" in last


@pytest.mark.parametrize(
    ("role", "env", "message"),
    [
        ("master", {}, "EDL_ETCD_ENDPOINTS: required"),
        ("pserver", {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1", "EDL_PSERVERS": "two"},
         "EDL_PSERVERS: not a valid int: 'two'"),
        ("pserver", {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1", "EDL_PSERVERS": "0",
                     "EDL_PORT": "70000"}, "EDL_PORT: must be in 0..65535"),
        ("trainer", {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, "EDL_ENTRYPOINT: required"),
        ("trainer", {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1", "EDL_ENTRYPOINT": "python x.py",
                     "EDL_WORKSPACE": "/nonexistent/ws"}, "EDL_WORKSPACE: not a directory"),
        # issue 33: a missing script is a configuration error in both modes
        ("trainer", {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1",
                     "EDL_ENTRYPOINT": "python no_such_script.py", "EDL_WORKSPACE": "/"},
         "EDL_ENTRYPOINT: no such script: no_such_script.py (in the workspace /)"),
    ],
)  # fmt: skip
def test_bad_configuration_is_one_line(role: str, env: dict[str, str], message: str) -> None:
    result = run_cli(role, env)
    assert result.returncode == 78  # EX_CONFIG: `edl run` fails at once on it
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_both_config_problems_are_named() -> None:
    env = {"EDL_ETCD_ENDPOINTS": "http://127.0.0.1:1", "EDL_PSERVERS": "0", "EDL_PASSES": "x"}
    result = run_cli("pserver", env)
    assert "EDL_PASSES" in result.stderr and "EDL_PSERVERS" in result.stderr


def _addresses(endpoints: str, job: str) -> tuple[str | None, dict[int, str]]:
    async def read():
        client = await connect(RuntimeConfig(job_name=job, etcd_endpoints=endpoints))
        try:
            return await leader_address(client), await client.list_pservers()
        finally:
            await client.shutdown()

    return run_retrying(read, (EtcdUnavailableError,))


def _wait_addresses(endpoints: str, job: str, pservers: int) -> tuple[str, dict[int, str]]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        master, ps = _addresses(endpoints, job)
        if master and len(ps) == pservers:
            return master, ps
        time.sleep(0.3)
    raise AssertionError("master/pserver never registered")


def test_malformed_grpc_is_rejected_and_servers_survive(job) -> None:
    job.env["EDL_PSERVERS"] = "1"
    job.start("master", "master-0")
    job.start("pserver", "pserver-0")
    master, pservers = _wait_addresses(job.etcd.endpoints, job.job, 1)
    wait_until(lambda: answers(master, "Master") and answers(pservers[0], "PServer"), 90,
               "the master and the pserver to serve")
    with grpc.insecure_channel(pservers[0]) as channel:
        raw_push = channel.unary_unary("/edl.runtime.PServer/Push")  # bytes in, bytes out
        with pytest.raises(grpc.RpcError) as garbage:
            raw_push(b"\xff\xff\xff\x07not a protobuf", timeout=10)
        assert garbage.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
        stub = pb_grpc.PServerStub(channel)
        init = pb.InitRequest(params=[tensors.encode("w#0", np.ones(4, np.float32))])
        init.optimizer.name = "sgd"
        init.optimizer.lr = 0.5
        assert stub.Init(init, timeout=10).accepted
        torn = pb.Tensor(id="w#0", dtype="float32", shape=[4], data=b"\0" * 7)
        with pytest.raises(grpc.RpcError) as bad:
            stub.Push(pb.PushRequest(grads=[torn]), timeout=10)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "7 bytes, expected 16" in bad.value.details()
        bad_opt = pb.InitRequest(params=init.params)
        bad_opt.optimizer.name = "lbfgs"
        with pytest.raises(grpc.RpcError) as unknown:
            stub.Init(bad_opt, timeout=10)
        assert "optimizer.name" in unknown.value.details()
        # still serving, and the malformed pushes changed nothing
        reply = stub.Pull(pb.PullRequest(), timeout=10)
        assert reply.version == 0
        assert np.array_equal(tensors.decode(reply.params[0]), np.ones(4, np.float32))
        good = stub.Push(
            pb.PushRequest(grads=[tensors.encode("w#0", np.ones(4, np.float32))], pull=True),
            timeout=10,
        )
        assert good.version == 1
        assert np.allclose(tensors.decode(good.params[0]), 0.5)
    with grpc.insecure_channel(master) as channel:
        with pytest.raises(grpc.RpcError):
            channel.unary_unary("/edl.runtime.Master/GetTask")(b"\x08\x96\x01garbage", timeout=10)
        stub = pb_grpc.MasterStub(channel)
        with pytest.raises(grpc.RpcError) as bad_dataset:
            stub.SetDataset(pb.Dataset(num_samples=-5, chunk_size=1, chunks_per_task=1), timeout=10)
        assert bad_dataset.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        progress = json.loads(stub.GetProgress(pb.ProgressRequest(), timeout=10).json)
        assert progress["tasks_total"] == 0
    assert job.procs["master-0"].poll() is None and job.procs["pserver-0"].poll() is None


def test_a_trainer_script_run_outside_edl_ends_with_one_line_saying_how_to_run_it(
    tmp_path: object,
) -> None:
    """Issue 24: `python train.py` ended in a ConnectionError traceback."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "digits" / "train.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDL_")}
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "run it with `edl run JOB.yaml`" in lines[0]
