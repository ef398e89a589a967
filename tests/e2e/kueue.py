"""A real Kueue on the e2e control plane: its controller manager run out of cluster.

The binary, CRDs and webhook configurations come from `tools/kueue/build.sh` (built from
the `sigs.k8s.io/kueue` Go module, cached outside the work tree). Kueue runs as envtest
runs it in Kueue's own integration tests: `--kubeconfig` to the loopback API server,
leader election and internal certificate management off, its webhooks served on a
loopback port with the suite's serving certificate (`e2e.pki`, SAN 127.0.0.1) and
registered as URL webhooks whose ``caBundle`` is the suite's CA. Only the webhooks of
the kinds in use are registered (batch Jobs and Kueue's own kinds): the batch/job
integration is the only one turned on.

Kueue reads its metrics certificate from a fixed path, /etc/kueue/metrics/certs, whenever
internal certificate management is off (cmd/kueue/main.go); the metrics server itself is
turned off here (``bindAddress: "0"``), but the files must exist: a throwaway pair signed
by the suite's CA is written there when none is.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ROOT, Component, ControlPlane
from e2e.helpers import SYSTEM_NAMESPACE, load_yaml
from e2e.rest import ApiError, Rest
from edl.procs import free_port
from polling import wait_until

BUILD_SCRIPT = ROOT / "tools" / "kueue" / "build.sh"
NAMESPACE = "kueue-system"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
WEBHOOK_GROUPS = ("batch", "kueue.x-k8s.io")
API = "/apis/kueue.x-k8s.io/v1beta2"
# kind -> plural, namespaced (Kueue's v1beta2 kinds the tests use)
KINDS = {"ResourceFlavor": ("resourceflavors", False), "ClusterQueue": ("clusterqueues", False),
         "LocalQueue": ("localqueues", True), "Workload": ("workloads", True),
         "WorkloadPriorityClass": ("workloadpriorityclasses", False),
         "Cohort": ("cohorts", False)}


def kueue_build() -> Path:
    """The directory with `kueue`, `crds/` and `webhooks.yaml`, built once (an error if
    that fails: the Kueue tests are never silently skipped)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/kueue/build.sh failed ({done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def kueue_path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    plural, namespaced = KINDS[kind]
    path = API + (f"/namespaces/{namespace}" if namespaced and namespace else "")
    return path + f"/{plural}" + (f"/{name}" if name else "")


@dataclass
class Kueue:
    """The running Kueue: its process and the plane it admits on."""

    plane: ControlPlane
    component: Component
    build: Path

    def check_running(self) -> None:
        if not self.component.running:
            raise RuntimeError(f"kueue exited:\n{self.component.tail()}")

    # -- Kueue's objects, as the admin applies them ----------------------------------------

    def apply(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Server-side apply one Kueue object (its webhooks validate it)."""
        obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", **obj}
        meta = obj["metadata"]
        path = kueue_path(obj["kind"], meta.get("namespace") or namespace, meta["name"])
        return Rest(self.plane).call("PATCH", path + "?fieldManager=e2e-admin&force=true", obj,
                                     "application/apply-patch+yaml")

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return Rest(self.plane).call("GET", kueue_path(kind, namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return Rest(self.plane).call("GET", kueue_path(kind, namespace))["items"]

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            Rest(self.plane).call("DELETE", kueue_path(kind, namespace, name))
        except ApiError as error:
            if error.code != 404:
                raise


def start_kueue(plane: ControlPlane) -> Kueue:
    """Install Kueue's CRDs, start its manager and register its webhooks; returns once its
    readiness probe and webhooks answer."""
    build = kueue_build()
    rest = Rest(plane)
    _install_crds(rest, build / "crds")
    if rest.find("Namespace", NAMESPACE) is None:
        rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    assert plane.pki is not None
    work = plane.work_dir / "kueue"
    certs = work / "webhook-certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plane.pki.serving_cert, certs / "tls.crt")
    shutil.copyfile(plane.pki.serving_key, certs / "tls.key")
    _metrics_certs(plane)
    webhook_port, health_port = free_port(), free_port()
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(_configuration(webhook_port, health_port, certs)))
    component = Component("kueue", [str(build / "kueue"), f"--config={config}",
                                     f"--kubeconfig={plane.admin_kubeconfig}",
                                     "--zap-log-level=2"],
                          plane.logs / "kueue.log")
    plane.components["kueue"] = component  # stopped with the plane, counted in its pids
    component.start()
    kueue = Kueue(plane, component, build)
    _wait_ready(kueue, health_port)
    _register_webhooks(rest, build / "webhooks.yaml", webhook_port, plane.pki.ca_cert)
    # The webhooks answer once a Kueue object passes through them (a dry-run create).
    wait_until(lambda: _webhook_answers(kueue), 60, "Kueue's webhooks answering")
    return kueue


def kueue_controller_account(plane: ControlPlane) -> Path:
    """A kubeconfig of ServiceAccount edl-system/edl-controller-kueue: the rules of
    deploy/rbac.yaml plus deploy/kueue-rbac.yaml, as `edl controller --kueue` needs, with
    deploy/admission-policy.yaml bound to it as well (edl's writes under Kueue, its
    servers' Workloads included, pass the same admission as everywhere else)."""
    rest = Rest(plane)
    name = "edl-controller-kueue"
    rest.apply([{"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE}}])
    roles = [d for d in load_yaml("kueue-rbac.yaml") if d["kind"] == "ClusterRole"]
    rest.apply(roles)
    for role in ("edl-controller", roles[0]["metadata"]["name"]):
        rest.apply([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"e2e-{name}-{role}"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                 "kind": "ClusterRole", "name": role},
                     "subjects": [{"kind": "ServiceAccount", "name": name,
                                   "namespace": SYSTEM_NAMESPACE}]}])
    rest.apply([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": f"e2e-{name}-leader", "namespace": SYSTEM_NAMESPACE},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "edl-controller-leader"},
                 "subjects": [{"kind": "ServiceAccount", "name": name,
                               "namespace": SYSTEM_NAMESPACE}]}])
    policy, binding = load_yaml("admission-policy.yaml")
    policy["metadata"]["name"] = binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    policy["spec"]["matchConditions"][0]["expression"] = (
        f"request.userInfo.username == 'system:serviceaccount:{SYSTEM_NAMESPACE}:{name}'")
    rest.apply([policy, binding])
    return plane.service_account_kubeconfig(SYSTEM_NAMESPACE, name,
                                            plane.work_dir / f"{name}.kubeconfig")


def _configuration(webhook_port: int, health_port: int, certs: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        # the on-demand visibility API is an aggregated API server: not run here
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 100, "burst": 200},
    }


def _install_crds(rest: Rest, directory: Path) -> None:
    names = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                rest.apply([doc])
                names.append(doc["metadata"]["name"])

    def established() -> bool:
        for name in names:
            crd = rest.get("CustomResourceDefinition", name)
            if not any(c["type"] == "Established" and c["status"] == "True"
                       for c in (crd.get("status") or {}).get("conditions") or ()):
                return False
        return True

    wait_until(established, 60, "Kueue's CRDs Established")


def _metrics_certs(plane: ControlPlane) -> None:
    """Kueue's metrics certificate at its fixed path (see the module docstring)."""
    assert plane.pki is not None
    if (METRICS_CERTS / "tls.crt").exists() and (METRICS_CERTS / "tls.key").exists():
        return
    try:
        METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for source, name in ((plane.pki.serving_cert, "tls.crt"),
                             (plane.pki.serving_key, "tls.key")):
            staged = METRICS_CERTS / f".{name}.{time.monotonic_ns()}"
            shutil.copyfile(source, staged)
            staged.replace(METRICS_CERTS / name)  # atomic: another worker may race us
    except OSError as error:
        raise RuntimeError(
            f"Kueue reads its metrics certificate from {METRICS_CERTS} (a fixed path) and it "
            f"cannot be written here ({error}); create tls.crt and tls.key there once") from None


def _wait_ready(kueue: Kueue, health_port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kueue.check_running()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz",
                                        timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"kueue not ready within {timeout} s:\n{kueue.component.tail()}")


def _register_webhooks(rest: Rest, manifests: Path, port: int, ca_cert: Path) -> None:
    """Kueue's webhook configurations with each service reference turned into a loopback
    URL (the suite's CA as caBundle), keeping only the kinds in use."""
    bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or ():
            groups = {g for rule in hook.get("rules") or () for g in rule.get("apiGroups") or ()}
            if not groups or not groups.issubset(WEBHOOK_GROUPS):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": bundle}
            kept.append(hook)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = kept
        kind = doc["kind"]
        plural = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
                  "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}[kind]
        path = (f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}"
                "?fieldManager=e2e-admin&force=true")
        rest.call("PATCH", path, doc, "application/apply-patch+yaml")


def _webhook_answers(kueue: Kueue) -> bool:
    kueue.check_running()
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "probe"}, "spec": {}}
    try:
        Rest(kueue.plane).call("POST", kueue_path("ResourceFlavor") + "?dryRun=All", flavor)
        return True
    except ApiError:
        return False
