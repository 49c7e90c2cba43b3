"""Fidelity: the replay and the static estimate against measured silicon (aiconfigurator's silicon_sample.csv)."""
