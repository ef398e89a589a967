"""Training runtime figures on real processes and a real etcd (one run, this machine).

* **throughput**: one trainer + one pserver (edl) against a plain single-process
  PyTorch loop on the same ~1M-parameter MLP, batch 256, same optimizer
  (momentum SGD). Target: edl >= 0.6 of plain PyTorch.
* **recovery** (median over --runs): SIGTERM -> trainer exit (scale-down);
  trainer SIGKILL -> its task dispatched again; pserver SIGKILL -> the index
  served again by a replacement started at once (as a ReplicaSet would);
  leader master SIGKILL -> the standby serving. Default TTLs (lease 5 s, trainer 6 s).
* **master ops/s**: GetTask + FinishTask pairs per second from 32 concurrent
  clients, every answer persisted in etcd (fsync on) before it is sent.
  Target >= 1,000/s. Baseline in the same run: the same load on the pure
  in-memory queue (no gRPC, no etcd).

Run: .venv/bin/python bench/runtime.py [--quick]
Writes docs/img/runtime-recovery.png (and the raw numbers, .json).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from edl.coord import EmbeddedEtcd, leader_address
from edl.runtime.config import RuntimeConfig
from edl.runtime.coordination import EtcdResolver, connect, read_state
from edl.runtime.master.queue import TaskQueue
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc
from edl.runtime.pserver.optim import OptimizerConfig
from edl.runtime.trainer.api import Job

REPO = Path(__file__).resolve().parents[1]
EDL = [sys.executable, "-m", "edl.cli.main"]
BATCH = 256
console = Console()


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )  # fmt: skip


class Processes:
    """edl processes for one scenario; every one is killed at the end."""

    def __init__(self, etcd: EmbeddedEtcd, tmp: Path, job: str, **env: str) -> None:
        self.tmp = tmp
        self.config = RuntimeConfig(job_name=job, etcd_endpoints=etcd.endpoints)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("EDL_")},
            "EDL_ETCD_ENDPOINTS": etcd.endpoints, "EDL_JOB_NAME": job, "EDL_PSERVERS": "1",
            "EDL_POD_IP": "127.0.0.1", "EDL_PORT": "0",
            "EDL_CHECKPOINT_DIR": str(tmp / f"ckpt-{job}"), "EDL_CHECKPOINT_INTERVAL": "2",
            "EDL_ENTRYPOINT": "python train.py", "EDL_WORKSPACE": str(REPO / "examples/digits"),
            **env,
        }  # fmt: skip
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, role: str, name: str) -> None:
        log = (self.tmp / f"{self.config.job_name}-{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [*EDL, role], env={**self.env, "EDL_POD_NAME": name}, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[name].pid, sig)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()

    def etcd(self, read: Callable) -> object:
        async def go() -> object:
            client = await connect(self.config)
            try:
                return await read(client)
            finally:
                await client.shutdown()

        return asyncio.run(go())


def wait_until(check: Callable[[], object], timeout: float, poll: float = 0.02) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError("condition not reached")


# ---------------------------------------------------------------- throughput
def timed_steps(step: Callable[[], None], steps: int) -> float:
    """Samples/s over `steps` steps after 3 warm-up steps."""
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * BATCH / (time.perf_counter() - start)


def throughput(etcd: EmbeddedEtcd, tmp: Path, steps: int, rounds: int) -> dict[str, list[float]]:
    """Alternate plain PyTorch and edl rounds so machine noise hits both alike."""
    x, y = torch.randn(BATCH, 512), torch.randint(0, 10, (BATCH,))
    plain_model = mlp()
    opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)

    def plain_step() -> None:
        opt.zero_grad()
        F.cross_entropy(plain_model(x), y).backward()
        opt.step()

    procs = Processes(etcd, tmp, "throughput")
    plain_threads = torch.get_num_threads()  # torch's default: one per core
    out: dict[str, list[float]] = {
        "plain": [], "plain (1 thread)": [], "edl": [], "edl (no pipelining)": [],
    }  # fmt: skip
    try:
        procs.start("pserver", "ps")
        config = RuntimeConfig(job_name="throughput", etcd_endpoints=etcd.endpoints, pservers=1)
        resolver = EtcdResolver.start(config)
        wait_until(lambda: resolver.pserver_addresses().get(0), 120)
        model = mlp()
        job = Job(model, OptimizerConfig(name="momentum", lr=0.01), resolver, config,
                  handle_sigterm=False)  # fmt: skip

        def edl_step() -> None:
            job.step(F.cross_entropy(model(x), y))

        for _ in range(rounds):
            # The Job picked its compute threads (one core left for communication);
            # plain PyTorch runs with torch's default, as a user's loop would.
            torch.set_num_threads(plain_threads)
            out["plain"].append(timed_steps(plain_step, steps))
            torch.set_num_threads(1)
            out["plain (1 thread)"].append(timed_steps(plain_step, steps))
            torch.set_num_threads(job.compute_threads)
            job.pipeline = True
            out["edl"].append(timed_steps(edl_step, steps))
            job.pipeline = False
            out["edl (no pipelining)"].append(timed_steps(edl_step, steps))
        job.close()
        resolver.stop()
    finally:
        procs.close()
    return out


# ------------------------------------------------------------------ recovery
def digits_job(etcd: EmbeddedEtcd, tmp: Path, name: str, trainers: int, masters: int = 1,
               **env: str) -> Processes:  # fmt: skip
    procs = Processes(etcd, tmp, name, EDL_PASSES="100000", **env)
    for m in range(masters):
        procs.start("master", f"master-{m}")
    procs.start("pserver", "ps-0")
    for t in range(trainers):
        procs.start("trainer", f"trainer-{t}")
    return procs


def held_tasks(procs: Processes) -> dict[int, dict]:
    raw = procs.etcd(lambda c: read_state(c, "master/tasks/"))
    return {int(k.rsplit("/", 1)[1]): json.loads(v) for k, v in raw.items()}  # type: ignore[union-attr]


def holding(procs: Processes, trainer: str) -> dict[int, dict]:
    return {i: t for i, t in held_tasks(procs).items() if t["trainer"] == trainer}


def sigterm_exit(etcd: EmbeddedEtcd, tmp: Path, runs: int) -> list[float]:
    out = []
    procs = digits_job(etcd, tmp, "sigterm", trainers=0)
    try:
        for r in range(runs):
            name = f"trainer-{r}"
            procs.start("trainer", name)
            wait_until(lambda name=name: holding(procs, name), 120, 0.1)
            sent = time.monotonic()
            procs.kill(name, signal.SIGTERM)
            procs.procs[name].wait(30)
            out.append(time.monotonic() - sent)
    finally:
        procs.close()
    return out


def trainer_death(etcd: EmbeddedEtcd, tmp: Path, runs: int) -> list[float]:
    """SIGKILL a trainer holding a task; time until that task is dispatched elsewhere."""
    out = []
    procs = digits_job(etcd, tmp, "trainer-death", trainers=1)
    try:
        for r in range(runs * 10):  # a victim killed between tasks does not count
            if len(out) >= runs:
                break
            victim = f"victim-{r}"
            procs.start("trainer", victim)
            wait_until(lambda victim=victim: holding(procs, victim), 120, 0.05)
            killed = time.monotonic()
            procs.kill(victim)
            held = holding(procs, victim)  # what it held when it died
            if not held:
                continue  # it finished its task in between: try again
            task_id, record = next(iter(held.items()))

            def redispatched(task_id=task_id, epoch=record["epoch"], victim=victim) -> bool:
                now = held_tasks(procs)[task_id]
                return now["epoch"] > epoch and now["trainer"] not in ("", victim)

            wait_until(redispatched, 60, 0.05)
            out.append(time.monotonic() - killed)
    finally:
        procs.close()
    return out


def pserver_death(etcd: EmbeddedEtcd, tmp: Path, runs: int) -> list[float]:
    out = []
    procs = digits_job(etcd, tmp, "pserver-death", trainers=1)
    try:
        for r in range(runs):
            old = wait_until(lambda: procs.etcd(lambda c: c.list_pservers()).get(0), 120)
            wait_until(lambda: held_tasks(procs), 120, 0.1)
            victim = "ps-0" if r == 0 else f"ps-{r}"
            killed = time.monotonic()
            procs.kill(victim)
            procs.start("pserver", f"ps-{r + 1}")

            def served(old=old) -> bool:
                new = procs.etcd(lambda c: c.list_pservers()).get(0)
                if not new or new == old:
                    return False
                with grpc.insecure_channel(new) as ch:
                    try:
                        return pb_grpc.PServerStub(ch).Pull(pb.PullRequest(), timeout=2).initialized
                    except grpc.RpcError:
                        return False

            wait_until(served, 120, 0.05)
            out.append(time.monotonic() - killed)
    finally:
        procs.close()
    return out


def master_death(etcd: EmbeddedEtcd, tmp: Path, runs: int) -> list[float]:
    out = []
    procs = digits_job(etcd, tmp, "master-death", trainers=1, masters=2)
    leader_of = {}
    try:
        for r in range(runs):
            address = wait_until(lambda: procs.etcd(leader_address), 120)
            wait_until(lambda: held_tasks(procs), 120, 0.1)
            victim = next(
                n for n, p in procs.procs.items()
                if n.startswith("master") and p.poll() is None
                and "leading (" in (tmp / f"master-death-{n}.log").read_text()
            )  # fmt: skip
            leader_of[r] = victim
            killed = time.monotonic()
            procs.kill(victim)
            procs.start("master", f"master-{r + 2}")  # the next standby

            def serving(old=address) -> bool:
                new = procs.etcd(leader_address)
                if not new or new == old:
                    return False
                with grpc.insecure_channel(new) as ch:
                    try:
                        stub = pb_grpc.MasterStub(ch)
                        return bool(stub.GetProgress(pb.ProgressRequest(), timeout=2).json)
                    except grpc.RpcError:
                        return False

            wait_until(serving, 120, 0.05)
            out.append(time.monotonic() - killed)
    finally:
        procs.close()
    return out


# ------------------------------------------------------------- master ops/s
async def master_ops(endpoints: str, tasks: int, clients: int) -> float:
    config = RuntimeConfig(job_name="ops", etcd_endpoints=endpoints)
    client = await connect(config)
    address = None
    while not address:
        address = await leader_address(client)
        await asyncio.sleep(0.1)
    await client.shutdown()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.MasterStub(channel)
        await stub.SetDataset(pb.Dataset(num_samples=tasks, chunk_size=1, chunks_per_task=1))
        done = 0

        async def worker(i: int) -> None:
            nonlocal done
            name = f"bench-{i}"
            while True:
                reply = await stub.GetTask(pb.TaskRequest(trainer=name))
                if reply.status == pb.TaskReply.DONE:
                    return
                if reply.status == pb.TaskReply.WAIT:
                    await asyncio.sleep(0.01)
                    continue
                report = pb.TaskReport(trainer=name, id=reply.task.id, epoch=reply.task.epoch)
                await stub.FinishTask(report)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(clients)))
        return done / (time.perf_counter() - start)


def memory_ops(tasks: int, clients: int) -> float:
    q = TaskQueue(passes=1)
    q.set_dataset(tasks, 1, 1)
    start = time.perf_counter()
    done, i = 0, 0
    while not q.finished:
        name = f"bench-{i % clients}"
        d = q.dispatch(name, time.monotonic())
        if d.task is not None:
            q.finish(d.task.id, d.task.epoch, name, time.monotonic())
            done += 1
        i += 1
    return done / (time.perf_counter() - start)


def ops_bench(tmp: Path, tasks: int, clients: int) -> float:
    with EmbeddedEtcd(fsync=True) as etcd:
        procs = Processes(etcd, tmp, "ops", EDL_PASSES="1")
        try:
            procs.start("master", "master")
            return asyncio.run(master_ops(etcd.endpoints, tasks, clients))
        finally:
            procs.close()


# --------------------------------------------------------------------- main
def plot(recovery: dict[str, list[float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    names = list(recovery)
    ax.boxplot([recovery[n] for n in names], orientation="horizontal")
    ax.set_yticks(range(1, len(names) + 1), names)
    ax.set_xlabel("seconds (lease TTL 5 s, trainer TTL 6 s)")
    ax.set_title("edl runtime: time to recover (real processes, real etcd)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def print_throughput(rates: dict[str, list[float]]) -> None:
    """The throughput figures alone (--throughput-only), each round and the medians."""
    plain = statistics.median(rates["plain"])
    for label, values in rates.items():
        rounds = ", ".join(f"{v:,.0f}" for v in values)
        median = statistics.median(values)
        print(f"{label}: median {median:,.0f} samples/s, ratio {median / plain:.2f} ({rounds})")
    best = max(plain, statistics.median(rates["plain (1 thread)"]))
    print(f"edl against the faster plain loop: {statistics.median(rates['edl']) / best:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and runs")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--throughput-only", action="store_true", help="only the trainer/pserver throughput"
    )
    args = parser.parse_args()
    runs = args.runs or (2 if args.quick else 5)
    steps = 30 if args.quick else 150
    tasks = 2000 if args.quick else 10000
    results: dict[str, object] = {}
    recovery: dict[str, list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="edl-bench-") as tmpdir,
        Progress(console=console) as progress,
    ):
        tmp = Path(tmpdir)
        todo = progress.add_task("runtime bench", total=6)
        with EmbeddedEtcd() as etcd:
            rates = throughput(etcd, tmp, steps, rounds=3 if args.quick else 5)
            progress.advance(todo)
            if args.throughput_only:
                print_throughput(rates)
                return
            for label, fn in [
                ("SIGTERM -> trainer exit", sigterm_exit),
                ("trainer SIGKILL -> task re-dispatched", trainer_death),
                ("pserver SIGKILL -> served again", pserver_death),
                ("master SIGKILL -> new master serving", master_death),
            ]:
                recovery[label] = fn(etcd, tmp, runs)
                progress.advance(todo)
        results["ops"] = ops_bench(tmp, tasks, 32)
        progress.advance(todo)
        results["ops_memory"] = memory_ops(tasks, 32)
        progress.advance(todo)

    table = Table(title="edl training runtime")
    for col in ("figure", "value", "baseline (same run)", "ratio / target"):
        table.add_column(col)
    plain = statistics.median(rates["plain"])
    edl = statistics.median(rates["edl"])
    sync = statistics.median(rates["edl (no pipelining)"])
    table.add_row(
        "throughput, 1 trainer + 1 pserver (samples/s)",
        f"{edl:,.0f}",
        f"plain PyTorch {plain:,.0f}",
        f"{edl / plain:.2f} (target >= 0.6)",
    )
    table.add_row("  same, without pipelining", f"{sync:,.0f}", "", f"{sync / plain:.2f}")
    one = statistics.median(rates["plain (1 thread)"])
    table.add_row("  plain PyTorch, 1 thread", f"{one:,.0f}", "", f"edl / faster plain: "
                  f"{edl / max(plain, one):.2f}")  # fmt: skip
    ops, mem = float(results["ops"]), float(results["ops_memory"])  # type: ignore[arg-type]
    table.add_row(
        "master get+finish pairs/s, persisted (etcd fsync)",
        f"{ops:,.0f}",
        f"in-memory queue {mem:,.0f}",
        f"target >= 1,000: {'met' if ops >= 1000 else 'MISSED'}",
    )
    for label, values in recovery.items():
        table.add_row(
            f"{label} (s, median of {len(values)})",
            f"{statistics.median(values):.2f}",
            f"max {max(values):.2f}",
            "",
        )
    console.print(table)
    print("\n| figure | value | baseline (same run) | ratio / target |\n|---|---|---|---|")
    print(
        f"| throughput 1 trainer + 1 pserver, MLP 1.06M params, batch 256 | {edl:,.0f} samples/s "
        f"| plain PyTorch {plain:,.0f} samples/s | {edl / plain:.2f} (target >= 0.6) |"
    )
    print(
        f"| same, push/pull not overlapped with compute | {sync:,.0f} samples/s | "
        f"| {sync / plain:.2f} |"
    )
    print(
        f"| master GetTask+FinishTask pairs/s, 32 clients, etcd fsync | {ops:,.0f} "
        f"| in-memory queue {mem:,.0f} | target >= 1,000 |"
    )
    for label, values in recovery.items():
        print(
            f"| {label} | median {statistics.median(values):.2f} s "
            f"(n={len(values)}, max {max(values):.2f} s) | | |"
        )
    plot(recovery, REPO / "docs" / "img" / "runtime-recovery.png")
    raw = {"throughput": rates, "recovery_s": recovery, "ops": ops, "ops_memory": mem}
    (REPO / "docs" / "img" / "runtime-recovery.json").write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
