"""Turn a pod manifest into the processes that run it on this machine (pure).

A local run plays kubelet: each container of a pod becomes one process. This
module decides *what* to start (argv, environment, which containers to skip)
from the manifest alone, so the rules are testable without spawning anything.

Local-run rules (documented in docs/local.md):
- a container named ``etcd`` is skipped: the run's embedded etcd replaces the
  master's etcd sidecar;
- ``edl`` as a command resolves to the ``edl`` script next to ``sys.executable``,
  ``python``/``python3`` to ``sys.executable`` itself;
- the downward API is resolved (pod name, namespace, uid, IP = 127.0.0.1, node);
- EDL_ETCD_ENDPOINTS, EDL_POD_IP, EDL_POD_NAME and EDL_PORT are overridden per
  process, so pods find the embedded etcd and never clash on ports;
- EDL_RDZV_ENDPOINT (a collective job's store, named by the master Service) is
  dropped: there is no Service DNS locally, so agents read the store's address
  from etcd, where `edl rendezvous` publishes it;
- a relative EDL_WORKSPACE is made absolute against the job file's directory,
  so ``workspace: .`` means "next to job.yaml" as it would inside an image.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SKIPPED_CONTAINERS = frozenset({"etcd"})
LOCAL_POD_IP = "127.0.0.1"
# EDL_* variables of the parent are dropped so a pod sees only its manifest's.
PARENT_ENV_DROP_PREFIX = "EDL_"


class PodSpecError(ValueError):
    """A manifest field a local run cannot honour; names the field path."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field_path = field_path


@dataclass(frozen=True)
class ProcessSpec:
    """One container as a process: what to exec, with which environment."""

    container: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LocalContext:
    """Facts of this machine and run that a manifest cannot know."""

    edl_executable: str
    python_executable: str
    etcd_endpoints: str
    node_name: str = "local"
    base_env: Mapping[str, str] = field(default_factory=dict)
    # Set when the manifest does not set them (e.g. EDL_CHECKPOINT_DIR inside the run dir).
    default_env: Mapping[str, str] = field(default_factory=dict)
    # Replace the manifest's own value (e.g. a collective job's EDL_CHECKPOINT_DIR, a
    # cluster path, by the run dir's), before later values expand $(NAME) with it.
    override_env: Mapping[str, str] = field(default_factory=dict)
    # A relative EDL_WORKSPACE is resolved against this directory (the job file's).
    workspace_base: str | None = None


def ports_needed(container: Mapping[str, Any]) -> int:
    """How many consecutive ports a container asks for through its EDL_PORTS_NUM* vars."""
    values = {e.get("name"): e.get("value") for e in container.get("env") or []}
    total = 0
    for name in ("EDL_PORTS_NUM", "EDL_PORTS_NUM_FOR_SPARSE"):
        try:
            total += max(0, int(values.get(name) or 0))
        except ValueError:
            continue
    return max(1, total)


def runnable_containers(pod: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """The containers this machine runs, with their index in spec.containers."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return [
        (i, c) for i, c in enumerate(containers) if c.get("name") not in SKIPPED_CONTAINERS
    ]


def process_specs(
    pod: Mapping[str, Any], ctx: LocalContext, ports: Mapping[str, int]
) -> list[ProcessSpec]:
    """The processes for a pod: one per runnable container.

    ``ports`` maps container name to its first assigned port (EDL_PORT).
    """
    specs = []
    for index, container in runnable_containers(pod):
        path = f"spec.containers[{index}]"
        name = container.get("name") or f"c{index}"
        env = container_env(pod, container, ctx, path)
        if name in ports:
            env["EDL_PORT"] = str(ports[name])
        argv = container_argv(container, env, ctx, path)
        merged = {
            k: v for k, v in ctx.base_env.items() if not k.startswith(PARENT_ENV_DROP_PREFIX)
        }
        merged.update(env)
        merged.setdefault("PYTHONUNBUFFERED", "1")
        specs.append(ProcessSpec(container=name, argv=argv, env=merged))
    return specs


def container_argv(
    container: Mapping[str, Any], env: Mapping[str, str], ctx: LocalContext, path: str
) -> list[str]:
    """command + args with $(VAR) expanded as Kubernetes does, and local executables resolved."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    argv = [expand(str(part), env) for part in command + args]
    if not argv:
        raise PodSpecError(f"{path}.command", "empty: a local run cannot use an image's entrypoint")
    argv[0] = resolve_executable(argv[0], ctx)
    return argv


def resolve_executable(name: str, ctx: LocalContext) -> str:
    """Map the container's executable name onto this machine's interpreter and edl."""
    if name == "edl":
        return ctx.edl_executable
    if name in ("python", "python3", "python3.11"):
        return ctx.python_executable
    return name


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], ctx: LocalContext, path: str
) -> dict[str, str]:
    """The container's env list resolved in order, then the local-run overrides."""
    env: dict[str, str] = {}
    for j, item in enumerate(container.get("env") or []):
        name = item.get("name")
        if not name:
            raise PodSpecError(f"{path}.env[{j}].name", "missing")
        if name in ctx.override_env:
            env[name] = ctx.override_env[name]
        elif "valueFrom" in item:
            env[name] = value_from(pod, item["valueFrom"], ctx, f"{path}.env[{j}].valueFrom")
        else:
            env[name] = expand(str(item.get("value", "")), env)
    for name, value in ctx.default_env.items():
        env.setdefault(name, value)
    workspace = env.get("EDL_WORKSPACE")
    if ctx.workspace_base is not None and workspace is not None:
        env["EDL_WORKSPACE"] = str(Path(ctx.workspace_base, workspace or ".").resolve())
    env["EDL_ETCD_ENDPOINTS"] = ctx.etcd_endpoints
    # no Service DNS here: a collective job's agents find the store through etcd
    env.pop("EDL_RDZV_ENDPOINT", None)
    env["EDL_POD_IP"] = LOCAL_POD_IP
    env["EDL_POD_NAME"] = str((pod.get("metadata") or {}).get("name", ""))
    return env


def value_from(
    pod: Mapping[str, Any], source: Mapping[str, Any], ctx: LocalContext, path: str
) -> str:
    """Resolve a downward-API fieldRef the way the kubelet would on this machine."""
    ref = source.get("fieldRef")
    if ref is None:
        raise PodSpecError(path, "only fieldRef is supported in local runs")
    field_path = ref.get("fieldPath", "")
    meta = pod.get("metadata") or {}
    known = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "status.podIP": LOCAL_POD_IP,
        "status.hostIP": LOCAL_POD_IP,
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName") or ctx.node_name,
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
    }
    if field_path in known:
        return str(known[field_path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PodSpecError(f"{path}.fieldRef.fieldPath", f"unsupported field {field_path!r}")


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion: known names substituted, unknown kept, $$ -> $."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(replace, text)


def default_context(
    etcd_endpoints: str,
    node_name: str,
    base_env: Mapping[str, str],
    default_env: Mapping[str, str] | None = None,
    workspace_base: str | None = None,
    override_env: Mapping[str, str] | None = None,
) -> LocalContext:
    """Context for this interpreter: edl and python resolved next to sys.executable."""
    python = sys.executable
    edl = Path(python).with_name("edl")
    return LocalContext(
        edl_executable=str(edl),
        python_executable=python,
        etcd_endpoints=etcd_endpoints,
        node_name=node_name,
        base_env=dict(base_env),
        default_env=dict(default_env or {}),
        workspace_base=workspace_base,
        override_env=dict(override_env or {}),
    )
