#!/usr/bin/env bash
# A one-machine SLURM on localhost (Debian's slurm-wlm and munge), to try dlcomm's SLURM path
# and to test it against a real controller.
#
#   scripts/slurm_local.sh up       install if needed (root, apt), write the config, start
#                                   munged, slurmctld and slurmd; idempotent
#   scripts/slurm_local.sh status   sinfo and squeue; exit 0 when the node is up, 1 otherwise
#   scripts/slurm_local.sh down     cancel every job and stop the daemons
#
# The node declares DLCOMM_SLURM_CPUS CPUs (default: 4 x this machine's cores, so that small
# multi-rank test jobs run side by side) and slurmd accepts that (SlurmdParameters=config_overrides).
# State lives in DLCOMM_SLURM_STATE (default /var/lib/dlcomm-slurm).
set -euo pipefail

STATE=${DLCOMM_SLURM_STATE:-/var/lib/dlcomm-slurm}
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
HOST=$(hostname -s)
CORES=$(nproc)
CPUS=${DLCOMM_SLURM_CPUS:-$((4 * CORES))}
MEMORY_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)

PROG=slurm_local
die() { echo "slurm_local: $*" >&2; exit 2; }
# shellcheck source=scripts/slurm_common.sh
. "$(dirname "$0")/slurm_common.sh"

write_config() {
    as_root mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" /var/log/slurm /run/munge /var/lib/munge /var/log/munge
    local wanted
    wanted=$(cat <<EOF
# Written by dlcomm's scripts/slurm_local.sh: a one-machine cluster for trying and testing.
ClusterName=dlcomm-local
SlurmctldHost=$HOST
$(common_slurm_settings)
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
KillWait=10
NodeName=$HOST CPUs=$CPUS RealMemory=$MEMORY_MB State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
)
    if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$wanted" ]; then
        echo "$wanted" | as_root tee "$CONF" >/dev/null
        RESTART=1
    fi
}

node_ready() { sinfo -h -N -o "%T" 2>/dev/null | grep -qE "^(idle|mixed|allocated)"; }

up() {
    RESTART=0
    install_slurm_packages
    write_config
    start_munge
    if [ "$RESTART" = 1 ]; then stop_daemons; fi
    pid_alive "$STATE/slurmctld.pid" || as_root slurmctld -f "$CONF"
    pid_alive "$STATE/slurmd.pid" || as_root slurmd -f "$CONF"
    for _ in $(seq 60); do
        if node_ready; then
            echo "slurm_local: up: partition 'local', node $HOST with $CPUS CPUs ($CORES real cores)"
            return 0
        fi
        state=$(sinfo -h -N -o "%T" 2>/dev/null || true)
        case "$state" in down* | drain*) as_root scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;; esac
        sleep 1
    done
    die "the node did not come up in 60 s; see /var/log/slurm/slurmctld.log and slurmd.log"
}

# by pid file: scripts/cluster_local.sh's daemons (same programs) are left alone
stop_daemons() { stop_pidfile "$STATE/slurmd.pid"; stop_pidfile "$STATE/slurmctld.pid"; }

down() {
    if command -v scancel >/dev/null && pid_alive "$STATE/slurmctld.pid"; then SLURM_CONF=$CONF scancel --full --quiet -u "$(id -un)" || true; fi
    stop_daemons
    echo "slurm_local: down"
}

status() {
    if ! command -v sinfo >/dev/null; then echo "slurm_local: not installed (run: scripts/slurm_local.sh up)"; return 1; fi
    sinfo -N -l 2>/dev/null || { echo "slurm_local: slurmctld is not answering (run: scripts/slurm_local.sh up)"; return 1; }
    squeue 2>/dev/null || true
    node_ready
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
