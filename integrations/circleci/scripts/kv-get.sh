#!/bin/sh
# kv-get: reads a shared value from baton kv; prints it, or exports it to the job's later steps
# as an environment variable (a line `export NAME='value'` in $BASH_ENV). POSIX sh.
#
# Parameters (environment): PARAM_NAME, PARAM_ENV_VAR (empty: print the value),
# PARAM_STORE (else BATON_STORE).
set -eu
. "$(dirname -- "$0")/lib.sh" # pack.sh inlines lib.sh here

orb_need_baton
orb_use_store
name=${PARAM_NAME:-}
[ -n "$name" ] || orb_fail "no name: set the name parameter (such as ci/version)"
env_var=${PARAM_ENV_VAR:-}
if [ -n "$env_var" ]; then
    case $env_var in
        [0-9]* | *[!A-Za-z0-9_]*) orb_fail "env_var \"$env_var\" is not an environment variable name" ;;
    esac
    [ -n "${BASH_ENV:-}" ] || orb_fail "BASH_ENV is not set: it is where CircleCI keeps the variables of a job's later steps"
fi

set +e
value=$(baton kv get -- "$name")
rc=$?
set -e
case $rc in
    0) ;;
    3) orb_fail "there is no value $name (never set, deleted, or expired)" ;;
    *) orb_fail "could not read $name (baton kv get exit $rc)" ;;
esac

if [ -z "$env_var" ]; then
    printf '%s\n' "$value"
    exit 0
fi
# Single quotes keep the value as it is; a quote in it becomes '\''.
quoted=$(printf '%s' "$value" | sed "s/'/'\\\\''/g")
printf "export %s='%s'\n" "$env_var" "$quoted" >>"$BASH_ENV"
orb_say "exported $name as \$$env_var to the job's later steps"
