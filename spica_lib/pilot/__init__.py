"""Pilot jobs on SLURM: warm hosts on compute nodes that outlive a round, fed through a spool folder."""
