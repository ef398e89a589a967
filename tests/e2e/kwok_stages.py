"""kwok's configuration for the e2e cluster: the lifecycle its fake kubelets play.

Adapted from kwok's own stage sets (kustomize/stage/node/fast and pod/general of
sigs.k8s.io/kwok), with three changes that make pods behave like long-running trainers
rather than batch work:

* no `pod-complete` stage: a running pod runs until it is deleted (kwok's general set
  would complete every Job pod at once, finishing every trainer Job);
* `pod-terminate`: a pod being deleted that still carries finalizers (the Job controller's
  tracking finalizer) is first terminated with exit code 143, as a kubelet's SIGTERM would;
  the Job controller then removes the finalizer and `pod-delete` removes the pod;
* `pod-crash`: trainer pods of the jobs named in `PlaneConfig.crash_jobs` exit 1 with a
  Python traceback's last line as their termination message, to exercise backoffLimit;
  `pod-config-error`: those of `PlaneConfig.config_error_jobs` exit 78 (EX_CONFIG), which
  the trainer Job's podFailurePolicy makes fail the Job at once; `pod-complete`: those of
  `PlaneConfig.complete_jobs` exit 0 (the work is done), which completes the trainer Job.

No node heartbeat stage: no node lifecycle controller runs, so nothing marks nodes NotReady.
"""

from __future__ import annotations

from typing import Any

API = "kwok.x-k8s.io/v1alpha1"
CRASH_MESSAGE = "RuntimeError: injected trainer crash (kwok stage pod-crash)"
CONFIG_ERROR_MESSAGE = "edl trainer: EDL_WORKSPACE is not a directory (kwok stage pod-config-error)"


def _stage(name: str, kind: str, selector: list[dict[str, Any]], delay_ms: int,
           next_: dict[str, Any], jitter_ms: int = 0) -> dict[str, Any]:
    """One Stage; with `jitter_ms` > `delay_ms` kwok draws the delay uniformly from
    [delay_ms, jitter_ms) (sigs.k8s.io/kwok pkg/utils/lifecycle `Stage.Delay`)."""
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": selector},
        "next": next_,
    }
    if delay_ms or jitter_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms}
        if jitter_ms > delay_ms:
            spec["delay"]["jitterDurationMilliseconds"] = jitter_ms
    return {"apiVersion": API, "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


NOT_DELETED = _expr(".metadata.deletionTimestamp", "DoesNotExist")
DELETED = _expr(".metadata.deletionTimestamp", "Exists")

NODE_INITIALIZE = """
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ NodeName | Quote }}
  type: Hostname
allocatable:
{{ YAML .status.allocatable 1 }}
capacity:
{{ YAML .status.capacity 1 }}
nodeInfo:
  architecture: amd64
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  operatingSystem: linux
phase: Running
"""

POD_CREATED = ("""
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  reason: ContainersNotReady
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  reason: ContainersNotReady
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    waiting:
      reason: ContainerCreating
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) """
    """( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Pending
""")

POD_RUNNING = """
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _terminated(exit_code: int, reason: str, message: str, phase: str = "Failed") -> str:
    return f"""
{{{{ $now := Now }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: PodFailed
  status: "False"
  type: Ready
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      reason: {reason}
      message: {message!r}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""


ROLE = '.metadata.labels["edl.dev/role"]'


def _delete_stages(config: Any) -> list[dict[str, Any]]:
    """Remove a deleted pod without finalizers after its termination time: `pod_stop_ms`,
    or per `edl.dev/role` as `config.role_stop_ms` says (the selectors are disjoint, so
    exactly one stage matches each pod; a pod without the label is "other")."""
    gone = [DELETED, _expr(".metadata.finalizers", "DoesNotExist")]
    roles = dict(config.role_stop_ms)
    if not roles:
        return [_stage("pod-delete", "Pod", gone, config.pod_stop_ms, {"delete": True})]
    stages = [_stage(f"pod-delete-{role}", "Pod", [*gone, _expr(ROLE, "In", role)], delay,
                     {"delete": True}) for role, delay in sorted(roles.items())]
    stages.append(_stage("pod-delete-other", "Pod", [*gone, _expr(ROLE, "NotIn", *sorted(roles))],
                         config.pod_stop_ms, {"delete": True}))
    return stages


def kwok_config(config: Any) -> list[dict[str, Any]]:
    """The Stage documents for a `PlaneConfig` (node and pod lifecycles, crash injection)."""
    node_ready = _expr('.status.conditions.[] | select( .type == "Ready" ) | .status',
                       "NotIn", "True")
    pod_stages = [
        _stage("pod-create", "Pod",
               [NOT_DELETED, _expr(".status.podIP", "DoesNotExist")],
               config.pod_start_ms, {"statusTemplate": POD_CREATED}),
        _stage("pod-ready", "Pod",
               [NOT_DELETED, _expr(".status.phase", "In", "Pending"),
                _expr(".status.podIP", "Exists")],
               config.pod_ready_ms, {"statusTemplate": POD_RUNNING},
               config.pod_ready_jitter_ms),
        _stage("pod-terminate", "Pod",
               [DELETED, _expr(".metadata.finalizers", "Exists"),
                _expr(".status.phase", "In", "Pending", "Running")],
               config.pod_stop_ms,
               {"statusTemplate": _terminated(143, "Error", "terminated by SIGTERM")}),
        *_delete_stages(config),
    ]
    if config.crash_jobs:
        pod_stages.append(_stage(
            "pod-crash", "Pod",
            [NOT_DELETED, _expr(".status.phase", "In", "Running"),
             _expr('.metadata.labels["edl.dev/role"]', "In", "trainer"),
             _expr('.metadata.labels["edl.dev/job"]', "In", *config.crash_jobs)],
            config.crash_after_ms,
            {"statusTemplate": _terminated(1, "Error", CRASH_MESSAGE)}))
    if config.config_error_jobs:
        pod_stages.append(_stage(
            "pod-config-error", "Pod",
            [NOT_DELETED, _expr(".status.phase", "In", "Running"),
             _expr('.metadata.labels["edl.dev/role"]', "In", "trainer"),
             _expr('.metadata.labels["edl.dev/job"]', "In", *config.config_error_jobs)],
            config.crash_after_ms,
            {"statusTemplate": _terminated(78, "Error", CONFIG_ERROR_MESSAGE)}))
    if getattr(config, "complete_jobs", ()):
        pod_stages.append(_stage(
            "pod-complete", "Pod",
            [NOT_DELETED, _expr(".status.phase", "In", "Running"),
             _expr('.metadata.labels["edl.dev/role"]', "In", "trainer"),
             _expr('.metadata.labels["edl.dev/job"]', "In", *config.complete_jobs)],
            config.crash_after_ms,
            {"statusTemplate": _terminated(0, "Completed", "", "Succeeded")}))
    return [_stage("node-initialize", "Node", [node_ready], 0,
                   {"statusTemplate": NODE_INITIALIZE}), *pod_stages]
