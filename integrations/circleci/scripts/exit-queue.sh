#!/bin/sh
# exit-queue: ends the turn this workflow took with wait-in-queue, recording how the work went,
# and optionally has baton post to Slack when a success follows failures. POSIX sh.
#
# Parameters (environment): PARAM_KEY (else WORKFLOW_LOCK_KEY), PARAM_STORE (else BATON_STORE),
# PARAM_EXIT_CONDITION (on_success, on_fail or always: the step's `when`), PARAM_OUTCOME (auto,
# succeeded, failed or cancelled; auto: failed for on_fail, succeeded for on_success, and for
# always failed if note-failure.sh left its mark, else succeeded),
# PARAM_SEND_SLACK_ON_RECOVERY (true or false), PARAM_SLACK_WEBHOOK (the name of the variable
# holding the Slack incoming-webhook URL).
#
# When wait-in-queue ran earlier in this job (the one-job form), a keeper renews the turn's
# lease: once the turn is released it ends by itself, and this step waits for that (or stops it),
# whichever job form it finds, so that the turn never outlives the exit.
set -eu
. "$(dirname -- "$0")/lib.sh" # pack.sh inlines lib.sh here

orb_need_baton
orb_use_store
orb_use_key
orb_use_turn_name

condition=${PARAM_EXIT_CONDITION:-on_success}
outcome=${PARAM_OUTCOME:-auto}
case $condition in
    on_success | on_fail | always) ;;
    *) orb_fail "exit_condition must be on_success, on_fail or always, not \"$condition\"" ;;
esac
case $outcome in
    auto)
        outcome=succeeded
        if [ "$condition" = on_fail ]; then
            outcome=failed
        elif [ "$condition" = always ] && [ -e "$(orb_failed_marker)" ]; then
            outcome=failed
        fi
        ;;
    succeeded | failed | cancelled) ;;
    *) orb_fail "outcome must be auto, succeeded, failed or cancelled, not \"$outcome\"" ;;
esac

# Before the release, so that the release's own `recovered` event reaches Slack. The rule is
# the store's, not the job's: it is added once (rules are one document for the whole store, and
# through baton serve adding one takes an admin token), and kept.
if [ "${PARAM_SEND_SLACK_ON_RECOVERY:-false}" = true ]; then
    webhook_var=${PARAM_SLACK_WEBHOOK:-SLACK_WEBHOOK}
    webhook=$(orb_env_value "$webhook_var")
    rule="circleci-recovered-$(printf '%s' "$KEY" | cksum | tr ' ' '-')"
    known=false
    case $(baton notify ls --json 2>/dev/null || true) in
        *"\"name\":\"$rule\""*) known=true ;;
    esac
    if [ -z "$webhook" ]; then
        orb_say "warning: send_slack_on_recovery is on but $webhook_var is empty: no Slack message"
    elif [ "$known" = true ]; then
        orb_say "Slack hears of a recovery at $KEY (notify rule $rule; baton notify rm $rule to change its URL)"
    elif baton notify add --name "$rule" --url "$webhook" --on recovered -- "$KEY" >/dev/null; then
        orb_say "added notify rule $rule: Slack hears when a turn at $KEY succeeds after failures"
    else
        orb_say "warning: could not add the notify rule for Slack (see above; through baton serve it takes an admin token, or add it once yourself: baton notify add --name $rule --url \"\$$webhook_var\" --on recovered $KEY): releasing anyway"
    fi
fi

# baton's own "no such value" would only confuse the log: its stderr is shown on other failures.
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
set +e
record=$(baton kv get --json -- "$TURN_NAME" 2>"$errors")
rc=$?
set -e
case $rc in
    0) ;;
    3)
        orb_say "workflow $WORKFLOW holds no turn at $KEY: it never got one (wait-in-queue did not run, or was superseded), or another exit-queue already ended it. Nothing to do."
        exit 0
        ;;
    *)
        cat "$errors" >&2
        orb_fail "could not read this workflow's turn from the store (baton kv get exit $rc)"
        ;;
esac
token=$(printf '%s\n' "$record" | sed -n 's/.*"value":"\([^"]*\)".*/\1/p')
version=$(printf '%s\n' "$record" | sed -n 's/.*"version":\([0-9][0-9]*\).*/\1/p')
[ -n "$version" ] ||
    orb_fail "could not read the record $TURN_NAME (baton kv get --json printed no version)"
if [ -z "$token" ]; then
    orb_say "workflow $WORKFLOW's turn at $KEY has already been ended by another exit-queue. Nothing to do."
    exit 0
fi

# Claim the release by emptying this version of the record: of two exit-queue jobs of one
# workflow, only the one whose write lands releases. (Emptied rather than deleted: a delete
# through baton serve takes an admin token, a write only a lock one. It expires in a day.)
set +e
printf '' | baton kv set --if-version "$version" --ttl 1d -- "$TURN_NAME" - >/dev/null 2>"$errors"
rc=$?
set -e
case $rc in
    0) ;;
    4)
        orb_say "another exit-queue of workflow $WORKFLOW is ending its turn at $KEY. Nothing to do."
        exit 0
        ;;
    *)
        cat "$errors" >&2
        orb_fail "could not claim this workflow's turn record $TURN_NAME (baton kv set exit $rc)"
        ;;
esac

# Sees the keeper of this job's turn, if any, end: by itself within a few seconds after a
# release (it looks every 2 s), else (the release failed, or it still renews after 10 s) stopped,
# so that its lease runs out.
stop_keeper() {
    keeper=$(cat "$(orb_keeper_file)" 2>/dev/null || true)
    [ -n "$keeper" ] || return 0
    waited=0
    while orb_keeper_running "$keeper" "$KEY"; do
        if [ "$1" = failed ] || [ "$waited" -ge 10 ]; then
            kill "$keeper" 2>/dev/null || true
            orb_say "stopped the keeper (pid $keeper): the turn ends within one lease"
            return 0
        fi
        sleep 1
        waited=$((waited + 1))
    done
    orb_say "the keeper (pid $keeper) has ended"
}

if ! baton release --outcome "$outcome" -- "$KEY" "$token"; then
    stop_keeper failed
    orb_fail "could not end this workflow's turn at $KEY (see baton's message above). A turn that had already ended ran past its lease (the ttl of wait-in-queue, or with a keeper its lease once ttl passed or the job that kept it died) or was released by an operator: \`baton log $KEY\` tells which"
fi
stop_keeper released
orb_say "ended workflow $WORKFLOW's turn at $KEY: $outcome ($condition)"
