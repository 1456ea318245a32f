#!/bin/bash
# What the plugin's hooks share; each hook sources it, then calls one function.
#
# The agent sources each hook in a bash of its own (its "scriptwrapper") and carries what the
# hook exports to the later hooks and to the command. So these functions `return`, never
# `exit` (an exit would end the hook before the agent reads its exports), and export only
# BATON_KEY, BATON_TICKET, BATON_FENCE, BATON_STORE and, when they install baton, PATH.
# bash 3.2 and later (macOS agents).

# The default of the install-script-url option.
BATON_BK_INSTALL_SH=https://raw.githubusercontent.com/baton-locks/baton/main/install.sh

baton_bk_say() {
    printf 'baton plugin: %s\n' "$*" >&2
}

baton_bk_error() {
    printf 'baton plugin: error: %s\n' "$*" >&2
}

# The environment variable the agent sets for option $1 (as plugin.yml names it, max-hold):
# BUILDKITE_PLUGIN_<NAME>_<OPTION>, NAME being the plugin's name as the agent derives it from
# where the plugin comes from (BATON for baton-locks/baton): BUILDKITE_PLUGIN_NAME, which agents
# set for a plugin's hooks, else BATON.
baton_bk_option_variable() {
    local option
    option=$(printf '%s' "$1" | tr 'a-z-' 'A-Z_')
    printf 'BUILDKITE_PLUGIN_%s_%s' "${BUILDKITE_PLUGIN_NAME:-BATON}" "$option"
}

# The value of option $1, or "".
baton_bk_option() {
    local variable
    variable=$(baton_bk_option_variable "$1")
    printf '%s' "${!variable:-}"
}

# Whether the baton at $1 is there and, when the baton-version option names one, is that one.
baton_bk_usable() {
    local version
    version=$(baton_bk_option baton-version)
    command -v "$1" >/dev/null 2>&1 || return 1
    [ -z "$version" ] || [ "$("$1" --version 2>/dev/null)" = "baton ${version#v}" ]
}

# Puts baton on PATH: the one there, else one installed before into ~/.baton/bin, else one
# that baton's install.sh installs there now (it checks the release archive's SHA-256).
baton_bk_use_baton() {
    local dir="${HOME:-${BUILDKITE_BUILD_CHECKOUT_PATH:-$PWD}}/.baton/bin"
    local version url script
    baton_bk_usable baton && return 0
    if ! baton_bk_usable "$dir/baton"; then
        version=$(baton_bk_option baton-version)
        url=$(baton_bk_option install-script-url)
        url=${url:-$BATON_BK_INSTALL_SH}
        script=$(mktemp "${TMPDIR:-/tmp}/baton-install-sh.XXXXXX") || return 1
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL -o "$script" "$url" || { baton_bk_error "could not download $url"; rm -f "$script"; return 1; }
        elif command -v wget >/dev/null 2>&1; then
            wget -q -O "$script" "$url" || { baton_bk_error "could not download $url"; rm -f "$script"; return 1; }
        else
            baton_bk_error "baton is not on PATH, and neither curl nor wget is there to download $url"
            rm -f "$script"
            return 1
        fi
        baton_bk_say "installing baton into $dir with $url"
        sh "$script" --dir "$dir" ${version:+--version "$version"} >/dev/null ||
            { baton_bk_error "install.sh failed (see above)"; rm -f "$script"; return 1; }
        rm -f "$script"
    fi
    PATH="$dir:$PATH"
    export PATH
}

# pre-command: waits for the turn at the key option and exports BATON_KEY, BATON_TICKET and
# BATON_FENCE, as `baton run` hands them to its command; a keeper process renews the lease.
baton_bk_take_turn() {
    local key store lease order supersede turn keeper status=0
    key=$(baton_bk_option key)
    if [ -z "$key" ]; then
        baton_bk_error "no key: set the plugin's key option, such as key: deploy/production ($(baton_bk_option_variable key) is empty)"
        return 1
    fi
    store=$(baton_bk_option store)
    if [ -n "$store" ]; then
        BATON_STORE=$store
        export BATON_STORE
    fi
    if [ -z "${BATON_STORE:-}" ]; then
        baton_bk_error "no store: set the plugin's store option, or BATON_STORE in the agent's environment, to a store every agent reaches (s3://…, postgres://…, dynamodb://TABLE, or http://… through baton serve)"
        return 1
    fi
    lease=$(baton_bk_option lease)
    local args=(--keep-alive --json --ttl "${lease:-1m}")
    [ -z "$(baton_bk_option max-hold)" ] || args+=(--max-hold "$(baton_bk_option max-hold)")
    [ -z "$(baton_bk_option timeout)" ] || args+=(--timeout "$(baton_bk_option timeout)")
    order=$(baton_bk_option order)
    [ -z "$order" ] || args+=(--order "$order")
    supersede=$(baton_bk_option supersede)
    case $supersede in
        true) args+=(--supersede) ;;
        false | '') ;;
        *)
            baton_bk_error "supersede must be true or false, not \"$supersede\""
            return 1
            ;;
    esac
    baton_bk_use_baton || return 1
    turn=$(baton acquire "${args[@]}" -- "$key") || status=$?
    case $status in
        0) ;;
        75) baton_bk_error "timed out after $(baton_bk_option timeout) waiting for a turn at $key (baton's last line above says who holds it)" ;;
        76) baton_bk_error "superseded: a job with a later order queued for $key with supersede, so this one ends without a turn" ;;
        *) baton_bk_error "no turn at $key: baton acquire exited $status (see above)" ;;
    esac
    [ "$status" -eq 0 ] || return 1
    BATON_TICKET=$(printf '%s\n' "$turn" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
    BATON_FENCE=$(printf '%s\n' "$turn" | sed -n 's/.*"fence":"\{0,1\}\([0-9][0-9]*\).*/\1/p')
    keeper=$(printf '%s\n' "$turn" | sed -n 's/.*"keeper_pid":\([0-9][0-9]*\).*/\1/p')
    if [ -z "$BATON_TICKET" ]; then
        baton_bk_error "baton acquire printed no token: $turn"
        return 1
    fi
    BATON_KEY=$key
    export BATON_KEY BATON_TICKET BATON_FENCE
    baton_bk_say "this job holds $key (fence $BATON_FENCE); keeper pid $keeper renews its ${lease:-1m} lease until pre-exit gives it back"
}

# pre-exit: gives the turn back, recorded as the command went: succeeded (exit status 0),
# failed (any other, or a job that timed out), cancelled (a job cancelled, BUILDKITE_JOB_CANCELLED).
# Always returns 0: a failing pre-exit's status would replace the command's as the job's.
baton_bk_give_back() {
    local outcome
    if [ -z "${BATON_KEY:-}" ] || [ -z "${BATON_TICKET:-}" ]; then
        baton_bk_say "nothing to give back: pre-command took no turn"
        return 0
    fi
    if [ "${BUILDKITE_JOB_CANCELLED:-}" = true ] && [ "${BUILDKITE_JOB_TIMED_OUT:-}" != true ]; then
        outcome=cancelled
    elif [ "${BUILDKITE_COMMAND_EXIT_STATUS:-}" = 0 ]; then
        outcome=succeeded
    else
        outcome=failed
    fi
    if baton release "$BATON_KEY" "$BATON_TICKET" --outcome "$outcome"; then
        baton_bk_say "gave $BATON_KEY back ($outcome)"
    else
        baton_bk_say "warning: could not give $BATON_KEY back (see above); the turn ends by itself when its lease runs out"
    fi
    return 0
}
