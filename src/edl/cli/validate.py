"""`edl validate FILE`: check a TrainingJob file and list every problem, one per line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from edl.api.errors import JobValidationError, format_problem
from edl.api.trainingjob import JobLoadError, TrainingJob, load_job_document
from edl.jobparser import JobParser


@click.command("validate")
@click.argument("file", metavar="FILE")
def validate(file: str) -> None:
    """Check the TrainingJob in FILE (`-` for stdin).

    Exit 0 with one summary line when valid; otherwise exit 1 with one
    `field.path: problem` line per problem, or one line when FILE cannot be read.
    """
    job = load_valid_job(file, problems_to_stderr=False)
    trainer = job.spec.trainer
    scaling = (
        f"elastic, {trainer.min_instance}..{trainer.max_instance} trainers"
        if job.elastic()
        else f"{trainer.min_instance} trainers"
    )
    namespace = job.metadata.namespace or "default"
    click.echo(
        f"{file}: valid TrainingJob {namespace}/{job.metadata.name} ({job.api_version}, {scaling}, "
        f"{job.spec.pserver.min_instance} pservers)"
    )


def load_valid_job(file: str, problems_to_stderr: bool) -> TrainingJob:
    """The validated job in FILE (`-` is stdin); on any problem print it and exit non-zero."""
    try:
        source: str | Path = sys.stdin.read() if file == "-" else Path(file)
        return JobParser().validate(load_job_document(source))
    except JobLoadError as error:
        _fail([f"{file}: {error}"], error.exit_code, problems_to_stderr)
    except JobValidationError as error:
        _fail([format_problem(p) for p in error.problems], 1, problems_to_stderr)


def _fail(lines: list[str], code: int, to_stderr: bool) -> NoReturn:
    for line in lines:
        click.echo(line, err=to_stderr)
    sys.exit(code)
