"""A batch-adapting job's pserver side, once a second: the batch in, the figures out.

* reads the job's batch the Autoscaler published (the job's etcd, the key collective
  workers read too: `edl.runtime.collective.keys.batch_key`; none: the initial batch)
  and makes it the target of the next updates;
* applies an incomplete update that has waited ``EDL_BATCH_FLUSH`` seconds (every
  trainer gone, the job at its end), so no push waits forever;
* publishes this shard's figures at ``state/gradients/<index>`` (fenced on holding the
  index, as checkpoints are), which the master sums into its progress
  (`edl.throughput.shards`);
* reads every shard's figures back, so each pserver scales its learning rate by the
  same job-wide AdaScale gain.
"""

from __future__ import annotations

import asyncio
import logging

from edl.coord import EtcdClient
from edl.coord.errors import CoordError, NotRegisteredError
from edl.runtime.collective import keys
from edl.runtime.coordination import GRADIENTS, dumps, read_state
from edl.runtime.pserver.shard import Shard
from edl.throughput.shards import job_estimate, parse_records

log = logging.getLogger("edl.pserver")

def published_batch(raw: bytes) -> int | None:
    """The Autoscaler's batch as written (None: none, or not a positive whole number)."""
    try:
        value = int(raw.decode().strip()) if raw else None
    except (UnicodeDecodeError, ValueError):
        return None
    return value if value is not None and value >= 1 else None


async def run_gradients(client: EtcdClient, shard: Shard, index: int, namespace: str,
                        job: str, initial_batch: int, interval: float = 1.0) -> None:
    batch_key = keys.batch_key(namespace, job).removeprefix(client.prefix + "/")
    last: dict | None = None
    while client.lease_valid():
        await asyncio.sleep(interval)
        try:
            batch = published_batch(await client.get_key(batch_key))
            shard.set_batch_target(batch or initial_batch)
            if await asyncio.to_thread(shard.flush_stale):
                log.info("pserver %d: applied an incomplete update (no push for a while)", index)
            record = shard.aggregation_record()
            if record is not None and record != last:
                await client.put_if_registered(f"state/{GRADIENTS}{index}", dumps(record),
                                               index=index)
                last = record
            shards = await read_state(client, GRADIENTS)
            shard.set_job_estimate(job_estimate(parse_records(shards.values())))
        except NotRegisteredError:
            return  # the index is no longer ours: serve_shard ends this term
        except (CoordError, OSError) as error:
            log.warning("pserver %d: gradient figures not exchanged: %s", index, error)
