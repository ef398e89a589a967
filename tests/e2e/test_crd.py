"""The CRD on the real API server: schema, CEL rules, defaults, printer columns, /scale.

tests/kube/test_crd.py checks the same rules with jsonschema and cel-python; here the
kube-apiserver itself evaluates `deploy/crd.yaml`.
"""

from __future__ import annotations

import copy
import json
import subprocess
import urllib.request
from typing import Any

import pytest
import yaml

from e2e.control_plane import ControlPlane
from e2e.helpers import EDL, load_yaml, trainingjob
from e2e.rest import ApiError, Rest
from edl.jobparser import JobParser
from edl.jobparser.validation import DEFAULT_IMAGE
from polling import wait_until


@pytest.fixture(scope="module")
def namespace(rest: Rest) -> Any:
    """One namespace for this module's tests (no controller runs; nothing is scheduled)."""
    name = "e2e-crd"
    rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    rest.delete("Namespace", name)
    wait_until(lambda: rest.find("Namespace", name) is None, 120, f"namespace {name} deleted")


def test_edl_crd_equals_the_shipped_crd_and_the_api_server_serves_it(rest: Rest) -> None:
    printed = subprocess.run([EDL, "crd"], capture_output=True, text=True, check=True).stdout
    assert yaml.safe_load(printed) == load_yaml("crd.yaml")[0]
    served = rest.get("CustomResourceDefinition", "trainingjobs.edl.dev")
    assert served["spec"]["versions"][0]["schema"] == load_yaml("crd.yaml")[0]["spec"][
        "versions"][0]["schema"]
    accepted = {c["type"]: c["status"] for c in served["status"]["conditions"]}
    assert accepted == {"NamesAccepted": "True", "Established": "True"} | {
        k: v for k, v in accepted.items() if k not in {"NamesAccepted", "Established"}}
    assert served["status"]["acceptedNames"]["shortNames"] == ["tj"]


def _rejected(rest: Rest, namespace: str, job: dict[str, Any], strict: bool = False) -> str:
    """The API server's message refusing `job`: 422 Invalid for schema and CEL violations,
    400 BadRequest for strict decoding (unknown fields)."""
    query = "?fieldValidation=Strict" if strict else ""
    with pytest.raises(ApiError) as caught:
        rest.call("POST", rest.path("TrainingJob", namespace) + query, job)
    assert caught.value.code == (400 if strict else 422), caught.value
    return caught.value.message


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda s: s["trainer"].update({"min-instance": 5, "max-instance": 3}),
     ["spec.trainer.min-instance must be <= spec.trainer.max-instance"]),
    (lambda s: s["pserver"].update({"min-instance": 3, "max-instance": 2}),
     ["spec.pserver.min-instance must be <= spec.pserver.max-instance"]),
    (lambda s: s.update({"fault_tolerant": False}),
     ["spec.trainer.max-instance: Invalid value",
      "spec.trainer.max-instance must equal min-instance unless spec.fault_tolerant"]),
    (lambda s: s.update({"port": 65535, "ports_num": 2}),
     ["spec.port + ports_num + ports_num_for_sparse - 1 must be <= 65535"]),
    (lambda s: s["trainer"]["resources"]["requests"].update({"cpu": "lots"}),
     ["spec.trainer.resources.requests.cpu"]),
    (lambda s: s["trainer"]["resources"]["limits"].update({"memory": "-1Gi"}),
     ["spec.trainer.resources.limits.memory"]),
    (lambda s: s["trainer"].update({"entrypoint": "  "}), ["spec.trainer.entrypoint"]),
    (lambda s: s.update({"port": 0}), ["spec.port"]),
])
def test_the_api_server_rejects_bad_jobs(rest: Rest, namespace: str, mutate: Any,
                                         expected: list[str]) -> None:
    job = trainingjob("bad")
    mutate(job["spec"])
    message = _rejected(rest, namespace, job)
    for text in expected:
        assert text in message, message
    assert rest.find("TrainingJob", "bad", namespace) is None


def test_several_problems_are_named_in_one_answer_and_names_are_checked(
        rest: Rest, namespace: str) -> None:
    job = trainingjob("two-problems")
    job["spec"]["trainer"].update({"min-instance": 5, "max-instance": 3})
    job["spec"]["trainer"]["resources"]["requests"]["cpu"] = "lots"
    message = _rejected(rest, namespace, job)
    assert "min-instance must be <= spec.trainer.max-instance" in message, message
    assert "spec.trainer.resources.requests.cpu" in message, message
    long_name = trainingjob("a" * 56)
    message = _rejected(rest, namespace, long_name)
    assert "DNS-1035 label of at most 55" in message
    # the rule sits at the root, but the answer names the field (it said `* <nil>: ...`)
    assert "metadata.name: Invalid value" in message and "<nil>" not in message, message


def test_unknown_fields_rejected_when_strict_and_pruned_otherwise(
        rest: Rest, namespace: str) -> None:
    job = trainingjob("unknown")
    job["spec"]["trainer"]["replicas"] = 3
    job["spec"]["colour"] = "blue"
    message = _rejected(rest, namespace, copy.deepcopy(job), strict=True)
    assert 'unknown field "spec.colour"' in message, message
    assert 'unknown field "spec.trainer.replicas"' in message, message
    stored = rest.create(job, namespace)  # kubectl --validate=false: the server prunes
    assert "colour" not in stored["spec"] and "replicas" not in stored["spec"]["trainer"]


