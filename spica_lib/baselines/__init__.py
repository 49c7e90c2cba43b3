"""Baselines: what the search's winner is compared with, each scored by the same replay."""
