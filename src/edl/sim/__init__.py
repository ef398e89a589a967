"""Simulation: scenarios, runs on virtual time, metrics, plots and reports (`edl simulate`)."""
