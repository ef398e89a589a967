"""The test node's cluster DNS: CoreDNS (built by tools/node/coredns.sh) as a process in the
node's namespaces, on the node IP's port 53 (the kubelet's `clusterDNS`), serving
`cluster.local` and the reverse zones from the API server's Services, EndpointSlices and
Pods through the node's API port (forward.py), as a real cluster's CoreDNS does.

It runs as a node process rather than a pod: it is up before any pod starts and dies with
the node's PID namespace, and it needs no image, no Deployment and no RBAC of its own (it
uses the kubelet's kubeconfig). Names outside the cluster are refused: the node has no
upstream resolver (no traffic may leave the machine).
"""

from __future__ import annotations

import contextlib
import http.client
import subprocess
import time
from pathlib import Path

from e2e.control_plane import ROOT, Component
from node.forward import in_netns

BUILD_SCRIPT = ROOT / "tools" / "node" / "coredns.sh"
READY_PORT, HEALTH_PORT = 8181, 8180
TTL = 2  # seconds: answers follow pods coming and going within a test's short waits


def coredns_binary() -> Path:
    """tools/node/coredns.sh's `coredns` (built once into the node cache)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tools/node/coredns.sh failed ({done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1]) / "coredns"


def corefile(ip: str, kubeconfig: Path) -> str:
    return f"""cluster.local in-addr.arpa ip6.arpa {{
    bind {ip}
    errors
    health 127.0.0.1:{HEALTH_PORT}
    ready 127.0.0.1:{READY_PORT}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl {TTL}
    }}
    cache {TTL}
}}
"""


def coredns_command(binary: Path, ip: str, work: Path, kubeconfig: Path) -> list[str]:
    """CoreDNS's command line, its Corefile written into `work`."""
    conf = work / "Corefile"
    conf.write_text(corefile(ip, kubeconfig))
    return [str(binary), f"-conf={conf}"]


def wait_coredns(component: Component, netns: str, timeout: float = 60.0) -> None:
    """Return once CoreDNS has synced with the API server: its `ready` endpoint, asked in
    the node's network namespace `netns`, answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not component.running:
            raise RuntimeError(f"CoreDNS exited:\n{component.tail()}")
        with contextlib.suppress(OSError):
            if in_netns(netns, _ready) == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"CoreDNS not ready within {timeout} s:\n{component.tail()}")


def _ready() -> int:
    connection = http.client.HTTPConnection("127.0.0.1", READY_PORT, timeout=2)
    try:
        connection.request("GET", "/ready")
        return connection.getresponse().status
    finally:
        connection.close()
