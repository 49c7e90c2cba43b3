"""Deployment files for the run's top candidates: what a cluster is handed, written and checked against what was replayed."""
