"""`edl plan STATE`: what a scaling policy would do to the jobs in a cluster snapshot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from edl.policy import POLICIES, get_policy
from edl.snapshot import SnapshotError, parse_snapshot, plan_inputs


def _fail(message: str) -> None:
    click.echo(f"edl plan: {message}", err=True)
    sys.exit(1)


@click.command("plan")
@click.option(
    "--policy",
    "policy_name",
    type=click.Choice(sorted(POLICIES)),
    default="default",
    show_default=True,
    help="Scaling policy.",
)
@click.option(
    "--max-load",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.97,
    show_default=True,
    help="max_load_desired: the share of the cluster's CPU that requests may reach "
    "(whole devices such as GPUs are never held back).",
)
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="A table, or the JSON document described below.")
@click.argument("state", metavar="STATE")
def plan(policy_name: str, max_load: float, output: str, state: str) -> None:
    """Plan the elastic TrainingJobs in STATE (`-` for stdin).

    STATE is a JSON or YAML Kubernetes List of Node, Pod, TrainingJob, Job,
    ResourceQuota and PriorityClass objects, as `kubectl get
    nodes,pods,trainingjobs,jobs,resourcequotas,priorityclasses -A -o json` prints; on a
    cluster that runs Kueue add clusterqueues,localqueues,workloads: a job Kueue holds
    is then not planned (its reason quotes Kueue) and an admitted elastic one is planned
    within what its ClusterQueue can still admit. Prints a table, or with `-o json`
    {"policy", "jobs": [{"namespace", "name", "parallelism", "target", "reason"}]}; a
    job that cannot be planned has null
    parallelism/target (`-` in the table).
    """
    try:
        text = sys.stdin.read() if state == "-" else Path(state).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        _fail(f"cannot read {state}: {getattr(error, 'strerror', None) or error}")
    try:
        inputs = plan_inputs(parse_snapshot(text))
    except SnapshotError as error:
        _fail(f"{state}: {error}")
    decisions = get_policy(policy_name).plan(inputs.jobs, inputs.resources, max_load)
    rows = [decision.to_dict() for decision in decisions]
    rows += [
        {
            "namespace": u.namespace,
            "name": u.name,
            "parallelism": None,
            "target": None,
            "reason": u.reason,
        }
        for u in inputs.unplannable
    ]
    rows.sort(key=lambda row: (row["namespace"], row["name"]))
    bare = rows and inputs.resources.node_count == 0
    for note in state_notes(state, inputs.resources.node_count, bool(rows),
                            not decisions and any(u.reason.startswith("no trainer Job")
                                                  for u in inputs.unplannable)):
        click.echo(f"edl plan: {note}", err=True)
    if output == "json":
        click.echo(json.dumps({"policy": policy_name, "jobs": rows}, indent=2))
    elif not rows:  # an empty cluster, or nodes only: say so rather than print no table
        nodes = inputs.resources.node_count
        click.echo(f"policy {policy_name}: no TrainingJob in {state} ({nodes} "
                   f"node{'s' if nodes != 1 else ''}, {inputs.resources.cpu_total_milli}m CPU "
                   "allocatable): nothing to plan")
    else:
        _table(rows, policy_name)
    if bare:  # nothing can be placed: not a plan
        sys.exit(1)


KUBECTL_STATE = "kubectl get nodes,pods,trainingjobs,jobs,resourcequotas,priorityclasses -A -o json"


def state_notes(state: str, nodes: int, jobs: bool, without_trainer_job: bool) -> list[str]:
    """What STATE must hold, when it lacks it (a job file alone is no cluster state)."""
    notes = []
    if jobs and nodes == 0:
        notes.append(f"{state} holds no Node, so nothing can be placed: STATE is the "
                     f"cluster's objects, as `{KUBECTL_STATE}` prints, not a job file")
    if without_trainer_job:
        notes.append("a TrainingJob is planned with its trainer Job (<job>-trainer, which the "
                     "controller creates): STATE must hold the jobs too")
    return notes


def _table(rows: list[dict], policy_name: str) -> None:
    headers = ("namespace", "name", "parallelism", "target", "reason")
    cells = [[("-" if row[h] is None else str(row[h])) for h in headers] for row in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headers)]
    click.echo(f"policy {policy_name}: {len(rows)} job{'s' if len(rows) != 1 else ''}")
    for line in [[h.upper() for h in headers], *cells]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
