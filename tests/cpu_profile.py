"""Opt-in CPU accounting of the test suite (docs/testing.md, "Where the CPU goes").

`EDL_TEST_CPU=/tmp/cpu.tsv pytest ...` appends one tab-separated row per event to that
file (every xdist worker appends to the same file; each row is one `write`, so rows do
not interleave). `python tests/cpu_profile.py /tmp/cpu.tsv` summarises it. Columns:

    kind  worker  name  wall_s  self_cpu_s  children_cpu_s  [outcome]

* `test`: one test's setup + call + teardown. `self_cpu_s` is the worker's own CPU
  (user + sys, `RUSAGE_SELF`): in-process clusters, asyncio controllers, hypothesis.
  `children_cpu_s` is the CPU of the processes reaped during the test (`RUSAGE_CHILDREN`:
  `edl run`, masters, trainers, torch workers, `edl controller`; a grandchild counts once
  its parent has reaped it; not a process orphaned by a SIGKILL of its parent, which
  nothing here reaps). A session-scoped fixture's set-up lands on the first test that
  asks for it. The last column says `passed` or `failed` (in any phase).
* `plane`: one e2e control plane (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok) over its whole life, per component, read from /proc/<pid>/stat
  just before it is stopped; `wall_s` is how long it ran. These processes are reaped
  in the last test's teardown, so the plugin takes their CPU off that test's children.
* `startup`: the worker from interpreter start to the end of collection (imports of
  conftest and every test module); `collect`: collection alone.
* `session`: the worker's totals at the end.

Nothing here changes what a test does; without EDL_TEST_CPU the plugin is not loaded.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator, Iterable
from pathlib import Path

import pytest

ENV = "EDL_TEST_CPU"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def proc_cpu(pid: int) -> float:
    """User + sys seconds of a live process and the children it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # after the ")" of comm: field 3 is index 0; utime, stime, cutime, cstime are 14-17
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def proc_age(pid: int) -> float:
    """Seconds since the process started."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / CLOCK_TICKS


class CpuProfile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.pending_plane_cpu = 0.0  # reaped in the current test but not its own
        self._collect_start = (0.0, 0.0)
        self._failed = False

    def write(self, kind: str, name: str, wall: float, own: float, children: float,
              outcome: str = "-") -> None:
        row = (f"{kind}\t{self.worker}\t{name}\t{wall:.3f}\t{own:.3f}\t{children:.3f}"
               f"\t{outcome}\n")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, row.encode())
        finally:
            os.close(fd)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self) -> Generator[None, None, None]:
        self._collect_start = (time.monotonic(), _cpu(resource.RUSAGE_SELF))
        yield
        wall0, cpu0 = self._collect_start
        own = _cpu(resource.RUSAGE_SELF)
        self.write("collect", "-", time.monotonic() - wall0, own - cpu0, 0.0)
        self.write("startup", "-", proc_age(os.getpid()), own,
                   _cpu(resource.RUSAGE_CHILDREN))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        wall0 = time.monotonic()
        own0, children0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        self.pending_plane_cpu = 0.0
        self._failed = False
        yield
        children = _cpu(resource.RUSAGE_CHILDREN) - children0 - self.pending_plane_cpu
        self.pending_plane_cpu = 0.0
        self.write("test", item.nodeid, time.monotonic() - wall0,
                   _cpu(resource.RUSAGE_SELF) - own0, max(children, 0.0),
                   "failed" if self._failed else "passed")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._failed = self._failed or report.failed

    def pytest_sessionfinish(self) -> None:
        self.write("session", "-", proc_age(os.getpid()), _cpu(resource.RUSAGE_SELF),
                   _cpu(resource.RUSAGE_CHILDREN))

    def plane_components(self, pids: Iterable[tuple[str, int]]) -> None:
        """Record each component's CPU over its life; call just before stopping them."""
        for name, pid in pids:
            try:
                cpu, age = proc_cpu(pid), proc_age(pid)
            except (OSError, IndexError, ValueError):
                continue
            self.pending_plane_cpu += cpu
            self.write("plane", name, age, 0.0, cpu)


_active: CpuProfile | None = None


