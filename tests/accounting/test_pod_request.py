"""pod_request follows Kubernetes' effective-request rule."""

from __future__ import annotations

import pytest

from edl.accounting import PodRequestError, PodResources, pod_request


def _pod(containers=(), init=(), overhead=None):
    spec = {"containers": list(containers), "initContainers": list(init)}
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def _c(requests=None, limits=None, restart=None):
    container = {"name": "c", "resources": {}}
    if requests:
        container["resources"]["requests"] = requests
    if limits:
        container["resources"]["limits"] = limits
    if restart:
        container["restartPolicy"] = restart
    return container


def test_app_containers_are_summed_and_memory_rounds_up() -> None:
    pod = _pod([_c({"cpu": "500m", "memory": "100Mi"}), _c({"cpu": "0.25", "memory": "1M"})])
    res = pod_request(pod)
    assert res.cpu_request_milli == 750
    # 100Mi + 1M = 105,857,600 bytes -> 106 mega (rounded once, up)
    assert res.memory_request_mega == 106


def test_init_container_counts_as_max_not_sum() -> None:
    pod = _pod([_c({"cpu": "1"})], init=[_c({"cpu": "4", "memory": "1G"})])
    res = pod_request(pod)
    assert res.cpu_request_milli == 4000  # the original would have said 5000
    assert res.memory_request_mega == 1000


def test_sidecar_init_containers_add_to_the_app_containers() -> None:
    sidecar = _c({"cpu": "1"}, restart="Always")
    later_init = _c({"cpu": "2"})
    pod = _pod([_c({"cpu": "500m"})], init=[sidecar, later_init])
    # app side: 0.5 + 1 = 1.5; init side: the later init runs beside the sidecar: 2 + 1 = 3
    assert pod_request(pod).cpu_request_milli == 3000


def test_overhead_adds_to_requests_and_only_to_set_limits() -> None:
    pod = _pod(
        [_c({"cpu": "1", "memory": "1G"}, {"cpu": "2"})], overhead={"cpu": "100m", "memory": "10M"}
    )
    res = pod_request(pod)
    assert (res.cpu_request_milli, res.memory_request_mega) == (1100, 1010)
    assert (res.cpu_limit_milli, res.memory_limit_mega) == (2100, 0)


def test_limit_without_request_requests_the_limit_and_gpu_names() -> None:
    pod = _pod(
        [
            _c(None, {"cpu": "2", "nvidia.com/gpu": "1"}),
            _c(None, {"alpha.kubernetes.io/nvidia-gpu": 2}),
        ]
    )
    res = pod_request(pod)
    assert res == PodResources(
        cpu_request_milli=2000, cpu_limit_milli=2000, gpu_request=3, gpu_limit=3
    )


def test_bad_quantity_names_the_field() -> None:
    with pytest.raises(PodRequestError, match=r"spec.initContainers\[0\].resources.requests.cpu"):
        pod_request(_pod([_c({"cpu": "1"})], init=[_c({"cpu": "lots"})]))


def test_trainer_request_sizes_a_trainer_as_the_cluster_will() -> None:
    from edl.accounting import trainer_request
    from edl.api.trainingjob import TrainingJob

    job = TrainingJob.from_dict({
        "apiVersion": "edl.dev/v1", "kind": "TrainingJob", "metadata": {"name": "j"},
        "spec": {"trainer": {"entrypoint": "x", "min-instance": 1, "resources": {
            "requests": {"cpu": "500m"},
            "limits": {"cpu": "1", "memory": "100Mi", "nvidia.com/gpu": 2}}}},
    })
    per_pod = trainer_request(job)
    # memory and GPUs have only limits: Kubernetes uses them as the requests
    assert (per_pod.cpu_request_milli, per_pod.cpu_limit_milli) == (500, 1000)
    assert (per_pod.memory_request_mega, per_pod.memory_limit_mega) == (105, 105)
    assert (per_pod.gpu_request, per_pod.gpu_limit) == (2, 2)
