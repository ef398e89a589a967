"""Local runs: the in-process control plane with real processes and the real clock."""
