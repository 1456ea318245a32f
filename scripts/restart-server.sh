#!/usr/bin/env bash
# Restarts one test server that scripts/with-servers.sh (or scripts/test.sh) started: a fault
# for the torture harness, "the store server restarts".
#
#   scripts/restart-server.sh NAME [--kill]
#
# NAME is postgres, redis or etcd. Stops the running server, cleanly and fast (PostgreSQL's fast
# shutdown, SIGINT; Redis's and etcd's SIGTERM) or, with --kill, by SIGKILL (a crash); waits
# until its processes are gone; starts it again on the same port with the same data and options
# (scripts/servers/NAME.sh's launch_NAME); waits until it answers, and exits 0. On failure it
# prints the tail of the server's log to stderr and exits 1 (2 for a wrong use). On success it
# prints one line: "NAME restarted (kill|clean) on 127.0.0.1:PORT in MS ms: pid OLD -> NEW".
#
# Run it from with-servers.sh's command or any child of it: it reads only the environment that
# start_NAME exported (BATON_TEST_POSTGRES_BIN, _DIR, _PORT; BATON_TEST_REDIS_DIR, _PORT;
# BATON_TEST_ETCD_DIR, _PORT, _PEER_PORT), and the EXIT trap of with-servers.sh finds the new
# server by its pid file. It runs as root (PostgreSQL runs as user postgres), one restart of a
# server at a time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
    sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

name=${1:-}
mode=clean
case "$#:${2:-}" in
1:) ;;
2:--kill) mode="kill" ;;
*) usage ;;
esac
case "$name" in
postgres | redis | etcd) ;;
*) usage ;;
esac

# need_env VAR: the value of VAR, which start_NAME exported.
need_env() {
    if [ -z "${!1:-}" ]; then
        echo "$1 is not set: run this under scripts/with-servers.sh (with $name among its servers)" >&2
        exit 2
    fi
    printf '%s' "${!1}"
}

# scripts/servers/NAME.sh collects the packages its server needs when sourced; here the server
# is installed and running already, so there is nothing to collect.
# shellcheck disable=SC2034 # postgres.sh appends to it
missing_packages=()
need_tool() { :; }
need_file() { :; }
# shellcheck source=/dev/null
source "scripts/servers/$name.sh"

# What differs between the servers: the pid file that names the running process, its log, the
# signal of a clean stop, its binary (a PID of something else is not the server: see below),
# relaunch (launch_NAME and await_NAME on the same port and data), and for a server with child
# processes, its working directory (see leftovers below).
workdir=""
case "$name" in
postgres)
    bin=$(need_env BATON_TEST_POSTGRES_BIN)
    dir=$(need_env BATON_TEST_POSTGRES_DIR)
    port=$(need_env BATON_TEST_POSTGRES_PORT)
    pidfile=$dir/data/postmaster.pid
    log=$dir/server.log
    # SIGINT is PostgreSQL's fast shutdown: it ends the sessions rather than waiting for them.
    stop_signal=INT
    exe=$(readlink -f "$bin/postgres")
    # The postmaster and its backends work in the data directory.
    workdir=$(readlink -f "$dir/data")
    # A killed postmaster leaves its lock files (postmaster.pid and its socket's), which name
    # its PID, and PostgreSQL refuses to start while that PID exists, even as a zombie that
    # PID 1 has yet to reap (seconds, in some containers). Once nothing of the old server runs
    # (below), they are stale. pg_ctl waits until the new server accepts connections, after
    # its crash recovery if the old one was killed.
    relaunch() {
        local lock old
        for lock in "$pidfile" "$dir/data/.s.PGSQL.$port.lock"; do
            old=$(head -n 1 "$lock" 2>/dev/null || true)
            if [[ "$old" =~ ^[0-9]+$ ]] && ! process_alive "$old"; then rm -f "$lock"; fi
        done
        launch_postgres "$bin" "$dir" "$port"
    }
    ;;
redis)
    dir=$(need_env BATON_TEST_REDIS_DIR)
    port=$(need_env BATON_TEST_REDIS_PORT)
    pidfile=$dir/pid
    log=$dir/redis.log
    # SIGTERM is a clean shutdown: Redis syncs its append-only file and exits.
    stop_signal=TERM
    # An append-only file rewrite runs in a child process, in the server's directory.
    exe=$(readlink -f "$(command -v redis-server)")
    workdir=$(readlink -f "$dir")
    # await_redis waits for the new server's pid file: a killed server leaves its own.
    relaunch() {
        rm -f "$pidfile"
        launch_redis "$dir" "$port" && await_redis "$dir" "$port"
    }
    ;;
