"""Cluster snapshots (Kubernetes `List` files) -> policy inputs, for `edl plan`."""

from edl.snapshot.load import (
    PlanInputs,
    SnapshotError,
    Unplannable,
    parse_snapshot,
    plan_inputs,
    selector_matches,
)

__all__ = [
    "PlanInputs",
    "SnapshotError",
    "Unplannable",
    "parse_snapshot",
    "plan_inputs",
    "selector_matches",
]
