#!/bin/sh
# kv-set: sets a shared value in baton kv, for later jobs (kv-get) or other workflows. POSIX sh.
#
# Parameters (environment): PARAM_NAME, PARAM_VALUE, PARAM_TTL (empty: never expires),
# PARAM_STORE (else BATON_STORE).
set -eu
. "$(dirname -- "$0")/lib.sh" # pack.sh inlines lib.sh here

orb_need_baton
orb_use_store
name=${PARAM_NAME:-}
[ -n "$name" ] || orb_fail "no name: set the name parameter (such as ci/version)"
value=${PARAM_VALUE-}

set -- kv set
if [ -n "${PARAM_TTL:-}" ]; then
    set -- "$@" --ttl "$PARAM_TTL"
fi
# The value goes through stdin: any text, even one that starts with a dash.
version=$(printf '%s' "$value" | baton "$@" -- "$name" -) ||
    orb_fail "could not set $name (see baton's message above)"
orb_say "set $name (version $version)"