etcd)
    dir=$(need_env BATON_TEST_ETCD_DIR)
    port=$(need_env BATON_TEST_ETCD_PORT)
    peer_port=$(need_env BATON_TEST_ETCD_PEER_PORT)
    pidfile=$dir/pid
    log=$dir/etcd.log
    stop_signal=TERM
    exe=$(readlink -f "$(command -v etcd)")
    relaunch() { launch_etcd "$dir" "$port" "$peer_port" && await_etcd "$dir" "$port"; }
    ;;
esac
if [ ! -d "$dir" ]; then
    echo "$name's directory $dir is gone (have its servers stopped?)" >&2
    exit 2
fi

# fail MESSAGE: prints MESSAGE and the tail of the server's log, and exits 1.
fail() {
    echo "restart-server.sh $name: $*; the end of $log:" >&2
    tail -n 40 "$log" >&2 || true
    exit 1
}

# process_alive PID: PID runs (a zombie does not: these servers' parent is PID 1 by now, which
# may take seconds to reap them). As in scripts/lib/servers.sh, which this does not source: it
# installs packages and an EXIT trap.
process_alive() {
    local stat
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# server_process PID: PID is a live process of the server's binary. A pid file left by a server
# that was killed, and not started again, names a PID that another process may have by now.
server_process() {
    process_alive "$1" && [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$exe" ]
}

# leftovers: the PIDs of live processes of the server's binary that work in its directory. A
# killed postmaster's backends outlive it until they notice (at their next wait), and while they
# hold its shared memory a new postmaster refuses to start; a killed Redis's rewrite child may
# still be writing into its directory.
leftovers() {
    [ -n "$workdir" ] || return 0
    local cwd pid
    # One find over /proc rather than two readlinks per process; processes that exit meanwhile
    # make it complain.
    for cwd in $(find /proc/[0-9]*/cwd -maxdepth 0 -lname "$workdir" 2>/dev/null || true); do
        pid=${cwd#/proc/}
        pid=${pid%/cwd}
        server_process "$pid" && echo "$pid"
    done
    return 0
}

# wait_gone SECONDS PID...: waits until none of the PIDs runs; fails after SECONDS.
wait_gone() {
    local tenths=$(($1 * 10)) pid
    shift
    while :; do
        local alive=0
        for pid in "$@"; do process_alive "$pid" && alive=1; done
        [ "$alive" = 0 ] && return 0
        tenths=$((tenths - 1))
        [ "$tenths" -gt 0 ] || return 1
        sleep 0.1
    done
}

started_ms=$(date +%s%3N)

# ----- stop ----------------------------------------------------------------------------------

pid=$(head -n 1 "$pidfile" 2>/dev/null || true)
if [[ "$pid" =~ ^[0-9]+$ ]] && server_process "$pid"; then
    if [ "$mode" = kill ]; then
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone 10 "$pid" || fail "pid $pid outlived SIGKILL for 10 s"
    else
        kill "-$stop_signal" "$pid" 2>/dev/null || true
        # A clean stop that does not end is a failure, not a crash in disguise.
        wait_gone 30 "$pid" || fail "pid $pid did not stop within 30 s of SIG$stop_signal"
    fi
else
    # Not running (a restart that failed, say): start it all the same.
    echo "restart-server.sh $name: it was not running (pid file $pidfile); starting it" >&2
fi
# What the server left behind goes too: give it 10 s to notice, as a crashed server's processes
# would, then kill it.
mapfile -t left < <(leftovers)
if ((${#left[@]})); then
    if ! wait_gone 10 "${left[@]}"; then
        kill -KILL "${left[@]}" 2>/dev/null || true
        wait_gone 10 "${left[@]}" || fail "processes ${left[*]} of the old server outlived SIGKILL"
    fi
fi

# ----- start ---------------------------------------------------------------------------------

relaunch || fail "it did not start again on 127.0.0.1:$port"
new_pid=$(head -n 1 "$pidfile" 2>/dev/null || true)
echo "$name restarted ($mode) on 127.0.0.1:$port in $(($(date +%s%3N) - started_ms)) ms:" \
    "pid ${pid:-none} -> ${new_pid:-?}"
