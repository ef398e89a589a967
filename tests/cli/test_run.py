"""`edl run` option handling: every bad value named before anything starts."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edl.cli.run import Reservation, parse_reservation, run

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"


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
    assert len(lines) == 1 and lines[0].startswith("edl run: "), result.output
    problems = lines[0].removeprefix("edl run: ").split("; ")
    assert [problem.split(":")[0].strip() for problem in problems] == [
        "--cpu", "--memory", "--reserve[0]", "--policy"
    ]
    assert not (tmp_path / "runs").exists()


def test_invalid_job_is_one_line_naming_every_field(tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text("kind: Foo\nmetadata: {name: x}\n")
    result = CliRunner().invoke(run, [str(job), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1  # bad input, as `edl validate`; bad option values are 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "apiVersion" in lines[0] and "kind" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_missing_etcd_binary_is_one_line_and_nothing_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDL_ETCD_BIN", str(tmp_path / "no-etcd"))
    result = CliRunner().invoke(run, [
        str(DIGITS / "job.yaml"), "--plain", "--runs-dir", str(tmp_path / "runs"),
    ])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "EDL_ETCD_BIN" in lines[0], result.output
    assert not (tmp_path / "runs").exists()


def test_missing_job_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(run, [str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "cannot read" in result.output


async def test_reserve_holds_its_share_from_start_to_end() -> None:
    """`--reserve CPU@START-END`: taken at START, given back at END; open-ended kept."""
    from edl.cli.run import _hold

    calls: list[tuple[str, ...]] = []

    class Recorder:
        def reserve(self, name: str, cpu: str) -> None:
            calls.append(("reserve", name, cpu))

        def release(self, name: str) -> None:
            calls.append(("release", name))

    await _hold(Recorder(), Reservation("500m", 0.01, 0.05), 0)  # type: ignore[arg-type]
    assert calls == [("reserve", "reserved-0", "500m"), ("release", "reserved-0")]
    calls.clear()
    await _hold(Recorder(), Reservation("1", 0.01, None), 3)  # type: ignore[arg-type]
    assert calls == [("reserve", "reserved-3", "1")]


@pytest.mark.parametrize("args, option", [
    (["--timeout", "-5"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--max-error-exits", "0"], "--max-error-exits"),
    (["--max-load", "2"], "--max-load"),
])  # fmt: skip
def test_bad_option_values_are_usage_errors(tmp_path: Path, args: list[str], option: str) -> None:
    """Defect 7: `--timeout -5` started a run that then 'did not finish within -5 s'."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "edl.cli.main", "run", str(DIGITS / "job.yaml"),
         "--runs-dir", str(tmp_path / "runs"), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()


def test_every_wrong_option_is_named_in_one_line(tmp_path: Path) -> None:
    """Issue 24: `--cpu -1 --memory x --timeout -5` named only --timeout."""
    result = CliRunner().invoke(run, [
        str(DIGITS / "job.yaml"), "--runs-dir", str(tmp_path / "runs"),
        "--cpu", "-1", "--memory", "x", "--timeout", "-5", "--max-load", "much",
        "--max-error-exits", "0.5", "--checkpoint-interval", "0", "--reserve", "1.2",
    ])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edl run: "), result.output
    named = [p.split(":")[0].strip() for p in lines[0].removeprefix("edl run: ").split("; ")]
    assert sorted(named) == sorted([
        "--cpu", "--memory", "--timeout", "--max-load", "--max-error-exits",
        "--checkpoint-interval", "--reserve[0]"])
    assert "--timeout: must be > 0, got '-5'" in lines[0]
    assert "--max-error-exits: must be an integer, got '0.5'" in lines[0]
    assert not (tmp_path / "runs").exists()
