"""Simulated pods: a `PodRunner` whose containers are timers on the clock.

What it models, and why:

* **start latency** — time from binding to phase Running (image cached,
  container started). The original experiment measured 1–8 s, so the default
  is uniform on [1, 8] s.
* **termination time per role** — how long a deleted pod keeps running (and
  holding its node's resources) before it exits 143 (SIGTERM); one still running
  at the end of its grace period is killed and exits 137 (SIGKILL).
  The original trainers ignored SIGTERM and used all 30 s; this project's
  trainers drain and exit within seconds.
* **run time per role** (optional) — a pod that exits by itself (code 0)
  after that long, e.g. trainers of a job that finishes.

All randomness comes from one seeded `random.Random`, so a seed fixes a run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from edl.api.names import LABEL_ROLE
from edl.cluster.port import Clock, Manifest, Timer


class Duration(Protocol):
    """A distribution of durations in seconds."""

    def draw(self, rng: random.Random) -> float: ...


@dataclass(frozen=True)
class Fixed:
    """Always the same duration."""

    seconds: float

    def draw(self, rng: random.Random) -> float:
        return self.seconds


@dataclass(frozen=True)
class Uniform:
    """Uniform on [low, high] seconds."""

    low: float
    high: float

    def draw(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)


DEFAULT_START_LATENCY = Uniform(1.0, 8.0)
# Seconds a deleted pod takes to exit, by role (capped by the grace period).
# Trainers of this project drain and exit quickly; services (nginx) stop at once.
DEFAULT_TERMINATION: Mapping[str, Duration] = {
    "trainer": Fixed(3.0),
    "pserver": Fixed(2.0),
    "master": Fixed(2.0),
}
DEFAULT_OTHER_TERMINATION: Duration = Fixed(1.0)


def pod_role(pod: Manifest) -> str:
    """The ``edl.dev/role`` label of a pod, or '' for pods that are not edl's."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE, "")


@dataclass
class _SimPod:
    on_running: Callable[[], None]
    on_exit: Callable[[int], None]
    timer: Timer | None = None
    running: bool = False
    stopping: bool = False


@dataclass
class SimulatedPodRunner:
    """`edl.cluster.port.PodRunner` for virtual time: pods are timers.

    ``termination`` maps a role to how long a deleted pod takes to exit;
    ``run_time`` maps a role to how long a pod runs before exiting 0 by itself
    (absent: it runs until deleted).
    """

    clock: Clock
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    start_latency: Duration = DEFAULT_START_LATENCY
    termination: Mapping[str, Duration] = field(default_factory=lambda: dict(DEFAULT_TERMINATION))
    other_termination: Duration = DEFAULT_OTHER_TERMINATION
    run_time: Mapping[str, Duration] = field(default_factory=dict)
    _pods: dict[str, _SimPod] = field(default_factory=dict, init=False, repr=False)

    def start(
        self,
        pod: Manifest,
        on_running: Callable[[], None],
        on_exit: Callable[[int], None],
    ) -> None:
        uid = pod["metadata"]["uid"]
        sim = _SimPod(on_running, on_exit)
        self._pods[uid] = sim
        sim.timer = self.clock.call_later(
            self.start_latency.draw(self.rng), self._running, uid, pod_role(pod)
        )

    def stop(self, pod: Manifest, grace_period_s: float) -> None:
        uid = pod["metadata"]["uid"]
        sim = self._pods.get(uid)
        if sim is None or sim.stopping:
            return
        sim.stopping = True
        if sim.timer is not None:
            sim.timer.cancel()
        if not sim.running:  # containers not started yet: nothing to drain
            delay = 0.0
        else:
            role = pod_role(pod)
            delay = self.termination.get(role, self.other_termination).draw(self.rng)
        if delay > grace_period_s:  # still running at the end of the grace period: SIGKILL
            sim.timer = self.clock.call_later(grace_period_s, self._exit, uid, 137)
        else:
            sim.timer = self.clock.call_later(delay, self._exit, uid, 143)  # 128 + SIGTERM

    def finish(self, uid: str, code: int = 0) -> bool:
        """Make a running pod's containers exit now with ``code`` (e.g. its job's work is
        done); False when the pod is not running (starting, stopping or gone)."""
        sim = self._pods.get(uid)
        if sim is None or not sim.running or sim.stopping:
            return False
        if sim.timer is not None:
            sim.timer.cancel()
        self._exit(uid, code)
        return True

    def _running(self, uid: str, role: str) -> None:
        sim = self._pods.get(uid)
        if sim is None:
            return
        sim.running = True
        sim.timer = None
        run_time = self.run_time.get(role)
        if run_time is not None:
            sim.timer = self.clock.call_later(run_time.draw(self.rng), self._exit, uid, 0)
        sim.on_running()

    def _exit(self, uid: str, code: int) -> None:
        sim = self._pods.pop(uid, None)
        if sim is not None:
            sim.on_exit(code)
