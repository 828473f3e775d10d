# Shared by scripts/slurm_local.sh and scripts/cluster_local.sh (sourced, not run): installing
# Debian's slurm-wlm and munge, munged, and stopping a daemon by its pid file.

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

install_slurm_packages() {
    if command -v slurmctld >/dev/null && command -v munged >/dev/null; then return; fi
    command -v apt-get >/dev/null || die "no apt-get: install slurm-wlm and munge with your package manager"
    echo "$PROG: installing slurm-wlm and munge (apt)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

start_munge() {
    as_root mkdir -p /run/munge /var/lib/munge /var/log/munge
    if [ ! -f /etc/munge/munge.key ]; then
        as_root mkdir -p /etc/munge
        as_root dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    as_root chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    as_root chmod 400 /etc/munge/munge.key
    if ! pgrep -x munged >/dev/null; then
        as_root runuser -u munge -- munged 2>/dev/null || as_root munged --force
    fi
}

# pid_alive FILE: the process named in FILE exists
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfile FILE: SIGTERM the process named in FILE, wait up to 10 s, then SIGKILL
stop_pidfile() {
    pid_alive "$1" || { rm -f "$1"; return 0; }
    local pid; pid=$(cat "$1")
    as_root kill "$pid" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || { rm -f "$1"; return 0; }; sleep 0.5; done
    as_root kill -9 "$pid" 2>/dev/null || true
    rm -f "$1"
}

# The settings both of dlcomm's clusters share: root runs everything, munge authenticates, no
# cgroups or accounting, nodes may declare more CPUs than they have (small test jobs side by side).
common_slurm_settings() {
    cat <<'SETTINGS'
SlurmUser=root
AuthType=auth/munge
# a requeued job waits this long before it may start again (default 120 s)
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# the main scheduler's full pass every second (default 60 s): only it starts a requeued job once its
# hold (cred_expire) is over, which no event does, so that job waited up to a minute more (a
# one-machine cluster's pass costs nothing)
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SETTINGS
}
