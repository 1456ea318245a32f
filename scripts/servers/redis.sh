# Redis for the Redis store's tests and the CLI tests: sourced by scripts/test.sh, which defines
# need_tool, free_port, add_test_store, server_dirs and server_pidfiles, and by
# scripts/restart-server.sh, which uses launch_redis and await_redis.
#
# One server on loopback, its data (an append-only file, so the store sees a server that
# persists, as in production) in a temporary directory. The store's tests read
# BATON_TEST_REDIS_URL; crates/baton-store/tests/conformance_redis.rs also starts servers of its
# own from the same binary (with a password, with TLS, to restart one).

need_tool redis-server redis-server
need_tool redis-cli redis-tools
need_tool openssl openssl # the TLS test's throwaway certificate authority

# launch_redis DIR PORT: starts the server as a daemon on 127.0.0.1:PORT with its data, its pid
# file (DIR/pid) and its log (DIR/redis.log) in DIR; it has not answered yet (await_redis).
# start_redis and scripts/restart-server.sh, which starts it again on the same port and data,
# both launch it here, so a restarted server has the options of the first.
#
# appendfsync is BATON_TEST_REDIS_FSYNC, else Redis's default, everysec (what the CLI tests and
# the benchmarks meet). Under everysec Redis syncs the file from a background thread once a
# second, and while that sync runs it holds back its writes to the file but not its replies: a
# server killed in those milliseconds loses writes it acknowledged. The fault runs, which kill it
# and then check that every acknowledged write is there, set `always` (sync, then reply).
launch_redis() {
    local dir=$1 port=$2
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly yes \
        --appendfsync "${BATON_TEST_REDIS_FSYNC:-everysec}" --dir "$dir" \
        --daemonize yes --pidfile "$dir/pid" --logfile "$dir/redis.log"
}

# await_redis DIR PORT: waits (10 s at most) until the server answers PING. Daemonized, it writes
# its pid file once it runs; the caller removes a stale one first. A server loading its
# append-only file answers LOADING, not PONG.
await_redis() {
    local dir=$1 port=$2 tries=0
    until [ -s "$dir/pid" ] && [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; do
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || return 1
        sleep 0.1
    done
}

# start_redis: starts the server, waits until it answers, exports BATON_TEST_REDIS_URL and, for
# scripts/restart-server.sh, BATON_TEST_REDIS_DIR and BATON_TEST_REDIS_PORT.
start_redis() {
    local dir port
    dir=$(mktemp -d "${TMPDIR:-/tmp}/baton-redis.XXXXXX")
    server_dirs+=("$dir")
    port=$(free_port)
    launch_redis "$dir" "$port" || {
        echo "redis-server did not start on 127.0.0.1:$port" >&2
        return 1
    }
    # The pid file, not the PID: a restart changes the PID.
    server_pidfiles+=("$dir/pid")
    await_redis "$dir" "$port" || {
        echo "redis did not answer on 127.0.0.1:$port; its log:" >&2
        cat "$dir/redis.log" >&2
        return 1
    }
    export BATON_TEST_REDIS_DIR="$dir" BATON_TEST_REDIS_PORT="$port"
    export BATON_TEST_REDIS_URL="redis://127.0.0.1:$port"
    echo "redis on 127.0.0.1:$port (pid $(cat "$dir/pid"), data $dir)"
    add_test_store "$BATON_TEST_REDIS_URL"
}
