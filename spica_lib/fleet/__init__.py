"""Several models on one GPU inventory: the fleet config, each model's sweep, and the split between them.

A level above one model's run: it uses `config/`, `run/` and `results/` as they are, never a branch
inside them (docs/STYLE: "a level above one model's run is a new package above run/").
"""
