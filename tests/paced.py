"""The digits example, paced: every step also sleeps, so a job lasts at least its steps
times the pause on any machine. A test that must act while a job trains (grow it, shrink
it, kill one of its processes) cannot then find it finished on a fast machine; the sleep
changes no number the job computes."""

from __future__ import annotations

from pathlib import Path

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"
STEP = "    job.step(F.cross_entropy(model(images), labels))"


def paced_digits_script(pause_s: float) -> str:
    script = (DIGITS / "train.py").read_text()
    assert STEP in script, "the digits example's loop changed: update tests/paced.py"
    return script.replace(STEP, f"{STEP}\n    time.sleep({pause_s!r})").replace(
        "import torch\n", "import time\n\nimport torch\n", 1)  # fmt: skip


def paced_digits(directory: Path, pause_s: float) -> Path:
    """A workspace in `directory` whose train.py is the paced digits example."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.py").write_text(paced_digits_script(pause_s))
    return directory
