# PostgreSQL (15 on Debian 12) for the tests of the `postgres://` store. Sourced by
# scripts/test.sh, which defines need_tool, missing_packages, free_port, server_dirs, server_pids
# and add_test_store.
#
# start_postgres runs a throwaway cluster on 127.0.0.1 (trust authentication, user `postgres`,
# data in a temporary directory) and exports BATON_TEST_POSTGRES_URL. The store's tests make
# their own schemas in it where they need fresh tables; the CLI tests use its `public` schema
# with random key prefixes.

# Debian 12's `postgresql` is version 15; any installed version will do.
compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || missing_packages+=(postgresql)

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
    # Loopback only, the socket in the data directory (not /var/run/postgresql, which may not
    # exist), and room for the tests' many pools and child processes at once. fsync off: the
    # data is thrown away.
    runuser -u postgres -- "$postgres_bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-p $port -k $dir/data -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off" \
        start >/dev/null || {
        cat "$dir/server.log" >&2
        return 1
    }
    # pg_ctl has returned once the server accepts connections (-w); the postmaster's PID is the
    # first line of its pid file. The EXIT trap stops it with SIGTERM (a "smart" shutdown).
    pid=$(head -n 1 "$dir/data/postmaster.pid")
    server_pids+=("$pid")
    export BATON_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
    echo "PostgreSQL $port (pid $pid, data $dir/data)"
    add_test_store "$BATON_TEST_POSTGRES_URL"
}
