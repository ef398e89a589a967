"""`edl validate FILE`: check a TrainingJob file and list every problem, one per line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from edl.api.errors import JobValidationError, format_problem
from edl.api.jobfile import JobLoadError, load_job_document
from edl.api.trainingjob import TrainingJob
from edl.jobparser import JobParser


@click.command("validate")
@click.argument("file", metavar="FILE")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text",
              show_default=True,
              help='json: {"valid", "job"} or {"valid": false, "problems": [{"path", "message"}]}.')
def validate(file: str, output: str) -> None:
    """Check the TrainingJob in FILE (`-` for stdin).

    Exit 0 with one summary line when valid; otherwise exit 1 with one
    `field.path: problem` line per problem, or one line when FILE cannot be read.
    A valid job a cluster would still refuse (the original paddlepaddle.org/v1, an
    original spelling such as VolumeMounts) gets a `note:` line on stderr per change
    `kubectl apply` needs.
    """
    from edl.kube.admission import cluster_notes

    document, job = load_valid_document(file, problems_to_stderr=False,
                                        as_json=output == "json")
    notes = cluster_notes(document)  # valid for edl; what a cluster would still refuse
    if output == "json":
        click.echo(json.dumps({"valid": True, "job": job.to_dict(), "cluster": notes},
                              indent=2))
        return
    trainer = job.spec.trainer
    scaling = (
        f"elastic, {trainer.min_instance}..{trainer.max_instance} trainers"
        if job.elastic()
        else f"{trainer.min_instance} trainers"
    )
    namespace = job.metadata.namespace or "default"
    if job.collective() and job.spec.collective is not None:
        nproc = job.spec.collective.nproc_per_node
        workers = f"collective, {nproc} worker{'' if nproc == 1 else 's'} per trainer"
    else:
        workers = f"{job.spec.pserver.min_instance} pservers"
    click.echo(
        f"{file}: valid TrainingJob {namespace}/{job.metadata.name} ({job.api_version}, {scaling}, "
        f"{workers})"
    )
    for note in notes:
        click.echo(f"note: for kubectl apply: {note}", err=True)


def load_valid_job(file: str, problems_to_stderr: bool, as_json: bool = False) -> TrainingJob:
    """The validated job in FILE (`-` is stdin); on any problem print it and exit non-zero.

    With `as_json` the problems are one JSON document on stdout instead of lines.
    """
    return load_valid_document(file, problems_to_stderr, as_json)[1]


def load_valid_document(file: str, problems_to_stderr: bool,
                        as_json: bool = False) -> tuple[Any, TrainingJob]:
    """The document as written and the validated job (see `load_valid_job`)."""
    try:
        source: str | Path = sys.stdin.read() if file == "-" else Path(file)
        document = load_job_document(source)
        return document, JobParser().validate(document)
    except JobLoadError as error:
        problems = [("", f"{file}: {error}")]
        code = error.exit_code
    except JobValidationError as error:
        problems, code = error.problems, 1
    if as_json:
        found = [{"path": path, "message": message} for path, message in problems]
        click.echo(json.dumps({"valid": False, "problems": found}, indent=2))
        sys.exit(code)
    _fail([format_problem(p) for p in problems], code, problems_to_stderr)


def _fail(lines: list[str], code: int, to_stderr: bool) -> NoReturn:
    for line in lines:
        click.echo(line, err=to_stderr)
    sys.exit(code)
