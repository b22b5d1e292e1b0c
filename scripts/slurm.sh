#!/usr/bin/env bash
# A one-node Slurm on this machine, for the job scripts of docs/HPC.md and
# tests/suite/slurm_jobs.rs. Root only; Debian packages slurm-wlm and
# munge (scripts/setup.sh installs them).
#
#   scripts/slurm.sh start    write slurm.conf, start munged (unless one already
#                             answers), slurmctld and slurmd, wait until the node
#                             is idle; reuses a cluster this script started
#   scripts/slurm.sh stop     cancel its jobs, stop exactly the daemons it started
#                             (pids in /run/packfs-slurm) and remove its slurm.conf
#   scripts/slurm.sh status   exit 0 and print sinfo if it is up, else exit 3
#
# The configuration is the smallest that runs jobs here: no cgroups,
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, auth/munge, jobs run
# as the submitting user (root here, so `packfs run` in a job can mount FUSE).
# It is written to $SLURM_CONF (default /etc/slurm/slurm.conf, which Debian's
# daemons and clients read) with a marker line; a slurm.conf without the marker
# was not written here and is never overwritten.
#
# Environment: SLURM_CONF (see above), PACKFS_SLURM_STATE (default
# /run/packfs-slurm), PACKFS_SLURM_TIMEOUT (seconds to wait for the node, 30).
set -euo pipefail

CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
STATE=${PACKFS_SLURM_STATE:-/run/packfs-slurm}
TIMEOUT=${PACKFS_SLURM_TIMEOUT:-30}
MARK='# packfs-slurm: written by scripts/slurm.sh; "scripts/slurm.sh stop" removes it'
LOGDIR=/var/log/slurm
CTLD_LOG=$LOGDIR/slurmctld.log
SLURMD_LOG=$LOGDIR/slurmd.log
MUNGE_LOG=/var/log/munge/munged.log
MUNGE_KEY=/etc/munge/munge.key

say() { echo "slurm.sh: $*"; }
die() { echo "slurm.sh: error: $*" >&2; exit 1; }

usage() {
    echo "usage: $0 start|stop|status" >&2
    exit 2
}

