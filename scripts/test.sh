#!/usr/bin/env bash
# baton's test command: the README and CI (.ci/run) call this, and nothing else.
#
# On a fresh Debian 12 machine (root, network only to package registries, a rustup toolchain
# with cargo already there) it installs what the build and the tests need, starts the test
# servers the stores need (scripts/lib/servers.sh), builds every target and runs every test.
#
# Environment:
#   CARGO_TARGET_DIR     honoured (cargo reads it).
#   BATON_TEST_STORES    comma-separated store URLs the CLI tests run against (`fresh-sqlite`:
#                        a new SQLite file per test, the default when unset; `serve+URL`:
#                        through a `baton serve` in front of URL). The server functions below
#                        append their URLs to it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/servers.sh
baton_root=$(pwd)
source scripts/lib/servers.sh
install_missing
start_test_servers
# The CLI tests run through `baton serve` too: each test starts a server of its own in front of
# a fresh SQLite file, and of PostgreSQL when it runs.
add_test_store "serve+fresh-sqlite"
if [ -n "${BATON_TEST_POSTGRES_URL:-}" ]; then
    add_test_store "serve+$BATON_TEST_POSTGRES_URL"
fi
if [ -n "${BATON_TEST_STORES:-}" ]; then
    echo "CLI tests run against: $BATON_TEST_STORES"
fi

# ----- build and test ----------------------------------------------------------------------

section "toolchain"
cargo --version
rustc --version
echo "target dir: ${CARGO_TARGET_DIR:-target}"

section "build (cargo build --workspace --all-targets)"
cargo build --workspace --all-targets

status=0
if cargo nextest --version >/dev/null 2>&1; then
    # nextest keeps both cores busy across test binaries (.config/nextest.toml says which
    # tests run alone); it runs no doc tests, so cargo runs those after it.
    section "test (cargo nextest run --workspace)"
    cargo nextest run --workspace || status=$?
    section "doc tests (cargo test --workspace --doc)"
    cargo test --workspace --doc || status=$?
else
    section "test (cargo test --workspace --no-fail-fast; cargo-nextest is not installed)"
    cargo test --workspace --no-fail-fast || status=$?
fi
if [ "$status" -ne 0 ]; then
    section "tests FAILED (exit $status): see the failures above"
    exit "$status"
fi
# The stores are cargo features: a build with some of them must compile and refuse the others
# by URL, naming the feature. After the tests, since it replaces the `baton` they ran.
section "a build with two stores (cargo build -p baton-cli --no-default-features --features sqlite,postgres)"
cargo build -p baton-cli --no-default-features --features sqlite,postgres
few_stores="${CARGO_TARGET_DIR:-target}/debug/baton"
refusal=$("$few_stores" status --store redis://127.0.0.1:9 2>&1) && status=0 || status=$?
if [ "$status" -ne 2 ] || [[ "$refusal" != *"cargo feature \`redis\`"* ]]; then
    section "tests FAILED: the two-store build did not refuse a Redis URL naming its feature"
    echo "exit $status: $refusal"
    exit 1
fi
scratch=$(mktemp -d)
"$few_stores" init --store "sqlite:$scratch/baton.db" >/dev/null
"$few_stores" status --store "sqlite:$scratch/baton.db" >/dev/null
rm -rf "$scratch"
echo "the two-store build refuses redis:// (exit 2, naming the feature) and opens SQLite"
section "all tests passed"
