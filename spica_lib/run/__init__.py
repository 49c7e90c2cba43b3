"""A run's folder and every path in it, and `spica run` (Snakemake with a safe unlock)."""
