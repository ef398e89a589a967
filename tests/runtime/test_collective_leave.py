"""A trainer that leaves a collective world whose workers are still starting: real
`edl agent` processes (torchrun, the `edl` rendezvous on a real store, gloo workers).

A shrink 2 -> 1 that landed while the workers imported torch or sat in
``init_process_group`` left the survivor's worker waiting for its gone peer until the
process group's timeout (30 min): no collective had started, so none failed, and
torch's agent restarts its workers only for a failure or a joining node.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from edl.procs import free_port
from polling import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SHRUNK = "shrunk"  # the test writes it when it drains a trainer; a world of 1 then ends
# A plain gloo script: a world of 2 runs collectives until a member goes, a world of 1
# (before the shrink: a trainer alone until the other joins) ends once the test shrank.
SCRIPT = f"""\
import os, time
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()
print(f"joined a world of {{world}}", flush=True)
while world > 1:
    dist.barrier()
    time.sleep(0.1)
while not os.path.exists({SHRUNK!r}):
    time.sleep(0.2)
dist.destroy_process_group()
"""
ROUND = re.compile(r"rendezvous: \{'round': (\d+), 'rank': (\d+), 'nodes': (\d+)")


@pytest.fixture
def store_port() -> Iterator[int]:
    """The master pod's rendezvous store (a TCPStore, as `edl rendezvous` hosts it)."""
    from torch.distributed import TCPStore

    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=60), multi_tenant=True)
    yield port
    del store


def _last_round(log: Path) -> tuple[int, int, int] | None:
    """(round, rank, nodes) of the agent's newest rendezvous."""
    found = ROUND.findall(log.read_text(errors="replace"))
    return tuple(int(x) for x in found[-1]) if found else None  # type: ignore[return-value]


@pytest.mark.parametrize("leaving_rank", [0])
def test_a_trainer_drained_while_the_workers_start_leaves_a_world_of_one_that_runs(
    tmp_path: Path, store_port: int, leaving_rank: int,
) -> None:
    """SIGTERM (a trainer pod's deletion: the kubelet signals the agent) as soon as the
    world of 2 formed: the survivor re-forms a world of 1 and its script ends there."""
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDL_", "TORCH"))}
    env.update({
        "EDL_JOB_NAME": "leave", "EDL_NAMESPACE": "t", "EDL_TRAINERS": "1",
        "EDL_TRAINERS_MAX": "2", "EDL_ENTRYPOINT": "python train.py",
        "EDL_WORKSPACE": str(tmp_path), "EDL_POD_IP": "127.0.0.1",
        "EDL_RDZV_ENDPOINT": f"127.0.0.1:{store_port}", "EDL_MAX_RESTARTS": "3",
    })
    agents: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b")}
    try:
        for name, log in logs.items():
            with log.open("wb") as out:
                agents[name] = subprocess.Popen(
                    [sys.executable, "-m", "edl.cli.main", "agent"],
                    env={**env, "EDL_POD_NAME": name}, cwd=tmp_path,
                    stdout=out, stderr=subprocess.STDOUT)

        def world_of_two() -> dict[str, tuple[int, int, int]] | None:
            rounds = {name: _last_round(log) for name, log in logs.items()}
            if all(r is not None and r[2] == 2 for r in rounds.values()) and (
                    len({r[0] for r in rounds.values() if r is not None}) == 1):
                return {name: r for name, r in rounds.items() if r is not None}
            assert all(agent.poll() is None for agent in agents.values()), _tails(logs)
            return None

        rounds = wait_until(world_of_two, 150, "a world of 2", interval=0.05)
        leaver = next(name for name, r in rounds.items() if r[1] == leaving_rank)
        survivor = next(name for name in agents if name != leaver)
        (tmp_path / SHRUNK).touch()
        drained = time.monotonic()
        agents[leaver].send_signal(signal.SIGTERM)
        assert agents[leaver].wait(60) == 143, _tails(logs)
        wait_until(lambda: agents[survivor].poll() is not None, 90,
                   f"the survivor's script to end in a world of 1\n{_tails(logs)}")
        code = agents[survivor].wait()
        took = time.monotonic() - drained
        survived = logs[survivor].read_text(errors="replace")
        assert code == 0, _tails(logs)
        assert _last_round(logs[survivor])[2] == 1, survived  # type: ignore[index]
        assert "joined a world of 1" in survived
        assert "1 of the 2 nodes of this round left it: restarting the workers" in survived
        print(f"drained rank {leaving_rank}: the survivor ended in a world of 1 "
              f"{took:.1f} s later")
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(10)


def _tails(logs: dict[str, Path]) -> str:
    return "\n".join(f"--- {name}\n" + "\n".join(
        log.read_text(errors="replace").splitlines()[-15:]) for name, log in logs.items())


def test_the_ddp_example_restarted_after_its_last_checkpoint_ends_with_its_accuracy(
    tmp_path: Path,
) -> None:
    """A world re-formed after the last epoch's checkpoint (a resize landing as the job
    ends) restarts the script with no epoch left to run; its final line read the last
    epoch's accuracy, unbound then, and the job failed as a crash loop instead of
    succeeding. Here no epoch is left from the start (--epochs 0), in a world of 1.
    (examples/digits-adaptive ends the same way.)"""
    script = Path(__file__).resolve().parents[2] / "examples" / "digits-ddp" / "train.py"
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    done = subprocess.run(
        [sys.executable, str(script), "--epochs", "0", "--checkpoint", str(tmp_path / "m.pt")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^test accuracy [0-9.]+ with 1 workers$", done.stdout, re.M), done.stdout
