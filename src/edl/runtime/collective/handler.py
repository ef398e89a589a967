"""The `edl` rendezvous handler, registered with torch's handler registry.

It is torch's own dynamic rendezvous on the c10d backend — the store is the
`TCPStore` the master pod hosts (`edl rendezvous`), so every agent is a client
(``is_host=false``) — wrapped to report each completed rendezvous (round, rank,
number of nodes) to the job's etcd, where `edl run` and `edl status` read world
size changes and restarts; and to restart its workers when a node of their round
leaves it (torch would leave workers still starting waiting for the gone peer). The
rendezvous protocol itself is torch's, unchanged; a new batch waits for the next round
(`batch`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    dynamic_rendezvous,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as c10d

from edl.runtime.collective import gateway, keys
from edl.runtime.collective.launch import BACKEND
from edl.runtime.collective.resize_pause import RESIZES_ENV, STARTED_ENV

log = logging.getLogger(__name__)

Report = Callable[[dict[str, Any]], None]
current: ReportingHandler | None = None  # this process's handler (one agent per process)
on_round: Callable[[], None] | None = None  # called as this node's join of a round succeeds


class ReportingHandler(RendezvousHandler):
    """Delegates to torch's handler; tells ``report`` about every rendezvous it joins."""

    def __init__(self, inner: RendezvousHandler, report: Report) -> None:
        self._inner = inner
        self._report = report
        self.rendezvous = 0  # rendezvous joined by this agent; each after the first is a restart
        self._stopping_since: float | None = None  # wall time a change was first seen
        self._world: frozenset[object] = frozenset()  # the participants of this agent's round

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        return self._inner.use_agent_store

    def next_rendezvous(self) -> RendezvousInfo:
        called = time.time()
        info = self._inner.next_rendezvous()
        self.rendezvous += 1
        if self.rendezvous > 1:  # a restart: the new workers measure its pause (env)
            os.environ[STARTED_ENV] = repr(self._stopping_since or called)
            os.environ[RESIZES_ENV] = str(self.rendezvous - 1)
        self._stopping_since = None
        state = getattr(getattr(self._inner, "_state_holder", None), "state", None)
        self._world = self._participants()
        self._report(
            {
                "round": getattr(state, "round", None),
                "rank": info.rank,
                "nodes": info.world_size,
                "rendezvous": self.rendezvous,
                "time": time.time(),
            }
        )
        return info

    def is_closed(self) -> bool:
        return self._inner.is_closed()

    def set_closed(self) -> None:
        self._inner.set_closed()

    def num_nodes_waiting(self) -> int:
        """torch's count; 1 when a node of this round left it: torch's agent then
        restarts its workers into a new round, as for a joining node."""
        waiting = self._inner.num_nodes_waiting()
        if waiting == 0 and self._member_left():
            waiting = 1
        if waiting and self._stopping_since is None:  # torch's agent restarts next
            self._stopping_since = time.time()
        return waiting

    def _participants(self) -> frozenset[object]:
        """The nodes of the round as this agent last synced it (torch's private state)."""
        state = getattr(getattr(self._inner, "_state_holder", None), "state", None)
        return frozenset(getattr(state, "participants", None) or ())

    def _member_left(self) -> bool:
        """True when a node of this agent's round has left it (drained, or dropped when
        its heartbeats lapsed).

        torch's agent restarts its workers for a node that joins, or when they fail; a
        node that leaves only makes the others' collectives fail. Workers still starting
        (importing torch, in ``init_process_group``) have no collective to fail: they wait
        for the gone peer in the store or in gloo's connect until the process group's
        timeout (30 min by default). So the agent restarts them into a new round now,
        as for a joining node, synced at most every second by ``num_nodes_waiting``.
        """
        if not self._world:
            return False
        gone = self._world - self._participants()
        if gone:
            log.info("%d of the %d nodes of this round left it: restarting the workers",
                     len(gone), len(self._world))
            self._world = frozenset()  # said once; the next round sets it again
        return bool(gone)

    def get_run_id(self) -> str:
        return self._inner.get_run_id()

    def shutdown(self) -> bool:
        return self._inner.shutdown()

    def leave(self, timeout_s: float = 5.0) -> bool:
        """Leave the rendezvous without closing it: a drained node (SIGTERM, a scale-down).

        torch's launcher leaves the rendezvous open on a signal, so the others carry on,
        but keeps this node a participant until its heartbeats lapse; leaving at once
        lets the survivors' next round form without that wait. Uses torch's own exit
        operation (the first step of every `next_rendezvous`), extended to the wait list
        (`_LeaveOp`), reached through private attributes: if they are not there, the
        heartbeats lapse as before.
        """
        inner = self._inner
        try:  # torch's private attributes: not in its types, hence the ignores
            inner._stop_heartbeats()  # type: ignore[attr-defined]
            inner._op_executor.run(  # type: ignore[attr-defined]
                _LeaveOp(), time.monotonic() + timeout_s
            )
        except Exception as error:  # best effort: the node's heartbeats will lapse anyway
            log.warning("could not leave the rendezvous: %r", error)
            return False
        log.info("left the rendezvous")
        return True


