"""Any JSON List is either planned or refused with SnapshotError — never a crash."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from edl.policy import get_policy
from edl.snapshot import SnapshotError, parse_snapshot, plan_inputs

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10), st.sampled_from(["", "1", "500m", "x", "2Gi"])
)
garbage = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2),
        st.dictionaries(st.sampled_from(["a", "cpu"]), inner, max_size=2),
    ),
    max_leaves=4,
)


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """The valid shape 24 times in 25, anything JSON otherwise."""
    return st.integers(0, 24).flatmap(lambda n: garbage if n == 0 else valid)


quantity = mostly(st.sampled_from(["1", "500m", "2Gi", 3]))
resources = mostly(st.fixed_dictionaries({}, optional={"cpu": quantity, "memory": quantity}))
requirements = mostly(
    st.fixed_dictionaries({}, optional={"requests": resources, "limits": resources})
)
container = st.fixed_dictionaries({"name": st.just("c")}, optional={"resources": requirements})
LABELS = {"edl.dev/job": "a", "edl.dev/role": "trainer"}
metadata = mostly(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "a-trainer", "n1", "p1", "p2"])},
        optional={
            "namespace": mostly(st.just("ns")),
            "labels": mostly(st.just(LABELS)),
            "ownerReferences": mostly(st.just([{"kind": "Job", "name": "a-trainer"}])),
        },
    )
)
selector = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "matchLabels": mostly(st.just(LABELS)),
            "matchExpressions": mostly(
                st.just([{"key": "edl.dev/job", "operator": "In", "values": ["a"]}])
            ),
        },
    )
)


@st.composite
def items(draw, kind=None):
    kind = kind or draw(st.sampled_from(["Node", "Pod", "Pod", "Job", "TrainingJob", "Other"]))
    item = {"kind": kind, "metadata": draw(metadata)}
    if kind in ("Job", "TrainingJob") and isinstance(item["metadata"], dict):
        item["metadata"]["name"] = "a-trainer" if kind == "Job" else "a"
    if kind == "Node":
        item["status"] = draw(mostly(st.fixed_dictionaries({"allocatable": resources})))
    elif kind == "Pod":
        spec = {"containers": mostly(st.lists(container, max_size=2))}
        optional = {
            "nodeName": mostly(st.sampled_from(["n1", ""])),
            "initContainers": mostly(st.lists(container, max_size=1)),
        }
        item["spec"] = draw(mostly(st.fixed_dictionaries(spec, optional=optional)))
        item["status"] = draw(
            mostly(
                st.fixed_dictionaries({"phase": st.sampled_from(["Pending", "Running", "Failed"])})
            )
        )
    elif kind == "Job":
        optional = {"parallelism": mostly(st.integers(0, 5)), "selector": selector}
        item["spec"] = draw(mostly(st.fixed_dictionaries({}, optional=optional)))
    elif kind == "TrainingJob":
        item["apiVersion"] = "edl.dev/v1"
        trainer = {
            "entrypoint": st.just("python train.py"),
            "min-instance": mostly(st.integers(1, 3)),
            "max-instance": mostly(st.integers(1, 6)),
            "resources": requirements,
        }
        item["spec"] = draw(
            mostly(st.fixed_dictionaries({"trainer": mostly(st.fixed_dictionaries(trainer))}))
        )
    return item


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items("TrainingJob"), items("Job"), items("Node"), st.lists(items(), max_size=6))
def test_any_list_is_planned_or_refused_cleanly(job, trainer, node, objects) -> None:
    objects = [job, trainer, node, *objects]
    text = json.dumps({"kind": "List", "items": objects})
    try:
        inputs = plan_inputs(parse_snapshot(text))
    except SnapshotError as error:
        assert "\n" not in str(error)
        event("refused")
        return
    event(f"planned ({'some' if inputs.jobs else 'no'} jobs)")
    for name in ("default", "reference"):
        decisions = get_policy(name).plan(inputs.jobs, inputs.resources, 0.97)
        assert len(decisions) == len(inputs.jobs)
