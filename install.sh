#!/bin/sh
# install.sh: downloads a baton release archive, checks its SHA-256 and puts `baton` on PATH.
#
#   curl -fsSL https://raw.githubusercontent.com/baton-locks/baton/main/install.sh | sh -s -- --version 0.1.0
#   sh install.sh [--version V] [--url URL] [--sha256 HEX] [--dir DIR] [--help]
#
# The archive is one scripts/dist.sh made: baton-VERSION-TARGET.tar.gz holding
# baton-VERSION-TARGET/baton and REQUIRES. Its digest is checked before anything is unpacked,
# and nothing is installed unless it matches. Messages go to stderr; the last line on stdout is
# the absolute path of the installed binary (the GitHub Action and the CircleCI orb read it).
# Exit status: 0 installed, 1 failed (download, digest, unpack, start), 2 wrong use.
#
# POSIX sh (dash, busybox ash). Everything runs from main(), called on the last line, so a
# download cut short while piped into sh runs nothing.
set -eu

# The version installed when none is given: the workspace version in Cargo.toml
# ([workspace.package]); integrations/tests/install.rs checks that they agree.
default_version=0.1.0
releases=https://github.com/baton-locks/baton/releases/download

say() { printf 'install.sh: %s\n' "$*" >&2; }
fail() {
    say "$*"
    exit 1
}
wrong_use() {
    say "$*"
    say "see: sh install.sh --help"
    exit 2
}

usage() {
    cat <<EOF
install.sh: downloads a baton release archive, checks its SHA-256 and puts baton on PATH

usage: sh install.sh [--version V] [--url URL] [--sha256 HEX] [--dir DIR]
       curl -fsSL https://raw.githubusercontent.com/baton-locks/baton/main/install.sh | sh -s -- [OPTIONS]

  --version V   the release to install (default $default_version; env BATON_VERSION); a
                leading v is dropped. Names the default URL:
                $releases/vV/baton-V-TARGET.tar.gz
                with TARGET x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu (uname -m)
  --url URL     download the archive from URL instead (env BATON_DOWNLOAD_URL): a mirror, an
                artifact store, file:///path; an archive scripts/dist.sh made
  --sha256 HEX  the archive's expected SHA-256 (env BATON_SHA256); without it the digest is
                read from URL.sha256 ("HEX  NAME" as sha256sum writes it, or just HEX)
  --dir DIR     install DIR/baton (env BATON_INSTALL_DIR; default \$HOME/.local/bin, or
                /usr/local/bin for root)
  --help        this text

The archive is refused, and nothing installed, when its SHA-256 does not match or cannot be
read. The new binary must start (baton --version) before it replaces DIR/baton, atomically.
Needs curl or wget (not for file:// URLs), tar, gzip, and sha256sum or shasum or openssl.

Messages go to stderr; stdout's last line is the installed binary's absolute path.
Exit status: 0 installed, 1 failed (download, digest, unpack, start), 2 wrong use.
EOF
}

# fetch URL FILE: downloads URL into FILE (file:// is copied, so it needs neither curl nor wget).
fetch() {
    case $1 in
    file://*)
        fetch_path=${1#file://}
        fetch_path=${fetch_path#localhost}
        cp -- "$fetch_path" "$2"
        ;;
    *)
        if command -v curl >/dev/null 2>&1; then
            # --retry covers the transient failures (timeouts, 5xx) and never a 404.
            curl -fsSL --retry 3 --connect-timeout 30 -o "$2" "$1" </dev/null
        elif command -v wget >/dev/null 2>&1; then
            wget -q -O "$2" "$1" </dev/null
        else
            fail "neither curl nor wget is installed: install one of them, or pass a file:// URL"
        fi
        ;;
    esac
}

# sha256_of FILE: the file's SHA-256 as lower-case hex, with whichever tool this system has.
sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        digest_line=$(sha256sum <"$1")
    elif command -v shasum >/dev/null 2>&1; then
        digest_line=$(shasum -a 256 <"$1")
    elif command -v openssl >/dev/null 2>&1; then
        digest_line=$(openssl dgst -sha256 -r <"$1")
    else
        fail "cannot check the archive's SHA-256: none of sha256sum, shasum or openssl is installed"
    fi
    printf '%s\n' "${digest_line%% *}" | tr 'A-F' 'a-f'
}

# is_sha256 TEXT: whether TEXT is 64 hex digits.
is_sha256() {
    case $1 in
    *[!0-9a-fA-F]* | '') return 1 ;;
    esac
    [ "${#1}" -eq 64 ]
}