class _LeaveOp:
    """torch's exit operation, then out of the wait and redundancy lists too.

    torch's exit leaves only a round's participants. A node drained while it waited to
    join (a growth undone, a pod deleted as it started) stayed in the wait list until
    its heartbeats lapsed (8 s), and every running agent restarted its workers for it
    once more. Uses torch's own actions, as its join operation does on a timeout.
    """

    def __call__(self, ctx: Any, deadline: float) -> Any:
        action = dynamic_rendezvous._RendezvousExitOp()(ctx, deadline)
        if action != dynamic_rendezvous._Action.FINISH:
            return action
        if ctx.node in ctx.state.wait_list:
            return dynamic_rendezvous._Action.REMOVE_FROM_WAIT_LIST
        if ctx.node in ctx.state.redundancy_list:
            return dynamic_rendezvous._Action.REMOVE_FROM_REDUNDANCY_LIST
        return action


def etcd_reporter(env: dict[str, str] | None = None) -> Report:
    """A report function writing to ``collective/agents/<pod>`` of the job's etcd."""
    env = dict(os.environ if env is None else env)
    endpoints = env.get("EDL_ETCD_ENDPOINTS", "")
    nproc = int(env.get("EDL_NPROC_PER_NODE") or 1)
    key = keys.agent_key(
        env.get("EDL_NAMESPACE") or "default",
        env.get("EDL_JOB_NAME") or "edl-job",
        env.get("EDL_POD_NAME") or f"agent-{os.getpid()}",
    )

    def report(event: dict[str, Any]) -> None:
        event = {**event, "world_size": int(event["nodes"]) * nproc}
        log.info("rendezvous: %s", event)
        if not endpoints:
            return
        try:
            gateway.put(endpoints, key, json.dumps(event))
        except OSError as error:  # the display misses one round; training goes on
            log.warning("rendezvous not reported to etcd: %s", error)

    return report


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torch's c10d dynamic rendezvous as a client of the master pod's store."""
    params.config.setdefault("is_host", "false")
    backend, store = c10d.create_backend(params)
    inner = dynamic_rendezvous.create_handler(store, backend, params)
    _call_on_round(inner)
    global current
    current = ReportingHandler(inner, etcd_reporter())
    return current


def _call_on_round(inner: RendezvousHandler) -> None:
    """Call `on_round` as soon as this node's join of a round succeeds: the round is
    complete and every node of it must now take part in the store handshakes that
    follow (the master address, then the ranks), still inside ``next_rendezvous``."""
    executor = getattr(inner, "_op_executor", None)  # torch's private attribute
    if executor is None:
        return
    run = executor.run

    def run_then_report(state_handler: Any, deadline: float, *args: Any) -> None:
        run(state_handler, deadline, *args)
        if isinstance(state_handler, dynamic_rendezvous._RendezvousJoinOp) and on_round:
            on_round()

    executor.run = run_then_report


def register() -> None:
    """Make ``--rdzv-backend=edl`` known to torch (idempotent)."""
    with contextlib.suppress(ValueError):  # already registered in this process
        rendezvous_handler_registry.register(BACKEND, create_handler)
