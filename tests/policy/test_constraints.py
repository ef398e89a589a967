"""Room a job's pods can actually use: taints, selectors, affinity, every resource,
namespace quotas, room held for a preemptor and pending pods served by priority."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting import inquire_resource, pod_request
from edl.accounting.eligibility import NodeFacts, constraints_of
from edl.accounting.ledger import pending_pod_resources
from edl.policy import JobView, Trainer, get_policy
from edl.policy.room import Room, extra_dimensions
from edl.policy.steps import place_pending_pods

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
A100 = {"nvidia.com/gpu.product": "A100"}


def resource(keyword: str) -> str:
    """`amd_com_gpu` -> `amd.com/gpu` (keyword arguments cannot spell resource names)."""
    *domain, name = keyword.split("_")
    return ".".join(domain) + "/" + name


def node(name, cpu=8, gpu=0, labels=None, taints=(), pods=None, **extended):
    allocatable = {"cpu": str(cpu), "memory": "64Gi"}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    if pods is not None:
        allocatable["pods"] = str(pods)
    allocatable.update({resource(k): str(v) for k, v in extended.items()})
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                   **(labels or {})}},
            "spec": {"taints": list(taints)}, "status": {"allocatable": allocatable}}


def pod(name, node_name="", cpu="1", namespace="default", labels=None, **extra):
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu,
                                                                    "memory": "1Gi"}}}],
            **extra.pop("spec", {})}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending",
                                     **extra.pop("status", {})}}


def trainer_spec(cpu="1", gpu=0, tolerations=None, selector=None, **extended):
    requests = {"cpu": cpu, "memory": "1Gi", **{resource(k): str(v)
                                                for k, v in extended.items()}}
    limits = {"nvidia.com/gpu": str(gpu)} if gpu else {}
    spec = {"containers": [{"name": "trainer",
                            "resources": {"requests": requests, "limits": limits}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    if selector:
        spec["nodeSelector"] = selector
    return spec


def view(name, spec, lo, hi, placed=(), namespace="default", **kw):
    per_pod = pod_request({"spec": spec})
    trainers = tuple(Trainer(f"{name}-{i}", n) for i, n in enumerate(placed))
    return JobView.from_pod_resources(
        namespace, name, min_instance=lo, max_instance=hi, parallelism=len(placed),
        per_pod=per_pod, total=len(placed), running=len(placed), pending=0, unscheduled=0,
        trainers=trainers, constraints=constraints_of(spec), **kw,
    )


def trainer_pods(job_view, spec):
    return [
        {"metadata": {"name": t.name, "namespace": job_view.namespace,
                      "labels": {"edl.dev/role": "trainer"}},
         "spec": {**spec, "nodeName": t.node}, "status": {"phase": "Running"}}
        for t in job_view.trainers
    ]


def plan(nodes, pods, views, policy="default", quotas=()):
    resources = inquire_resource(nodes, pods)
    if quotas:
        from dataclasses import replace

        from edl.accounting.quota import quota_room
        # synced, as the quota controller leaves them: status.hard is spec.hard
        synced = [{**q, "status": {"hard": q["spec"]["hard"], **q.get("status", {})}}
                  for q in quotas]
        resources = replace(resources, quotas=tuple(quota_room(q) for q in synced))
    decisions = get_policy(policy).plan(views, resources, 1.0)
    return {d.name: d for d in decisions}


def gpu_cluster():
    return [node("cpu-1"), node("cpu-2"),
            node("gpu-1", gpu=4, labels=A100, taints=[GPU_TAINT]),
            node("gpu-2", gpu=4, labels=A100, taints=[GPU_TAINT])]


def test_a_job_without_the_toleration_never_counts_tainted_nodes():
    plain_spec = trainer_spec()
    plain = view("plain", plain_spec, 1, 40, placed=["cpu-1"])
    for policy in ("default", "goodput"):
        decision = plan(gpu_cluster(), trainer_pods(plain, plain_spec), [plain], policy)["plain"]
        assert decision.target == 16  # 2 x 8 cores, not the GPU nodes' 16 more
        assert set(decision.placement) <= {"cpu-1", "cpu-2"}
        assert "no node whose taints it tolerates has room for more" in decision.reason


def test_a_gpu_job_with_toleration_and_selector_grows_only_onto_the_gpu_pool():
    gpu_spec = trainer_spec(gpu=1, tolerations=TOLERATE_GPU, selector=A100)
    gpu = view("gpu", gpu_spec, 1, 20, placed=["gpu-1"])
    decision = plan(gpu_cluster(), trainer_pods(gpu, gpu_spec), [gpu])["gpu"]
    assert decision.target == 8
    assert set(decision.placement) <= {"gpu-1", "gpu-2"}
    assert "no node matching nvidia.com/gpu.product=A100 has room" in decision.reason


def test_fair_shares_follow_the_pools_jobs_can_use():
    """A CPU job and a GPU-pool job do not share each other's nodes: each fills its own."""
    plain_spec = trainer_spec(cpu="2")
    pool_spec = trainer_spec(cpu="2", tolerations=TOLERATE_GPU, selector=A100)
    plain = view("plain", plain_spec, 1, 40, placed=["cpu-1"])
    pool = view("pool", pool_spec, 1, 40, placed=["gpu-1"])
    pods = trainer_pods(plain, plain_spec) + trainer_pods(pool, pool_spec)
    decisions = plan(gpu_cluster(), pods, [plain, pool])
    assert decisions["plain"].target == 8 and decisions["pool"].target == 8
    assert set(decisions["pool"].placement) <= {"gpu-1", "gpu-2"}


