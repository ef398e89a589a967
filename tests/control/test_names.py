"""Every name edl gives a job's objects fits Kubernetes for every job name the CRD allows:
children and trainer pods within 63 characters (a trainer's hostname is its pod name),
distinct per role, and trainer pods as distinct as their random suffix."""

from __future__ import annotations

import random
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.api.names import ROLES, child_names, trainer_job_name
from edl.control.trainer_pods import NAME_SUFFIX_LEN, pod_name
from edl.kube.crd_rules import ROOT_RULES

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
(LIMIT,) = (int(m) for m in re.findall(r"name\.size\(\) <= (\d+)", ROOT_RULES[0]["rule"]))
NAME_RULE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # the CRD rule's own pattern
assert NAME_RULE.pattern in ROOT_RULES[0]["rule"]

job_names = st.from_regex(NAME_RULE, fullmatch=True).filter(lambda n: len(n) <= LIMIT)
longest = st.integers(1, LIMIT).flatmap(
    lambda size: st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=size - 1,
                         max_size=size - 1).map(lambda rest: "a" + rest.rstrip("-") + "z"))


@settings(max_examples=300, deadline=None)
@given(st.one_of(job_names, longest.filter(lambda n: len(n) <= LIMIT)), st.integers(0, 2**32))
def test_every_name_fits_for_every_job_name_the_crd_allows(name: str, seed: int) -> None:
    assert NAME_RULE.match(name)
    children = child_names(name)
    assert len(set(children.values())) == len(ROLES)
    for child in children.values():
        assert len(child) <= 63 and DNS_LABEL.match(child), child
    rng = random.Random(seed)
    pods = [pod_name(trainer_job_name(name), rng) for _ in range(20)]
    for pod in pods:
        assert len(pod) <= 63 and DNS_LABEL.match(pod), pod  # the hostname, whole
        assert pod.startswith(f"{trainer_job_name(name)}-"[:63 - NAME_SUFFIX_LEN])
    # distinct suffixes give distinct pods and hostnames (the suffix is never cut)
    suffixes = {pod[-NAME_SUFFIX_LEN:] for pod in pods}
    assert len(set(pods)) == len(suffixes)


def test_the_longest_job_name_keeps_its_trainers_apart() -> None:
    name = "j" * LIMIT
    rng = random.Random(1)
    first, second = pod_name(trainer_job_name(name), rng), pod_name(trainer_job_name(name), rng)
    assert len(first) == len(second) == 63 and first != second
    assert first.startswith(name + "-")
