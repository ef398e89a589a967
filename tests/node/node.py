"""A real Kubernetes node for tests: kubelet + containerd + runc + bridge CNI, registered to a
control plane from tests/e2e/control_plane.py, in namespaces the test creates.

Layout (docs/testing.md, "The node tier"):
* `holder.py` is PID 1 of new mount, network and PID namespaces; containerd and the kubelet
  join all three (`nsenter --target`). Pods get their own network namespaces on the bridge
  inside the node's one. Nothing is added to the machine's own interfaces, and the
  machine's sysctls are untouched (the holder's bind-mounted copies take the kubelet's writes).
* `forward.py` joins the node to the machine's loopback: the API server's port inside the
  node namespace (`API_PORT` on the node IP and 127.0.0.1 there), and an HTTP CONNECT proxy
  on a unix socket that kube-apiserver's egress selector uses to reach the kubelet (logs).
* cluster DNS is CoreDNS on the node IP (`cluster_dns.py`), a node process like the kubelet.
* cgroups (v1, cgroupfs driver) go under `/<name>` in every hierarchy and are removed at stop.

Stopping kills PID 1 of the node's PID namespace, which kills every node process (shims,
pause and pod processes included); `leftovers()` says what, if anything, remains.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ROOT, Component, ControlPlane
from node.cluster_dns import coredns_binary, coredns_command, wait_coredns
from node.holder import SYSCTLS

sys.path.insert(0, str(ROOT / "tools" / "node"))
import images  # tools/node/images.py

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = ROOT / "tools" / "node" / "build.sh"
API_PORT = 6443
CGROUP_FS = Path("/sys/fs/cgroup")
PAUSE_IMAGE = images.PAUSE_IMAGE


@dataclass(frozen=True)
class PodProcess:
    """A container's process: its user, its root filesystem's overlay upper directory (what
    it wrote there) and its mount points (files runc bind-mounts over, such as /etc/hosts)."""

    pid: int
    uid: int
    upperdir: str
    mounts: frozenset[str]

    def written(self) -> list[str]:
        """Files written into the image's filesystem (not into a volume or a mount)."""
        if not self.upperdir:
            return []
        top = Path(self.upperdir)
        return sorted(rel for p in top.rglob("*") if not p.is_dir()
                      and "/" + (rel := str(p.relative_to(top))) not in self.mounts)


