"""The pservers' checkpoint health, as `edl run` shows it.

A pserver that cannot write its checkpoint (a full or read-only disk) keeps serving,
and its log says so every interval; but if it then died, its shard's state since its
last checkpoint would be lost. Each pserver publishes its checkpoint health to
``/edl/<ns>/<job>/state/checkpoint-health/<index>`` when it changes
(`edl.runtime.pserver.main.Checkpointer`); `edl run` turns a change into one fault
line, a recovery into a clearing line, and the records left after the pservers'
final checkpoints into the run's last word on whether its state was saved. The fold
is pure; reading is one HTTP range per refresh.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from edl.runtime.collective import gateway

log = logging.getLogger(__name__)

HEALTH_DIR = "state/checkpoint-health/"


def health_prefix(namespace: str, job: str) -> str:
    return f"/edl/{namespace}/{job}/{HEALTH_DIR}"


def _index(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _failing(record: Mapping[str, Any]) -> bool:
    return record.get("ok") is False


def fault_line(index: str, record: Mapping[str, Any]) -> str:
    """What one failing pserver cannot do and what it would lose (pure)."""
    version = record.get("saved_version")
    saved = (f"its state since version {version} (its last checkpoint)"
             if isinstance(version, int) and version >= 0 else "its whole state")
    return (f"pserver {index} cannot checkpoint: {record.get('error')}; {saved} is lost "
            "if it dies — fix the checkpoint directory (EDL_CHECKPOINT_DIR)")


def failing_now(records: Mapping[str, Mapping[str, Any]]) -> str:
    """Every pserver failing to checkpoint now, one fault line each ("" when none)."""
    return "; ".join(fault_line(i, r) for i, r in sorted(records.items()) if _failing(r))


def health_events(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """A fault line per pserver that started failing (or failed differently), a clearing
    line per one that recovered (pure; keys are pserver indexes)."""
    lines: list[str] = []
    for index, record in sorted(after.items()):
        old = before.get(index) or {}
        if _failing(record) and (not _failing(old) or old.get("error") != record.get("error")):
            lines.append(fault_line(index, record))
        elif _failing(old) and record.get("ok") is True:
            lines.append(f"pserver {index} checkpoints again (version "
                         f"{record.get('saved_version')} saved)")
    return lines


def parse_records(raw: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Health records by pserver index from the keys read (unreadable ones skipped)."""
    records: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        try:
            record = json.loads(value)
        except ValueError:
            continue
        if isinstance(record, dict):
            records[_index(key)] = record
    return records


def final_word(records: Mapping[str, Mapping[str, Any]]) -> str:
    """Whether the pservers' last state was saved, from their last records (pure)."""
    if not records:
        return ""
    failing = {i: r for i, r in sorted(records.items()) if _failing(r)}
    if failing:
        named = "; ".join(f"pserver {i}: {r.get('error')}" for i, r in failing.items())
        return f"last state NOT saved ({named})"
    versions = ", ".join(f"pserver {i} version {r.get('saved_version')}"
                         for i, r in sorted(records.items()))
    return f"last state saved ({versions})"


class HealthReader:
    """The latest checkpoint-health record of each pserver of one job."""

    def __init__(self, etcd_endpoints: str, namespace: str, job: str) -> None:
        self.endpoints = etcd_endpoints
        self.prefix = health_prefix(namespace, job)
        self.records: dict[str, dict[str, Any]] = {}

    async def read(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """(records now, the lines their changes call for); unchanged when etcd is away."""
        try:
            raw = await asyncio.to_thread(gateway.get_prefix, self.endpoints, self.prefix)
        except OSError as error:
            log.debug("checkpoint health not read: %s", error)
            return self.records, []
        records = parse_records(raw)
        lines = health_events(self.records, records)
        self.records = records
        return records, lines
