"""Files, logs and versions every stage shares: atomic artifact writes, canonical JSON, stage logs."""
