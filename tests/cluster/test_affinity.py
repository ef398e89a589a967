"""Preferred node affinity in the in-process scheduler, against upstream's NodeAffinity
score plugin: weights of matching terms, normalised to 0..100 over the feasible nodes,
added with weight 2 to NodeResourcesFit + BalancedAllocation (weight 1 each)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.cluster.inproc.affinity import AffinityError, preferred_terms
from edl.cluster.inproc.scheduler import Node, NodeIndex, resource_scores
from edl.cluster.port import ClusterError

ZONES = ("a", "b", "c")


def term(weight, expressions=(), fields=()):
    preference = {}
    if expressions:
        preference["matchExpressions"] = [
            {"key": k, "operator": op, "values": list(v)} for k, op, v in expressions]
    if fields:
        preference["matchFields"] = [
            {"key": "metadata.name", "operator": op, "values": [v]} for op, v in fields]
    return {"weight": weight, "preference": preference}


def spec(*terms):
    return {"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": list(terms)}}}


# -- an independent transcription of upstream, one node at a time ------------------------
def requirement_matches(labels, key, op, values):
    """`labels.Requirement.Matches` (apimachinery)."""
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if key not in labels:
        return False
    try:
        have = int(labels[key])
    except ValueError:
        return False
    return have > int(values[0]) if op == "Gt" else have < int(values[0])


def upstream_affinity(node_name, labels, raw_terms):
    """`PreferredSchedulingTerms.Score`: the weights of the terms the node matches."""
    total = 0
    for t in raw_terms:
        pref = t["preference"]
        exprs, fields = pref.get("matchExpressions") or [], pref.get("matchFields") or []
        if not exprs and not fields:
            continue
        ok = all(requirement_matches(labels, e["key"], e["operator"], e["values"])
                 for e in exprs)
        ok = ok and all((node_name == f["values"][0]) == (f["operator"] == "In")
                        for f in fields)
        total += t["weight"] if ok else 0
    return total


requirement = st.one_of(
    st.tuples(st.just("zone"), st.sampled_from(["In", "NotIn"]),
              st.lists(st.sampled_from(ZONES), min_size=1, max_size=2)),
    st.tuples(st.just("gpu"), st.sampled_from(["Exists", "DoesNotExist"]), st.just([])),
    st.tuples(st.just("rank"), st.sampled_from(["Gt", "Lt"]),
              st.integers(-1, 4).map(lambda v: [str(v)])),
)
terms_strategy = st.lists(
    st.builds(
        term, st.integers(1, 100), st.lists(requirement, max_size=2),
        st.lists(st.tuples(st.sampled_from(["In", "NotIn"]),
                           st.integers(0, 7).map(lambda i: f"n{i}")), max_size=1),
    ),
    min_size=1, max_size=3,
)
node_strategy = st.tuples(  # cores, GiB, used CPU and memory in 16ths, labels
    st.integers(1, 16), st.integers(1, 64), st.integers(0, 16), st.integers(0, 16),
    st.sampled_from(ZONES), st.booleans(), st.sampled_from(["0", "1", "2", "3", "x"]),
)


@given(st.lists(node_strategy, min_size=1, max_size=8), st.integers(0, 4000),
       st.integers(0, 8000), st.sampled_from(["spread", "binpack"]), terms_strategy)
def test_the_node_chosen_has_the_highest_upstream_total(nodes, cpu, memory, placement, raw):
    index = NodeIndex(placement, seed=3)
    for i, (cores, gib, used_cpu, used_gib, zone, gpu, rank) in enumerate(nodes):
        labels = {"zone": zone, "rank": rank, **({"gpu": "yes"} if gpu else {})}
        node = Node(f"n{i}", i, cores * 1000, gib * 1000, 0, labels)
        index.add(node)
        index.take(node, node.cpu_milli * used_cpu // 16, node.memory_mega * used_gib // 16, 0)
    feasible = [n for n in index.nodes
                if n.free_cpu_milli >= cpu and n.free_memory_mega >= memory]
    chosen = index.find(cpu, memory, 0, preferred_terms(spec(*raw)))
    if not feasible:
        assert chosen is None
        return
    raw_scores = {n.name: upstream_affinity(n.name, n.labels, raw) for n in feasible}
    top = max(raw_scores.values())

    def total(n):
        import numpy as np
        arr = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
        resources = int(resource_scores(
            arr(n.cpu_milli), arr(n.memory_mega), arr(n.cpu_milli - n.free_cpu_milli + cpu),
            arr(n.memory_mega - n.free_memory_mega + memory), placement)[0])
        affinity = raw_scores[n.name] * 100 // top if top else 0
        return resources + 2 * affinity

    assert chosen in feasible
    assert total(chosen) == max(total(n) for n in feasible)


def build(placement="spread"):
    index = NodeIndex(placement, seed=0)
    for i, (used, zone) in enumerate([(12000, "a"), (0, "b"), (8000, "a")]):
        node = Node(f"n{i}", i, 16000, 64000, 0, {"kubernetes.io/hostname": f"n{i}",
                                                  "zone": zone})
        index.add(node)
        index.take(node, used, used * 4, 0)
    return index


def test_a_preferred_node_outweighs_the_spreading_scores():
    index = build()
    assert index.find(2000, 2000, 0).name == "n1"  # the emptiest, without a preference
    hostname = term(100, [("kubernetes.io/hostname", "In", ["n0"])])
    assert index.find(2000, 2000, 0, preferred_terms(spec(hostname))).name == "n0"
    # NodeResourcesFit+Balanced differ by < 200 between nodes; 2 × 100 for the preference
    assert build("binpack").find(2000, 2000, 0, preferred_terms(spec(
        term(1, [("kubernetes.io/hostname", "In", ["n1"])])))).name == "n1"


def test_weights_are_normalised_to_the_best_feasible_node():
    index = build()
    # n0 matches weight 10, n2 weight 40: normalised 25 and 100 -> n2 gets 2*75 more
    raw = spec(term(10, [("zone", "In", ["a"])]), term(30, fields=[("In", "n2")]))
    assert index.find(2000, 2000, 0, preferred_terms(raw)).name == "n2"


def test_a_preference_is_never_a_requirement():
    index = build()
    # n0 has 4 cores free: a 6-core pod goes elsewhere rather than wait
    raw = spec(term(100, [("kubernetes.io/hostname", "In", ["n0"])]))
    assert index.find(6000, 6000, 0, preferred_terms(raw)).name == "n1"
    assert index.find(6000, 6000, 0, preferred_terms(spec(
        term(100, [("kubernetes.io/hostname", "In", ["gone"])])))).name == "n1"


def test_empty_terms_score_nothing():
    assert preferred_terms(spec({"weight": 5, "preference": {}})) == ()
    assert preferred_terms({}) == () and preferred_terms(None) == ()


def test_invalid_affinity_names_every_wrong_field():
    raw = spec(
        {"weight": 0, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "Near", "values": ["a"]},
            {"key": "rank", "operator": "Gt", "values": ["one"]},
            {"key": "gpu", "operator": "Exists", "values": ["x"]}]}},
        {"weight": 101, "preference": {"matchFields": [
            {"key": "metadata.labels", "operator": "In", "values": ["a", "b"]}]}},
    )
    with pytest.raises(AffinityError) as caught:
        preferred_terms(raw)
    text = str(caught.value)
    base = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for field in ("[0].weight", "[0].preference.matchExpressions[0].operator",
                  "[0].preference.matchExpressions[1].values",
                  "[0].preference.matchExpressions[2].values", "[1].weight",
                  "[1].preference.matchFields[0].key", "[1].preference.matchFields[0].values"):
        assert f"{base}{field}" in text, field


def test_the_cluster_refuses_a_pod_with_invalid_affinity_and_labels_nodes_by_hostname(
        cluster_factory):
    cluster = cluster_factory(nodes=2, cpu="8")
    assert cluster.nodes.by_name["node-0"].labels["kubernetes.io/hostname"] == "node-0"
    pod = {"metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c"}], **spec({"weight": 0, "preference": {}})}}
    with pytest.raises(ClusterError) as caught:
        cluster.create_pod(pod)
    assert caught.value.status == 422 and "weight" in str(caught.value)
