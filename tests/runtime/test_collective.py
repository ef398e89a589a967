"""The collective runtime's parts: the agent's command line, metric lines, the etcd
gateway, and torch's rendezvous through the registered `edl` handler on a real store."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.coord.embedded import EmbeddedEtcd
from edl.procs import free_port
from edl.runtime.collective import gateway, handler, keys
from edl.runtime.collective.agent import AgentError, find_endpoint, run_agent
from edl.runtime.collective.launch import (
    LaunchError,
    config_from_env,
    expand,
    missing_program,
    torchrun_args,
)
from edl.runtime.collective.metrics import parse_metrics
from polling import wait_until

ENV = {
    "EDL_JOB_NAME": "ddp",
    "EDL_NAMESPACE": "team-a",
    "EDL_TRAINERS": "2",
    "EDL_TRAINERS_MAX": "4",
    "EDL_NPROC_PER_NODE": "2",
    "EDL_MAX_RESTARTS": "7",
    "EDL_ENTRYPOINT": "python train.py --checkpoint $(CKPT)/a.pt --x $$HOME",
    "EDL_POD_IP": "10.0.0.7",
    "CKPT": "/shared",
}



@contextlib.contextmanager
def rendezvous_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """A torch TCPStore for edl's rendezvous handler (nothing reported to etcd), and
    `agent(run_id, last_call_s, keep_alive_s, attempts)`: a handler on it for one node."""
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import (
        RendezvousParameters,
        rendezvous_handler_registry,
    )

    monkeypatch.setattr(handler, "etcd_reporter", lambda env=None: lambda event: None)
    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=30), multi_tenant=True)
    handler.register()

    def agent(run_id: str, last_call_s: float, keep_alive_s: float, attempts: int) -> Any:
        return rendezvous_handler_registry.create_handler(RendezvousParameters(
            backend="edl", endpoint=f"127.0.0.1:{port}", run_id=run_id, min_nodes=1,
            max_nodes=2, local_addr="127.0.0.1", last_call_timeout=last_call_s,
            join_timeout=60, keep_alive_interval=keep_alive_s,
            keep_alive_max_attempt=attempts))

    try:
        yield agent
    finally:
        del store


def join_two(agent: Callable[[], Any]) -> list[Any]:
    """Two nodes made by `agent()` joined in one round of 2 (each in its own thread)."""
    agents: list[Any] = [None, None]
    worlds: list[int] = [0, 0]
    start = threading.Barrier(2, timeout=60)

    def join(index: int) -> None:
        agents[index] = agent()
        start.wait()
        worlds[index] = agents[index].next_rendezvous().world_size

    threads = [threading.Thread(target=join, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert worlds == [2, 2]
    return agents

def test_torchrun_arguments_of_a_pod() -> None:
    args = torchrun_args(config_from_env(ENV), "ddp-master.team-a.svc:7164", "/py")
    assert args[:6] == [
        "--nnodes=2:4", "--nproc-per-node=2", "--max-restarts=7", "--rdzv-backend=edl",
        "--rdzv-endpoint=ddp-master.team-a.svc:7164", "--rdzv-id=team-a-ddp",
    ]
    assert "--local-addr=10.0.0.7" in args
    worker = ["--no-python", "/py", "-m", "edl.runtime.collective.worker"]
    assert args[-11:] == [*worker, "/py", "-u", "train.py", "--checkpoint", "/shared/a.pt",
                          "--x", "$HOME"]
    assert torchrun_args(config_from_env(ENV), "h:1", "/py")[-11:] == args[-11:]
    other = torchrun_args(config_from_env({**ENV, "EDL_ENTRYPOINT": "./run.sh 3"}), "h:1", "/py")
    assert other[-6:] == [*worker, "./run.sh", "3"]


def test_a_worker_dies_with_its_agent(tmp_path: Path) -> None:
    # agent: starts a worker in a new session (as torch does), prints its pid, then hangs
    agent = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys, time\n"
         "os.environ['EDL_WORKER_PARENT'] = str(os.getpid())\n"  # as edl's torchrun sets it
         "w = subprocess.Popen([sys.executable, '-m', 'edl.runtime.collective.worker',"
         " sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
         "print(w.pid, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )
    assert agent.stdout is not None
    worker = int(agent.stdout.readline())
    wait_until(lambda: b"collective.worker" not in Path(f"/proc/{worker}/cmdline").read_bytes(),
               30, "the worker to exec its command")
    agent.kill()
    agent.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(worker, os.WNOHANG)
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived its SIGKILLed agent"


def test_a_worker_whose_agent_died_while_it_started_never_runs_its_command(
    tmp_path: Path,
) -> None:
    """PDEATHSIG covers only a death after prctl: a worker already re-parented (its
    agent was killed while it started) must stop rather than train as an orphan."""
    marker = tmp_path / "ran"

    def worker_started_by(parent: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "edl.runtime.collective.worker", sys.executable, "-c",
             f"open({str(marker)!r}, 'w').close()"],
            env={**os.environ, "EDL_WORKER_PARENT": str(parent)},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    not_the_parent = os.getpid() + 1_000_000  # no process has it: the agent is gone
    done = worker_started_by(not_the_parent)
    assert done.returncode == 1 and not marker.exists()
    assert done.stderr.strip() == (
        f"edl worker: its agent (pid {not_the_parent}) is gone; not starting {sys.executable}"
    )
    # run by its real parent, the same worker starts its command
    done = worker_started_by(os.getpid())
    assert done.returncode == 0 and marker.exists(), done.stderr


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def test_every_bad_agent_variable_is_named() -> None:
    bad = {"EDL_TRAINERS": "two", "EDL_TRAINERS_MAX": "0", "EDL_MAX_RESTARTS": "-1"}
    with pytest.raises(LaunchError) as caught:
        config_from_env(bad)
    message = str(caught.value)
    for name in ("EDL_TRAINERS:", "EDL_TRAINERS_MAX:", "EDL_MAX_RESTARTS:", "EDL_ENTRYPOINT:"):
        assert name in message, message
    with pytest.raises(LaunchError, match="must be followed by a script"):
        torchrun_args(config_from_env({**ENV, "EDL_ENTRYPOINT": "python -c 1"}), "h:1")


@given(st.text(alphabet="ab$()_X ", max_size=20))
def test_expansion_leaves_unknown_names_and_never_fails(text: str) -> None:
    assert expand(text, {}) == text.replace("$$", "$") or "$$" in text
    if "$$" not in text:  # "$$(X)" is the escape for a literal "$(X)", as in Kubernetes
        assert "$(X)" not in expand(text, {"X": "v"})


def test_a_doubled_dollar_escapes_a_reference() -> None:
    assert expand("$$(X) $(X) $$$(X)", {"X": "v"}) == "$(X) v $v"


def test_metric_lines_are_name_value_pairs_only() -> None:
    assert parse_metrics("epoch=3 loss=0.1182 accuracy=0.9611\n") == {
        "epoch": 3.0, "loss": 0.1182, "accuracy": 0.9611}
    assert parse_metrics("val/acc=1e-3, step=7") == {"val/acc": 0.001, "step": 7.0}
    for line in ("INFO rank=0 world_size=2 joined", "Traceback (most recent call last):",
                 "accuracy=high", "", "loss = 0.3"):
        assert parse_metrics(line) == {}, line


def test_gateway_and_the_agents_endpoint_lookup_on_a_real_etcd() -> None:
    with EmbeddedEtcd() as server:
        endpoints = server.endpoints
        gateway.put(endpoints, keys.agent_key("ns", "j", "p1"), json.dumps({"round": 1}))
        gateway.put(endpoints, keys.metrics_key("ns", "j"), "{}")
        gateway.put(endpoints, keys.agent_key("ns", "j2", "p1"), "other job")
        found = gateway.get_prefix(endpoints, keys.job_prefix("ns", "j"))
        assert set(found) == {keys.agent_key("ns", "j", "p1"), keys.metrics_key("ns", "j")}
        config = config_from_env({**ENV, "EDL_JOB_NAME": "j", "EDL_NAMESPACE": "ns"})
        env = {"EDL_ETCD_ENDPOINTS": endpoints}
        with pytest.raises(AgentError, match="no rendezvous store published"):
            find_endpoint(env, config, wait_s=0.5)
        gateway.put(endpoints, keys.rendezvous_key("ns", "j"), "127.0.0.1:555")
        assert find_endpoint(env, config, wait_s=5) == "127.0.0.1:555"
        assert find_endpoint({**env, "EDL_RDZV_ENDPOINT": "svc:1"}, config, 5) == "svc:1"
    with pytest.raises(OSError):
        gateway.get(endpoints, "gone")


def test_agent_refuses_to_start_without_its_variables() -> None:
    with pytest.raises(AgentError) as caught:
        run_agent({"EDL_TRAINERS": "1"})
    assert caught.value.code == 78 and "EDL_ENTRYPOINT" in str(caught.value)  # EX_CONFIG
    done = subprocess.run([sys.executable, "-m", "edl.cli.main", "agent"], env={"PATH": ""},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 78
    assert done.stderr.strip().splitlines() == [
        "edl agent: EDL_TRAINERS: required; EDL_ENTRYPOINT: required (the TrainingJob's "
        "spec.trainer.entrypoint)"]


def test_a_missing_script_or_workspace_is_a_configuration_error_before_torch_starts(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text("")
    env = {"EDL_TRAINERS": "1", "EDL_RDZV_ENDPOINT": "127.0.0.1:1", "EDL_WORKSPACE": str(tmp_path)}
    cases = {
        "python no_such_script.py": "EDL_ENTRYPOINT: no such script: no_such_script.py",
        "./no_such_program --x": "EDL_ENTRYPOINT: no such program: ./no_such_program",
        "no-such-program-on-path": "EDL_ENTRYPOINT: no such program: no-such-program-on-path",
    }
    for entrypoint, message in cases.items():
        with pytest.raises(AgentError) as caught:
            run_agent({**env, "EDL_ENTRYPOINT": entrypoint}, endpoint_wait_s=0)
        assert caught.value.code == 78 and str(caught.value).startswith(message), entrypoint
    assert missing_program("python train.py --lr 1", str(tmp_path)) == ""
    assert missing_program("sh -c 'python x.py'", str(tmp_path)) == ""
    with pytest.raises(AgentError) as caught:
        run_agent({**env, "EDL_ENTRYPOINT": "python train.py",
                   "EDL_WORKSPACE": str(tmp_path / "nope")}, endpoint_wait_s=0)
    assert caught.value.code == 78 and "EDL_WORKSPACE: not a directory" in str(caught.value)
    # the checkpoint directory the entrypoint names is made, or the job fails saying why
    with pytest.raises(AgentError) as caught:
        run_agent({**env, "EDL_ENTRYPOINT": "python train.py",
                   "EDL_CHECKPOINT_DIR": str(tmp_path / "train.py" / "ckpt")}, endpoint_wait_s=0)
    assert caught.value.code == 78 and str(caught.value).startswith(
        f"EDL_CHECKPOINT_DIR: cannot create {tmp_path}/train.py/ckpt: Not a directory")
    with pytest.raises(AgentError, match="no rendezvous store"):  # past the checks
        run_agent({**env, "EDL_RDZV_ENDPOINT": "", "EDL_ETCD_ENDPOINTS": "http://127.0.0.1:9",
                   "EDL_ENTRYPOINT": "python train.py",
                   "EDL_CHECKPOINT_DIR": str(tmp_path / "c" / "d")}, endpoint_wait_s=0)
    assert (tmp_path / "c" / "d").is_dir()


def test_two_agents_meet_through_the_registered_handler_on_the_masters_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import (
        RendezvousParameters,
        rendezvous_handler_registry,
    )

    reports: list[dict[str, Any]] = []
    monkeypatch.setattr(handler, "etcd_reporter", lambda env=None: reports.append)
    joined: list[int] = []  # a join that succeeded: the round's handshakes follow
    monkeypatch.setattr(handler, "on_round", lambda: joined.append(1))
    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=30), multi_tenant=True)
    handler.register()
    results: dict[int, Any] = {}
    both = threading.Barrier(2, timeout=90)  # closing before the other has synced ends its join

    def join(index: int) -> None:
        params = RendezvousParameters(
            backend="edl", endpoint=f"127.0.0.1:{port}", run_id="t", min_nodes=2, max_nodes=2,
            local_addr="127.0.0.1", last_call_timeout=1, join_timeout=60)
        agent = rendezvous_handler_registry.create_handler(params)
        assert agent.get_backend() == "edl"
        info = agent.next_rendezvous()
        results[index] = (info.rank, info.world_size, agent.use_agent_store)
        both.wait()
        assert agent.shutdown() and agent.is_closed()

    threads = [threading.Thread(target=join, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    del store
    assert sorted(r[0] for r in results.values()) == [0, 1]
    assert {r[1] for r in results.values()} == {2}
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert {(r["round"], r["nodes"], r["rendezvous"]) for r in reports} == {(0, 2, 1)}
    assert joined == [1, 1]


def test_a_drained_agent_leaves_so_the_next_round_need_not_wait_for_its_heartbeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with rendezvous_store(monkeypatch) as agent:
        # heartbeats lapse only after 3 x 30 s: far beyond this test's wait
        agents = join_two(lambda: agent("leave", 5, 30, 3))
        assert agents[0].leave()
        began = time.monotonic()
        again = agents[1].next_rendezvous()
        assert again.world_size == 1 and again.rank == 0
        assert time.monotonic() - began < 20, "waited for the drained agent's heartbeats"
        agents[1].shutdown()


def test_an_agent_whose_round_lost_a_node_restarts_its_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node of the round stops heartbeating (a SIGKILLed pod): once it is dropped, the
    other agent reports a node waiting, so torch's agent restarts its workers even if
    they never reach a collective that would fail (still starting, in init_process_group)."""
    with rendezvous_store(monkeypatch) as agent:
        survivor, lost = join_two(lambda: agent("lost", 5, 1, 2))
        assert survivor.num_nodes_waiting() == 0  # the round is whole: nothing to restart
        lost._inner._stop_heartbeats()  # the pod is gone: no exit, no more heartbeats
        began = time.monotonic()
        wait_until(lambda: survivor.num_nodes_waiting() == 1, 30, "the lost node noticed")
        assert time.monotonic() - began < 20  # dropped after its heartbeats lapsed (2 s)
        survivor.shutdown()


