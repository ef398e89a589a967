"""`edl simulate`: output layout, --json, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from edl.cli.simulate import simulate_command
from edl.sim.metrics import METRIC_KEYS

TINY = str(Path(__file__).resolve().parents[1] / "sim" / "data" / "tiny.yaml")


def test_out_layout_with_several_policies(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        simulate_command,
        [TINY, "--policy", "static,default", "--policy", "reference", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    for policy in ("static", "default", "reference"):
        data = json.loads((tmp_path / policy / "metrics.json").read_text())
        assert tuple(sorted(data)) == tuple(sorted(METRIC_KEYS))
        assert data["policy"] == policy and data["scenario"] == "tiny"
    for name in ("utilization.png", "trainers.png", "pending_jobs.png", "services.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    table = (tmp_path / "table.md").read_text()
    main, constraints = table.split("\n\n")[:2]  # the constraints table follows
    assert main.count("| tiny |") == 3 and constraints.count("| tiny |") == 3
    assert "| tiny | static |" in result.output


def test_one_policy_json_and_flat_layout(tmp_path: Path) -> None:
    result = CliRunner().invoke(simulate_command, [TINY, "--json", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["policy"] == "default"
    assert (tmp_path / "metrics.json").read_text() == result.stdout
    assert f"wrote metrics.json, table.md and utilization.png, trainers.png, " \
        f"pending_jobs.png, services.png to {tmp_path}" in result.stderr


def test_errors_are_one_line_exit_1_or_2_for_usage(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration_s: -1\ncluster: {node_groups: []}\nmeasure: {}\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [x\n")
    usage = ([TINY, "--policy", "greedy"], [TINY, "--out", str(a_file)])
    for args in (
        [str(bad)], ["no-such-scenario"], *usage, [str(tmp_path)], [str(a_file)], [str(broken)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "edl.cli.main", "simulate", *args],
            capture_output=True, text=True, timeout=120,
        )
        # defect 10: a bad option value is a usage error (2) as in every command; bad input 1
        assert done.returncode == (2 if args in usage else 1), (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("edl simulate: "), done.stderr
        assert "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "edl.cli.main", "simulate", str(bad)],
        capture_output=True, text=True, timeout=120,
    )
    for path in ("duration_s", "cluster.node_groups", "measure.steady_state"):
        assert path in done.stderr


def test_a_scenario_can_come_from_a_pipe() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "edl.cli.main", "simulate", "/dev/stdin", "--json"],
        input=Path(TINY).read_text(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["policy"] == "default"


def read_csv(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_timeline_csv_per_policy(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        simulate_command, [TINY, "--policy", "static,default", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for policy in ("static", "default"):
        rows = read_csv(tmp_path / policy / "timeline.csv")
        assert list(rows[0]) == [
            "t_s", "cpu_running_pct", "trainers_running:default/job-1",
            "trainers_running:default/job-2", "replicas_running:default/web",
            "replicas_desired:default/web",
        ]
        assert [float(row["t_s"]) for row in rows] == [float(t) for t in range(81)]
        assert rows[10]["replicas_desired:default/web"] == "2"
        assert rows[66]["replicas_desired:default/web"] == "0"  # scaled to 0 at 65 s
        assert 0 < float(rows[30]["cpu_running_pct"]) <= 100
    static = read_csv(tmp_path / "static" / "timeline.csv")
    assert static[30]["trainers_running:default/job-1"] == "12"


def test_timeline_csv_flat_with_one_policy(tmp_path: Path) -> None:
    result = CliRunner().invoke(simulate_command, [TINY, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert len(read_csv(tmp_path / "timeline.csv")) == 81
