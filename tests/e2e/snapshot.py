"""A snapshot of the real control plane, as `kubectl get nodes,pods,trainingjobs,jobs,
resourcequotas,priorityclasses -A -o json` prints it, and `edl plan` run on it: the
planner given a real cluster's objects must decide what the running controller decided."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from e2e.rest import KINDS, Rest

SNAPSHOT_KINDS = ("Node", "Pod", "TrainingJob", "Job", "ResourceQuota", "PriorityClass")


def snapshot(rest: Rest) -> dict[str, Any]:
    """Every object of SNAPSHOT_KINDS in all namespaces, as one v1 List (kind and
    apiVersion set on each item, as kubectl does; a list answer leaves them out)."""
    items = []
    for kind in SNAPSHOT_KINDS:
        prefix = KINDS[kind][0]
        version = prefix.removeprefix("/apis/").removeprefix("/api/")
        items += [{**item, "kind": kind, "apiVersion": version} for item in rest.list(kind)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def edl_plan(rest: Rest, path: Path, *options: str) -> dict[tuple[str, str], dict[str, Any]]:
    """`edl plan SNAPSHOT -o json [options]` on the cluster as it is now (give it the
    controller's policy options): the row of each job."""
    path.write_text(json.dumps(snapshot(rest)))
    done = subprocess.run([sys.executable, "-m", "edl.cli.main", "plan", str(path), "-o", "json",
                           *options], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {(row["namespace"], row["name"]): row for row in json.loads(done.stdout)["jobs"]}
