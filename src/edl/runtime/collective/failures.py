"""The script's own error in torchrun's output, and torch's restarts of it (pure).

A collective script's exception reaches the agent only as text on torchrun's
stderr, followed by torch's own report (a ``ChildFailedError`` banner whose last
line is ``traceback : To enable traceback see: …``) or, on the other agents, a
``RendezvousClosedError``. The user needs the script's line (``ValueError: …``),
so `ScriptErrors` follows the stream: the last exception line of a Python
traceback, told apart by its type (torch's elastic agent raises types under
``torch.distributed.elastic``; anything else came from the script), and torch's
"Worker group FAILED. 3/100 attempts left" lines (logged by its agent at INFO,
which `edl.runtime.collective.torchrun` lets through), which say a restart is
counted against ``--max-restarts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TORCH_ELASTIC = "torch.distributed.elastic."
_RESTART = re.compile(r"Worker group (FAILED|UNHEALTHY)\. (\d+)/(\d+) attempts left")
_TRACEBACK = "Traceback (most recent call last):"
# an exception line: a (dotted) type name, optionally ': message'
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


@dataclass(frozen=True)
class Restart:
    """torch restarts the workers after a failure; ``left`` of ``limit`` restarts remain."""

    left: int
    limit: int
    error: str  # the script's last exception line ('' if none was seen)


def is_torch_error(line: str) -> bool:
    """An exception line of torch's elastic agent (not of the user's script)."""
    return line.startswith(TORCH_ELASTIC)


class ScriptErrors:
    """Feed torchrun's stderr line by line; remembers the last exceptions seen."""

    def __init__(self) -> None:
        self.script_error = ""  # the script's last exception line
        self.torch_error = ""  # torch's own last exception line (ChildFailedError, …)
        self.failures = 0  # worker failures torch reported (restarts counted or not)
        self._in_traceback = False

    def feed(self, line: str) -> Restart | None:
        """Read one line; returns a `Restart` when torch says it restarts failed workers."""
        text = line.rstrip("\r\n")
        restart = _RESTART.search(text)
        if restart:
            self.failures += 1
            left, limit = int(restart.group(2)), int(restart.group(3))
            return Restart(max(0, left - 1), limit, self.script_error)
        if text.startswith(_TRACEBACK):
            self._in_traceback = True
            return None
        if self._in_traceback and text and not text[0].isspace():
            self._in_traceback = False
            if _EXCEPTION.match(text.split(" ", 1)[0].rstrip(":")) is None:
                return None  # not an exception line (e.g. another process's output)
            if is_torch_error(text):
                self.torch_error = text
            else:
                self.script_error = text
        return None

    def progress(self) -> None:
        """The script reported a metric line: an earlier error of it was recovered from."""
        self.script_error = ""

    def reason(self, fallback: str) -> str:
        """Why torchrun failed, the script's line first; ``fallback``: the last stderr line."""
        if self.script_error:
            return self.script_error
        if self.torch_error:
            return _short(self.torch_error)
        return fallback


def _short(line: str) -> str:
    """torch's error without its module path (``RendezvousClosedError: …``)."""
    name, _, rest = line.partition(":")
    short = name.rsplit(".", 1)[-1]
    return f"{short}:{rest}" if rest else short
