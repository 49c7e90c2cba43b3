"""What a sweep hands back: the report and its plots, deployment files, the manifest, and status while it runs."""
