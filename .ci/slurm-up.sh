#!/usr/bin/env bash
# Bring up a one-node SLURM cluster on this machine (Debian 12, as root): munge, slurmctld and slurmd,
# a `cpu` partition (default) and a `gpu` partition with eight fake GPUs (an H200 node's count, so a rehearsal
# asks for the GPUs its sbatch script asks for), no accounting database.
# Idempotent: if the node already answers as idle, it does nothing. Stop it with .ci/slurm-down.sh.
set -euo pipefail

die() { echo "slurm-up: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
grep -q '^ID=debian' /etc/os-release 2>/dev/null || die "needs Debian (apt packages slurmctld slurmd slurm-client munge)"

node_state() { timeout 3 sinfo -h -N -o %T 2>/dev/null | head -1 || true; }   # sinfo blocks ~10 s when slurmctld is down

if command -v sinfo >/dev/null && [ "$(node_state)" = idle ]; then
    echo "slurm-up: already up"; exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munge >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi

if [ -e /etc/slurm/slurm.conf ] && ! grep -q '^ClusterName=spica-ci$' /etc/slurm/slurm.conf; then
    die "/etc/slurm/slurm.conf exists and is not ours (ClusterName spica-ci): refusing to overwrite a real cluster's config"
fi

mkdir -p /etc/slurm /run/slurm /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /run/munge
cpus=$(nproc)
memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 3 / 4 ))
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=spica-ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
MinJobAge=600
KillWait=5
InactiveLimit=0
Waittime=0
GresTypes=gpu
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${memory_mb} Gres=gpu:fake:8 State=UNKNOWN
PartitionName=cpu Nodes=localhost Default=YES MaxTime=120 State=UP
PartitionName=gpu Nodes=localhost MaxTime=120 State=UP
EOF
# GRES File= must name character devices; /dev/null's major/minor will do for a GPU nobody opens.
echo "NodeName=localhost Name=gpu Type=fake File=/dev/fakegpu[0-7]" > /etc/slurm/gres.conf
for i in 0 1 2 3 4 5 6 7; do [ -c /dev/fakegpu$i ] || mknod /dev/fakegpu$i c 1 3; done

[ -s /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 400 /etc/munge/munge.key

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$(cat "$1")/status" 2>/dev/null; }
alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
for _ in $(seq 100); do munge -n | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n | unmunge >/dev/null 2>&1 || die "munged did not start"

alive /run/slurm/slurmctld.pid || slurmctld -i     # -i: start from clean state
alive /run/slurm/slurmd.pid || slurmd -N localhost # the host name is not "localhost"; force the node name

for _ in $(seq 60); do
    [ "$(node_state)" = idle ] && { echo "slurm-up: node localhost idle (${cpus} CPUs, ${memory_mb} MB, 8 fake GPUs)"; exit 0; }
    sleep 0.5
done
tail -5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
die "the node did not become idle within 30 s (state: '$(node_state)')"
