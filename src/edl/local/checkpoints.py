"""The pservers' (or a collective job's rank 0's) checkpoint health, as `edl run` shows it.

A pserver that cannot write its checkpoint (a full or read-only disk) keeps serving,
and its log says so every interval; but if it then died, its shard's state since its
last checkpoint would be lost. Each pserver publishes its checkpoint health to
``/edl/<ns>/<job>/state/checkpoint-health/<index>`` when it changes
(`edl.runtime.pserver.main.Checkpointer`); in a collective job the agent hosting
rank 0 probes the script's checkpoint directory and publishes ``.../rank0`` in the
same format, plus ``who`` and ``pod`` (`edl.runtime.collective.ckpt_health`). `edl
run` turns a change into one fault line, a recovery into a clearing line, and the
records left at the end into the run's last word on whether its state was saved.
The fold is pure; reading is one HTTP range per refresh.
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


def _who(index: str, record: Mapping[str, Any]) -> str:
    """'pserver 0', or 'rank 0 on <pod>' for a collective job's record."""
    if record.get("who"):
        return f"{record.get('who')} on {record.get('pod')}"
    return f"pserver {index}"


def _last_file(record: Mapping[str, Any]) -> str:
    """Rank 0's newest checkpoint file and its age when the record was written."""
    name, saved, at = record.get("saved_file"), record.get("saved_at"), record.get("at")
    if not name:
        return ""
    if isinstance(saved, (int, float)) and isinstance(at, (int, float)):
        return f"{name}, {max(0.0, at - saved):.0f} s old"
    return str(name)


def fault_line(index: str, record: Mapping[str, Any]) -> str:
    """What one failing pserver (or rank 0) cannot do and what it would lose (pure)."""
    if record.get("who"):  # a collective script's own checkpoint, probed by its agent
        last = _last_file(record)
        since = f"its last checkpoint ({last})" if last else "the start (no checkpoint yet)"
        risk = (f"the training since {since} is lost if the workers restart, and the "
                "script's next save fails")
    else:
        version = record.get("saved_version")
        risk = (f"its state since version {version} (its last checkpoint)"
                if isinstance(version, int) and version >= 0 else "its whole state")
        risk += " is lost if it dies"
    return (f"{_who(index, record)} cannot checkpoint: {record.get('error')}; {risk} — "
            "fix the checkpoint directory (EDL_CHECKPOINT_DIR)")


def failing_now(records: Mapping[str, Mapping[str, Any]]) -> str:
    """Every pserver (or rank 0) failing to checkpoint now, one fault line each ("" when
    none)."""
    return "; ".join(fault_line(i, r) for i, r in sorted(records.items()) if _failing(r))


def _recovered(index: str, record: Mapping[str, Any]) -> str:
    if record.get("who"):
        return f"{_who(index, record)} can checkpoint again (its directory takes writes)"
    return f"pserver {index} checkpoints again (version {record.get('saved_version')} saved)"


def health_events(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """A fault line per pserver (or rank 0) that started failing (or failed differently),
    a clearing line per one that recovered (pure; keys are pserver indexes, or rank0)."""
    lines: list[str] = []
    for index, record in sorted(after.items()):
        old = before.get(index) or {}
        if _failing(record) and (not _failing(old) or old.get("error") != record.get("error")):
            lines.append(fault_line(index, record))
        elif _failing(old) and record.get("ok") is True:
            lines.append(_recovered(index, record))
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


def _saved(index: str, record: Mapping[str, Any]) -> str:
    if not record.get("who"):
        return f"pserver {index} version {record.get('saved_version')}"
    name, saved, at = record.get("saved_file"), record.get("saved_at"), record.get("at")
    if not name:
        return f"{_who(index, record)}: no checkpoint file in EDL_CHECKPOINT_DIR"
    when = ""
    if isinstance(saved, (int, float)) and isinstance(at, (int, float)):
        end = "its workers ended" if record.get("final") else "its last probe"
        when = f", written {max(0.0, at - saved):.1f} s before {end}"
    return f"{_who(index, record)}: {name}{when}"


def final_word(records: Mapping[str, Mapping[str, Any]]) -> str:
    """Whether the last state was saved, from the last records (pure): the pservers',
    or for a collective job rank 0's newest checkpoint file."""
    if not records:
        return ""
    failing = {i: r for i, r in sorted(records.items()) if _failing(r)}
    if failing:
        named = "; ".join(f"{_who(i, r)}: {r.get('error')}" for i, r in failing.items())
        return f"last state NOT saved ({named})"
    if all(r.get("who") and not r.get("saved_file") for r in records.values()):
        return f"no checkpoint saved ({'; '.join(_saved(i, r) for i, r in records.items())})"
    return f"last state saved ({', '.join(_saved(i, r) for i, r in sorted(records.items()))})"


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