def test_defaults_printer_columns_and_scale_subresource(
        rest: Rest, namespace: str, plane: ControlPlane) -> None:
    job = trainingjob("defaults", min_instance=1, max_instance=3)
    for key in ("port", "ports_num", "ports_num_for_sparse", "passes", "image"):
        job["spec"].pop(key, None)
    del job["spec"]["pserver"]["min-instance"]
    stored = rest.create(job, namespace)["spec"]
    assert (stored["port"], stored["ports_num"], stored["ports_num_for_sparse"],
            stored["passes"]) == (7164, 1, 1, 1)
    # no image default in the CRD: the controller's --image (DEFAULT_IMAGE unless set) decides
    assert "image" not in stored and JobParser().validate(
        {**job, "metadata": {"name": "defaults"}}).spec.image == DEFAULT_IMAGE
    assert stored["pserver"]["min-instance"] == 1

    request = urllib.request.Request(
        plane.url + rest.path("TrainingJob", namespace),
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    with urllib.request.urlopen(request, context=plane.ssl_context(), timeout=30) as answer:
        table = json.loads(answer.read())
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "State", "Running", "Desired", "Min", "Max", "Waiting", "Age",
                       "Pending", "Image", "Message"]
    wide = [c["name"] for c in table["columnDefinitions"] if c.get("priority")]
    assert wide == ["Pending", "Image", "Message"]  # what `kubectl get -o wide` adds
    (row,) = [r for r in table["rows"] if r["cells"][0] == "defaults"]
    assert row["cells"][4:6] == [1, 3]  # Min, Max
    # the Image column is spec.image: empty for a job that takes the controller's --image
    assert row["cells"][columns.index("Image")] is None

    scale = rest.get("TrainingJob", "defaults", namespace, sub="scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    rest.merge("TrainingJob", "defaults", {"spec": {"replicas": 2}}, namespace, sub="scale")
    assert rest.get("TrainingJob", "defaults", namespace)["spec"]["trainer"]["min-instance"] == 2
    with pytest.raises(ApiError) as caught:  # above max-instance: the CEL rule refuses it
        rest.merge("TrainingJob", "defaults", {"spec": {"replicas": 4}}, namespace, sub="scale")
    assert caught.value.code == 422
    assert "min-instance must be <= spec.trainer.max-instance" in caught.value.message
    assert "kubectl scale --replicas sets spec.trainer.min-instance" in caught.value.message


def test_scaling_a_job_that_is_not_fault_tolerant_says_what_replicas_means(
        rest: Rest, namespace: str) -> None:
    """min = max is the only shape such a job has, so no `kubectl scale` can succeed; the
    refusal says that --replicas sets min-instance and what to edit instead."""
    job = trainingjob("fixed", min_instance=2, max_instance=2, fault_tolerant=False)
    rest.create(job, namespace)
    scale = rest.get("TrainingJob", "fixed", namespace, sub="scale")
    assert scale["spec"]["replicas"] == 2
    with pytest.raises(ApiError) as caught:
        rest.merge("TrainingJob", "fixed", {"spec": {"replicas": 3}}, namespace, sub="scale")
    assert caught.value.code == 422
    message = caught.value.message
    assert "spec.trainer.max-instance: Invalid value" in message, message
    assert "kubectl scale --replicas (which sets min-instance) cannot change it" in message
    assert rest.get("TrainingJob", "fixed", namespace)["spec"]["trainer"]["min-instance"] == 2


def test_kubectl_explain_finds_a_description_for_every_field(plane: ControlPlane) -> None:
    """`kubectl explain` reads the API server's OpenAPI v3 document for the group; every
    property of the CRD's schema must arrive there with its description."""
    index = plane.request("GET", "/openapi/v3")
    group = plane.request("GET", "/" + index["paths"]["apis/edl.dev/v1"]["serverRelativeURL"]
                          .lstrip("/"))
    served = group["components"]["schemas"]["dev.edl.v1.TrainingJob"]
    shipped = load_yaml("crd.yaml")[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def walk(mine: dict[str, Any], theirs: dict[str, Any], path: str) -> int:
        count = 0
        for prop, sub in (mine.get("properties") or {}).items():
            if path == "" and prop in {"metadata", "apiVersion", "kind"}:
                continue  # the API server puts its own descriptions there
            there = theirs["properties"][prop]
            if "allOf" in there:  # the server wraps a described $ref this way
                there = {**there, **there["allOf"][0]}
            assert there.get("description") == sub["description"], f"{path}.{prop}"
            count += 1 + walk(sub, there, f"{path}.{prop}")
        return count

    assert walk(shipped, served, "") > 40
    assert served["description"] == shipped["description"]
    assert "paddlepaddle.org/v1" in served["description"]  # `kubectl explain tj` says it
    trainer = served["properties"]["spec"]["properties"]["trainer"]["properties"]
    assert "kubectl scale" in trainer["min-instance"]["description"]
