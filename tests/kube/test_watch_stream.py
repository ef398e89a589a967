"""Watch-stream lines decoded without the resource's model (edl.kube.watch_stream)."""

from __future__ import annotations

import json

import pytest
from lightkube.core.exceptions import ApiError

from edl.kube.watch_stream import decode_line


def line(kind: str, obj: dict) -> str:
    return json.dumps({"type": kind, "object": obj})


def test_an_event_keeps_its_object_as_a_plain_dict() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7"},
           "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
    assert decode_line(line("MODIFIED", pod)) == ("MODIFIED", pod)


def test_a_bookmark_is_its_metadata_only_whatever_its_empty_spec_holds() -> None:
    bookmark = {"kind": "Pod", "spec": {"containers": None},
                "metadata": {"resourceVersion": "42", "annotations": {
                    "k8s.io/initial-events-end": "true"}}}
    kind, obj = decode_line(line("BOOKMARK", bookmark).encode())  # type: ignore[misc]
    assert kind == "BOOKMARK" and obj == {"metadata": bookmark["metadata"]}


def test_an_error_event_raises_the_api_error_it_carries() -> None:
    gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
            "reason": "Expired", "message": "too old resource version"}
    with pytest.raises(ApiError) as raised:
        decode_line(line("ERROR", gone))
    assert raised.value.status.code == 410


@pytest.mark.parametrize("blank", ["", "  ", b"\n"])
def test_a_blank_line_is_no_event(blank: str | bytes) -> None:
    assert decode_line(blank) is None
