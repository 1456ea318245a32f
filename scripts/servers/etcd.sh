# etcd for the etcd store's tests and the CLI tests: sourced by scripts/test.sh, which defines
# need_tool, free_port, add_test_store, server_dirs and server_pidfiles, and by
# scripts/restart-server.sh, which uses launch_etcd and await_etcd.
#
# One etcd member on loopback ports, its data in a temporary directory. The store's tests read
# BATON_TEST_ETCD_URL; crates/baton-cli/tests/skew.rs runs clients under faketime against it.

need_tool etcd etcd-server
need_tool etcdctl etcd-client
need_tool faketime faketime # the clock-skew tests (crates/baton-cli/tests/skew.rs)
need_tool openssl openssl   # certificates for the TLS test of the etcd store

# launch_etcd DIR CLIENT_PORT PEER_PORT: starts the member in the background with its data in
# DIR/data, appending its output to DIR/etcd.log, and writes its PID to DIR/pid (etcd keeps no
# pid file, and the shell that started it may be gone when the servers stop); it has not
# answered yet (await_etcd). start_etcd and scripts/restart-server.sh, which starts it again on
# the same ports and data, both launch it here, so a restarted member has the options of the
# first. The --initial-cluster flags only matter to a new member: a member that finds its data
# directory ignores them and rejoins its cluster of one.
launch_etcd() {
    local dir=$1 client_port=$2 peer_port=$3
    etcd --name baton-test --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:$client_port" \
        --advertise-client-urls "http://127.0.0.1:$client_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "baton-test=http://127.0.0.1:$peer_port" \
        --initial-cluster-state new \
        </dev/null >>"$dir/etcd.log" 2>&1 &
    echo "$!" >"$dir/pid"
    # Out of the job table: a member killed by scripts/restart-server.sh would have the shell
    # that started it print "Killed" and its command line.
    disown "$!"
}

# await_etcd DIR CLIENT_PORT: waits (20 s at most) until the member launched by launch_etcd
# reports itself healthy; fails at once if it exited.
await_etcd() {
    local dir=$1 client_port=$2 pid tries=0
    pid=$(cat "$dir/pid")
    until ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$client_port" --dial-timeout 1s \
        endpoint health >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -ge 100 ] || ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.2
    done
}

# start_etcd: starts the member, waits until it answers, exports BATON_TEST_ETCD_URL and, for
# scripts/restart-server.sh, BATON_TEST_ETCD_DIR, BATON_TEST_ETCD_PORT (the client port) and
# BATON_TEST_ETCD_PEER_PORT.
start_etcd() {
    local dir client_port peer_port
    dir=$(mktemp -d "${TMPDIR:-/tmp}/baton-etcd.XXXXXX")
    server_dirs+=("$dir")
    client_port=$(free_port)
    peer_port=$(free_port)
    while [ "$peer_port" = "$client_port" ]; do peer_port=$(free_port); done
    launch_etcd "$dir" "$client_port" "$peer_port"
    # The pid file, not the PID: a restart changes the PID.
    server_pidfiles+=("$dir/pid")
    await_etcd "$dir" "$client_port" || {
        echo "etcd did not become healthy on 127.0.0.1:$client_port; its log:" >&2
        cat "$dir/etcd.log" >&2
        return 1
    }
    export BATON_TEST_ETCD_DIR="$dir" BATON_TEST_ETCD_PORT="$client_port"
    export BATON_TEST_ETCD_PEER_PORT="$peer_port"
    export BATON_TEST_ETCD_URL="etcd://127.0.0.1:$client_port/baton-test"
    echo "etcd on 127.0.0.1:$client_port (pid $(cat "$dir/pid"), data $dir)"
    add_test_store "$BATON_TEST_ETCD_URL"
}
