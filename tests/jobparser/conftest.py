"""Checks that an emitted manifest is one current Kubernetes would accept.

`kubernetes-validate` checks the OpenAPI schema (strict: unknown fields are
errors). The API server also enforces rules the schema cannot express (name
formats, label values, port names, extended-resource rules); the ones our
manifests could break are checked here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_validate import utils as kv

K8S_VERSION = kv.latest_version()
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


def _check_labels(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        assert len(value) <= 63 and LABEL_VALUE.match(value), f"bad label value {key}={value!r}"


def _check_pod_spec(pod: dict[str, Any]) -> None:
    volume_names = [v["name"] for v in pod.get("volumes", [])]
    assert len(volume_names) == len(set(volume_names)), "duplicate volume names"
    names = [c["name"] for c in pod["containers"]]
    assert len(names) == len(set(names)), "duplicate container names"
    for container in pod["containers"]:
        port_names = [p["name"] for p in container.get("ports", [])]
        assert len(port_names) == len(set(port_names))
        for port in container.get("ports", []):
            assert len(port["name"]) <= 15 and PORT_NAME.match(port["name"])
            assert re.search("[a-z]", port["name"]), "a port name needs a letter"
            assert 1 <= port["containerPort"] <= 65535
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volume_names, f"mount of unknown volume {mount['name']}"
        resources = container.get("resources", {})
        limits, requests = resources.get("limits", {}), resources.get("requests", {})
        for name in {**limits, **requests}:
            if name in STANDARD_RESOURCES:
                continue
            assert "kubernetes.io" not in name, f"{name} is not a resource the API server accepts"
            assert name in limits, f"extended resource {name} needs a limit"
            if name in requests:
                assert str(requests[name]) == str(limits[name])


def check_manifest(manifest: dict[str, Any]) -> None:
    """Fail the test unless `manifest` is acceptable to current Kubernetes."""
    try:
        kv.validate(manifest, K8S_VERSION, strict=True)
    except kv.ValidationError as error:
        where = "/".join(str(part) for part in error.path)
        pytest.fail(
            f"{manifest['kind']} {manifest['metadata']['name']} at {where}: {error.message}"
        )
    metadata = manifest["metadata"]
    name_rule = DNS1035_LABEL if manifest["kind"] == "Service" else DNS1123_LABEL
    assert len(metadata["name"]) <= 63 and name_rule.match(metadata["name"])
    _check_labels(metadata.get("labels", {}))
    if manifest["kind"] == "Service":
        return
    template = manifest["spec"]["template"]
    _check_labels(template["metadata"]["labels"])
    _check_pod_spec(template["spec"])


@pytest.fixture
def assert_valid_manifest() -> Callable[[dict[str, Any]], None]:
    return check_manifest
