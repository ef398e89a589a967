"""A job file or text → one TrainingJob document: reading, YAML, one document per job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from edl.api.trainingjob import TrainingJob
from edl.api.yamlload import safe_load_all


class JobLoadError(ValueError):
    """A job file that cannot be read or is not YAML; `exit_code` tells the CLI how to exit."""

    def __init__(self, message: str, exit_code: int = 1) -> None:  # 1: bad input, as kubectl
        self.exit_code = exit_code
        super().__init__(message)


def load_trainingjob(source: str | Path) -> TrainingJob:
    """Load one TrainingJob from a file path or from YAML/JSON text.

    Raises JobLoadError for unreadable files or bad YAML, JobValidationError for
    a document that is not a valid TrainingJob.
    """
    return TrainingJob.from_dict(load_job_document(source))


def load_job_document(source: str | Path) -> Any:
    """The single YAML document of a job file or text, as plain data (not yet checked).

    Callers that report every problem at once (`JobParser.validate`) start here.
    """
    text = read_job_text(source)
    try:
        documents = [d for d in safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "malformed"
        raise JobLoadError(f"not valid YAML{where}: {problem}") from None
    if len(documents) != 1:
        raise JobLoadError(f"expected one YAML document with a TrainingJob, found {len(documents)}")
    return documents[0]


def read_job_text(source: str | Path) -> str:
    """The text of a job: the file's content for a path, else `source` itself."""
    is_path = isinstance(source, Path) or ("\n" not in source and os.path.exists(source))
    if not is_path:
        return str(source)
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise JobLoadError(f"cannot read {source}: {reason}") from None
