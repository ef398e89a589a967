"""`edl pserver`: one parameter shard, configured by EDL_* env vars."""

from __future__ import annotations

import asyncio

import click

from edl.cli._runtime_common import common_options, fail, load_config


@click.command("pserver")
@common_options
@click.option("--pservers", type=int, help="desired pserver count (EDL_PSERVERS)")
@click.option("--checkpoint-dir", help="directory for shard checkpoints (EDL_CHECKPOINT_DIR)")
@click.option("--checkpoint-interval", type=float,
              help="seconds between checkpoints (EDL_CHECKPOINT_INTERVAL)")
def pserver(**overrides: object) -> None:
    """Run a pserver: register for an index, restore its checkpoint, serve its shard."""
    import torch

    from edl.runtime.heap import freeze_startup_heap
    from edl.runtime.malloc import tune_malloc
    from edl.runtime.pserver.main import serve

    tune_malloc()
    freeze_startup_heap()
    torch.set_num_threads(1)  # updates are small and many trainers share the cores
    config = load_config("pserver", **overrides)
    try:
        asyncio.run(serve(config))
    except (ConnectionError, ValueError) as error:
        fail(f"edl pserver: {error}")
