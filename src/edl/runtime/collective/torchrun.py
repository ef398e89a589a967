"""`python -m edl.runtime.collective.torchrun ARGS`: torchrun with the `edl` rendezvous.

torch's own launcher (`torch.distributed.run`) and elastic agent, unchanged; the
only addition is registering the `edl` rendezvous handler first, so
``--rdzv-backend=edl`` resolves. A separate process (not `edl agent` itself) so
the agent's signal handling and exit codes stay exactly torch's.
"""

from __future__ import annotations

import logging
import sys

from torch.distributed import run

from edl.runtime.collective.handler import register


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(format="%(asctime)s agent %(levelname)s %(name)s: %(message)s")
    logging.getLogger("edl").setLevel(logging.INFO)
    register()
    run.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
