#!/usr/bin/env bash
# A multi-host SLURM cluster inside this machine: every host a Linux network namespace with its
# own address, hostname and shaped link, one slurmd each, one slurmctld they all report to.
#
#   scripts/cluster_local.sh up --hosts N [--gbps R]   make hosts h1..hN and start SLURM on them;
#                                                      idempotent (a different N or R remakes it)
#   scripts/cluster_local.sh status                    hosts, links and sinfo; exit 0 when all are up
#   scripts/cluster_local.sh down                      cancel the jobs, stop the daemons, remove the
#                                                      namespaces, links, bridge, /etc/hosts lines
#   scripts/cluster_local.sh exec HOST CMD...          run CMD on a host (its namespace)
#   scripts/cluster_local.sh link HOST up|down         take a host's link down or bring it back
#
# The network: a bridge dlcbr0 (10.77.0.1/24) in this machine's namespace; host hI is namespace
# hI with interface eth0 = 10.77.0.(10+I), the other end of a veth pair on the bridge. Each
# direction of each host's link is shaped to R Gb/s by a tbf qdisc (this kernel has no netem,
# so no delay is added). Ranks on the same host talk over that host's loopback, unshaped.
#
# SLURM: its own configuration (/etc/dlcomm-cluster/slurm.conf, ports 6827/6828), so it runs
# beside scripts/slurm_local.sh's one-machine cluster; point SLURM's commands at it with
#   export SLURM_CONF=/etc/dlcomm-cluster/slurm.conf
# (`up` prints this). Every slurmd runs in its host's network and UTS namespaces, so the jobs it
# starts see that host's name and address. The file system is this machine's: shared by all.
# How soon a lost host is seen: slurmctld sets a host DOWN (and ends its jobs) once it has been
# silent for DLCOMM_CLUSTER_SLURMD_TIMEOUT seconds (SlurmdTimeout, default 20) and its pings have
# failed, each after DLCOMM_CLUSTER_MESSAGE_TIMEOUT seconds (MessageTimeout, SLURM's default 10):
# ~29 s from a killed slurmd or a downed link to DOWN here with the defaults, ~22 s with 15 and 4,
# which tests/test_hosts.py uses. A different value on `up` remakes the cluster.
# Needs root, iproute2, util-linux's unshare, and Debian's slurm-wlm + munge (installed if absent).
set -euo pipefail

PROG=cluster_local
STATE=${DLCOMM_CLUSTER_STATE:-/var/lib/dlcomm-cluster}
CONF_DIR=/etc/dlcomm-cluster
CONF=$CONF_DIR/slurm.conf
BRIDGE=dlcbr0
NET=10.77.0
CTLD_ADDR=$NET.1
CTLD_HOST=$(hostname -s)
CORES=$(nproc)
SLURMD_TIMEOUT=${DLCOMM_CLUSTER_SLURMD_TIMEOUT:-20}
MESSAGE_TIMEOUT=${DLCOMM_CLUSTER_MESSAGE_TIMEOUT:-10}
HOSTS_BEGIN="# dlcomm cluster_local begin"
HOSTS_END="# dlcomm cluster_local end"

die() { echo "$PROG: $*" >&2; exit 2; }
# shellcheck source=scripts/slurm_common.sh
. "$(dirname "$0")/slurm_common.sh"

host_addr() { echo "$NET.$((10 + ${1#h}))"; }
hosts_made() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^h[0-9]+$' | sort -V || true; }

check_tools() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc, slurmd); run it with sudo"
    for tool in ip tc unshare nsenter; do command -v "$tool" >/dev/null || die "no $tool on PATH: install iproute2 and util-linux"; done
    ip netns add dlc-probe 2>/dev/null || die "network namespaces are not allowed here (ip netns add failed): run on a machine or container with CAP_SYS_ADMIN"
    ip netns del dlc-probe
}

# tbf on DEV's egress at RATE_GBPS. The burst must hold one GSO super-packet (64 KiB) or tbf
# drops it; at 0.1 Gb/s 64 KiB is 5 ms of the link, the shaper's granularity.
shape() {  # shape NETNS_OR_EMPTY DEV RATE_GBPS
    local ns=$1 dev=$2 rate=$3 burst
    burst=$(awk -v r="$rate" 'BEGIN {b = r * 1e9 / 8 * 0.002; if (b < 65536) b = 65536; printf "%d", b}')
    local cmd=(tc qdisc replace dev "$dev" root tbf rate "${rate}gbit" burst "$burst" latency 100ms)
    if [ -n "$ns" ]; then ip netns exec "$ns" "${cmd[@]}"; else "${cmd[@]}"; fi
}

