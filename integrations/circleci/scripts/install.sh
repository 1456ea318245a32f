#!/bin/sh
# install: puts baton on PATH. If baton is already there (an image that has it), uses it as it
# is; otherwise fetches the repository's install.sh from PARAM_INSTALL_SCRIPT_URL and runs it,
# then adds the directory it installed into to PATH for the job's later steps ($BASH_ENV).
# POSIX sh.
#
# Parameters (environment): PARAM_INSTALL_SCRIPT_URL, PARAM_VERSION (empty: install.sh's
# default), PARAM_DOWNLOAD_URL (install.sh --url; empty: its default), PARAM_DIR (install.sh --dir;
# empty: its default).
set -eu
. "$(dirname -- "$0")/lib.sh" # pack.sh inlines lib.sh here

if command -v baton >/dev/null 2>&1; then
    orb_say "baton is already installed: $(command -v baton) ($(baton --version))"
    exit 0
fi

url=${PARAM_INSTALL_SCRIPT_URL:-}
[ -n "$url" ] ||
    orb_fail "baton is not on PATH and install_script_url is empty: set it to the URL of baton's install.sh, or use an image that has baton"

script=$(mktemp)
trap 'rm -f "$script"' EXIT
if command -v curl >/dev/null 2>&1; then
    curl -fsSL -o "$script" "$url" || orb_fail "could not download $url"
elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$script" "$url" || orb_fail "could not download $url"
else
    orb_fail "neither curl nor wget is installed: cannot download $url"
fi

set --
if [ -n "${PARAM_VERSION:-}" ]; then
    set -- "$@" --version "$PARAM_VERSION"
fi
if [ -n "${PARAM_DOWNLOAD_URL:-}" ]; then
    set -- "$@" --url "$PARAM_DOWNLOAD_URL"
fi
if [ -n "${PARAM_DIR:-}" ]; then
    set -- "$@" --dir "$PARAM_DIR"
fi
out=$(sh "$script" "$@") || orb_fail "install.sh failed (see above)"
installed=$(printf '%s\n' "$out" | tail -n 1)
[ -x "$installed" ] || orb_fail "install.sh did not print the path of an installed baton (last line: \"$installed\")"
dir=$(dirname -- "$installed")
if [ -n "${BASH_ENV:-}" ]; then
    # shellcheck disable=SC2016 # $PATH is expanded when BASH_ENV is read, by each later step.
    printf 'export PATH="%s:$PATH"\n' "$dir" >>"$BASH_ENV"
else
    orb_say "warning: BASH_ENV is not set: add $dir to PATH yourself"
fi
orb_say "installed $installed ($("$installed" --version)); $dir is on PATH from the next step on"
