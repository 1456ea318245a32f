#!/usr/bin/env bash
# baton next to the locks users would otherwise use, side by side in one run (BENCHMARKS.md's
# first table): starts PostgreSQL, Redis, etcd and moto (S3 and DynamoDB) on loopback
# (scripts/with-servers.sh), builds the release binaries and runs
#
#   baton-bench peers [ARGS...]
#
# which prints a Markdown table: per scenario and store, baton's and the peer's median and p99,
# their ratio, and the goal it is held to. It exits 3 when a goal is not met, 1 on an error.
# Run it on a machine doing nothing else; the table says the load average at its start and
# end. Takes about 20 minutes; `--scenarios b1,b3` (for instance) runs fewer.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${BATON_BENCH_INNER:-}" ]; then
    cargo build --release --workspace
    BATON_BENCH_INNER=1 exec scripts/with-servers.sh --only postgres,redis,etcd,moto "$0" "$@"
fi

exec "${CARGO_TARGET_DIR:-target}/release/baton-bench" peers "$@"
