"""The end of a sweep: ranking, Pareto fronts, the merged tables and the summary."""
