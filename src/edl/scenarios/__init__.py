"""Scenarios shipped with edl (``edl simulate case1``); the format is in docs/simulation.md."""