def test_pods_allocatable_and_extended_resources_bound_the_room():
    nodes = [node("small", cpu=64, pods=3), node("amd", cpu=64, amd_com_gpu=2)]
    spec = trainer_spec(amd_com_gpu=1)
    job = view("amd", spec, 1, 10, placed=["amd"])
    decision = plan(nodes, [*trainer_pods(job, spec), pod("x", "small"), pod("y", "small")],
                    [job])["amd"]
    assert decision.target == 2 and decision.placement == ("amd",)
    assert "with amd.com/gpu" in decision.reason
    plain_spec = trainer_spec()
    plain = view("plain", plain_spec, 1, 10, placed=["small"])
    pods = [*trainer_pods(plain, plain_spec), pod("x", "small")]
    decision = plan([node("small", cpu=64, pods=3)], pods, [plain])["plain"]
    assert decision.target == 2  # 3 pods fit the node; two are there


def test_a_quota_stops_growth_and_the_reason_names_it():
    quota = {"metadata": {"name": "team", "namespace": "ml"},
             "spec": {"hard": {"requests.cpu": "4", "count/pods": "10"}},
             "status": {"used": {"requests.cpu": "2", "count/pods": "2"}}}
    spec = trainer_spec()
    a = view("a", spec, 1, 10, placed=["cpu-1"], namespace="ml")
    b = view("b", spec, 1, 10, placed=["cpu-2"], namespace="ml")
    pods = trainer_pods(a, spec) + trainer_pods(b, spec)
    decisions = plan([node("cpu-1"), node("cpu-2")], pods, [a, b], quotas=[quota])
    assert decisions["a"].target + decisions["b"].target == 4  # 2 used + 2 more cores
    for decision in decisions.values():
        assert "namespace quota ml/team (requests.cpu: 4000m of 4000m" in decision.reason
    other = view("other", spec, 1, 10, placed=["cpu-1"], namespace="elsewhere")
    decision = plan([node("cpu-1"), node("cpu-2")], trainer_pods(other, spec), [other],
                    quotas=[quota])["other"]
    assert decision.target == 10  # another namespace's quota does not count


def test_a_priority_class_scoped_quota_counts_only_its_class():
    quota = {"metadata": {"name": "high", "namespace": "ml"},
             "spec": {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
                 {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}},
             "status": {"used": {"pods": "1"}}}
    spec = trainer_spec()
    low = view("low", spec, 1, 5, placed=["cpu-1"], namespace="ml", priority_class="low")
    high = view("high", spec, 1, 5, placed=["cpu-2"], namespace="ml", priority_class="high")
    pods = trainer_pods(low, spec) + trainer_pods(high, spec)
    decisions = plan([node("cpu-1"), node("cpu-2")], pods, [low, high], quotas=[quota])
    assert decisions["low"].target == 5
    assert decisions["high"].target == 1 and "ml/high" in decisions["high"].reason


def test_room_held_for_a_preemptor_is_never_grown_into():
    spec = trainer_spec()
    job = view("job", spec, 1, 10, placed=["cpu-1"])
    preemptor = pod("web", cpu="6", status={"nominatedNodeName": "cpu-2"})
    pods = [*trainer_pods(job, spec), preemptor]
    decision = plan([node("cpu-1"), node("cpu-2")], pods, [job])["job"]
    assert decision.target == 1 + 7 + 2  # cpu-2 keeps 6 cores for the nominated pod
    assert decision.placement.count("cpu-2") == 2


def test_pending_pods_take_room_by_priority():
    resources = inquire_resource(
        [node("only", cpu=4)],
        [pod("low", cpu="3", spec={"priority": 10}), pod("high", cpu="3",
                                                         spec={"priority": 1000})],
    )
    room = Room(resources.nodes, extra_dimensions(resources.nodes, []))
    left = place_pending_pods(resources, room)
    assert len(left) == 1 and left[0][0][0] == 3000
    assert resources.pending[0].priority in (10, 1000)
    assert sorted(p.priority for p in resources.pending) == [10, 1000]


