#!/usr/bin/env bash
# The per-store benchmarks of BENCHMARKS.md: starts PostgreSQL, Redis and etcd on loopback
# (scripts/with-servers.sh), builds the release binaries and runs, on each store and on a
# fresh SQLite file:
#   baton-bench throughput                    one uncontended client: latency, round trips
#   baton-bench handoff                       release -> the waiting `baton run`'s command
#   baton-bench throughput --processes 16     16 processes on one key for 10 s
# and, on etcd, `baton-bench process` (baton run next to `etcdctl lock`).
#
#   scripts/bench-stores.sh [--json]
#
# Run it on a machine doing nothing else; every table prints the load average at its start.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${BATON_BENCH_INNER:-}" ]; then
    cargo build --release --workspace
    BATON_BENCH_INNER=1 exec scripts/with-servers.sh --only postgres,redis,etcd "$0" "$@"
fi

bin=${CARGO_TARGET_DIR:-target}/release/baton-bench
run() {
    printf '\n$ baton-bench %s\n' "$*"
    "$bin" "$@"
}
for store in sqlite "$BATON_TEST_POSTGRES_URL" "$BATON_TEST_REDIS_URL" "$BATON_TEST_ETCD_URL"; do
    args=()
    [ "$store" = sqlite ] || args=(--store "$store")
    printf '\n######## %s ########\n' "$store"
    run throughput "${args[@]}" --cycles 2000 "$@"
    run handoff "${args[@]}" "$@"
    run throughput "${args[@]}" --processes 16 "$@"
done
run process --store "$BATON_TEST_ETCD_URL" "$@"
