"""`edl crd` and `edl controller`: output and bad options, one line each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from edl.cli.main import cli
from edl.kube.crd import build_crd

EDL = str(Path(sys.executable).with_name("edl"))


def test_edl_crd_prints_the_generated_crd_as_yaml_and_json() -> None:
    runner = CliRunner()
    as_yaml = runner.invoke(cli, ["crd"])
    as_json = runner.invoke(cli, ["crd", "-o", "json"])
    assert as_yaml.exit_code == as_json.exit_code == 0
    assert yaml.safe_load(as_yaml.output) == build_crd() == json.loads(as_json.output)


def test_edl_controller_rejects_bad_options_in_one_line() -> None:
    for args in (["--listen", "nowhere"], ["--policy", "nope"],
                 ["--retry-period", "5", "--renew-deadline", "2"],
                 ["--crash-backoff", "20", "--crash-backoff-max", "5"],
                 ["--crash-backoff", "-1"],
                 ["--trainer-priority-class", "High_Priority"], ["--image", " "],
                 ["--etcd-image", ""]):
        result = subprocess.run([EDL, "controller", *args], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr
        # one line naming the command (the CLI's usage-error format since 602b64c)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith("edl controller: "), result.stderr


def test_edl_controller_names_an_unusable_kubeconfig_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    foreign = tmp_path / "pod.yaml"
    foreign.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    cases = {broken: "not valid YAML", empty: "not a kubeconfig", foreign: "not a kubeconfig",
             tmp_path / "missing": "not found", tmp_path: "not found"}
    for kubeconfig, message in cases.items():
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
        result = subprocess.run([EDL, "controller"], capture_output=True, text=True,
                                timeout=120, env=env)
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("edl controller: "), result.stderr
        assert message in lines[0], lines[0]


def test_edl_controller_rejects_a_port_out_of_range() -> None:
    result = subprocess.run([EDL, "controller", "--listen", "127.0.0.1:70000"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "0..65535" in result.stderr