def test_a_node_drained_while_it_waits_to_join_leaves_the_wait_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trainer SIGTERMed while it waited to join a running round: the running agent
    must not go on seeing it waiting (a restart of its workers for nobody)."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _Action

    with rendezvous_store(monkeypatch) as agent:
        # heartbeats lapse only after 3 x 30 s: far beyond this test
        running, joining = agent("wait", 1, 30, 3), agent("wait", 1, 30, 3)
        assert running.next_rendezvous().world_size == 1

        def into_the_wait_list(ctx: Any, deadline: float) -> _Action:  # as its join does
            return (_Action.FINISH if ctx.node in ctx.state.wait_list
                    else _Action.ADD_TO_WAIT_LIST)

        joining._inner._op_executor.run(into_the_wait_list, time.monotonic() + 30)
        wait_until(lambda: running.num_nodes_waiting() == 1, 10, "the joiner seen waiting")
        assert joining.leave()
        wait_until(lambda: running.num_nodes_waiting() == 0, 10, "the drained joiner gone")
        running.shutdown()


def test_a_sigterm_during_a_rounds_rank_handshake_is_raised_once_it_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERMed between a completed round and the rank assignment, a node never wrote
    its role: its peers waited 60 s for it, then their torchrun failed (and closed the
    rendezvous). The stop is held until the handshake is done, and only then raised."""
    import signal

    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from edl.runtime.collective import stop_hold

    steps: list[str] = []

    def handshake(agent: Any, *args: Any) -> str:  # torch's, with a SIGTERM in its middle
        steps.append("role written")
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("ranks read")
        return "workers"

    previous = {stop: signal.getsignal(stop) for stop in stop_hold.STOP_SIGNALS}
    monkeypatch.setattr(SimpleElasticAgent, "_assign_worker_ranks", handshake)
    monkeypatch.setenv("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM")
    hold = stop_hold.StopHold()
    try:
        stop_hold.install(hold)
        assert os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGHUP,SIGQUIT"
        hold.begin()  # a round completed
        with pytest.raises(SignalException) as caught:
            SimpleElasticAgent._assign_worker_ranks(None, None, 0, 2, None)  # type: ignore[arg-type]
        assert steps == ["role written", "ranks read"] and caught.value.sigval == signal.SIGTERM
        with pytest.raises(SignalException):  # outside the handshake: at once, as torch's
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        hold.begin()
        hold.end()  # no signal came: nothing raised
        now = [0.0]
        late = stop_hold.StopHold(clock=lambda: now[0])
        late.begin()
        now[0] = stop_hold.MAX_HOLD_S + 1  # a hold never ended is not kept for good
        with pytest.raises(SignalException):
            late.on_signal(signal.SIGTERM, None)
    finally:
        for stop, handler_was in previous.items():
            signal.signal(stop, handler_was)
