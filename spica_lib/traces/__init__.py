"""Traces: a trace read and checked once (its scan), and the traces drawn from it (a sample, a resample), written as
files other processes read."""
