"""The sweep's warm host: one process per sweep that keeps Vizier, Dynamo and the perf DBs loaded and runs each round's jobs in children forked from it."""