def register(config: pytest.Config) -> None:
    """Called from tests/conftest.py's pytest_configure when EDL_TEST_CPU is set."""
    global _active
    path = os.environ.get(ENV)
    if path and _active is None:
        _active = CpuProfile(Path(path))
        config.pluginmanager.register(_active, "edl_cpu_profile")


def plane_components(pids: Iterable[tuple[str, int]]) -> None:
    """The e2e plane fixture reports its processes here (a no-op when not profiling)."""
    if _active is not None:
        _active.plane_components(pids)


def summarise(rows: list[list[str]], top: int = 40) -> str:
    tests = [(float(r[4]) + float(r[5]), float(r[4]), float(r[5]), float(r[3]), r[2])
             for r in rows if r[0] == "test"]
    lines = []
    total_tests = sum(t[0] for t in tests)
    planes: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        if r[0] == "plane":
            planes[r[2]][0] += float(r[5])
            planes[r[2]][1] += float(r[3])
            planes[r[2]][2] += 1
    startup = [float(r[4]) for r in rows if r[0] == "startup"]
    collect = [float(r[4]) for r in rows if r[0] == "collect"]
    # under xdist the controller ("main") reaps the workers: count the workers only
    workers = {r[1] for r in rows if r[0] == "session"}
    main_only = workers == {"main"}
    sessions = [(float(r[4]), float(r[5])) for r in rows
                if r[0] == "session" and (main_only or r[1] != "main")]
    controller = sum(float(r[4]) for r in rows
                     if r[0] == "session" and r[1] == "main" and not main_only)
    own, children = sum(t[1] for t in tests), sum(t[2] for t in tests)
    lines.append(f"tests: {len(tests)}, their CPU {total_tests:.0f} s "
                 f"(own {own:.0f} s, children {children:.0f} s)")
    plane_total = sum(v[0] for v in planes.values())
    lines.append(f"control planes: {plane_total:.0f} s CPU")
    for name, (cpu, wall, count) in sorted(planes.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {name:26s} {cpu:7.1f} s CPU over {wall:6.0f} s alive in {count:.0f}"
                     f" planes ({100 * cpu / max(wall, 1e-9):.1f} % of a core)")
    lines.append(f"worker start-up (to end of collection): {sum(startup):.0f} s CPU over "
                 f"{len(startup)} workers; collection alone {sum(collect):.0f} s")
    if sessions:
        own_total, reaped = sum(s[0] for s in sessions), sum(s[1] for s in sessions)
        lines.append(f"workers' totals: own {own_total:.0f} s, reaped children {reaped:.0f} s,"
                     f" xdist controller {controller:.0f} s:"
                     f" {own_total + reaped + controller:.0f} s"
                     f" (not in a test, a plane or start-up: "
                     f"{own_total + reaped - total_tests - plane_total - sum(startup):.0f} s)")
    by_dir: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for cpu, _own, _children, wall, name in tests:
        path = name.split("::")[0]
        parts = path.split("/")
        directory = "/".join(parts[:2]) if len(parts) > 2 else path
        for table, key in ((by_dir, directory), (by_file, path)):
            table[key][0] += cpu
            table[key][1] += wall
            table[key][2] += 1
    for title, table in (("directory", by_dir), ("file", by_file)):
        lines.append(f"\nby {title}: CPU s, wall s, tests")
        for key, (cpu, wall, count) in sorted(table.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"  {cpu:7.1f} {wall:7.1f} {count:4.0f}  {key}")
    lines.append("\ntests: CPU s (own + children), wall s")
    failed = {r[2] for r in rows if r[0] == "test" and len(r) > 6 and r[6] == "failed"}
    for cpu, own, children, wall, name in sorted(tests, reverse=True)[:top]:
        mark = "  (failed)" if name in failed else ""
        lines.append(f"  {cpu:7.1f} = {own:6.1f} + {children:6.1f}  {wall:7.1f}  {name}{mark}")
    return "\n".join(lines)


if __name__ == "__main__":
    source = Path(sys.argv[1])
    table = [line.split("\t") for line in source.read_text().splitlines() if line]
    print(summarise(table, int(sys.argv[2]) if len(sys.argv) > 2 else 40))
