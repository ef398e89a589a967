"""Defect 5: every integer field is bounded (JobParser.validate; the CRD: tests/kube)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.jobparser import JobParser, JobValidationError
from edl.jobparser.validation import INT32_MAX, INT_BOUNDS
from int_bounds import HUGE, bound_cases, job


def parser_problems(obj: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        JobParser().validate(obj)
    except JobValidationError as error:
        return error.problems
    return []


def test_the_reported_instance_count_is_rejected_before_it_reaches_a_manifest() -> None:
    obj = job(**{"spec.trainer.max-instance": HUGE, "spec.trainer.min-instance": HUGE})
    found = dict(parser_problems(obj))
    assert set(found) == {"spec.trainer.min-instance", "spec.trainer.max-instance"}
    assert f"got {HUGE}" in found["spec.trainer.max-instance"]


@pytest.mark.parametrize("path", sorted(INT_BOUNDS))
def test_each_integer_field_is_bounded(path: str) -> None:
    for obj, ok in bound_cases(path):
        paths = [p for p, _ in parser_problems(obj)]
        assert (path not in paths) is ok, (obj, paths)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=INT_BOUNDS["spec.trainer.max-instance"][1]))
def test_every_valid_count_renders_int32_fields(count: int) -> None:
    parsed = JobParser().validate(job(**{"spec.trainer.max-instance": count}))
    trainer_job = JobParser().parse_to_trainer(parsed)
    spec = trainer_job["spec"]
    assert 0 <= spec["parallelism"] <= INT32_MAX and 0 <= spec["backoffLimit"] <= INT32_MAX


def test_a_batch_section_needs_its_initial_batch_and_a_max_not_below_it() -> None:
    found = dict(parser_problems(job(**{"spec.batch.max": 8})))
    assert found == {"spec.batch.initial": "required when spec.batch is given"}
    found = dict(parser_problems(job(**{"spec.batch.initial": 64, "spec.batch.max": 32})))
    assert found == {"spec.batch.max": "must be >= initial (64)"}
    parsed = JobParser().validate(job(**{"spec.batch.initial": 64, "spec.batch.max": 512,
                                         "spec.batch.per-trainer-max": 128}))
    assert parsed.spec.batch is not None and parsed.spec.batch.per_trainer_max == 128
    assert parsed.to_dict()["spec"]["batch"] == {"initial": 64, "max": 512,
                                                 "per-trainer-max": 128}
