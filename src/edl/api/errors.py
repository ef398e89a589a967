"""Problems with a TrainingJob as (field path, message) pairs.

Why one error type: users fix a job file faster when every wrong field is
listed at once, each under the path they wrote (`spec.trainer.max-instance`),
whether the problem was found by the schema (pydantic) or by the job parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["JobValidationError", "Problem", "format_problem", "join_path", "plain_message"]

Problem = tuple[str, str]


def join_path(parts: Iterable[str | int]) -> str:
    """`("spec", "volumes", 0, "name")` -> `spec.volumes[0].name`.

    Keys with dots or slashes (`nvidia.com/gpu`) go in brackets, as kubectl writes them.
    """
    text = ""
    for part in parts:
        if isinstance(part, int) or "." in part or "/" in part:
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def format_problem(problem: Problem) -> str:
    """One line per problem: `path: message` (just the message for the whole document)."""
    path, message = problem
    return f"{path}: {message}" if path else message


class JobValidationError(ValueError):
    """A TrainingJob that cannot be used; `.problems` lists every (field path, message)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("; ".join(format_problem(p) for p in self.problems))


def describe_input(value: Any) -> str:
    """A short rendering of a wrong value for a message (long values are cut)."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def plain_message(error: Mapping[str, Any]) -> str:
    """One pydantic error in plain words: 'required', 'unknown field', 'must be …
    (got …)' instead of 'Field required', 'Extra inputs are not permitted', 'Input
    should be …'. Used for TrainingJobs and simulator scenarios alike."""
    kind = error["type"]
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    message = str(error["msg"])
    if kind in ("value_error", "assertion_error"):
        return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    message = message.replace("Input should be", "must be")
    message = re.sub(r"a valid dictionary( or instance of \w+)?", "a mapping", message)
    return f"{message} (got {describe_input(error.get('input'))})"

