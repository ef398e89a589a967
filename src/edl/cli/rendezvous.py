"""`edl rendezvous`: the master pod of a collective job — host the c10d rendezvous store."""

from __future__ import annotations

import logging
import os

import click

from edl.cli._runtime_common import fail


@click.command("rendezvous")
@click.option("--port", type=int, help="port of the store, 0 = any free (EDL_PORT)")
@click.option("--host", "bind", default="0.0.0.0", show_default=True, help="address to bind")
def rendezvous(port: int | None, bind: str) -> None:
    """Host the TCPStore torch's elastic agents rendezvous in; publish it in etcd."""
    from edl.runtime.collective.rendezvous import serve

    env = os.environ
    text = str(port) if port is not None else env.get("EDL_PORT", "0")
    try:
        number = int(text)
    except ValueError:
        fail(f"edl rendezvous: EDL_PORT: must be an integer (got {text!r})", 2)
    if not 0 <= number <= 65535:
        fail(f"edl rendezvous: EDL_PORT: must be between 0 and 65535 (got {number})", 2)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s rendezvous %(levelname)s: %(message)s"
    )
    try:
        serve(
            bind,
            number,
            env.get("EDL_POD_IP") or "127.0.0.1",
            env.get("EDL_ETCD_ENDPOINTS") or "",
            env.get("EDL_NAMESPACE") or "default",
            env.get("EDL_JOB_NAME") or "edl-job",
        )
    except (OSError, RuntimeError) as error:
        fail(f"edl rendezvous: cannot serve on {bind}:{number}: {error}", 1)
