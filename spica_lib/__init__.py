"""Spica: deployment-tuning search for LLM serving, scored by real NVIDIA Dynamo replays.

One module per pipeline stage; the Snakemake rules in ``workflow/`` call these through thin scripts.
Importing the package has no side effects (no JAX or logging configuration).
"""

__version__ = "0.1.0"
