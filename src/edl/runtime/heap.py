"""Keep the collector off what a torch process imported at startup.

With torch and edl imported a process tracks ~180,000 container objects (modules,
functions, classes, torch's op registrations) that live until it exits. Each full
collection walks them all (110-180 ms here: a pause in the middle of a training
step or a pserver update), and so does the interpreter's exit. Frozen, they sit in
the permanent generation and are never walked again (bench/gc_freeze.py).
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect what startup left as garbage, then freeze everything still alive.

    Call once the long-lived state exists (imports, the model, the dataset); objects
    made later are collected as usual.
    """
    gc.collect()
    gc.freeze()
