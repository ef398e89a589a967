"""hypothesis's profiles: derandomized in CI and `make test`/`make check`, random locally.

A property test that searches at random finds a new case only sometimes, and then
fails CI for no change of the code. With ``CI`` set (or ``HYPOTHESIS_PROFILE=ci``,
which the Makefile exports) every run draws the same examples; a plain `pytest`
keeps the random search, and every case it finds is kept in the test as an
``@example``, so it is then checked in every run.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import settings

CI, DEV = "ci", "dev"


def profile_name(env: Mapping[str, str]) -> str:
    """``HYPOTHESIS_PROFILE`` if set, else ``ci`` when ``CI`` is set, else ``dev``."""
    chosen = (env.get("HYPOTHESIS_PROFILE") or "").strip()
    if chosen:
        return chosen
    return CI if (env.get("CI") or "").strip() not in ("", "0", "false") else DEV


def load(env: Mapping[str, str]) -> str:
    """Register both profiles and load the one ``env`` selects; returns its name."""
    settings.register_profile(CI, derandomize=True, database=None, print_blob=True)
    settings.register_profile(DEV, print_blob=True)
    name = profile_name(env)
    settings.load_profile(name)
    return name
