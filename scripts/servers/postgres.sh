# PostgreSQL (15 on Debian 12) for the tests of the `postgres://` store. Sourced by
# scripts/test.sh, which defines need_tool, missing_packages, free_port, server_dirs,
# server_pidfiles and add_test_store, and by scripts/restart-server.sh, which uses
# launch_postgres.
#
# start_postgres runs a throwaway cluster on 127.0.0.1 (trust authentication, user `postgres`,
# data in a temporary directory) and exports BATON_TEST_POSTGRES_URL. The store's tests make
# their own schemas in it where they need fresh tables; the CLI tests use its `public` schema
# with random key prefixes.

# Debian 12's `postgresql` is version 15; any installed version will do.
compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || missing_packages+=(postgresql)

# launch_postgres BIN DIR PORT: starts the cluster of DIR/data (logging to DIR/server.log) with
# the server of the bin directory BIN on 127.0.0.1:PORT, and returns once it accepts
# connections, after crash recovery if it was killed (pg_ctl -w, 60 s at most). After a kill,
# the postmaster does not start while the old one's backends run or its PID still exists (a
# zombie too): scripts/restart-server.sh waits for the first and clears the lock files of the
# second. start_postgres and scripts/restart-server.sh, which starts it again on the same port
# and data, both launch it here, so a restarted server has the options of the first.
launch_postgres() {
    local bin=$1 dir=$2 port=$3
    # Loopback only, the socket in the data directory (not /var/run/postgresql, which may not
    # exist), and room for the tests' many pools and child processes at once. fsync off: the
    # data is thrown away (a killed server still keeps every commit: its WAL is written to the
    # kernel at commit; only a crashed machine would lose some).
    runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-p $port -k $dir/data -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off" \
        start >/dev/null
}

# start_postgres: creates and starts the cluster, exports BATON_TEST_POSTGRES_URL and, for
# scripts/restart-server.sh, BATON_TEST_POSTGRES_BIN, BATON_TEST_POSTGRES_DIR (the data is
# DIR/data) and BATON_TEST_POSTGRES_PORT.
start_postgres() {
    local dir port pid postgres_bin
    postgres_bin=$(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' | sort -V | tail -n 1)")
    # initdb refuses to run as root: the cluster belongs to the `postgres` user (the package
    # creates it), and every parent of its data directory must be traversable by that user.
    dir=$(mktemp -d)
    chmod 755 "$dir"
    server_dirs+=("$dir")
    mkdir "$dir/data"
    touch "$dir/server.log"
    chown postgres: "$dir/data" "$dir/server.log"
    port=$(free_port)
    runuser -u postgres -- "$postgres_bin/initdb" -D "$dir/data" -U postgres --auth=trust \
        -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        return 1
    }
    # The postmaster's PID is the first line of its pid file, which a restart rewrites. The
    # EXIT trap stops it with SIGINT (a "fast" shutdown).
    server_pidfiles+=("$dir/data/postmaster.pid")
    launch_postgres "$postgres_bin" "$dir" "$port" || {
        cat "$dir/server.log" >&2
        return 1
    }
    pid=$(head -n 1 "$dir/data/postmaster.pid")
    export BATON_TEST_POSTGRES_BIN="$postgres_bin" BATON_TEST_POSTGRES_DIR="$dir"
    export BATON_TEST_POSTGRES_PORT="$port"
    export BATON_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
    echo "PostgreSQL $port (pid $pid, data $dir/data)"
    add_test_store "$BATON_TEST_POSTGRES_URL"
}
