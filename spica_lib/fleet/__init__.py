"""Several models on one GPU inventory: the fleet config, each model's sweep, and the split between them.

A level above one model's run: it uses `config/`, `run/` and `results/` as they are (its paths extend
RunFiles, its confirming replays go through the trial store), never a branch inside them
(docs/architecture.md: a level above one model's run is a new package above run/).
"""
