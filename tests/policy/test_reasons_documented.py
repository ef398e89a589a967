"""Every reason a plan gives is listed in docs/kubernetes.md ("Plan reasons").

Each phrase below is checked twice: the policy's source still says it (so the list
cannot go stale) and the docs' section lists it."""

from __future__ import annotations

from pathlib import Path

import pytest

from edl.policy.reasons import LOAD_CAP

ROOT = Path(__file__).resolve().parents[2]
PHRASES = [
    "has room for more", "whose taints it tolerates", "room for another trainer",
    "waiting for room to be freed", "pending trainers fit no node yet",
    "pending trainers wait for room being freed", "waiting for room on a node",
    "admits no more", "cannot admit the namespace's pods", LOAD_CAP,
    "of the cluster", "GPU limits above the cluster's GPUs", "at max-instance",
    "above max-instance", "not elastic (min-instance = max-instance)",
    "fixed size (min-instance = max-instance)", "at its fair share",
    "no job waits for the room", "placed on nodes with free room", "waiting for room (fair share",
    "give {what} to jobs below their fair share", "make room for",
    "pending pods that are not trainers", "jobs below min-instance",
    "below its fair share ", "(this job's share: ", "alone can use",
    "pending trainers fit no node: the target ",
]


def section() -> str:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    start = text.index("### Plan reasons")
    return " ".join(text[start:text.index("\n### ", start + 1)].split())


@pytest.mark.parametrize("phrase", PHRASES)
def test_each_reason_is_said_by_the_policy_and_listed_in_the_docs(phrase: str) -> None:
    source = "".join(p.read_text() for p in (ROOT / "src" / "edl" / "policy").glob("*.py"))
    assert phrase in source or phrase == LOAD_CAP
    listed = phrase.replace("{what}", "room")
    assert listed in section(), f"docs/kubernetes.md 'Plan reasons' lacks {listed!r}"
