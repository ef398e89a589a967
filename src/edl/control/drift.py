"""Which roles' pods a changed TrainingJob spec does not reach (pure).

A TrainingJob edited in place (``kubectl apply`` of a changed file) changes the
templates edl would emit, but the running children keep theirs: a Job's pod
template is immutable, and a ReplicaSet's new template reaches only pods created
after it. Rather than claim the edit landed, the Controller compares what it
would emit with what is stored and says in the status which roles still run the
old template. Stored objects carry API-server defaults edl never wrote, so the
comparison asks only that every field edl emits is stored with the same value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def covers(stored: Any, desired: Any) -> bool:
    """Whether ``stored`` holds every field of ``desired`` with the same value (extra
    keys in ``stored``, such as defaults, are fine)."""
    if isinstance(desired, Mapping):
        return isinstance(stored, Mapping) and all(
            covers(stored.get(key), value) for key, value in desired.items())
    if isinstance(desired, list):
        return (isinstance(stored, list) and len(stored) == len(desired)
                and all(covers(s, d) for s, d in zip(stored, desired, strict=True)))
    return bool(stored == desired)


def template(manifest: Mapping[str, Any]) -> Any:
    return (manifest.get("spec") or {}).get("template") or {}


def unapplied(pairs: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> str:
    """``(role, desired child, stored child)`` -> the status line naming the roles whose
    running template differs, "" if none."""
    roles = [role for role, desired, stored in pairs
             if not covers(template(stored), template(desired))]
    if not roles:
        return ""
    return (f"spec change not applied to the {', '.join(roles)} pods (their template is "
            "fixed once created): delete and re-create the TrainingJob to apply it")
