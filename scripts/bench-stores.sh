#!/usr/bin/env bash
# The per-store benchmarks of BENCHMARKS.md: starts PostgreSQL, Redis, etcd and moto (S3 and
# DynamoDB) on loopback (scripts/with-servers.sh), builds the release binaries and runs, on each
# store and on a fresh SQLite file:
#   baton-bench throughput                    one uncontended client: latency, round trips
#   baton-bench handoff                       release -> the waiting `baton run`'s command
#   baton-bench handoff --waiter library      release -> another process's `acquire` returns
#   baton-bench throughput --processes 16     16 processes on one key for 10 s
# on S3 and DynamoDB (no push: waiters poll)
#   baton-bench polling                       store requests per waiter and minute, by place
# and, on etcd, `baton-bench process` (baton run next to `etcdctl lock`). DynamoDB's write
# units per acquire + release are measured by its conformance test
# (`write_units_per_acquire_and_release`, printed with --nocapture).
#
#   scripts/bench-stores.sh [--json]
#
# Run it on a machine doing nothing else; every table prints the load average at its start.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${BATON_BENCH_INNER:-}" ]; then
    cargo build --release --workspace
    BATON_BENCH_INNER=1 exec scripts/with-servers.sh --only postgres,redis,etcd,moto "$0" "$@"
fi

bin=${CARGO_TARGET_DIR:-target}/release/baton-bench
run() {
    printf '\n$ baton-bench %s\n' "$*"
    "$bin" "$@"
}
"${CARGO_TARGET_DIR:-target}/release/baton" init --store "$BATON_TEST_DYNAMODB_URL" >/dev/null
for store in sqlite "$BATON_TEST_POSTGRES_URL" "$BATON_TEST_REDIS_URL" "$BATON_TEST_ETCD_URL" \
    "$BATON_TEST_S3_URL" "$BATON_TEST_DYNAMODB_URL"; do
    args=()
    [ "$store" = sqlite ] || args=(--store "$store")
    printf '\n######## %s ########\n' "$store"
    run throughput "${args[@]}" --cycles 2000 "$@"
    run handoff "${args[@]}" "$@"
    run handoff "${args[@]}" --waiter library --rounds 30 "$@"
    run throughput "${args[@]}" --processes 16 "$@"
    case "$store" in
        s3://* | dynamodb://*) run polling "${args[@]}" "$@" ;;
    esac
done
run process --store "$BATON_TEST_ETCD_URL" "$@"