def test_a_pending_pods_constraints_are_read():
    spec = {"tolerations": TOLERATE_GPU, "priority": 5,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    resources = pending_pod_resources({"spec": spec}, pod_request({"spec": spec}))
    assert resources.priority == 5
    assert resources.constraints.tolerations[0].key == "nvidia.com/gpu"


# -- property: every grown trainer lands where its pods may go ---------------------------

@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(2, 16), st.booleans(), st.sampled_from(["a", "b"]),
                       st.integers(0, 2)), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.sampled_from([None, "a", "b"]),
                       st.integers(0, 1), st.integers(1, 12)), min_size=1, max_size=4),
    st.sampled_from(["default", "goodput"]),
)
def test_growth_only_onto_eligible_nodes_within_every_resource(nodes_raw, jobs_raw, policy):
    nodes = [
        node(f"n{i}", cpu=cpu, labels={"pool": pool}, taints=[GPU_TAINT] if tainted else (),
             pods=6, example_com_dev=dev)
        for i, (cpu, tainted, pool, dev) in enumerate(nodes_raw)
    ]
    views, specs = [], {}
    for j, (cpu, tolerant, pool, dev, hi) in enumerate(jobs_raw):
        spec = trainer_spec(cpu=str(cpu), tolerations=TOLERATE_GPU if tolerant else None,
                            selector={"pool": pool} if pool else None,
                            **({"example_com_dev": dev} if dev else {}))
        views.append(view(f"j{j}", spec, 1, hi, placed=[]))
        specs[f"j{j}"] = spec
    resources = inquire_resource(nodes, [])
    decisions = get_policy(policy).plan(views, resources, 1.0)
    free = {n["metadata"]["name"]: [int(n["status"]["allocatable"]["cpu"]) * 1000, 6,
                                    int(n["status"]["allocatable"].get("example.com/dev", 0))]
            for n in nodes}
    facts = resources.nodes.facts
    for decision in decisions:
        spec = specs[decision.name]
        constraints = constraints_of(spec)
        per_pod = pod_request({"spec": spec})
        dev = dict(per_pod.extended).get("example.com/dev", 0)
        for name in decision.placement:
            assert constraints.blocker(facts.get(name) or NodeFacts(name)) == ""
            free[name][0] -= per_pod.cpu_request_milli
            free[name][1] -= 1
            free[name][2] -= dev
    assert all(min(values) >= 0 for values in free.values())


def test_a_job_below_min_gets_the_namespace_quota_another_job_holds():
    """Job `a` grew to the whole quota before `b` came: `b`'s trainers are refused at
    creation until `a` gives back what `b` needs to reach min (victims named), and
    then down to its fair share of the quota (3 each of 6 trainers' worth)."""
    quota = {"metadata": {"name": "team", "namespace": "ml"},
             "spec": {"hard": {"requests.cpu": "6"}},
             "status": {"used": {"requests.cpu": "6"}}}
    spec = trainer_spec()
    a = view("a", spec, 1, 10, placed=["cpu-1"] * 6, namespace="ml")
    b = JobView.from_pod_resources(
        "ml", "b", min_instance=2, max_instance=10, parallelism=2,
        per_pod=pod_request({"spec": spec}), total=0, running=0, pending=0, unscheduled=0,
        trainers=(), constraints=constraints_of(spec))
    decisions = plan([node("cpu-1"), node("cpu-2")], trainer_pods(a, spec), [a, b],
                     quotas=[quota])
    assert decisions["a"].target == 3 and len(decisions["a"].victims) == 3
    assert "cannot admit the namespace's pods" in decisions["a"].reason
    assert "give quota to b below its fair share" in decisions["a"].reason
    assert decisions["b"].target == 2
    # once a's three victims are gone the quota has room for b's three: no further shrink
    leaving = view("a", spec, 1, 10, placed=["cpu-1"] * 6, namespace="ml")
    leaving = JobView.from_pod_resources(
        "ml", "a", min_instance=1, max_instance=10, parallelism=3,
        per_pod=pod_request({"spec": spec}), total=6, running=6, pending=0, unscheduled=0,
        trainers=tuple(Trainer(t.name, t.node, i < 3) for i, t in enumerate(leaving.trainers)),
        constraints=constraints_of(spec))
    decisions = plan([node("cpu-1"), node("cpu-2")], trainer_pods(a, spec), [leaving, b],
                     quotas=[quota])
    assert decisions["a"].target == 3 and decisions["b"].target == 2
