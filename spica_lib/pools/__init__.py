"""Candidate pools and branches: the knobs each deployment mode searches and the KV-feasible layouts."""
