"""`edl render FILE`: print the Kubernetes children of a TrainingJob as multi-document YAML."""

from __future__ import annotations

import click
import yaml

from edl.cli.validate import load_valid_job
from edl.jobparser import JobParser


@click.command("render")
@click.argument("file", metavar="FILE")
def render(file: str) -> None:
    """Print the master Service, master and pserver ReplicaSets and trainer Job for FILE.

    Problems go to stderr, one `field.path: problem` line each, with exit status 1.
    """
    job = load_valid_job(file, problems_to_stderr=True)
    click.echo(yaml.safe_dump_all(JobParser().parse_all(job), sort_keys=False), nl=False)
