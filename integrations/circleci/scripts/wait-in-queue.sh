#!/bin/sh
# wait-in-queue: takes this workflow's turn at the key, in commit-time order, and leaves the
# turn's token in baton kv for exit-queue (a later step or job of the same workflow). POSIX sh.
#
# Parameters (environment): PARAM_KEY (else WORKFLOW_LOCK_KEY), PARAM_STORE (else BATON_STORE),
# PARAM_SQUASH (true: a newer commit's workflow supersedes older queued ones), PARAM_FORCE_DEPLOY_TAG
# (in the commit message: never superseded), PARAM_KEEP_ALIVE (true, as the command passes it
# unless told otherwise: the turn is taken and ended within this job, and a keeper process renews
# a short lease, PARAM_LEASE, while the job runs; false, as the wait-in-queue job passes it, and
# when unset: the turn spans jobs, and its lease is PARAM_TTL, which nothing renews), PARAM_TTL
# (how long the workflow may hold the turn: with keep-alive the keeper's --max-hold, else the
# lease), PARAM_LEASE (with keep-alive, the renewed lease: a job that dies frees the key about
# this long later), PARAM_TIMEOUT (how long to wait; empty: as long as it takes), PARAM_CONTEXT
# (who waits; empty: baton's own, from the CIRCLE_* variables), PARAM_ON_SUPERSEDED
# (cancel_workflow, halt or fail), PARAM_CIRCLE_TOKEN (the name of the variable holding a
# CircleCI API token, for cancel_workflow), PARAM_CIRCLECI_API (the CircleCI API's base URL).
set -eu
. "$(dirname -- "$0")/lib.sh" # pack.sh inlines lib.sh here

orb_need_baton
orb_use_store
orb_use_key
orb_use_turn_name

ttl=${PARAM_TTL:-1h}
lease=${PARAM_LEASE:-1m}
keep_alive=${PARAM_KEEP_ALIVE:-false}
timeout=${PARAM_TIMEOUT-4h}
squash=${PARAM_SQUASH:-true}
force_tag=${PARAM_FORCE_DEPLOY_TAG-[force deploy]}
on_superseded=${PARAM_ON_SUPERSEDED:-cancel_workflow}
case $squash in
    true | false) ;;
    *) orb_fail "squash must be true or false, not \"$squash\"" ;;
esac
case $keep_alive in
    true | false) ;;
    *) orb_fail "keep_alive must be true or false, not \"$keep_alive\"" ;;
esac
case $on_superseded in
    cancel_workflow | halt | fail) ;;
    *) orb_fail "on_superseded must be cancel_workflow, halt or fail, not \"$on_superseded\"" ;;
esac

keeper_file=$(orb_keeper_file)

# A rerun of this job in the same workflow (CIRCLE_WORKFLOW_WORKSPACE_ID is the same across
# reruns): if the workflow still holds its turn, keep it. With keep-alive, only a turn whose
# keeper runs in this job is kept: an earlier run's keeper ended with its job, and a turn nothing
# renews must not cover this one's work.
set +e
token=$(baton kv get -- "$TURN_NAME" 2>/dev/null)
rc=$?
set -e
if [ "$rc" -eq 0 ] && [ -n "$token" ]; then
    if [ "$keep_alive" = true ]; then
        keeper=$(cat "$keeper_file" 2>/dev/null || true)
        if [ -n "$keeper" ] && orb_keeper_running "$keeper" "$KEY"; then
            orb_say "this job already holds workflow $WORKFLOW's turn at $KEY (keeper pid $keeper): keeping it"
            exit 0
        fi
        baton release --outcome cancelled -- "$KEY" "$token" >/dev/null 2>&1 || true
        orb_say "the turn an earlier run of this job took at $KEY is kept alive by nobody now (its job ended): giving it up, queueing again"
    elif baton renew --ttl "$ttl" -- "$KEY" "$token" >/dev/null 2>&1; then
        orb_say "workflow $WORKFLOW already holds its turn at $KEY (an earlier run of this job took it): keeping it, lease renewed for $ttl"
        exit 0
    else
        orb_say "the turn an earlier run of this job took at $KEY has ended: queueing again"
    fi
fi

# The order: the commit's time, zero-padded so that it compares as a string.
order=
keep=false
if command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1; then
    rev=HEAD
    if [ -n "${CIRCLE_SHA1:-}" ] && git cat-file -e "${CIRCLE_SHA1}^{commit}" 2>/dev/null; then
        rev=$CIRCLE_SHA1
    fi
    committed=$(git log -1 --format=%ct "$rev")
    order=$(printf '%012d' "$committed")
    message=$(git log -1 --format=%B "$rev")
    case $message in
        *"$force_tag"*) [ -z "$force_tag" ] || keep=true ;;
    esac
    orb_say "commit $(git rev-parse --short "$rev") was committed at $committed (unix time): queueing in commit-time order"
