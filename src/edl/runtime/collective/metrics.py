"""Metrics from a script's output: lines made only of ``name=value`` pairs (pure).

The format Katib's stdout collector reads (``epoch=3 loss=0.1182 accuracy=0.9611``):
a plain script reports progress by printing, with no edl import. Lines with
anything else on them (logs, tracebacks, torch's ``key=value`` diagnostics inside
sentences) are not metrics.
"""

from __future__ import annotations

import re

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PAIR = re.compile(rf"([A-Za-z_][A-Za-z0-9_./-]*)=({_NUMBER})")
_LINE = re.compile(rf"^\s*(?:[A-Za-z_][A-Za-z0-9_./-]*={_NUMBER}[\s,;]*)+$")


def parse_metrics(line: str) -> dict[str, float]:
    """The ``name=value`` pairs of a metrics line, or {} for any other line."""
    if not _LINE.match(line):
        return {}
    return {name: float(value) for name, value in _PAIR.findall(line)}
