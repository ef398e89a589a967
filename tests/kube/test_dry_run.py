"""TrainerDryRuns: one dry-run per trainer template, asked again only when its inputs
change (the template, the namespace's LimitRanges, any PriorityClass), rate-limited; a
refusal is an answer, an outage keeps the last one."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx2

from edl.kube.dry_run import ChangeStore, TrainerDryRuns, dry_run_pod


class _Pod:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def to_dict(self) -> dict[str, Any]:
        return self.body


class FakeClient:
    """Answers dry-run creates as admission with a LimitRange defaulting a widget."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail: int | None = None  # an HTTP status to answer with
        self.words = "refused"  # ... and its message

    async def create(self, obj: Any, namespace: str, dry_run: bool = False) -> _Pod:
        assert dry_run
        body = obj.to_dict()
        self.calls.append(body)
        if self.fail is not None:
            request = httpx2.Request("POST", "https://api/pods")
            raise httpx2.HTTPStatusError(f"{self.words} {self.fail}", request=request,
                                         response=httpx2.Response(self.fail, request=request))
        body = copy.deepcopy(body)
        body["metadata"]["name"] = body["metadata"]["generateName"] + "xyz12"
        body["spec"]["containers"][0].setdefault("resources", {})["requests"] = {
            "cpu": "1", "example.com/widget": "3"}
        return _Pod(body)


def _trainer(cpu: str = "1") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "j-trainer", "namespace": "ns", "uid": "u1"},
        "spec": {"template": {"metadata": {"labels": {"edl.dev/job": "j",
                                                      "edl.dev/role": "trainer"}},
                              "spec": {"restartPolicy": "Never", "containers": [
                                  {"name": "trainer", "image": "img",
                                   "resources": {"requests": {"cpu": cpu}}}]}}}}


def _reader(clock: list[float]) -> tuple[TrainerDryRuns, FakeClient, ChangeStore,
                                         ChangeStore]:
    client = FakeClient()
    ranges, classes = ChangeStore(), ChangeStore()
    reader = TrainerDryRuns(client, ranges, classes,  # type: ignore[arg-type]
                            min_gap_s=2.0, retry_s=30.0, clock=lambda: clock[0])
    return reader, client, ranges, classes


def test_the_pod_asked_about_is_the_trainer_controllers_named_by_the_server() -> None:
    pod = dry_run_pod(_trainer())
    meta = pod["metadata"]
    assert "name" not in meta and meta["generateName"] == "j-trainer-"
    assert meta["ownerReferences"][0]["kind"] == "Job" and "edl.dev/created-by" in \
        meta["annotations"]
    assert meta["labels"] == {"edl.dev/job": "j", "edl.dev/role": "trainer"}


def test_asked_once_per_template_and_again_when_a_limit_range_or_class_changes() -> None:
    clock = [100.0]
    reader, client, ranges, classes = _reader(clock)

    async def run() -> None:
        first = await reader.admitted(_trainer())
        assert first is not None and first.per_pod is not None
        assert first.per_pod.extended == (("example.com/widget", 3),)
        clock[0] += 60
        assert await reader.admitted(_trainer()) == first and len(client.calls) == 1
        # another namespace's LimitRange: still fresh
        ranges.apply("ADDED", {"metadata": {"namespace": "other", "name": "l",
                                            "resourceVersion": "5"}})
        await reader.admitted(_trainer())
        assert len(client.calls) == 1
        ranges.apply("ADDED", {"metadata": {"namespace": "ns", "name": "l",
                                            "resourceVersion": "6"}})
        await reader.admitted(_trainer())
        assert len(client.calls) == 2
        classes.apply("ADDED", {"metadata": {"name": "late", "resourceVersion": "7"},
                                "value": 1000, "globalDefault": True})
        await reader.admitted(_trainer())  # within min_gap_s of the last ask: cached
        assert len(client.calls) == 2
        clock[0] += 2
        await reader.admitted(_trainer())
        assert len(client.calls) == 3
        await reader.admitted(_trainer(cpu="2"))  # a new template: asked at once
        assert len(client.calls) == 4
        # a trainer Job nobody asks about for a sweep period is forgotten
        other = _trainer()
        other["metadata"]["name"] = "k-trainer"
        await reader.admitted(other)
        clock[0] += 600
        await reader.admitted(_trainer(cpu="2"))
        clock[0] += 600
        await reader.admitted(_trainer(cpu="2"))
        assert set(reader._cache) == {("ns", "j-trainer")}
        # a relist that no longer has the class counts as a change
        version = classes.version()
        classes.begin_replace()
        classes.end_replace()
        assert classes.version() == version + 1
        classes.begin_replace()  # and one that lists the same objects does not
        classes.end_replace()
        assert classes.version() == version + 1

    asyncio.run(run())


def test_a_refusal_is_an_answer_asked_again_later_and_an_outage_keeps_the_last() -> None:
    clock = [0.0]
    reader, client, _, _ = _reader(clock)

    async def run() -> None:
        good = await reader.admitted(_trainer())
        client.fail = 503
        clock[0] += 100
        reader.forget("ns", "j-trainer")
        assert await reader.admitted(_trainer()) is None  # nothing known: the template
        client.fail = None
        clock[0] += 2
        assert await reader.admitted(_trainer()) == good
        client.fail = 403
        reader.forget("ns", "j-trainer")
        refused = await reader.admitted(_trainer())
        assert refused is not None and refused.per_pod is None
        assert refused.problem == "the API server refuses trainer pods: refused 403"
        calls = len(client.calls)
        clock[0] += 29
        assert await reader.admitted(_trainer()) == refused and len(client.calls) == calls
        client.fail = None
        clock[0] += 1
        assert await reader.admitted(_trainer()) == good  # retried after retry_s

    asyncio.run(run())


def test_a_namespace_at_its_quota_is_no_refusal_of_the_template() -> None:
    """Quota admission checks a dry-run as a create: 'exceeded quota' says the namespace
    is full now, which the planner counts from the quotas; the last answer stands."""
    clock = [0.0]
    reader, client, _, _ = _reader(clock)

    async def run() -> None:
        client.fail, client.words = 403, 'pods "j-trainer-x" is forbidden: exceeded quota: q'
        assert await reader.admitted(_trainer()) is None  # nothing known: the template
        client.fail = None
        clock[0] += 2
        assert await reader.admitted(_trainer()) is None  # asked again after retry_s only
        clock[0] += 28
        good = await reader.admitted(_trainer())
        assert good is not None and good.problem == ""
        client.fail = 403
        reader.limit_ranges.apply("ADDED", {"metadata": {"namespace": "ns", "name": "l",
                                                         "resourceVersion": "1"}})
        clock[0] += 2
        assert await reader.admitted(_trainer()) == good  # kept through the full quota
        assert len(client.calls) == 3

    asyncio.run(run())
