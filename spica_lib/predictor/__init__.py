"""The load-predictor stage: which forecaster the Dynamo planner runs, scored on the workload's trace."""