make_network() {
    local n=$1 rate=$2
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$CTLD_ADDR/24" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    for i in $(seq 1 "$n"); do
        local h=h$i addr
        addr=$(host_addr "$h")
        ip netns list | awk '{print $1}' | grep -qx "$h" || ip netns add "$h"
        if ! ip link show "v$h" >/dev/null 2>&1; then
            ip link add "v$h" type veth peer name eth0 netns "$h"
            ip link set "v$h" master "$BRIDGE"
        fi
        ip link set "v$h" up
        ip netns exec "$h" ip link set lo up
        ip netns exec "$h" ip addr replace "$addr/24" dev eth0
        ip netns exec "$h" ip link set eth0 up
        shape "$h" eth0 "$rate"
        shape "" "v$h" "$rate"
    done
    write_hosts "$n"
}

write_hosts() {
    local n=$1 block
    # the IPv4-mapped IPv6 form too: a dual-stack listener (torch's TCPStore) sees its clients so
    # and looks their names up (no DNS answers inside a host: every lookup must be in this file)
    block=$(printf '%s\n' "$HOSTS_BEGIN"
        for i in $(seq 1 "$n"); do echo "$(host_addr "h$i") h$i"; echo "::ffff:$(host_addr "h$i") h$i"; done
        echo "$HOSTS_END")
    remove_hosts
    printf '%s\n' "$block" >>/etc/hosts
}

remove_hosts() {
    if grep -qF "$HOSTS_BEGIN" /etc/hosts; then
        # /etc/hosts may be a bind mount (containers): rewrite in place, never replace the file
        local kept; kept=$(sed "/^$HOSTS_BEGIN\$/,/^$HOSTS_END\$/d" /etc/hosts)
        printf '%s\n' "$kept" >/etc/hosts
    fi
}

write_config() {
    local n=$1 cpus=${DLCOMM_CLUSTER_CPUS:-$((2 * CORES))} memory_mb
    memory_mb=$(awk -v n="$n" '/MemTotal/ {print int($2 / 1024 * 0.9 / n)}' /proc/meminfo)
    mkdir -p "$CONF_DIR" "$STATE/ctld" /var/log/slurm
    cat >"$CONF" <<EOF
# Written by dlcomm's scripts/cluster_local.sh: $n hosts in network namespaces on one machine.
ClusterName=dlcomm-hosts
SlurmctldHost=$CTLD_HOST($CTLD_ADDR)
SlurmctldPort=6827
SlurmdPort=6828
$(common_slurm_settings)
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdSpoolDir=$STATE/%n/spool
SlurmdPidFile=$STATE/%n/slurmd.pid
SlurmdLogFile=$STATE/%n/slurmd.log
# a host that stops answering is marked DOWN (and its jobs end) after this many seconds
SlurmdTimeout=$SLURMD_TIMEOUT
# a round trip to a daemon (a ping of a host among them) fails after this many seconds
MessageTimeout=$MESSAGE_TIMEOUT
KillWait=10
NodeName=DEFAULT CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
$(for i in $(seq 1 "$n"); do echo "NodeName=h$i NodeAddr=$(host_addr "h$i") NodeHostname=h$i"; done)
# LLN: a job goes to the least loaded hosts, so a sweep's elements spread over them
PartitionName=hosts Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP LLN=YES
EOF
}

start_slurm() {
    local n=$1
    pid_alive "$STATE/slurmctld.pid" || slurmctld -f "$CONF"
    for i in $(seq 1 "$n"); do
        local h=h$i
        mkdir -p "$STATE/$h/spool"
        pid_alive "$STATE/$h/slurmd.pid" && continue
        # nsenter, not `ip netns exec` (which remounts /sys without the cgroup tree slurmd needs);
        # its own UTS namespace: slurmd finds its node name in the hostname
        nsenter --net="/run/netns/$h" unshare --uts sh -c "hostname $h && exec slurmd -f '$CONF'"
    done
}

nodes_ready() {
    local n=$1 idle
    idle=$(SLURM_CONF=$CONF sinfo -h -N -o "%N %T" 2>/dev/null | grep -cE " (idle|mixed|allocated)$" || true)
    [ "$idle" = "$n" ]
}

