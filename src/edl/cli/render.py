"""`edl render FILE`: print the Kubernetes children of a TrainingJob as multi-document YAML."""

from __future__ import annotations

import json

import click
import yaml

from edl.cli.validate import load_valid_job
from edl.jobparser import JobParser


@click.command("render")
@click.argument("file", metavar="FILE")
@click.option("--output", "-o", type=click.Choice(["yaml", "json"]), default="yaml",
              show_default=True, help="yaml: one document per child; json: a v1 List.")
def render(file: str, output: str) -> None:
    """Print the master Service, master and pserver ReplicaSets and trainer Job for FILE.

    Problems go to stderr, one `field.path: problem` line each, with exit status 1.
    """
    job = load_valid_job(file, problems_to_stderr=True)
    children = JobParser().parse_all(job)
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": children}, indent=2))
    else:
        click.echo(yaml.safe_dump_all(children, sort_keys=False), nl=False)
