"""`edl agent`: a collective job's trainer pod — torch's elastic agent on the user's script.

Configured only by EDL_* variables (the collective contract in docs/collective.md).
"""

from __future__ import annotations

import logging
import os
import sys

import click

from edl.cli._runtime_common import fail


@click.command("agent")
def agent() -> None:
    """Run EDL_ENTRYPOINT under torch's elastic agent (--nnodes=min:max, edl rendezvous)."""
    from edl.runtime.collective.agent import AgentError, run_agent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s: %(message)s")
    try:
        code = run_agent(os.environ)
    except AgentError as error:
        fail(f"edl agent: {error}", error.code)
    sys.exit(code)
