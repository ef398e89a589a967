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

Once a script has called ``init_process_group``, torch prefixes every line of its
tracebacks with ``[rankN]: ``, and the ranks' lines interleave on one stream; each
rank's traceback is therefore followed on its own, and of one failure's errors the
first rank's to end wins (torch's "first observed failure"), unless it is only a
lost peer (the others' collectives fail after the one that raised).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TORCH_ELASTIC = "torch.distributed.elastic."
_RESTART = re.compile(r"Worker group (FAILED|UNHEALTHY)\. (\d+)/(\d+) attempts left")
_TRACEBACK = "Traceback (most recent call last):"
# an exception line: a (dotted) type name, optionally ': message'
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_RANK = re.compile(r"^(\[(?:rank|default)\d+\]):\s?")
# python itself, when the script named on its command line does not exist
_CANT_OPEN = re.compile(r"^\S*python[\d.]*: can't open file ")
# a collective that failed because a peer's process ended (gloo's words, torch's types)
_LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "DistNetworkError",
              "DistBackendError", "Broken pipe")


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
    """Feed torchrun's stderr line by line; remembers the exceptions seen."""

    def __init__(self) -> None:
        self.torch_error = ""  # torch's own last exception line (ChildFailedError, …)
        self.failures = 0  # worker failures torch reported (restarts counted or not)
        self._previous = ""  # the script's error in an earlier failure (until progress)
        self._errors: dict[str, str] = {}  # this failure's: rank prefix -> its last error
        self._open: set[str] = set()  # rank prefixes inside a traceback
        self.progressed = False  # a metric line since the last restart (the agent resets it)

    @property
    def script_error(self) -> str:
        """The script's error in this failure (else the previous one's); '' if none."""
        errors = list(self._errors.values())
        own = [e for e in errors if not is_lost_peer(e)]
        return (own or errors or [self._previous])[0]

    def feed(self, line: str) -> Restart | None:
        """Read one line; returns a `Restart` when torch says it restarts failed workers."""
        prefix, text = split_rank(line.rstrip("\r\n"))
        restart = _RESTART.search(text)
        if restart:
            self.failures += 1
            left, limit = int(restart.group(2)), int(restart.group(3))
            error = self.script_error
            self._previous, self._errors, self._open = error, {}, set()
            return Restart(max(0, left - 1), limit, error)
        if text.startswith(_TRACEBACK):
            self._open.add(prefix)
            return None
        if prefix in self._open and text and not text[0].isspace():
            self._open.discard(prefix)
            if _EXCEPTION.match(text.split(" ", 1)[0].rstrip(":")) is None:
                return None  # not an exception line (e.g. another process's output)
            if is_torch_error(text):
                self.torch_error = text
            else:
                self._errors.pop(prefix, None)  # a chained exception: its last line counts,
                self._errors[prefix] = text  # ordered by when each rank's traceback ended
        elif _CANT_OPEN.match(text):  # the interpreter found no script: no traceback
            self._errors.setdefault(prefix, text)
        return None

    def progress(self) -> None:
        """The script reported a metric line: an earlier error of it was recovered from."""
        self._previous, self._errors = "", {}
        self.progressed = True

    def reason(self, fallback: str) -> str:
        """Why torchrun failed, the script's line first; ``fallback``: the last stderr line."""
        if self.script_error:
            return self.script_error
        if self.torch_error:
            return _short(self.torch_error)
        return fallback


def split_rank(line: str) -> tuple[str, str]:
    """(``[rank3]:`` or '', the line without it): torch's prefix after init_process_group."""
    found = _RANK.match(line)
    if found is None:
        return "", line
    return found.group(1), line[found.end():]


def is_lost_peer(error: str) -> bool:
    """An error that only says another worker went away (the others' side of a failure)."""
    return any(sign in error for sign in _LOST_PEER)


def _short(line: str) -> str:
    """torch's error without its module path (``RendezvousClosedError: …``)."""
    name, _, rest = line.partition(":")
    short = name.rsplit(".", 1)[-1]
    return f"{short}:{rest}" if rest else short
