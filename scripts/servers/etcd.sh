# etcd for the etcd store's tests and the CLI tests: sourced by scripts/test.sh, which defines
# need_tool, free_port, add_test_store, server_dirs and server_pids.
#
# One etcd member on loopback ports, its data in a temporary directory. The store's tests read
# BATON_TEST_ETCD_URL; crates/baton-cli/tests/skew.rs runs clients under faketime against it.

need_tool etcd etcd-server
need_tool etcdctl etcd-client
need_tool faketime faketime # the clock-skew tests (crates/baton-cli/tests/skew.rs)
need_tool openssl openssl   # certificates for the TLS test of the etcd store

# start_etcd: starts the member, waits until it answers, exports BATON_TEST_ETCD_URL.
start_etcd() {
    local dir client_port peer_port pid
    dir=$(mktemp -d "${TMPDIR:-/tmp}/baton-etcd.XXXXXX")
    server_dirs+=("$dir")
    client_port=$(free_port)
    peer_port=$(free_port)
    while [ "$peer_port" = "$client_port" ]; do peer_port=$(free_port); done
    etcd --name baton-test --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:$client_port" \
        --advertise-client-urls "http://127.0.0.1:$client_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "baton-test=http://127.0.0.1:$peer_port" \
        --initial-cluster-state new \
        >"$dir/etcd.log" 2>&1 &
    pid=$!
    server_pids+=("$pid")
    local tries=0
    until ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$client_port" --dial-timeout 1s \
        endpoint health >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -ge 100 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "etcd did not become healthy on 127.0.0.1:$client_port; its log:" >&2
            cat "$dir/etcd.log" >&2
            return 1
        fi
        sleep 0.2
    done
    export BATON_TEST_ETCD_URL="etcd://127.0.0.1:$client_port/baton-test"
    echo "etcd on 127.0.0.1:$client_port (pid $pid, data $dir)"
    add_test_store "$BATON_TEST_ETCD_URL"
}
