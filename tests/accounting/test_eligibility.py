"""Node eligibility as kube-scheduler's TaintToleration and NodeAffinity filters decide it.

Tables: cases from the upstream semantics (component-helpers `ToleratesTaint`,
`FindMatchingUntoleratedTaint`, `nodeaffinity.GetRequiredNodeAffinity(...).Match`).
Properties (hypothesis): the algebra those rules imply, and that a plan's grouped
evaluation (`Room.eligible`) equals asking every node.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting import Nodes
from edl.accounting.eligibility import (
    NO_CONSTRAINTS,
    NodeFacts,
    PodConstraints,
    Requirement,
    Taint,
    Term,
    Toleration,
    constraints_of,
    find_untolerated_taint,
    node_facts,
    requirement_matches,
    tolerates,
)
from edl.policy.room import Room

GPU = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), GPU, True),
    (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), GPU, True),
    (Toleration("nvidia.com/gpu", "", "present", ""), GPU, True),  # "" operator: Equal
    (Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), GPU, False),
    (Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"), GPU, False),  # other effect
    (Toleration("", "Exists", "", ""), GPU, True),  # tolerates everything
    (Toleration("other", "Exists", "", ""), GPU, False),
    (Toleration("nvidia.com/gpu", "Gt", "1", ""), Taint("nvidia.com/gpu", "2", "NoSchedule"),
     False),  # comparison operators are feature-gated off
])
def test_tolerates_taint(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_prefer_no_schedule_never_filters():
    soft = Taint("spot", "true", "PreferNoSchedule")
    assert find_untolerated_taint([soft], []) is None
    assert find_untolerated_taint([soft, GPU], []) == GPU
    evict = Taint("maintenance", "", "NoExecute")
    assert find_untolerated_taint([evict], []) == evict


def facts(labels=None, taints=(), name="n1"):
    return NodeFacts(name, tuple(sorted((labels or {}).items())), tuple(taints))


def spec_with(**spec):
    return constraints_of(spec)


@pytest.mark.parametrize(("requirement", "labels", "expected"), [
    (Requirement("zone", "In", ("a", "b")), {"zone": "a"}, True),
    (Requirement("zone", "In", ("a", "b")), {}, False),
    (Requirement("zone", "NotIn", ("a",)), {}, True),
    (Requirement("zone", "NotIn", ("a",)), {"zone": "a"}, False),
    (Requirement("zone", "Exists"), {"zone": ""}, True),
    (Requirement("zone", "DoesNotExist"), {"zone": ""}, False),
    (Requirement("cores", "Gt", ("8",)), {"cores": "16"}, True),
    (Requirement("cores", "Gt", ("8",)), {"cores": "8"}, False),
    (Requirement("cores", "Lt", ("8",)), {"cores": "4"}, True),
    (Requirement("cores", "Lt", ("8",)), {"cores": "four"}, False),
    (Requirement("cores", "Gt", ("8",)), {}, False),
])
def test_requirement_operators(requirement, labels, expected):
    assert requirement_matches(requirement, labels) is expected


def affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def test_node_selector_and_required_affinity_must_both_hold():
    c = spec_with(
        nodeSelector={"nvidia.com/gpu.product": "A100"},
        affinity=affinity({"matchExpressions": [{"key": "zone", "operator": "In",
                                                  "values": ["a"]}]}),
    )
    assert c.selects(facts({"nvidia.com/gpu.product": "A100", "zone": "a"}))
    assert not c.selects(facts({"nvidia.com/gpu.product": "A100", "zone": "b"}))
    assert not c.selects(facts({"zone": "a"}))
    assert c.describe() == "nvidia.com/gpu.product=A100, zone In a"


def test_terms_are_ored_and_an_empty_or_bad_term_matches_nothing():
    zone_a = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    bad = {"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}
    assert spec_with(affinity=affinity(zone_a, {})).selects(facts({"zone": "a"}))
    assert not spec_with(affinity=affinity({})).selects(facts({"zone": "a"}))
    assert not spec_with(affinity=affinity(bad)).selects(facts({"zone": "a"}))
    assert spec_with(affinity=affinity(bad, zone_a)).selects(facts({"zone": "a"}))
    gt_word = {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["x"]}]}
    assert not spec_with(affinity=affinity(gt_word)).selects(facts({"n": "5"}))


def test_match_fields_on_the_node_name():
    only = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    but = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}
    assert spec_with(affinity=affinity(only)).selects(facts(name="n2"))
    assert not spec_with(affinity=affinity(only)).selects(facts(name="n1"))
    assert spec_with(affinity=affinity(but)).selects(facts(name="n1"))
    two = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
    assert not spec_with(affinity=affinity(two)).selects(facts(name="a"))  # one value only
    assert spec_with(affinity=affinity(only)).per_node


def test_a_pod_without_constraints_is_kept_off_tainted_nodes_only():
    assert constraints_of({}) is NO_CONSTRAINTS
    assert NO_CONSTRAINTS.blocker(facts(taints=[GPU])) == (
        "untolerated taint {nvidia.com/gpu: present}")
    assert NO_CONSTRAINTS.blocker(facts({"any": "label"})) == ""


def test_node_facts_read_labels_and_taints():
    node = {"metadata": {"name": "g1", "labels": {"pool": "gpu"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                 "effect": "NoSchedule"}]}}
    assert node_facts(node) == NodeFacts("g1", (("pool", "gpu"),), (GPU,))


# -- properties -------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "zone", "kubernetes.io/hostname"])
VALUES = st.sampled_from(["", "x", "y", "3", "10", "-2"])
EFFECTS = st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])
taints = st.builds(Taint, KEYS, VALUES, EFFECTS)
tolerations = st.builds(
    Toleration, st.sampled_from(["", "a", "b", "zone"]), st.sampled_from(["", "Equal", "Exists"]),
    VALUES, st.sampled_from(["", "NoSchedule", "NoExecute", "PreferNoSchedule"]),
)
labels = st.dictionaries(KEYS, VALUES, max_size=4)
requirements = st.builds(
    Requirement, KEYS, st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
    st.lists(VALUES, max_size=2).map(tuple),
)


@given(st.lists(taints, max_size=4), st.lists(tolerations, max_size=3), tolerations)
def test_more_tolerations_never_close_a_node(node_taints, have, extra):
    before = find_untolerated_taint(node_taints, have) is None
    after = find_untolerated_taint(node_taints, [*have, extra]) is None
    assert after or not before


@given(st.lists(taints, max_size=4), st.lists(tolerations, max_size=3))
def test_only_filtering_effects_block(node_taints, have):
    blocking = find_untolerated_taint(node_taints, have)
    expected = [t for t in node_taints if t.effect != "PreferNoSchedule"
                and not any(tolerates(o, t) for o in have)]
    assert blocking == (expected[0] if expected else None)


@given(KEYS, st.lists(VALUES, min_size=1, max_size=3), labels)
def test_not_in_is_the_complement_of_in(key, values, node_labels):
    inside = requirement_matches(Requirement(key, "In", tuple(values)), node_labels)
    outside = requirement_matches(Requirement(key, "NotIn", tuple(values)), node_labels)
    assert inside != outside
    exists = requirement_matches(Requirement(key, "Exists"), node_labels)
    assert exists != requirement_matches(Requirement(key, "DoesNotExist"), node_labels)


@given(KEYS, st.integers(-5, 20), labels)
def test_gt_and_lt_compare_integers(key, bound, node_labels):
    gt = requirement_matches(Requirement(key, "Gt", (str(bound),)), node_labels)
    lt = requirement_matches(Requirement(key, "Lt", (str(bound),)), node_labels)
    value = node_labels.get(key)
    number = int(value) if value is not None and value.lstrip("-").isdigit() else None
    assert gt == (number is not None and number > bound)
    assert lt == (number is not None and number < bound)


@given(st.lists(st.lists(requirements, min_size=1, max_size=2), min_size=1, max_size=3), labels)
def test_required_terms_are_ored(raw_terms, node_labels):
    terms = [Term(tuple(reqs), (), all(_ok(r) for r in reqs)) for reqs in raw_terms]
    node = facts(node_labels)
    whole = PodConstraints(required=tuple(terms)).selects(node)
    assert whole == any(PodConstraints(required=(t,)).selects(node) for t in terms)


def _ok(req: Requirement) -> bool:
    if req.operator in ("In", "NotIn"):
        return bool(req.values)
    if req.operator in ("Exists", "DoesNotExist"):
        return not req.values
    return len(req.values) == 1 and req.values[0].lstrip("-").isdigit()


@settings(max_examples=60)
@given(
    st.lists(st.tuples(labels, st.lists(taints, max_size=2)), min_size=1, max_size=8),
    st.lists(tolerations, max_size=2),
    st.dictionaries(KEYS, VALUES, max_size=1),
    st.lists(st.lists(requirements, min_size=1, max_size=2), max_size=2),
)
def test_the_rooms_grouped_masks_equal_asking_every_node(nodes, have, selector, raw_terms):
    names = [f"node-{i}" for i in range(len(nodes))]
    node_objs = {
        name: NodeFacts(name, tuple(sorted({**lab, "kubernetes.io/hostname": name}.items())),
                        tuple(ts))
        for name, (lab, ts) in zip(names, nodes, strict=True)
    }
    room = Room(Nodes(cpu_idle_milli=dict.fromkeys(names, 1000), facts=node_objs))
    terms = tuple(Term(tuple(reqs), (), all(_ok(r) for r in reqs)) for reqs in raw_terms)
    constraints = PodConstraints(tuple(have), tuple(sorted(selector.items())),
                                 terms if raw_terms else None)
    allowed = room.eligible(constraints)
    expected = [constraints.blocker(node_objs[n]) == "" for n in names]
    assert (allowed.flags if allowed is not None else [True] * len(names)) == expected