# True while PID runs (a zombie that its parent has not reaped yet has exited).
alive() {
    [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# The pid recorded for DAEMON in the state dir if that process is alive and
# is DAEMON (its comm matches), else nothing. Guards against recycled pids.
live_pid() {
    local name=$1 f=$STATE/$1.pid pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    alive "$pid" || return 0
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && echo "$pid"
    return 0
}

# Pids of running processes whose executable is /usr/sbin/NAME (detection
# only: nothing found here is ever signalled unless its pid was recorded).
running() {
    local name=$1 d exe
    for d in /proc/[0-9]*; do
        exe=$(readlink "$d/exe" 2>/dev/null) || continue
        [ "${exe##*/}" = "$name" ] && echo "${d#/proc/}"
    done
    return 0
}

ours_conf() { [ -f "$CONF" ] && grep -qxF "$MARK" "$CONF"; }

node_state() {
    sinfo -h -n "$(hostname -s)" -o %t 2>/dev/null | head -n1
}

munge_works() {
    command -v munge >/dev/null && munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1
}

logs_tail() {
    local f
    for f in "$MUNGE_LOG" "$CTLD_LOG" "$SLURMD_LOG"; do
        [ -f "$f" ] || continue
        echo "----- last lines of $f -----" >&2
        tail -n 25 "$f" >&2 || true
    done
}

check_prereqs() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd runs jobs as their user; FUSE mounts in jobs need root here)"
    local missing=() c
    for c in slurmctld slurmd munged sinfo sbatch scontrol squeue scancel munge unmunge runuser; do
        command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || missing+=("$c")
    done
    [ ${#missing[@]} -eq 0 ] ||
        die "missing ${missing[*]}: install the Debian packages slurm-wlm and munge (scripts/setup.sh does)"
}

write_conf() {
    local h node
    h=$(hostname -s)
    # The node's real topology and memory, as slurmd detects them (a node
    # configured with more than it has would be drained).
    node=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=' || true)
    if [ -z "$node" ]; then
        node="NodeName=$h CPUs=$(nproc) RealMemory=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024))"
    fi
    mkdir -p "$(dirname "$CONF")"
    local tmp=$CONF.packfs-tmp.$$
    cat >"$tmp" <<EOF
$MARK
# One-node test cluster: no cgroups, jobs run as their submitter.
ClusterName=packfs
SlurmctldHost=$h(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$h Default=YES MaxTime=INFINITE State=UP
EOF
    mv -f "$tmp" "$CONF"
}

start_munge() {
    if munge_works; then
        say "munged already answers; using it (not ours: stop leaves it running)"
        return
    fi
    if [ ! -s "$MUNGE_KEY" ]; then
        say "creating $MUNGE_KEY"
        mkdir -p "$(dirname "$MUNGE_KEY")"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            dd if=/dev/urandom bs=1 count=1024 of="$MUNGE_KEY" status=none
        fi
        chown munge:munge "$MUNGE_KEY"
        chmod 400 "$MUNGE_KEY"
    fi
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    # A stale pid file or socket from a dead munged makes the new one refuse.
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 9>&- ||
        { logs_tail; die "munged failed to start"; }
    local i pid
    for ((i = 0; i < 50; i++)); do
        pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
        [ -n "$pid" ] && munge_works && break
        sleep 0.1
    done
    munge_works || { logs_tail; die "munged started but does not answer (munge -n | unmunge)"; }
    echo "$pid" >"$STATE/munged.pid"
}

# Starts DAEMON (slurmctld or slurmd) detached and waits for its pid file.
start_daemon() {
    local name=$1 log=$2 pid i
    shift 2
    rm -f "$STATE/$name.pid"
    "/usr/sbin/$name" "$@" </dev/null >>"$log" 2>&1 9>&- ||
        { logs_tail; die "$name failed to start (log: $log)"; }
    for ((i = 0; i < 100; i++)); do
        pid=$(live_pid "$name")
        [ -n "$pid" ] && break
        sleep 0.1
    done
    [ -n "$pid" ] || { logs_tail; die "$name did not write $STATE/$name.pid (log: $log)"; }
}

# Sends SIGTERM to a recorded daemon and waits for it to exit (SIGKILL after 15 s).
stop_one() {
    local name=$1 pid i
    pid=$(live_pid "$name")
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            say "$name (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                alive "$pid" || break
                sleep 0.1
            done
            alive "$pid" && die "$name (pid $pid) survived SIGKILL"
        fi
        say "stopped $name (pid $pid)"
    fi
    rm -f "$STATE/$name.pid"
}

do_status() {
    local ctld slurmd st=""
    ctld=$(live_pid slurmctld)
    slurmd=$(live_pid slurmd)
    [ -z "$ctld" ] || st=$(node_state)
    if ours_conf && [ -n "$ctld" ] && [ -n "$slurmd" ] && [ -n "$st" ] && [[ ! $st =~ (down|drain|fail) ]]; then
        local munged
        munged=$(live_pid munged)
        say "up: slurmctld $ctld, slurmd $slurmd, munged ${munged:-(not started here)} (node $st; state $STATE)"
        sinfo
        return 0
    fi
    say "not up (conf ours: $(ours_conf && echo yes || echo no), slurmctld: ${ctld:-none}, slurmd: ${slurmd:-none}, node: ${st:-none})"
    return 3
}

do_start() {
    check_prereqs
    mkdir -p "$STATE"
    if [ -e "$CONF" ] && ! ours_conf; then
        die "$CONF exists and was not written by this script (no marker line '$MARK'); refusing to overwrite it. Move it away, or set SLURM_CONF to another path."
    fi
    # Reuse a cluster this script started that still answers.
    if ours_conf && [ -n "$(live_pid slurmctld)" ] && [ -n "$(live_pid slurmd)" ]; then
        local st
        st=$(node_state)
        if [ -n "$st" ] && [[ ! $st =~ (down|drain|fail) ]]; then
            say "already up (node $st); reusing it"
            return 0
        fi
        say "a cluster started here is running but its node is '${st:-unknown}'; restarting it"
    fi
    # Whatever is left of an earlier start (dead or half-up) goes first.
    stop_one slurmd
    stop_one slurmctld
    local other
    for d in slurmctld slurmd; do
        other=$(running "$d")
        [ -z "$other" ] ||
            die "a $d not started by this script is running (pid $(echo $other)); stop it first"
    done

    write_conf
    mkdir -p /var/spool/slurmctld /var/spool/slurmd "$LOGDIR"
    : >"$CTLD_LOG"
    : >"$SLURMD_LOG"
    [ -n "$(live_pid munged)" ] || start_munge
    # -c: start from a clean state (no jobs or node states of an earlier run).
    start_daemon slurmctld "$CTLD_LOG" -c
    start_daemon slurmd "$SLURMD_LOG"

    local i st=""
    for ((i = 0; i < TIMEOUT * 2; i++)); do
        st=$(node_state)
        [ "$st" = idle ] && break
        sleep 0.5
    done
    if [ "$st" != idle ]; then
        echo "slurm.sh: the node is '${st:-not listed}' after ${TIMEOUT} s, not idle:" >&2
        sinfo >&2 || true
        scontrol show node "$(hostname -s)" >&2 || true
        logs_tail
        do_stop >&2 || true
        exit 1
    fi
    say "up: slurmctld $(live_pid slurmctld), slurmd $(live_pid slurmd); conf $CONF; logs $LOGDIR"
    sinfo
}

do_stop() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    if [ -n "$(live_pid slurmctld)" ] && ours_conf; then
        # Jobs would outlive slurmd in their slurmstepd: cancel them first.
        local jobs i
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            say "cancelling jobs: $(echo $jobs)"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            for ((i = 0; i < 100; i++)); do
                [ -z "$(squeue -h -o %i 2>/dev/null || true)" ] && break
                sleep 0.1
            done
        fi
    fi
    stop_one slurmd
    stop_one slurmctld
    stop_one munged
    if ours_conf; then
        rm -f "$CONF"
    fi
    rmdir "$STATE" 2>/dev/null || true
    say "stopped"
}

[ $# -eq 1 ] || usage
# One start/stop at a time (two tests or a test and a person).
mkdir -p "$(dirname "$STATE")"
exec 9>"$STATE.lock"
flock -w 120 9 || die "another slurm.sh holds $STATE.lock"
case $1 in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
*) usage ;;
esac
