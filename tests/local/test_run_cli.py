"""`edl run` option handling: every bad value named before anything starts."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edl.cli.run import Reservation, parse_reservation, run

from .conftest import DIGITS


def test_reservations_parse() -> None:
    assert parse_reservation("1.2@10-30") == Reservation("1.2", 10.0, 30.0)
    assert parse_reservation("500m@5") == Reservation("500m", 5.0, None)
    for bad in ("1.2", "x@1", "1@30-10"):
        with pytest.raises(click.BadParameter):
            parse_reservation(bad)


def test_bad_options_are_all_named_and_nothing_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(run, [
        str(DIGITS / "job.yaml"), "--runs-dir", str(tmp_path / "runs"),
        "--cpu", "abc", "--memory", "-1", "--policy", "nope", "--reserve", "0m@1",
    ])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == [
        "--cpu", "--memory", "--reserve[0]", "--policy"
    ]
    assert not (tmp_path / "runs").exists()


def test_missing_job_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(run, [str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "cannot read" in result.output
