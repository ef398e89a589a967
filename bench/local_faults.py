"""Recovery of `edl run` under the faults the chaos suite injects (one run, this machine).

Runs the digits example twice as `edl run --plain` subprocesses: once undisturbed (the
baseline) and once with, in turn, etcd, one pserver, the master and every trainer
SIGKILLed once training has progressed; then two runs that must fail fast (a job that
cannot fit, a configuration error). Prints, per fault, the seconds from the kill to the
run's own line for the recovery (read from status.json's events) and to the next task
done, and the chaos run's wall time against the baseline's.

Run: .venv/bin/python bench/local_faults.py [--passes N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"
EDL = str(Path(sys.executable).with_name("edl"))


def job_file(base: Path, passes: int, workspace: str = str(DIGITS)) -> Path:
    job = yaml.safe_load((DIGITS / "job.yaml").read_text())
    job["spec"]["passes"] = passes
    job["spec"]["trainer"]["workspace"] = workspace
    path = base / f"job-{passes}-{abs(hash(workspace))}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def start(base: Path, job: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [EDL, "run", str(job), "--plain", "--runs-dir", str(base / "runs"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=base,
        env={**os.environ, "TMPDIR": str(base)}, start_new_session=True,
    )


def status(base: Path) -> dict:
    for _ in range(20):
        files = sorted((base / "runs").glob("*/status.json"), key=lambda p: p.stat().st_mtime)
        try:
            return json.loads(files[-1].read_text()) if files else {}
        except (ValueError, OSError):
            time.sleep(0.05)
    return {}


def wait(predicate, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError("gave up waiting")


def done_tasks(s: dict) -> int:
    return (s.get("pass_index") or 0) * (s.get("tasks_total") or 0) + (s.get("tasks_done") or 0)


def pod_pid(s: dict, prefix: str) -> int | None:
    pods = [p for p in s.get("pods", []) if p["name"].startswith(prefix) and p.get("pid")]
    return pods[0]["pid"] if pods else None


def etcd_pid(root: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == root and b"--data-dir" in cmd:
                return int(entry.name)
    return None


def inject(base: Path, proc: subprocess.Popen[str], what: str, expect: str) -> tuple[float, float]:
    """Kill `what`; seconds to the event containing `expect`, and to the next task done."""
    s = wait(lambda: (st := status(base)) and st.get("events_total") is not None and st)
    if what == "etcd":
        victims = [wait(lambda: etcd_pid(proc.pid))]
    elif what == "trainers":
        victims = [p["pid"] for p in s["pods"] if p["name"].startswith("digits-trainer-")
                   and p.get("pid")]
    else:
        victims = [wait(lambda: pod_pid(status(base), f"digits-{what}-"))]
    before = done_tasks(s)
    seen = s.get("events_total", 0)
    killed = time.time()
    for pid in victims:
        if what == "etcd":
            os.kill(pid, signal.SIGKILL)
        else:
            os.killpg(pid, signal.SIGKILL)  # the pod's process group, as its deletion would
    started_at = s["started_at"]

    def event_time():
        st = status(base)
        new = st.get("events", [])[-(st.get("events_total", 0) - seen):] if \
            st.get("events_total", 0) > seen else []
        hits = [at for at, text in new if expect in text]
        return hits[0] if hits else None

    at = wait(event_time, 180)
    wait(lambda: done_tasks(status(base)) > before, 180)
    progressed = time.time() - killed
    return max(0.0, at - (killed - started_at)), progressed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passes", type=int, default=150)
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="edl-bench-faults-") as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        began = time.monotonic()
        proc = start(base, job_file(base, args.passes), "--checkpoint-interval", "1")
        proc.communicate(timeout=900)
        baseline = time.monotonic() - began
        chaos = Path(tmp) / "chaos"
        chaos.mkdir()
        began = time.monotonic()
        proc = start(chaos, job_file(chaos, args.passes), "--checkpoint-interval", "1")
        wait(lambda: done_tasks(status(chaos)) > 12, 300)
        faults = (("etcd", "etcd restarted"), ("pserver", "restored shard"),
                  ("master", "master failover"), ("trainers", "replaces digits-trainer-"))
        for what, expect in faults:
            seen, progressed = inject(chaos, proc, what, expect)
            rows.append((f"{what} SIGKILL", f"'{expect}' after {seen:.1f} s",
                         f"next task done after {progressed:.1f} s"))
            time.sleep(3)
        _out, err = proc.communicate(timeout=900)
        chaos_s = time.monotonic() - began
        outcome = "Succeeded" if proc.returncode == 0 else f"exit {proc.returncode}: {err[-300:]}"
        rows.append(("whole run", f"{chaos_s:.0f} s with the 4 faults ({outcome})",
                     f"baseline {baseline:.0f} s undisturbed: ratio {chaos_s / baseline:.2f}"))
        for name, extra, workspace in (("cannot fit (--cpu 0.1)", ["--cpu", "0.1"], str(DIGITS)),
                                       ("EDL_WORKSPACE not a directory", [], "/nonexistent")):
            here = Path(tmp) / name.split()[0]
            here.mkdir()
            began = time.monotonic()
            proc = start(here, job_file(here, 1, workspace), *extra)
            _, err = proc.communicate(timeout=300)
            took = time.monotonic() - began
            last = err.strip().splitlines()[0] if err.strip() else ""
            rows.append((name, f"failed (exit {proc.returncode}) after {took:.1f} s", last[:150]))
    for row in rows:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
