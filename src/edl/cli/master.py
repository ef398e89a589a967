"""`edl master`: the job's task queue, configured by EDL_* env vars."""

from __future__ import annotations

import asyncio

import click

from edl.cli._runtime_common import common_options, fail, load_config


@click.command("master")
@common_options
@click.option("--passes", type=int, help="passes over the data (EDL_PASSES)")
@click.option("--task-timeout", "task_timeout_floor", type=float,
              help="floor of the adaptive task timeout, seconds (EDL_TASK_TIMEOUT)")
@click.option("--trainer-ttl", type=float, help="trainer silence before its task returns")
def master(**overrides: object) -> None:
    """Run the master: elect, restore state from etcd, serve tasks over gRPC."""
    from edl.runtime.master.main import serve

    config = load_config("master", **overrides)
    try:
        asyncio.run(serve(config))
    except (ConnectionError, ValueError) as error:
        fail(f"edl master: {error}")
