"""A run: its folder and every path in it, the body of each of its jobs (run/jobs/), a finished run read back
(RunView), and `spica run` (Snakemake with a safe unlock)."""
