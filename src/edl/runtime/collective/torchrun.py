"""`python -m edl.runtime.collective.torchrun ARGS`: torchrun with the `edl` rendezvous.

torch's own launcher (`torch.distributed.run`) and elastic agent, unchanged; the
additions are registering the `edl` rendezvous handler first, so
``--rdzv-backend=edl`` resolves, and leaving the rendezvous when drained by a
signal. A separate process (not `edl agent` itself) so the agent's signal handling
and exit codes stay exactly torch's.
"""

from __future__ import annotations

import logging
import os
import sys

from torch.distributed import run
from torch.distributed.elastic.multiprocessing.api import SignalException

from edl.runtime.collective import handler, stop_hold, worker

# torch's agent logs "Worker group FAILED. 3/100 attempts left; will restart worker
# group" at INFO; `edl agent` reads it to say why the workers restart (failures.py)
AGENT_LOGGER = "torch.distributed.elastic.agent.server.api"


class _RestartsOnly(logging.Filter):
    """Of torch's agent's INFO records, only the restart lines (the rest stays quiet)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or "will restart worker group" in str(record.msg)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(format="%(asctime)s agent %(levelname)s %(name)s: %(message)s")
    logging.getLogger("edl").setLevel(logging.INFO)
    agent_log = logging.getLogger(AGENT_LOGGER)
    agent_log.setLevel(min(agent_log.getEffectiveLevel(), logging.INFO))
    agent_log.addFilter(_RestartsOnly())
    handler.register()
    os.environ[worker.PARENT_ENV] = str(os.getpid())  # torch's workers inherit it
    # torch's agent takes SIGTERM (raising SignalException) only once it starts its
    # workers; before that — joining a round, or between the round and the workers'
    # start — the signal's default killed this process without leaving, and the
    # others waited for its heartbeats to lapse (8 s). Taken from the start, and held
    # during a completed round's rank handshake (`stop_hold`).
    hold = stop_hold.StopHold()
    stop_hold.install(hold)
    handler.on_round = hold.begin
    try:
        run.main(sys.argv[1:] if argv is None else argv)
    except SignalException:
        # drained (SIGTERM: a scale-down): torch stopped the workers and left the
        # rendezvous open; leave it too, so the others need not wait for our heartbeats
        if handler.current is not None:
            handler.current.leave()
        raise


if __name__ == "__main__":
    main()
