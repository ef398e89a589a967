"""Jobs at and beyond each integer bound: shared by the JobParser and CRD tests (defect 5)."""

from __future__ import annotations

from typing import Any

from edl.jobparser.validation import INT32_MAX, INT_BOUNDS

HUGE = 99999999999999999999999


def job(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "apiVersion": "edl.dev/v1", "kind": "TrainingJob", "metadata": {"name": "mnist"},
        "spec": {"fault_tolerant": True, "ports_num_for_sparse": 0,
                 "trainer": {"entrypoint": "python train.py", "min-instance": 1}},
    }  # fmt: skip
    for path, value in fields.items():
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return data


def bound_cases(path: str) -> list[tuple[dict[str, Any], bool]]:
    """(job, in range) at and just beyond each end of the field's bounds."""
    low, high = INT_BOUNDS[path]
    cases = []
    for value, ok in ((low, True), (high, True), (low - 1, False), (high + 1, False),
                      (INT32_MAX + 1, False)):
        obj = job(**{path: value})
        if path.endswith("min-instance"):  # keep max >= min so only the bound is tested
            obj = job(**{path: value, path.replace("min-", "max-"): max(value, 1)})
        cases.append((obj, ok))
    return cases