else
    orb_say "not in a git checkout (add the checkout step before wait-in-queue): queueing in arrival order, and the commit message is not read for \"$force_tag\""
fi

if [ "$keep_alive" = true ]; then
    set -- acquire --json --keep-alive --ttl "$lease" --max-hold "$ttl"
else
    set -- acquire --ttl "$ttl"
fi
if [ -n "${PARAM_CONTEXT:-}" ]; then
    set -- "$@" --context "$PARAM_CONTEXT"
fi
if [ -n "$timeout" ]; then
    set -- "$@" --timeout "$timeout"
fi
if [ -n "$order" ]; then
    set -- "$@" --order "$order"
fi
if [ "$squash" = true ]; then
    set -- "$@" --supersede
fi
if [ "$keep" = true ]; then
    orb_say "the commit message has \"$force_tag\": this workflow is never superseded"
    set -- "$@" --keep
fi

halt() {
    if command -v circleci-agent >/dev/null 2>&1; then
        circleci-agent step halt
    fi
    exit 0
}

superseded() {
    what="superseded at $KEY by a newer commit's workflow, which deploys this commit's changes too"
    case $on_superseded in
        halt)
            orb_say "$what: halting this job (on_superseded: halt; the later jobs of this workflow still run, without a turn)"
            halt
            ;;
        fail)
            orb_fail "$what: failing this job so that the rest of the workflow does not run (on_superseded: fail)"
            ;;
    esac
    token_var=${PARAM_CIRCLE_TOKEN:-CIRCLE_TOKEN}
    api_token=$(orb_env_value "$token_var")
    if [ -z "$api_token" ]; then
        orb_fail "$what. Cannot cancel this workflow: $token_var is empty (set it to a CircleCI API token, in a context). Failing this job instead, so that the rest of the workflow does not run without a turn"
    fi
    if ! command -v curl >/dev/null 2>&1; then
        orb_fail "$what. Cannot cancel this workflow: curl is not installed. Failing this job instead, so that the rest of the workflow does not run without a turn"
    fi
    api=${PARAM_CIRCLECI_API:-https://circleci.com/api/v2}
    current=${CIRCLE_WORKFLOW_ID:-$WORKFLOW}
    # The token goes through stdin, never onto a command line or into the log.
    if ! printf 'Circle-Token: %s\n' "$api_token" |
        curl -fsS -o /dev/null -X POST -H @- "${api%/}/workflow/$current/cancel"; then
        orb_fail "$what. The CircleCI API refused to cancel workflow $current (see above). Failing this job instead, so that the rest of the workflow does not run without a turn"
    fi
    orb_say "$what: cancelled workflow $current, halting this job"
    halt
}

hold="ttl $ttl"
[ "$keep_alive" = false ] || hold="lease $lease kept alive for at most $ttl"
orb_say "workflow $WORKFLOW waits for a turn at $KEY ($hold, timeout ${timeout:-none})"
set +e
token=$(baton "$@" -- "$KEY")
rc=$?
set -e
keeper=
if [ "$rc" -eq 0 ] && [ "$keep_alive" = true ]; then
    # The JSON object: the token and the keeper's pid (tokens are letters, digits and dashes).
    turn=$token
    token=$(printf '%s\n' "$turn" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
    keeper=$(printf '%s\n' "$turn" | sed -n 's/.*"keeper_pid":\([0-9][0-9]*\).*/\1/p')
    [ -n "$token" ] || orb_fail "baton acquire --json printed no token: $turn"
    printf '%s\n' "$keeper" >"$keeper_file"
fi
case $rc in
    0) ;;
    75) orb_fail "waited $timeout for a turn at $KEY without getting one (timeout)" ;;
    76) superseded ;;
    77) orb_fail "this workflow's place in the queue at $KEY was cancelled by an operator (baton cancel)" ;;
    *) orb_fail "baton acquire failed (exit $rc): see its message above" ;;
esac

# The token goes through stdin, not the command line; it is never printed.
if ! printf '%s' "$token" | baton kv set --ttl "$ttl 1d" -- "$TURN_NAME" - >/dev/null; then
    baton release --outcome cancelled -- "$KEY" "$token" >/dev/null 2>&1 || true
    orb_fail "could not record the turn for exit-queue under $TURN_NAME (see above): gave the turn back"
fi
if [ "$keep_alive" = true ]; then
    orb_say "workflow $WORKFLOW holds the turn at $KEY: a keeper (pid $keeper) renews its $lease lease while this job runs, for at most $ttl; end it with exit-queue later in this job (exit_condition: always)"
else
    orb_say "workflow $WORKFLOW holds the turn at $KEY for at most $ttl: end it with exit-queue (on_success at the end, on_fail in every job)"
fi
