"""The quota admission's "must specify" rule (`pkg/quota/v1/evaluator/core/pods.go`
`podEvaluator.Constraints` / `enforcePodContainerConstraints`), against a transcription:
a quota on cpu or memory (requests, limits, or the bare name) makes every container and
init container state it. Found missing by the constrained fidelity run: the real API
server refused edl's master pod, whose etcd sidecar stated no CPU (docs/fidelity.md)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.accounting.quota import QuotaPod, missing_requests, quota_room
from edl.jobparser import JobParser

VALIDATION = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
              "limits.memory")


def quota(*keys: str, name: str = "cap") -> list:
    return [quota_room({"metadata": {"name": name, "namespace": "ns"},
                        "spec": {"hard": {key: "10" for key in keys}}})]


def transcription(keys: set[str], containers: list[dict]) -> set[tuple[str, str]]:
    """(resource, container) pairs upstream reports missing, written out from pods.go."""
    required = keys & set(VALIDATION)
    missing = set()
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = dict(resources.get("requests") or {})
        for name in limits:  # API defaulting: a limit without a request requests it
            requests.setdefault(name, limits[name])
        usage = set()
        if "cpu" in requests:
            usage |= {"cpu", "requests.cpu"}
        if "memory" in requests:
            usage |= {"memory", "requests.memory"}
        if "cpu" in limits:
            usage.add("limits.cpu")
        if "memory" in limits:
            usage.add("limits.memory")
        missing |= {(resource, container["name"]) for resource in required - usage}
    return missing


resource_lists = st.dictionaries(st.sampled_from(["cpu", "memory"]), st.just("1"), max_size=2)
containers = st.lists(st.builds(
    lambda name, requests, limits: {"name": name, "resources": {
        **({"requests": requests} if requests else {}), **({"limits": limits} if limits else {})}},
    st.sampled_from(["a", "b", "etcd"]), resource_lists, resource_lists),
    max_size=3, unique_by=lambda c: c["name"])


@given(st.sets(st.sampled_from([*VALIDATION, "count/pods", "requests.nvidia.com/gpu"]),
               min_size=1), containers)
def test_must_specify_matches_the_transcription(keys, pod_containers):
    message = missing_requests(quota(*sorted(keys)), "ns", {"containers": pod_containers},
                               QuotaPod())
    expected = transcription(keys, pod_containers)
    assert bool(message) == bool(expected)
    for resource, container in expected:
        assert resource in message and container in message


def test_the_message_is_the_api_servers():
    spec = {"containers": [{"name": "master", "resources": {"requests": {"cpu": "1"}}},
                           {"name": "etcd"}]}
    assert (missing_requests(quota("requests.cpu", name="research-cap"), "ns", spec,
                             QuotaPod())
            == "failed quota: research-cap: must specify requests.cpu for: etcd")
    assert missing_requests(quota("count/pods"), "ns", spec, QuotaPod()) == ""
    assert missing_requests(quota("requests.cpu"), "other", spec, QuotaPod()) == ""


def test_every_container_of_edls_master_pod_states_cpu_and_memory():
    job = {"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
           "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"image": "img", "fault_tolerant": True,
                    "trainer": {"entrypoint": "python t.py", "workspace": "/w",
                                "min-instance": 1, "max-instance": 2,
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    "pserver": {"min-instance": 1, "max-instance": 1,
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    "master": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}}
    parser = JobParser()
    parsed = parser.validate(job)
    master = parser.parse_to_master(parsed)
    spec = master["spec"]["template"]["spec"]
    assert "etcd" in [c["name"] for c in spec["containers"]]
    assert missing_requests(quota("requests.cpu", "requests.memory"), "ns", spec,
                            QuotaPod()) == ""
