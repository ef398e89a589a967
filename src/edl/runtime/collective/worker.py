"""`python -m edl.runtime.collective.worker CMD ARGS...`: exec CMD so it dies with its agent.

torch's agent starts each worker in a new session, so nothing takes a worker down
when its agent is SIGKILLed (a lost pod, a killed `edl run`), and orphaned workers
would go on training together. Setting ``PR_SET_PDEATHSIG`` before exec'ing the
script ties each worker to its agent, as a container ties all its processes.
"""

from __future__ import annotations

import os
import sys

from edl.procs import die_with_parent

PARENT_ENV = "EDL_WORKER_PARENT"  # the agent's pid, set by edl's torchrun wrapper


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.exit("edl worker: no command to run")
    parent = os.environ.pop(PARENT_ENV, "")
    die_with_parent()
    # PDEATHSIG only covers a death after prctl: an agent killed while this process
    # started has re-parented it already, and nothing would ever stop the script
    if parent.isdigit() and os.getppid() != int(parent):
        sys.exit(f"edl worker: its agent (pid {parent}) is gone; not starting {args[0]}")
    os.execvp(args[0], args)


if __name__ == "__main__":
    main()
