"""PID 1 of the test node: started by `unshare --mount --net --pid --fork --mount-proc`, it
prepares the namespaces every node process then joins (`nsenter --target <its pid>`) and
reaps orphans (containerd's shims) until it is killed. Killing it kills every process of
the node, containers included; the namespaces and every mount in them go with the last one.

Inside the private mount namespace:
* tmpfs over /run, /var/lib and /var/log: what the kubelet, containerd and CNI write at fixed
  paths (/var/log/pods, /var/lib/cni, /run/netns, ...) never reaches the machine;
* each machine-wide sysctl the kubelet sets at start (vm.overcommit_memory, kernel.panic, ...)
  is a bind-mounted copy of its value, so the kubelet's write changes nothing on the machine.
Inside the new network namespace: loopback up and the bridge pods attach to, holding the
node's IP (the kubelet refuses a loopback node IP).

Usage: holder.py NODE_IP/PREFIX BRIDGE (stdlib only; prints "ready" when prepared).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

# The kubelet's setupKernelTunables (pkg/kubelet/cm/container_manager_linux.go).
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def run(*argv: str) -> None:
    subprocess.run(argv, check=True)


def prepare(address: str, bridge: str) -> None:
    for path in ("/run", "/var/lib", "/var/log"):
        run("mount", "-t", "tmpfs", "-o", "mode=755", "edl-node", path)
    for name in SYSCTLS:
        copy = f"/run/edl-sysctl/{name}"
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        with open(f"/proc/sys/{name}") as live, open(copy, "w") as out:
            out.write(live.read())
        run("mount", "--bind", copy, f"/proc/sys/{name}")
    run("ip", "link", "set", "lo", "up")
    run("ip", "link", "add", bridge, "type", "bridge")
    run("ip", "addr", "add", address, "dev", bridge)
    run("ip", "link", "set", bridge, "up")


def reap_forever() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.2)


def main() -> None:
    address, bridge = sys.argv[1:3]
    prepare(address, bridge)
    print("ready", flush=True)
    reap_forever()


if __name__ == "__main__":
    main()
