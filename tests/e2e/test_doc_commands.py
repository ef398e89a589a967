"""The admin's commands of README.md and docs/kubernetes.md, run as written with kubectl
(kubectl's own output and exit status, against the real control plane where they need
one): the laptop step's CA extraction when the kubeconfig names a CA *file*, the GPU
pool's node check showing the pool label, and the uninstall on the laptop path (no
controller Deployment) exiting 0 (server-side dry run: the plane is shared)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from e2e.control_plane import ROOT, ControlPlane

PAGE = (ROOT / "docs" / "kubernetes.md").read_text()


def sh(command: str, kubeconfig: Path, cwd: Path = ROOT, timeout: float = 60,
       **variables: str) -> subprocess.CompletedProcess[str]:
    """`command` in a shell, as an admin types it (kubectl 1.32+ must be on PATH), with
    shell `variables` set."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "NO_PROXY": "127.0.0.1,localhost",
           **variables}
    return subprocess.run(["sh", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_laptop_step_extracts_a_ca_the_kubeconfig_names_as_a_file(
    plane: ControlPlane, tmp_path: Path
) -> None:
    (line,) = [m.group(0) for m in re.finditer(
        r"kubectl config view [^\n]*certificate-authority-data[^\n]*\\\n[^\n]*edl-ca\.crt",
        PAGE)]
    admin = yaml.safe_load(plane.admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = tmp_path / "ca.crt"
    if "certificate-authority-data" in cluster:
        import base64
        ca.write_bytes(base64.b64decode(cluster.pop("certificate-authority-data")))
    else:
        ca.write_bytes(Path(cluster["certificate-authority"]).read_bytes())
    cluster["certificate-authority"] = str(ca)  # as kubeadm/minikube kubeconfigs name it
    named = tmp_path / "named-ca.kubeconfig"
    named.write_text(yaml.safe_dump(admin))
    done = sh(line.replace("\\\n", " "), named, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "edl-ca.crt").read_bytes() == ca.read_bytes() != b""


def test_the_gpu_pool_node_check_shows_the_label(plane: ControlPlane) -> None:
    found = re.search(r"check\s+with `(kubectl get nodes -o\s+custom-columns=[^`]*)`", PAGE)
    assert found, "the GPU pool walkthrough's node check"
    command = " ".join(found.group(1).split())
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    (node,) = plane.add_nodes(1, prefix="kwok-doc", labels={"nvidia.com/gpu.present": "true"},
                              taints=[taint])
    try:
        done = sh(command, plane.admin_kubeconfig)
        assert done.returncode == 0, done.stderr
        (row,) = [line.split() for line in done.stdout.splitlines() if line.startswith(node)]
        assert row[1] == "true", done.stdout  # the POOL column: the label's value
        assert "key:nvidia.com/gpu" in " ".join(row[2:]), done.stdout
    finally:
        plane.request("DELETE", f"/api/v1/nodes/{node}")


def test_the_uninstall_exits_0_on_the_laptop_path(plane: ControlPlane) -> None:
    """No controller Deployment was applied (the controller ran on a laptop)."""
    block = (ROOT / "README.md").read_text().split("To uninstall edl")[1]
    (command,) = re.findall(r"^kubectl delete [^\n]*deploy/controller\.yaml[^\n]*$", block,
                            re.M)
    done = sh(f"{command} --dry-run=server", plane.admin_kubeconfig)
    assert done.returncode == 0, done.stderr
    assert "deleted (server dry run)" in done.stdout, done.stdout
