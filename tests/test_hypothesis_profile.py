"""hypothesis runs derandomized where CI and `make test` run it, at random elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis_profile import CI, DEV, profile_name

TESTS = Path(__file__).resolve().parent


def test_ci_or_the_makefile_select_the_derandomized_profile() -> None:
    assert profile_name({"CI": "1"}) == CI
    assert profile_name({"CI": "true", "HYPOTHESIS_PROFILE": DEV}) == DEV
    assert profile_name({}) == DEV and profile_name({"CI": "0"}) == DEV
    # what every recipe of the Makefile (make test, make check) runs with
    env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "CI")}
    make = subprocess.run(
        ["make", "-s", "--eval", 'edl-env: ; @echo "profile=$$HYPOTHESIS_PROFILE"', "edl-env"],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=60, env=env)
    assert make.stdout.strip() == f"profile={CI}", make.stderr


def test_the_ci_profile_draws_the_same_examples_every_run() -> None:
    code = ("import hypothesis_profile, os\n"
            "from hypothesis import given, strategies as st\n"
            "print(hypothesis_profile.load(os.environ))\n"
            "seen = []\n"
            "@given(st.floats())\n"
            "def t(x): seen.append(x)\n"
            "t(); print(repr(seen))\n")
    def draws(env: dict[str, str]) -> list[str]:
        out = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True,
                             text=True, timeout=120, env={**os.environ, **env,
                                                          "PYTHONPATH": str(TESTS)})
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()
    first, second = draws({"CI": "1", "HYPOTHESIS_PROFILE": ""}), draws({"CI": "1",
                                                                        "HYPOTHESIS_PROFILE": ""})
    assert first[0] == CI and first == second
    assert draws({"CI": "", "HYPOTHESIS_PROFILE": ""})[0] == DEV
