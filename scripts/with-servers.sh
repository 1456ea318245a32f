#!/usr/bin/env bash
# Runs one command with baton's test servers up on loopback, then stops them.
#
#   scripts/with-servers.sh [--only NAME[,NAME]] COMMAND [ARG...]
#
# Starts every server of scripts/servers/ (or just the named ones: postgres, redis, etcd, ...)
# on 127.0.0.1 on free ports with temporary data, exactly as scripts/test.sh does, exports the
# URLs the tests read (BATON_TEST_POSTGRES_URL, BATON_TEST_REDIS_URL, BATON_TEST_ETCD_URL, ...
# and BATON_TEST_STORES), runs COMMAND, stops the servers by PID and exits with COMMAND's
# status. For one store's tests or a benchmark against real servers, for example:
#
#   scripts/with-servers.sh --only postgres cargo test -p baton-store --test conformance_postgres
#   scripts/with-servers.sh sh -c 'target/release/baton-bench handoff --store "$BATON_TEST_REDIS_URL"'
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

only=""
if [ "${1:-}" = "--only" ]; then
    only=${2:?"--only needs a comma-separated list of server names"}
    shift 2
fi
if [ "$#" -eq 0 ]; then
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi

baton_root=$(pwd)
# shellcheck source=scripts/lib/servers.sh
source scripts/lib/servers.sh
if [ -n "$only" ]; then
    IFS=, read -r -a wanted <<<"$only"
    for name in "${wanted[@]}"; do
        if [ ! -e "scripts/servers/$name.sh" ]; then
            echo "no server named '$name' (known: ${server_names[*]})" >&2
            exit 2
        fi
    done
    server_names=("${wanted[@]}")
fi
install_missing
start_test_servers >&2

status=0
"$@" || status=$?
exit "$status"
