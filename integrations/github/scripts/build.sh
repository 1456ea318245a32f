#!/bin/sh
# Bundles src/ into dist/ (committed: a JavaScript action runs its files as they are in the
# repository, with no install step), or with --check rebuilds into a temporary directory and
# fails if dist/ differs, so CI can tell a dist/ that was not rebuilt after a change to src/.
#
#   scripts/build.sh            rebuild dist/
#   scripts/build.sh --check    exit 1 if dist/ is not what src/ builds to
#
# Installs the pinned dependencies first (npm ci, from package-lock.json) when they are missing;
# scripts/bundle.mjs says how the bundles are made. They are deterministic: same sources and lock
# file, same bytes (no timestamps, no absolute paths: esbuild names bundled files relative to
# this directory).
set -eu

cd "$(dirname "$0")/.."

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: scripts/build.sh [--check]" >&2; exit 2 ;;
esac

if [ ! -x node_modules/.bin/esbuild ] || [ ! -d node_modules/@actions/core ]; then
    # --ignore-scripts: esbuild's postinstall only verifies its platform binary, which npm
    # installs anyway as an optional dependency (@esbuild/<platform>).
    npm ci --ignore-scripts --no-audit --no-fund
fi

if $check; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
else
    out=dist
    mkdir -p "$out"
fi

node scripts/bundle.mjs "$out"

if $check; then
    if ! diff -r dist "$out" >/dev/null; then
        echo "integrations/github/dist/ is out of date: run integrations/github/scripts/build.sh" >&2
        diff -r dist "$out" | head -40 >&2 || true
        exit 1
    fi
    echo "integrations/github/dist/ is up to date"
fi