up() {
    local n=0 rate=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --hosts) n=${2:-}; shift 2 ;;
            --gbps) rate=${2:-}; shift 2 ;;
            *) die "unknown option $1: use up --hosts N [--gbps R]" ;;
        esac
    done
    [[ "$SLURMD_TIMEOUT" =~ ^[0-9]+$ ]] && [ "$SLURMD_TIMEOUT" -ge 3 ] || die "DLCOMM_CLUSTER_SLURMD_TIMEOUT=$SLURMD_TIMEOUT is invalid: pass whole seconds, at least 3 (SLURM pings every third of it)"
    [[ "$MESSAGE_TIMEOUT" =~ ^[0-9]+$ ]] && [ "$MESSAGE_TIMEOUT" -ge 2 ] || die "DLCOMM_CLUSTER_MESSAGE_TIMEOUT=$MESSAGE_TIMEOUT is invalid: pass whole seconds, at least 2"
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "--hosts $n is invalid: pass a number of hosts from 1 to 200"
    awk -v r="$rate" 'BEGIN {exit !(r + 0 > 0 && r + 0 <= 400)}' || die "--gbps $rate is invalid: pass a link rate in Gb/s, e.g. 1 or 0.1"
    check_tools
    install_slurm_packages
    local made; made=$(hosts_made | wc -l)
    if [ -f "$STATE/shape" ] && [ "$(cat "$STATE/shape")" != "$n $rate" ] || { [ "$made" -gt 0 ] && [ "$made" != "$n" ]; } \
        || { [ -f "$STATE/timeouts" ] && [ "$(cat "$STATE/timeouts")" != "$SLURMD_TIMEOUT $MESSAGE_TIMEOUT" ]; }; then
        echo "$PROG: remaking the cluster ($(cat "$STATE/shape" 2>/dev/null || echo "$made hosts") -> $n hosts at $rate Gb/s, SlurmdTimeout=$SLURMD_TIMEOUT MessageTimeout=$MESSAGE_TIMEOUT)"
        down >/dev/null
    fi
    make_network "$n" "$rate"
    write_config "$n"
    echo "$n $rate" >"$STATE/shape"
    echo "$SLURMD_TIMEOUT $MESSAGE_TIMEOUT" >"$STATE/timeouts"
    start_munge
    start_slurm "$n"
    for _ in $(seq 60); do
        if nodes_ready "$n"; then
            echo "$PROG: up: $n hosts h1..h$n ($(host_addr h1)..$(host_addr "h$n")), links shaped to $rate Gb/s, partition 'hosts'"
            echo "$PROG: for SLURM's commands and dlcomm's launcher=slurm: export SLURM_CONF=$CONF"
            return 0
        fi
        SLURM_CONF=$CONF sinfo -h -N -o "%N %T" 2>/dev/null | awk '$2 ~ /^(down|drain)/ {print $1}' | while read -r h; do
            SLURM_CONF=$CONF scontrol update nodename="$h" state=resume 2>/dev/null || true
        done
        sleep 1
    done
    die "the hosts did not all come up in 60 s; see $STATE/slurmctld.log and $STATE/h*/slurmd.log"
}

down() {
    if [ -f "$CONF" ] && pid_alive "$STATE/slurmctld.pid"; then SLURM_CONF=$CONF scancel --full --quiet 2>/dev/null || true; fi
    for h in $(hosts_made); do
        stop_pidfile "$STATE/$h/slurmd.pid"
        # whatever still runs on the host (a job's tasks) ends with it
        ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip link del "v$h" 2>/dev/null || true
        ip netns del "$h"
    done
    stop_pidfile "$STATE/slurmctld.pid"
    ip link del "$BRIDGE" 2>/dev/null || true
    remove_hosts
    rm -rf "$STATE" "$CONF_DIR"
    echo "$PROG: down: no hosts, bridge or daemons left"
}

status() {
    local hosts; hosts=$(hosts_made)
    if [ -z "$hosts" ]; then echo "$PROG: no hosts (run: scripts/cluster_local.sh up --hosts N)"; return 1; fi
    echo "$PROG: $(echo "$hosts" | wc -w) hosts, links at $(awk '{print $2}' "$STATE/shape" 2>/dev/null || echo '?') Gb/s"
    for h in $hosts; do
        printf '  %-4s %-12s link %s\n' "$h" "$(host_addr "$h")" "$(ip netns exec "$h" cat /sys/class/net/eth0/operstate 2>/dev/null || echo missing)"
    done
    SLURM_CONF=$CONF sinfo -N -l 2>/dev/null || { echo "$PROG: slurmctld is not answering (run: scripts/cluster_local.sh up --hosts N)"; return 1; }
    SLURM_CONF=$CONF squeue 2>/dev/null || true
    nodes_ready "$(echo "$hosts" | wc -w)"
}

on_host() {  # exec HOST CMD...: in the host's network and UTS namespaces (hostname set)
    local h=${1:-}; shift || true
    hosts_made | grep -qx "$h" || die "no host '$h': the hosts are $(hosts_made | tr '\n' ' ')"
    [ $# -gt 0 ] || die "exec $h needs a command"
    exec nsenter --net="/run/netns/$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

link() {  # link HOST up|down
    local h=${1:-} state=${2:-}
    hosts_made | grep -qx "$h" || die "no host '$h': the hosts are $(hosts_made | tr '\n' ' ')"
    case "$state" in up | down) ip link set "v$h" "$state"; echo "$PROG: $h's link is $state" ;; *) die "link $h needs up or down" ;; esac
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) check_tools; down ;;
    status) status ;;
    exec) shift; on_host "$@" ;;
    link) shift; link "$@" ;;
    *) echo "usage: $0 up --hosts N [--gbps R] | status | down | exec HOST CMD... | link HOST up|down" >&2; exit 2 ;;
esac
