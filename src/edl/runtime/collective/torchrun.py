"""`python -m edl.runtime.collective.torchrun ARGS`: torchrun with the `edl` rendezvous.

torch's own launcher (`torch.distributed.run`) and elastic agent, unchanged; the
additions are registering the `edl` rendezvous handler first, so
``--rdzv-backend=edl`` resolves, and leaving the rendezvous when drained by a
signal. A separate process (not `edl agent` itself) so the agent's signal handling
and exit codes stay exactly torch's.
"""

from __future__ import annotations

import logging
import sys

from torch.distributed import run
from torch.distributed.elastic.multiprocessing.api import SignalException

from edl.runtime.collective import handler


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(format="%(asctime)s agent %(levelname)s %(name)s: %(message)s")
    logging.getLogger("edl").setLevel(logging.INFO)
    handler.register()
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
