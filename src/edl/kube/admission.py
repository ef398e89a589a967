"""What a cluster would say about a job file that `edl validate` accepts.

`edl run` and `edl validate` read the original PaddlePaddle EDL files unchanged: the
`paddlepaddle.org/v1` API version and every accepted spelling of a field
(`VolumeMounts`, `min_instance`, ...). A cluster serves only what `deploy/crd.yaml`
declares: `edl.dev/v1`, one spelling per field. These notes name each difference and
how to write it for `kubectl apply` (pure: a job document in, lines out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.api.trainingjob import FIELD_SPELLINGS
from edl.kube.crd import GROUP, KIND, VERSION, openapi_schema

SERVED = f"{GROUP}/{VERSION}"


def cluster_notes(document: Mapping[str, Any]) -> list[str]:
    """One line per thing the API server would refuse or drop in a job edl accepts."""
    notes = []
    version = document.get("apiVersion")
    if version != SERVED:
        notes.append(
            f"apiVersion {version}: a cluster serves only {SERVED} (kubectl apply answers "
            f'no matches for kind "{KIND}" in version "{version}"); write apiVersion: '
            f"{SERVED}, the spec stays the same")
    schema = openapi_schema()["properties"]["spec"]
    notes += _spellings(document.get("spec"), schema, "spec")
    return notes


def _spellings(node: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    properties = schema.get("properties")
    if not isinstance(node, Mapping) or not isinstance(properties, Mapping):
        return []
    notes = []
    for key, value in node.items():
        where = f"{path}.{key}"
        if key in properties:
            notes += _spellings(value, properties[key], where)
            continue
        served = [s for s in FIELD_SPELLINGS.get(str(key), ()) if s in properties]
        if served:
            notes.append(f"{where}: a cluster knows this field only as {path}.{served[0]} "
                         "(kubectl apply refuses or drops the other spelling); rename it")
    return notes
