"""What a sweep hands back to read: the report and its plots, and the manifest (versions and input hashes)."""
