"""The Pod Security Standards' `restricted` level (baseline included), transcribed for tests.

Source: kubernetes.io/docs/concepts/security/pod-security-standards and the checks of
k8s.io/pod-security-admission/policy (check_*.go), latest policy version. Each check
returns the violations it finds in a PodSpec (plus the pod's annotations), named as
the admission plugin names them, so a test failure says which rule a pod breaks. The
real admission plugin is exercised in tests/e2e/test_pod_security.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Pod = Mapping[str, Any]
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret", "image",
}


def _containers(spec: Pod) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return container.get("securityContext") or {}


def host_namespaces(spec: Pod, _: Pod) -> list[str]:
    return [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]


def privileged(spec: Pod, _: Pod) -> list[str]:
    return [c["name"] for c in _containers(spec) if _sc(c).get("privileged")]


def capabilities_baseline(spec: Pod, _: Pod) -> list[str]:
    return [f"{c['name']} adds {cap}" for c in _containers(spec)
            for cap in (_sc(c).get("capabilities") or {}).get("add") or []
            if cap not in BASELINE_CAPABILITIES]


def host_path_volumes(spec: Pod, _: Pod) -> list[str]:
    return [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]


def host_ports(spec: Pod, _: Pod) -> list[str]:
    return [f"{c['name']}:{p['hostPort']}" for c in _containers(spec)
            for p in c.get("ports") or [] if p.get("hostPort")]


def app_armor(spec: Pod, annotations: Pod) -> list[str]:
    found = [k for k, v in annotations.items()
             if k.startswith("container.apparmor.security.beta.kubernetes.io/")
             and not (v == "runtime/default" or v.startswith("localhost/"))]
    contexts = [spec.get("securityContext") or {}, *(_sc(c) for c in _containers(spec))]
    found += ["appArmorProfile Unconfined" for sc in contexts
              if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined"]
    return found


def selinux(spec: Pod, _: Pod) -> list[str]:
    found = []
    for sc in [spec.get("securityContext") or {}, *(_sc(c) for c in _containers(spec))]:
        options = sc.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") \
                or options.get("role"):
            found.append(str(options))
    return found


def proc_mount(spec: Pod, _: Pod) -> list[str]:
    return [c["name"] for c in _containers(spec) if _sc(c).get("procMount", "Default") != "Default"]


def seccomp_baseline(spec: Pod, _: Pod) -> list[str]:
    contexts = [spec.get("securityContext") or {}, *(_sc(c) for c in _containers(spec))]
    return ["Unconfined" for sc in contexts
            if (sc.get("seccompProfile") or {}).get("type") == "Unconfined"]


def sysctls(spec: Pod, _: Pod) -> list[str]:
    return [s["name"] for s in (spec.get("securityContext") or {}).get("sysctls") or []
            if s["name"] not in SAFE_SYSCTLS]


def volume_types(spec: Pod, _: Pod) -> list[str]:
    return [v["name"] for v in spec.get("volumes") or []
            if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES]


def privilege_escalation(spec: Pod, _: Pod) -> list[str]:
    return [c["name"] for c in _containers(spec)
            if _sc(c).get("allowPrivilegeEscalation") is not False]


def run_as_non_root(spec: Pod, _: Pod) -> list[str]:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    found = [] if pod is not False else ["pod runAsNonRoot=false"]
    for container in _containers(spec):
        value = _sc(container).get("runAsNonRoot")
        if value is False or (value is None and pod is not True):
            found.append(container["name"])
    return found


def run_as_user(spec: Pod, _: Pod) -> list[str]:
    contexts = [spec.get("securityContext") or {}, *(_sc(c) for c in _containers(spec))]
    return ["runAsUser=0" for sc in contexts if sc.get("runAsUser") == 0]


def seccomp_restricted(spec: Pod, _: Pod) -> list[str]:
    allowed = {"RuntimeDefault", "Localhost"}
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    found = [] if pod in (None, *allowed) else [f"pod {pod}"]
    for container in _containers(spec):
        value = (_sc(container).get("seccompProfile") or {}).get("type")
        if (value is None and pod not in allowed) or (value is not None and value not in allowed):
            found.append(container["name"])
    return found


def capabilities_restricted(spec: Pod, _: Pod) -> list[str]:
    found = []
    for container in _containers(spec):
        caps = _sc(container).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{container['name']} does not drop ALL")
        found += [f"{container['name']} adds {c}" for c in caps.get("add") or []
                  if c != "NET_BIND_SERVICE"]
    return found


BASELINE: dict[str, Callable[[Pod, Pod], list[str]]] = {
    "host namespaces": host_namespaces, "privileged": privileged,
    "capabilities (baseline)": capabilities_baseline, "hostPath volumes": host_path_volumes,
    "host ports": host_ports, "AppArmor": app_armor, "SELinux": selinux,
    "/proc mount type": proc_mount, "seccomp (baseline)": seccomp_baseline, "sysctls": sysctls,
}
RESTRICTED: dict[str, Callable[[Pod, Pod], list[str]]] = {
    **BASELINE, "volume types": volume_types, "privilege escalation": privilege_escalation,
    "running as non-root": run_as_non_root, "running as non-root user": run_as_user,
    "seccomp (restricted)": seccomp_restricted,
    "capabilities (restricted)": capabilities_restricted,
}


def restricted_violations(template: Pod) -> dict[str, list[str]]:
    """Each `restricted` check a pod template breaks, with what breaks it (empty: it passes)."""
    spec = template["spec"]
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    found = {name: check(spec, annotations) for name, check in RESTRICTED.items()}
    return {name: what for name, what in found.items() if what}