def node_binaries() -> Path:
    """The directory tools/node/build.sh fills (kubelet, containerd, runc, CNI, pause)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/node/build.sh failed ({done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def egress_config(path: Path, socket: Path) -> Path:
    """kube-apiserver's EgressSelectorConfiguration: `cluster` traffic via `socket`."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
        "egressSelections": [{"name": "cluster", "connection": {
            "proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(socket)}}}}]}))
    return path


@dataclass
class Node:
    """Start with `start()`, stop with `stop()`."""

    bins: Path
    work: Path
    plane: ControlPlane
    name: str = "edl-node"
    ip: str = "10.88.0.1"
    prefix: int = 16
    bridge: str = "cni0"
    components: dict[str, Component] = field(default_factory=dict)
    holder: subprocess.Popen[bytes] | None = None
    holder_pid: int = 0
    pid_namespace: str = ""  # the node's PID namespace ("pid:[inode]"): all its processes
    dns_binary: Path | None = None  # CoreDNS (tools/node/coredns.sh's) or built at start
    helpers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def egress_socket(self) -> Path:
        return self.work / "egress.sock"

    @property
    def containerd_socket(self) -> Path:
        return self.work / "containerd" / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/{self.name}"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Node:
        self.logs.mkdir(parents=True, exist_ok=True)
        self._start_holder()
        self._start_helpers()
        self._start_containerd()
        self.import_image(self._pause_image())
        self._start_kubelet()
        self.wait_ready()
        self._start_kube_proxy()
        dns = self._add("coredns", coredns_command(self.dns_binary or coredns_binary(), self.ip,
                                                   self.work, self.work / "kubelet.kubeconfig"))
        wait_coredns(dns, f"/proc/{self.holder_pid}/ns/net")
        return self

    def stop(self) -> None:
        """Kill every node process (PID 1 of its PID namespace), then remove its cgroups."""
        if self.holder is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.holder_pid, signal.SIGKILL)
            self.holder.wait(30)
            self.holder = None
        for component in self.components.values():
            component.stop(timeout=10)
        for helper in self.helpers.values():
            helper.terminate()
            helper.wait(10)
        self.helpers.clear()
        self._remove_cgroups()

    def _nsenter(self) -> list[str]:
        return ["nsenter", f"--target={self.holder_pid}", "--mount", "--net", "--pid", "--"]

    def _start_holder(self) -> None:
        with (self.logs / "holder.log").open("wb") as log:
            self.holder = subprocess.Popen(
                ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc",
                 "--propagation", "private", sys.executable, str(HERE / "holder.py"),
                 f"{self.ip}/{self.prefix}", self.bridge],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True)
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the node's namespaces could not be made:\n"
                               f"{(self.logs / 'holder.log').read_text(errors='replace')}")
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children")
        self.holder_pid = int(children.read_text().split()[0])
        self.pid_namespace = os.readlink(f"/proc/{self.holder_pid}/ns/pid")

    def _start_helpers(self) -> None:
        """forward.py: the API server into the node, the egress proxy out of it."""
        args = [f"--netns=/proc/{self.holder_pid}/ns/net", f"--listen={API_PORT}",
                f"--to=127.0.0.1:{self.plane.port}", f"--connect-uds={self.egress_socket}"]
        with (self.logs / "forward.log").open("wb") as log:
            helper = subprocess.Popen([sys.executable, str(HERE / "forward.py"), *args],
                                      stdout=subprocess.PIPE, stderr=log,
                                      stdin=subprocess.DEVNULL, start_new_session=True, cwd=HERE)
        self.helpers["forward"] = helper
        assert helper.stdout is not None
        if helper.stdout.readline().strip() != b"ready":
            raise RuntimeError("forward.py did not start: "
                               f"{(self.logs / 'forward.log').read_text(errors='replace')}")

    def _add(self, name: str, argv: list[str]) -> Component:
        path = f"{self.bins}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        component = Component(name, [*self._nsenter(), *argv], self.logs / f"{name}.log",
                              {"PATH": path})
        self.components[name] = component
        component.start()
        return component

    def _start_containerd(self) -> None:
        root = self.work / "containerd"
        cni_conf = self.work / "cni"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-edl.conflist").write_text(json.dumps(self._cni_config()))
        cri = {
            "sandbox_image": PAUSE_IMAGE,
            # runc sets every sandbox's oom_score_adj (-998); lowering it needs
            # CAP_SYS_RESOURCE, which this kind of machine lacks: clamp to containerd's own.
            "restrict_oom_score_adj": True,
            "disable_apparmor": True,
            "containerd": {
                "snapshotter": "overlayfs", "default_runtime_name": "runc",
                "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {
                    "BinaryName": str(self.bins / "runc"), "SystemdCgroup": False}}}},
            "cni": {"bin_dir": str(self.bins / "cni"), "conf_dir": str(cni_conf)},
        }
        config = {
            "version": 2, "root": str(root / "root"), "state": "/run/containerd",
            "grpc": {"address": str(self.containerd_socket)},
            "ttrpc": {"address": f"{self.containerd_socket}.ttrpc"},
            "disabled_plugins": [f"io.containerd.snapshotter.v1.{s}"
                                 for s in ("aufs", "btrfs", "zfs", "devmapper")],
            "plugins": {"io.containerd.grpc.v1.cri": cri},
        }
        path = self.work / "containerd.toml"
        path.write_text(_toml(config))
        component = self._add("containerd", [str(self.bins / "containerd"), f"--config={path}"])
        deadline = time.monotonic() + 60
        while not self.containerd_socket.exists():
            if not component.running or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start:\n{component.tail()}")
            time.sleep(0.2)

    def _cni_config(self) -> dict[str, Any]:
        return {"cniVersion": "0.4.0", "name": "edl", "plugins": [
            # the default route too: ClusterIPs (kube-proxy) are reached through the node
            {"type": "bridge", "bridge": self.bridge, "isGateway": True,
             "isDefaultGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{
                 "subnet": f"{self.ip.rsplit('.', 2)[0]}.0.0/{self.prefix}",
                 "gateway": self.ip}]], "dataDir": str(self.work / "ipam")}},
            {"type": "loopback"}]}

    def _pause_image(self) -> Path:
        return images.pause_image(self.work, self.bins)

    def import_image(self, tar: Path) -> None:
        """`ctr images import` into the k8s.io namespace (the kubelet's)."""
        done = subprocess.run(
            [str(self.bins / "ctr"), f"--address={self.containerd_socket}",
             "--namespace=k8s.io", "images", "import", str(tar)],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {tar.name} failed: {done.stderr}")

    def tag_image(self, source: str, target: str) -> None:
        """`ctr images tag`: `target` names the imported `source` too, as `kind load` puts a
        locally built image under the name a manifest uses (nothing is pulled for it)."""
        done = subprocess.run(
            [str(self.bins / "ctr"), f"--address={self.containerd_socket}",
             "--namespace=k8s.io", "images", "tag", "--force", source, target],
            capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ctr images tag {source} {target} failed: {done.stderr}")

    def make_cgroups(self) -> None:
        """The kubelet's cgroup root in every v1 hierarchy (it refuses to create it), with
        cpuset's CPUs and memory nodes copied from the parent, as cpuset requires."""
        for hierarchy in CGROUP_FS.iterdir():
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            top = hierarchy / self.cgroup_root.strip("/")
            top.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / name).exists():
                    (top / name).write_text((hierarchy / name).read_text())

    def _start_kubelet(self) -> None:
        self.make_cgroups()
        assert self.plane.pki is not None
        pki = self.plane.pki
        kubeconfig = self.work / "kubelet.kubeconfig"
        self.plane.write_kubeconfig(kubeconfig, user={
            "client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)})
        config = yaml.safe_load(kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{API_PORT}"
        kubeconfig.write_text(yaml.safe_dump(config))
        resolv = self.work / "resolv.conf"
        resolv.write_text("# pods resolve through the cluster DNS only\n")
        kubelet_config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # cgroup v1 is this machine's only choice; 1.35+ refuses it unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root,
            "address": self.ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki.ca_cert)}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [self.ip], "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            # lowering its own oom_score_adj (-999 by default) needs CAP_SYS_RESOURCE
            "oomScoreAdj": 0,
            "failSwapOn": False,
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "serializeImagePulls": False,
            "syncFrequency": "5s", "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "podLogsDir": "/var/log/pods",
            "rotateCertificates": False, "serverTLSBootstrap": False,
            "maxPods": 30,
        }
        config_path = self.work / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(kubelet_config))
        self._add("kubelet", [
            str(self.bins / "kubelet"), f"--config={config_path}",
            f"--kubeconfig={kubeconfig}", f"--root-dir={self.work / 'kubelet'}",
            f"--hostname-override={self.name}", f"--node-ip={self.ip}", "--v=2"])

    def _start_kube_proxy(self) -> None:
        """kube-proxy (nftables mode) in the node's namespace, and the `kubernetes` Service's
        endpoint (the API server's port inside the node, forward.py) that kube-apiserver
        would publish itself were it not on loopback (--endpoint-reconciler-type=none)."""
        self.plane.request("POST", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "edl-node-tests"}},
            "addressType": "IPv4", "endpoints": [{"addresses": [self.ip]}],
            "ports": [{"name": "https", "port": API_PORT, "protocol": "TCP"}]})
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "nftables", "hostnameOverride": self.name,
            "clientConnection": {"kubeconfig": str(self.work / "kubelet.kubeconfig")},
            "clusterCIDR": f"{self.ip.rsplit('.', 2)[0]}.0.0/{self.prefix}",
            "detectLocalMode": "ClusterCIDR",
            # replies from a pod on the same bridge come back through the node's conntrack
            # only if service traffic is masqueraded (no br_netfilter here)
            "nftables": {"masqueradeAll": True, "minSyncPeriod": "0s", "syncPeriod": "30s"},
            # conntrack sizes are machine-wide: leave them alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        }
        path = self.work / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._add("kube-proxy", [str(self.bins / "kube-proxy"), f"--config={path}", "--v=2"])

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for component in self.components.values():
                if not component.running:
                    raise RuntimeError(f"{component.name} exited:\n{component.tail()}")
            with contextlib.suppress(Exception):
                node = self.plane.request("GET", f"/api/v1/nodes/{self.name}")
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in node["status"].get("conditions", [])):
                    return
            time.sleep(0.5)
        raise RuntimeError(f"node {self.name} not Ready within {timeout} s:\n"
                           f"{self.components['kubelet'].tail()}")

    # -- leftovers ----------------------------------------------------------------------

    def _cgroup_dirs(self) -> list[Path]:
        return [h / self.cgroup_root.strip("/") for h in CGROUP_FS.iterdir()
                if (h / self.cgroup_root.strip("/")).is_dir()]

    def _remove_cgroups(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while (dirs := self._cgroup_dirs()) and time.monotonic() < deadline:
            for top in dirs:
                for sub in sorted((p for p in top.rglob("*") if p.is_dir()),
                                  key=lambda p: len(p.parts), reverse=True):
                    with contextlib.suppress(OSError):
                        sub.rmdir()
                with contextlib.suppress(OSError):
                    top.rmdir()
            time.sleep(0.2)

    def leftovers(self) -> list[str]:
        """What of this node is still on the machine: processes, cgroups, mounts."""
        found = [f"cgroup {d}" for d in self._cgroup_dirs()]
        marker = str(self.work)
        # this node's processes only (another session's node may run beside it): those
        # in its PID namespace (every pod and node process) or naming its work directory
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if marker in cmdline or os.readlink(proc / "ns" / "pid") == self.pid_namespace:
                    found.append(f"process {proc.name}: {cmdline[:120]}")
        with contextlib.suppress(OSError):
            found += [f"mount {line.split()[4]}"
                      for line in Path("/proc/self/mountinfo").read_text().splitlines()
                      if marker in line]
        return found

    def pod_processes(self, pod_uid: str) -> list[PodProcess]:
        """Every process of pod `pod_uid` as the machine (not the pod) sees it, from /proc."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError, StopIteration):
                if f"/pod{pod_uid}/" not in (proc / "cgroup").read_text():
                    continue
                uid = int(next(line.split()[1] for line in (proc / "status").read_text()
                               .splitlines() if line.startswith("Uid:")))
                mounts = [line.split() for line in
                          (proc / "mountinfo").read_text().splitlines()]
                root = next(m for m in mounts if m[4] == "/")
                upper = next((o.removeprefix("upperdir=") for o in root[-1].split(",")
                              if o.startswith("upperdir=")), "")
                found.append(PodProcess(int(proc.name), uid, upper,
                                        frozenset(m[4] for m in mounts)))
        return found

    @staticmethod
    def machine_state() -> dict[str, str]:
        """What the node must not change on the machine: the sysctls the kubelet sets and
        the machine's network interfaces."""
        state = {name: Path(f"/proc/sys/{name}").read_text().strip() for name in SYSCTLS}
        state["interfaces"] = " ".join(sorted(p.name for p in Path("/sys/class/net").iterdir()))
        return state

    def remove_work(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """The small TOML subset containerd's config needs (strings, bools, ints, lists, tables)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            quoted = f'"{k}"' if "." in k else k
            name = f"{prefix}.{quoted}" if prefix else quoted
            lines += ["", f"[{name}]", _toml(v, name)]
    return "\n".join(lines)
