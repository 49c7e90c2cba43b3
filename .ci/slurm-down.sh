#!/usr/bin/env bash
# Stop the one-node cluster started by .ci/slurm-up.sh (cancelling its jobs first).
set -uo pipefail
timeout 3 scancel --user="$(id -un)" 2>/dev/null
for pidfile in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid /run/munge/munged.pid; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
done
exit 0
