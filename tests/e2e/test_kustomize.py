"""The kustomize base (deploy/kustomization.yaml) and an installation's overlay
(examples/install), rendered and applied by kubectl's built-in kustomize to the real
control plane.

The base renders exactly the files an install applies one by one (the README's step 2,
and `install_edl`, which every e2e test runs against: the walkthrough included), so the
two ways cannot drift apart. The overlay's values land: the controller's image, its
flags, its resources and the namespaces edl serves. The applied Deployment is removed
again afterwards (its pods would take room the next test counts)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import yaml

from e2e.control_plane import ROOT, ControlPlane
from e2e.helpers import load_yaml
from e2e.rest import Rest
from polling import wait_until

BASE_FILES = ("namespace.yaml", "crd.yaml", "rbac.yaml", "admission-policy.yaml",
              "priorityclass.yaml", "controller.yaml")


def kubectl(plane: ControlPlane, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(plane.admin_kubeconfig),
           "NO_PROXY": "127.0.0.1,localhost"}
    done = subprocess.run(["kubectl", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def squeezed(value: Any) -> Any:
    """`value` with every string's whitespace runs made one space: kustomize re-folds
    the admission policy's folded CEL expressions with blank lines (whitespace only,
    which CEL ignores); anything else must be equal."""
    if isinstance(value, dict):
        return {k: squeezed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [squeezed(v) for v in value]
    return " ".join(value.split()) if isinstance(value, str) else value


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def test_the_base_renders_the_install_files_and_the_overlay_installs_with_its_values(
    plane: ControlPlane, rest: Rest
) -> None:
    rendered = {key(d): d for d in yaml.safe_load_all(kubectl(plane, "kustomize", "deploy"))
                if d}
    files = {key(d): d for name in BASE_FILES for d in load_yaml(name)}
    assert squeezed(rendered) == squeezed(files)  # nothing added, dropped or changed

    overlay = [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", "examples/install"))
               if d]
    out = kubectl(plane, "apply", "-k", "examples/install")  # as the overlay's comment says
    assert "deployment.apps/edl-controller created" in out, out
    try:
        deployment = rest.get("Deployment", "edl-controller", "edl-system")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/edl/edl-controller:0.1.0"
        args = container["args"]
        assert args[-3:] == [  # appended: the later --max-load wins
            "--max-load=0.9", "--image=registry.example.com/edl/edl-runtime:0.1.0",
            "--etcd-image=registry.example.com/edl/etcd:v3.5.17"]
        assert container["resources"]["limits"] == {"memory": "2Gi"}
        for name in ("team-a", "team-b"):
            labels = rest.get("Namespace", name)["metadata"]["labels"]
            assert labels["edl.dev/served"] == "true"
        assert {key(d) for d in overlay} >= set(files)  # the whole base, values on top
        # the objects every other e2e test runs against are the base's, unchanged
        for kind, namespace, name in files:
            if kind in ("Deployment", "Namespace"):
                continue
            stored = rest.get(kind, name, namespace or None)
            assert stored["metadata"]["name"] == name
    finally:
        rest.delete("Deployment", "edl-controller", "edl-system")
        for name in ("team-a", "team-b"):
            rest.delete("Namespace", name)
        wait_until(lambda: not rest.list("Pod", "edl-system"), 120, "the controller pods gone")
        wait_until(lambda: all(rest.find("Namespace", n) is None for n in ("team-a", "team-b")),
                   120, "the served namespaces removed")