# default_target: the Rust target triple of the release archive for this machine.
default_target() {
    system=$(uname -s)
    [ "$system" = Linux ] ||
        fail "baton's release archives are for Linux, and this is $system: build it from source (cargo install --git https://github.com/baton-locks/baton baton-cli), or pass --url for an archive built for $system"
    machine=$(uname -m)
    case $machine in
    x86_64 | amd64) printf '%s\n' x86_64-unknown-linux-gnu ;;
    aarch64 | arm64) printf '%s\n' aarch64-unknown-linux-gnu ;;
    *) fail "there is no release archive for $machine (only x86_64 and aarch64): build baton from source, or pass --url" ;;
    esac
}

# system_glibc: which C library this system has, for the message when baton does not start.
system_glibc() {
    getconf GNU_LIBC_VERSION 2>/dev/null ||
        echo "no glibc found (getconf GNU_LIBC_VERSION failed: musl, as on Alpine?)"
}

main() {
    version=${BATON_VERSION:-}
    url=${BATON_DOWNLOAD_URL:-}
    expected=${BATON_SHA256:-}
    expected_from=BATON_SHA256
    dir=${BATON_INSTALL_DIR:-}
    while [ "$#" -gt 0 ]; do
        case $1 in
        -h | --help)
            usage
            exit 0
            ;;
        --version | --url | --sha256 | --dir)
            [ "$#" -ge 2 ] || wrong_use "$1 needs a value"
            option=$1
            value=$2
            shift 2
            ;;
        --version=* | --url=* | --sha256=* | --dir=*)
            option=${1%%=*}
            value=${1#*=}
            shift
            ;;
        *) wrong_use "unknown argument '$1'" ;;
        esac
        [ -n "$value" ] || wrong_use "$option needs a value"
        case $option in
        --version) version=$value ;;
        --url) url=$value ;;
        --sha256)
            expected=$value
            expected_from=--sha256
            ;;
        --dir) dir=$value ;;
        esac
    done

    # The GitHub Action passes tags as they are written in workflows (v0.1.0).
    version=${version#v}
    case $version in
    *[!0-9A-Za-z.+_-]*) wrong_use "'$version' is not a version (such as $default_version)" ;;
    esac
    if [ -n "$expected" ]; then
        is_sha256 "$expected" || wrong_use "$expected_from '$expected' is not a SHA-256 (64 hex digits)"
        expected=$(printf '%s\n' "$expected" | tr 'A-F' 'a-f')
    fi

    default_url=""
    if [ -z "$url" ]; then
        target=$(default_target) || exit 1
        default_url="$releases/v${version:-$default_version}/baton-${version:-$default_version}-$target.tar.gz"
        url=$default_url
    fi
    case $url in
    *://*) ;;
    *) wrong_use "'$url' is not a URL (https://..., file:///...)" ;;
    esac
    # URL.sha256, before a query string if there is one (an artifact store's signed URL).
    url_path=${url%%\?*}
    url_query=${url#"$url_path"}
    digest_url="$url_path.sha256$url_query"

    if [ -z "$dir" ]; then
        if [ "$(id -u)" = 0 ]; then
            dir=/usr/local/bin
        elif [ -n "${HOME:-}" ]; then
            dir="$HOME/.local/bin"
        else
            wrong_use "HOME is not set: pass --dir DIR"
        fi
    fi

    # Everything downloaded and unpacked stays here, and goes when the script ends however it
    # ends; so does a half-copied binary in DIR.
    work=$(mktemp -d "${TMPDIR:-/tmp}/baton-install.XXXXXX") ||
        fail "cannot create a temporary directory in ${TMPDIR:-/tmp}"
    partial=""
    trap 'rm -rf "$work"; if [ -n "$partial" ]; then rm -f "$partial"; fi' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    archive="$work/archive.tar.gz"
    say "downloading $url"
    fetch "$url" "$archive" || fail "could not download $url"

    if [ -z "$expected" ]; then
        fetch "$digest_url" "$work/archive.sha256" ||
            fail "could not download $digest_url, the archive's SHA-256: refusing to install an archive whose digest is unknown (pass --sha256 HEX if you know it)"
        # "HEX  NAME" (sha256sum), "HEX *NAME" or a bare HEX: the first word of the first line.
        expected=$(tr -d '\r' <"$work/archive.sha256" | awk 'NF { print $1; exit }')
        is_sha256 "$expected" ||
            fail "$digest_url does not hold a SHA-256 (64 hex digits first): refusing to install"
        expected=$(printf '%s\n' "$expected" | tr 'A-F' 'a-f')
        digest_from=$digest_url
    else
        digest_from=$expected_from
    fi
    actual=$(sha256_of "$archive") || exit 1
    [ "$actual" = "$expected" ] ||
        fail "SHA-256 mismatch: the downloaded archive has $actual but $digest_from says $expected; the download is corrupt or not the release it claims to be, and nothing was installed"
    say "SHA-256 $actual matches $digest_from"

    mkdir "$work/unpacked"
    tar -xzf "$archive" -C "$work/unpacked" </dev/null ||
        fail "could not unpack $url (not a .tar.gz archive?)"
    binary=""
    for candidate in "$work"/unpacked/baton-*/baton "$work"/unpacked/baton; do
        if [ -f "$candidate" ] && [ ! -L "$candidate" ]; then
            binary=$candidate
            break
        fi
    done
    [ -n "$binary" ] || fail "$url holds no baton-*/baton: is it an archive scripts/dist.sh made?"
    requires_file="${binary%/baton}/REQUIRES"

    mkdir -p -- "$dir" 2>/dev/null || fail "cannot create $dir: pass --dir DIR, or run as root"
    dir=$(CDPATH='' cd -- "$dir" && pwd) || fail "cannot enter $dir"
    [ -w "$dir" ] || fail "cannot write to $dir: pass --dir DIR, or run as root"

    # The new binary is copied next to its final name, must start there (the directory may be
    # mounted noexec; the system's glibc may be older than the one it was built against), and
    # only then replaces DIR/baton with one rename: a running or working baton is never broken.
    partial="$dir/.baton.tmp.$$"
    cp -- "$binary" "$partial" || fail "could not copy baton into $dir"
    chmod 755 "$partial"
    if ! started=$("$partial" --version 2>&1 </dev/null); then
        requires="the archive does not say which glibc it needs"
        if [ -f "$requires_file" ]; then
            requires=$(cat "$requires_file")
        fi
        say "the downloaded baton does not start here, so nothing was installed: $started"
        say "$requires"
        fail "this system: $(uname -sm), $(system_glibc)"
    fi
    mv -f -- "$partial" "$dir/baton" || fail "could not move baton into $dir"
    partial=""
    say "installed $dir/baton ($started)"
    if [ -n "$version" ] && [ "$url" != "$default_url" ]; then
        case " $started " in
        *" $version "*) ;;
        *) say "note: version $version was asked for, but the binary from $url says: $started" ;;
        esac
    fi

    case ":${PATH:-}:" in
    *":$dir:"*)
        found=$(command -v baton 2>/dev/null || true)
        if [ -n "$found" ] && [ "$found" != "$dir/baton" ]; then
            say "note: PATH finds $found before $dir/baton"
        fi
        ;;
    *) say "$dir is not on PATH; add it with: export PATH=\"$dir:\$PATH\" (in ~/.profile to keep it)" ;;
    esac
    printf '%s\n' "$dir/baton"
}

main "$@"
