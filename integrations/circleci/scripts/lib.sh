# Shared by the orb's scripts: each script sources this file when run on its own, and pack.sh
# inlines it in place of that line, so that every packed command stands alone. POSIX sh.

orb_say() {
    printf 'baton orb: %s\n' "$*" >&2
}

orb_fail() {
    printf 'baton orb: error: %s\n' "$*" >&2
    exit 1
}

# The value of the environment variable whose name is $1 (an env_var_name parameter), or "".
orb_env_value() {
    case $1 in
        '' | [0-9]* | *[!A-Za-z0-9_]*) orb_fail "\"$1\" is not an environment variable name" ;;
    esac
    eval "printf '%s' \"\${$1:-}\""
}

# Fails unless baton is on PATH.
orb_need_baton() {
    command -v baton >/dev/null 2>&1 ||
        orb_fail "baton is not on PATH: run the orb's install command first (or use an image that has baton)"
}

# Exports BATON_STORE from the store parameter, if given; fails when there is no store at all:
# baton's default, a SQLite file on this machine, would give no exclusion between jobs.
orb_use_store() {
    if [ -n "${PARAM_STORE:-}" ]; then
        BATON_STORE=$PARAM_STORE
        export BATON_STORE
    fi
    [ -n "${BATON_STORE:-}" ] ||
        orb_fail "no store: set the store parameter or BATON_STORE (in a context) to a store every job reaches (postgres://…, redis://…, dynamodb://TABLE, or http://… through baton serve)"
    # Through baton serve with no token of its own: the job's OIDC ID token (its audience is the
    # organisation's id), which a server started with --trust checks against CircleCI's keys, so
    # that no token need be kept in a context.
    case $BATON_STORE in
        http://* | https://*)
            if [ -z "${BATON_TOKEN:-}" ] && [ -z "${BATON_TOKEN_FILE:-}" ] && [ -n "${CIRCLE_OIDC_TOKEN_V2:-}" ]; then
                BATON_TOKEN=$CIRCLE_OIDC_TOKEN_V2
                export BATON_TOKEN
            fi
            ;;
    esac
}

# Sets KEY from the key parameter, else from WORKFLOW_LOCK_KEY.
orb_use_key() {
    KEY=${PARAM_KEY:-}
    [ -n "$KEY" ] || KEY=${WORKFLOW_LOCK_KEY:-}
    [ -n "$KEY" ] ||
        orb_fail "no key: set the key parameter, or WORKFLOW_LOCK_KEY (in a context every job of the workflow uses) to the name of the queue, such as deploy/production"
}

# Sets WORKFLOW (the workflow's id for its turn: CIRCLE_WORKFLOW_WORKSPACE_ID, which stays the
# same when a workflow is rerun, else CIRCLE_WORKFLOW_ID) and TURN_NAME: the baton kv name under
# which wait-in-queue leaves the workflow's turn (its token) for exit-queue. kv names follow the
# rules of keys (at most 256 bytes): a key too long for that is replaced by its checksum.
orb_use_turn_name() {
    WORKFLOW=${CIRCLE_WORKFLOW_WORKSPACE_ID:-${CIRCLE_WORKFLOW_ID:-}}
    [ -n "$WORKFLOW" ] ||
        orb_fail "CIRCLE_WORKFLOW_ID is not set: the workflow's turn is passed from wait-in-queue to exit-queue under the workflow's id (this runs in a CircleCI job)"
    TURN_NAME="circleci/turn/$KEY/$WORKFLOW"
    if [ "$(printf '%s' "$TURN_NAME" | wc -c)" -gt 256 ]; then
        TURN_NAME="circleci/turn/cksum-$(printf '%s' "$KEY" | cksum | tr ' ' '-')/$WORKFLOW"
    fi
}

# The file whose existence tells exit-queue (exit_condition: always) that an earlier step of the
# job failed: note-failure.sh, a step that runs only then, creates it. One per job: every job
# runs in a container or machine of its own.
orb_failed_marker() {
    printf '%s/baton-orb-job-failed' "${TMPDIR:-/tmp}"
}

# The file in which wait-in-queue, run as a step of the job that does the work (keep_alive),
# leaves the pid of the keeper that renews the turn's lease, for exit-queue in the same job. One
# per turn (TURN_NAME), in the job's own temporary directory: nothing in it outlives the job.
orb_keeper_file() {
    printf '%s/baton-orb-keeper-%s' "${TMPDIR:-/tmp}" "$(printf '%s' "$TURN_NAME" | cksum | tr ' ' '-')"
}

# Whether pid $1 is still the keeper of key $2 (`baton … keep KEY …`), judged by its command
# line (/proc, else ps), so that a pid another process took since is never mistaken for it.
orb_keeper_running() {
    keeper_args=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") ||
        keeper_args=$(ps -o args= -p "$1" 2>/dev/null) ||
        return 1
    case " $keeper_args " in
        *" keep $2 "*) return 0 ;;
    esac
    return 1
}
