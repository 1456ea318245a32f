# Redis for the Redis store's tests and the CLI tests: sourced by scripts/test.sh, which defines
# need_tool, free_port, add_test_store, server_dirs and server_pids.
#
# One server on loopback, its data (an append-only file, so the store sees a server that
# persists, as in production) in a temporary directory. The store's tests read
# BATON_TEST_REDIS_URL; crates/baton-store/tests/conformance_redis.rs also starts servers of its
# own from the same binary (with a password, with TLS, to restart one).

need_tool redis-server redis-server
need_tool redis-cli redis-tools
need_tool openssl openssl # the TLS test's throwaway certificate authority

# start_redis: starts the server, waits until it answers, exports BATON_TEST_REDIS_URL.
start_redis() {
    local dir port pid tries=0
    dir=$(mktemp -d "${TMPDIR:-/tmp}/baton-redis.XXXXXX")
    server_dirs+=("$dir")
    port=$(free_port)
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly yes --dir "$dir" \
        --daemonize yes --pidfile "$dir/pid" --logfile "$dir/redis.log" || {
        echo "redis-server did not start on 127.0.0.1:$port" >&2
        return 1
    }
    # Daemonized: the PID comes from the pid file, written once the server runs.
    until [ -s "$dir/pid" ] && redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; do
        tries=$((tries + 1))
        if [ "$tries" -ge 100 ]; then
            echo "redis did not answer on 127.0.0.1:$port; its log:" >&2
            cat "$dir/redis.log" >&2
            return 1
        fi
        sleep 0.1
    done
    pid=$(cat "$dir/pid")
    server_pids+=("$pid")
    export BATON_TEST_REDIS_URL="redis://127.0.0.1:$port"
    echo "redis on 127.0.0.1:$port (pid $pid, data $dir)"
    add_test_store "$BATON_TEST_REDIS_URL"
}
