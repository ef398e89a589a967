"""Defect 6: a key written twice is an error naming its path, in every file edl reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edl.api.jobfile import JobLoadError, load_trainingjob
from edl.api.yamlload import DuplicateKeyError, load_json_or_yaml, safe_load, safe_load_all
from edl.sim.scenario import ScenarioError, load_scenario
from edl.snapshot import SnapshotError, parse_snapshot

JOB = """\
apiVersion: edl.dev/v1
kind: TrainingJob
metadata: {name: mnist}
spec:
  trainer:
    entrypoint: python train.py
    min-instance: 1
    workspace: .
    min-instance: 5
"""


def test_duplicate_key_names_its_path_and_both_lines() -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        safe_load(JOB)
    assert caught.value.path == "spec.trainer.min-instance"
    assert "first at line 7" in str(caught.value) and "line 9" in str(caught.value)


def test_job_file_with_a_duplicate_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    with pytest.raises(JobLoadError) as caught:
        load_trainingjob(path)
    message = str(caught.value)
    assert caught.value.exit_code == 1 and "\n" not in message
    assert "duplicate key spec.trainer.min-instance" in message


@pytest.mark.parametrize("text, path", [
    ("a: 1\na: 2\n", "a"),
    ("items:\n- {name: x, name: y}\n", "items[0].name"),
    ("x:\n  nvidia.com/gpu: 1\n  nvidia.com/gpu: 2\n", "x[nvidia.com/gpu]"),
    ("---\nok: 1\n---\nb: {c: 1, c: 1}\n", "b.c"),
])  # fmt: skip
def test_paths(text: str, path: str) -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        safe_load_all(text)
    assert caught.value.path == path


def test_what_is_not_a_duplicate_still_loads() -> None:
    assert safe_load("a: 1\nb: {a: 2}\nc: [{a: 1}, {a: 2}]\n") == {
        "a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]
    }
    assert safe_load("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n")["d"] == {"x": 1, "y": 2}
    assert safe_load("'1': a\n1: b\n") == {"1": "a", 1: "b"}  # a string and an int differ
    with pytest.raises(yaml.constructor.ConstructorError):
        safe_load("!!python/object:os.system {}\n")  # still safe


def test_json_duplicates_are_found_with_their_path() -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        load_json_or_yaml('{"kind": "List", "items": [{"kind": "Pod", "kind": "Node"}]}')
    assert caught.value.path == "items[0].kind"
    assert load_json_or_yaml('{"a": 1}') == [{"a": 1}]


def test_snapshot_and_scenario_reject_duplicates(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="duplicate key items"):
        parse_snapshot("kind: List\nitems: []\nitems: []\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\nname: y\n")
    with pytest.raises(ScenarioError, match="duplicate key name"):
        load_scenario(str(scenario))


def test_the_first_duplicate_in_the_document_is_named() -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        safe_load("a:\n  x: 1\n  x: 2\nb:\n  y: 1\n  y: 2\n")
    assert caught.value.path == "a.x"
