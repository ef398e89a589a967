"""`edl validate` and `edl render`, through click's runner and once through the real binary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner, Result

from edl.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "jobs"
EDL = Path(sys.executable).parent / "edl"


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin)


def test_validate_valid_file_prints_one_line() -> None:
    result = run("validate", str(EXAMPLES / "mnist.yaml"))
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        f"{EXAMPLES / 'mnist.yaml'}: valid TrainingJob default/mnist "
        "(edl.dev/v1, elastic, 2..10 trainers, 2 pservers)"
    ]
    original = run("validate", str(EXAMPLES / "paddle-original.yaml"))
    assert original.exit_code == 0 and "paddlepaddle.org/v1" in original.output


def test_validate_invalid_file_prints_one_line_per_problem() -> None:
    result = run("validate", str(EXAMPLES / "invalid" / "many-problems.yaml"))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 7
    assert "spec.trainer.max-instance: must be >= min-instance (5)" in lines
    assert "spec.trainer.resources.requests.memory: invalid quantity 'lots'" in lines
    assert "Traceback" not in result.output


def test_validate_bad_yaml_and_missing_file() -> None:
    bad = run("validate", str(EXAMPLES / "invalid" / "not-yaml.yaml"))
    assert bad.exit_code == 1
    assert len(bad.output.splitlines()) == 1 and "not valid YAML at line 4" in bad.output
    missing = run("validate", "/nonexistent/job.yaml")
    assert missing.exit_code == 1  # bad input is 1 in every command (usage errors are 2)
    assert missing.output == (
        "/nonexistent/job.yaml: cannot read /nonexistent/job.yaml: No such file or directory\n"
    )
    directory = run("validate", str(EXAMPLES))
    assert directory.exit_code == 1 and len(directory.output.splitlines()) == 1


def test_validate_reads_stdin() -> None:
    text = (EXAMPLES / "mnist.yaml").read_text()
    assert run("validate", "-", stdin=text).exit_code == 0
    empty = run("validate", "-", stdin="")
    assert empty.exit_code == 1
    assert empty.output == "-: expected one YAML document with a TrainingJob, found 0\n"


def test_render_prints_the_children_as_multi_document_yaml() -> None:
    result = run("render", str(EXAMPLES / "mnist.yaml"))
    assert result.exit_code == 0
    documents = list(yaml.safe_load_all(result.output))
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("Service", "mnist-master"),
        ("ReplicaSet", "mnist-master"),
        ("ReplicaSet", "mnist-pserver"),
        ("Job", "mnist-trainer"),
    ]
    assert documents[3]["spec"]["parallelism"] == 2


def test_render_invalid_reports_problems_and_no_yaml() -> None:
    result = CliRunner().invoke(cli, ["render", str(EXAMPLES / "invalid" / "unknown-fields.yaml")])
    assert result.exit_code == 1
    assert "replicas: unknown field" in result.output.splitlines()
    assert "kind:" not in result.output


def test_the_installed_binary() -> None:
    valid = subprocess.run(
        [str(EDL), "validate", str(EXAMPLES / "paddle-original.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert valid.returncode == 0, valid.stderr
    assert len(valid.stdout.splitlines()) == 1
    # valid for edl, and what `kubectl apply` needs changed, one note per change
    notes = valid.stderr.splitlines()
    assert notes == [
        'note: for kubectl apply: apiVersion paddlepaddle.org/v1: a cluster serves only '
        'edl.dev/v1 (kubectl apply answers no matches for kind "TrainingJob" in version '
        '"paddlepaddle.org/v1"); write apiVersion: edl.dev/v1, the spec stays the same',
        "note: for kubectl apply: spec.VolumeMounts: a cluster knows this field only as "
        "spec.volumeMounts (kubectl apply refuses or drops the other spelling); rename it",
    ]
    invalid = subprocess.run(
        [str(EDL), "render", str(EXAMPLES / "invalid" / "many-problems.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert invalid.returncode == 1 and invalid.stdout == ""
    assert "spec.pserver.min-instance: must be >= 1 (got 0)" in invalid.stderr.splitlines()
    assert "Traceback" not in invalid.stderr


def test_validate_and_render_a_collective_job(tmp_path: Path) -> None:
    example = ROOT / "examples" / "digits-ddp" / "job.yaml"
    result = run("validate", str(example))
    assert result.exit_code == 0
    assert result.output.strip().endswith(
        "(edl.dev/v1, elastic, 1..4 trainers, collective, 1 worker per trainer)")
    rendered = list(yaml.safe_load_all(run("render", str(example)).output))
    assert [m["kind"] for m in rendered] == ["Service", "ReplicaSet", "Job"]
    bad = yaml.safe_load(example.read_text())
    bad["spec"]["pserver"] = {"min-instance": 1}
    bad["spec"]["collective"]["world-sizes"] = [2, 4]  # min-instance 1 is no longer allowed
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = run("validate", str(path))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 2
    assert any(line.startswith("spec.pserver: only for parameter-server jobs") for line in lines)
    assert any(line.startswith("spec.trainer.min-instance: must give an allowed world size")
               for line in lines)


def test_validate_notes_nothing_for_a_job_a_cluster_admits_and_json_carries_the_notes() -> None:
    import json

    clean = run("validate", str(EXAMPLES / "mnist.yaml"), "-o", "json")
    assert json.loads(clean.stdout)["cluster"] == []
    original = run("validate", str(EXAMPLES / "paddle-original.yaml"), "-o", "json")
    notes = json.loads(original.stdout)["cluster"]
    assert [n.split(":")[0] for n in notes] == ["apiVersion paddlepaddle.org/v1",
                                                "spec.VolumeMounts"]
