#!/usr/bin/env bash
# Packs the `baton` binary into a release archive that install.sh (at the repository root) can
# fetch, verify and install in seconds.
#
#   scripts/dist.sh [--binary PATH] [--out DIR] [--version V] [--target TRIPLE]
#
# Without --binary it builds one first (cargo build --release --locked -p baton-cli) and packs
# $CARGO_TARGET_DIR/release/baton (target/ by default); with --binary it packs that file as it
# is (the tests pack the debug binary this way). It writes, into --out (default dist/):
#
#   baton-VERSION-TARGET.tar.gz         one directory baton-VERSION-TARGET/ holding `baton`
#                                       (mode 755), REQUIRES (which glibc it needs) and the
#                                       repository's README.md and LICENSE* files, if any
#   baton-VERSION-TARGET.tar.gz.sha256  "HEX  baton-VERSION-TARGET.tar.gz" (sha256sum's format,
#                                       so `sha256sum -c` checks it; install.sh requires it)
#
# VERSION defaults to crates/baton-cli/Cargo.toml's (the workspace's); TARGET is the Rust target
# triple the binary was built for, read from its ELF header (x86_64-unknown-linux-gnu, ...), or
# --target. The archive is reproducible: sorted entries, owner and group 0, every mtime
# SOURCE_DATE_EPOCH (0 when unset), gzip without a name or time stamp; packing the same binary
# twice gives the same bytes, so a digest can be checked against a rebuild.
#
# It prints the highest GLIBC_x.y symbol version the binary links against (a binary built on a
# newer distribution does not start on an older one: "version `GLIBC_2.34' not found") with the
# oldest common distributions that have it, and writes the same line to REQUIRES. Messages go to
# stderr; stdout gets one line, the archive's path. Needs GNU tar, gzip, sha256sum and readelf
# or objdump (binutils, which gcc brings). Exit status: 0 packed, 1 failed, 2 wrong use.
set -euo pipefail

# help: the comment block at the top of this file, without its `# `.
help() {
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

usage() {
    help >&2
    exit 2
}

fail() {
    echo "dist.sh: $*" >&2
    exit 1
}

say() {
    echo "dist.sh: $*" >&2
}

# absolute PATH: PATH made absolute against the caller's directory (the script moves to the
# repository root before building, and relative paths the caller gave must keep their meaning).
absolute() {
    case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s/%s\n' "$PWD" "$1" ;;
    esac
}

binary=""
out="dist"
version=""
target=""
while [ "$#" -gt 0 ]; do
    case "$1" in
    --binary | --out | --version | --target)
        if [ "$#" -lt 2 ] || [ -z "$2" ]; then
            echo "dist.sh: $1 needs a value" >&2
            usage
        fi
        case "$1" in
        --binary) binary=$(absolute "$2") ;;
        --out) out=$2 ;;
        --version) version=$2 ;;
        --target) target=$2 ;;
        esac
        shift 2
        ;;
    -h | --help)
        help
        exit 0
        ;;
    *)
        echo "dist.sh: unknown argument '$1'" >&2
        usage
        ;;
    esac
done
out=$(absolute "$out")
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    CARGO_TARGET_DIR=$(absolute "$CARGO_TARGET_DIR")
    export CARGO_TARGET_DIR
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)

# cargo_version FILE SECTION: the `version = "..."` of [SECTION] in FILE, or "workspace" when it
# says `version.workspace = true` (nothing when it has none).
cargo_version() {
    awk -v want="[$2]" '
        /^[[:space:]]*\[/ { in_section = ($1 == want); next }
        in_section && /^[[:space:]]*version\.workspace[[:space:]]*=[[:space:]]*true/ {
            print "workspace"; exit
        }
        in_section && /^[[:space:]]*version[[:space:]]*=/ {
            sub(/^[^"]*"/, ""); sub(/".*$/, ""); print; exit
        }
    ' "$1"
}

if [ -z "$version" ]; then
    version=$(cargo_version crates/baton-cli/Cargo.toml package)
    if [ "$version" = "workspace" ]; then
        version=$(cargo_version Cargo.toml workspace.package)
    fi
    [ -n "$version" ] || fail "cannot read the version from crates/baton-cli/Cargo.toml (pass --version)"
fi
# The version becomes part of file names and of install.sh's download URL.
if ! [[ "$version" =~ ^[0-9A-Za-z][0-9A-Za-z.+_-]*$ ]]; then
    echo "dist.sh: --version '$version' is not a plain version (letters, digits, . + _ -)" >&2
    usage
fi

for tool in tar gzip sha256sum; do
    command -v "$tool" >/dev/null || fail "needs $tool, which is not installed"
done
# Not `tar --version | grep -q`: grep may exit before tar has written everything, and pipefail
# would then call GNU tar missing.
case "$(tar --version 2>/dev/null)" in
*"GNU tar"*) ;;
*) fail "needs GNU tar (for --sort, --mtime and --owner, which make the archive reproducible)" ;;
esac
# readelf first: it reads an ELF file of any architecture, where a distribution's objdump knows
# only its own (an aarch64 binary packed on an x86_64 machine).
if command -v readelf >/dev/null; then
    dynamic_symbols() { readelf --wide --dyn-syms "$1"; }
    elf_machine() { readelf -h "$1" | sed -n 's/^ *Machine: *//p'; }
elif command -v objdump >/dev/null; then
    dynamic_symbols() { objdump -T "$1"; }
    elf_machine() { objdump -f "$1" | sed -n 's/^architecture: \([^,]*\).*/\1/p'; }
else
    fail "needs objdump or readelf (binutils) to read which glibc the binary needs"
fi

if [ -z "$binary" ]; then
    say "building: cargo build --release --locked -p baton-cli"
    cargo build --release --locked -p baton-cli >&2
    binary="${CARGO_TARGET_DIR:-$root/target}/release/baton"
fi
[ -f "$binary" ] || fail "no binary at $binary"
[ -x "$binary" ] || fail "$binary is not executable"

# The highest GLIBC_x.y among the versioned symbols it imports: the oldest glibc it starts on.
glibc=$(dynamic_symbols "$binary" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' |
    sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1 || true)

if [ -z "$target" ]; then
    machine=$(elf_machine "$binary" || true)
    case "$machine" in
    *x86-64* | *X86-64*) arch=x86_64 ;;
    *aarch64* | *AArch64*) arch=aarch64 ;;
    *"Intel 80386"* | i386) arch=i686 ;;
    *) fail "cannot tell the target of $binary (machine '$machine'): pass --target" ;;
    esac
    # No glibc symbol versions at all: a static binary, which for Rust means musl.
    if [ -n "$glibc" ]; then
        target="$arch-unknown-linux-gnu"
    else
        target="$arch-unknown-linux-musl"
    fi
fi

# distributions_with GLIBC: the oldest release of each common distribution that ships at least
# that glibc (from the distributions' own package versions).
distributions_with() {
    local need=$1 line name release have found=()
    for line in \
        "Ubuntu 18.04 2.27" "Ubuntu 20.04 2.31" "Ubuntu 22.04 2.35" "Ubuntu 24.04 2.39" \
        "Debian 10 2.28" "Debian 11 2.31" "Debian 12 2.36" "Debian 13 2.41" \
        "RHEL 7 2.17" "RHEL 8 2.28" "RHEL 9 2.34" "RHEL 10 2.39"; do
        read -r name release have <<<"$line"
        if [[ " ${found[*]} " == *" $name "* ]]; then
            continue
        fi
        if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -t. -k1,1n -k2,2n | head -n 1)" = "$need" ]; then
            found+=("$name" "$release+")
        fi
    done
    local text="" i
    for ((i = 0; i < ${#found[@]}; i += 2)); do
        text+="${text:+, }${found[i]} ${found[i + 1]}"
    done
    printf '%s\n' "${text:-newer than any release listed here}"
}

if [ -n "$glibc" ]; then
    requires="needs glibc $glibc or newer ($(distributions_with "$glibc"))"
else
    requires="needs no particular glibc (no versioned glibc symbols: statically linked)"
fi

name="baton-$version-$target"
staging=$(mktemp -d "${TMPDIR:-/tmp}/baton-dist.XXXXXX")
trap 'rm -rf "$staging"' EXIT
mkdir "$staging/$name"
cp "$binary" "$staging/$name/baton"
chmod 755 "$staging/$name/baton"
printf 'baton %s for %s %s.\n' "$version" "$target" "$requires" >"$staging/$name/REQUIRES"
shopt -s nullglob
for extra in README.md LICENSE*; do
    if [ -f "$extra" ]; then
        cp "$extra" "$staging/$name/"
    fi
done
shopt -u nullglob
find "$staging/$name" -type f ! -name baton -exec chmod 644 {} +
chmod 755 "$staging/$name"

mkdir -p "$out"
archive="$out/$name.tar.gz"
# Everything that varies between two packings of the same files is pinned: entry order, owner,
# group, mtimes, the tar format (gnu: no pax headers with access times), gzip's header.
# gzip -6 (its default), not -9: on baton's binary -9 takes three times as long for an archive
# under 1% smaller.
tar --create --format=gnu --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@${SOURCE_DATE_EPOCH:-0}" -C "$staging" "$name" |
    gzip -n -6 >"$archive.tmp"
mv -f "$archive.tmp" "$archive"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256.tmp" &&
    mv -f "$name.tar.gz.sha256.tmp" "$name.tar.gz.sha256")

say "baton $version for $target $requires"
say "wrote $archive ($(wc -c <"$archive") bytes) and $name.tar.gz.sha256: $(cut -d' ' -f1 "$archive.sha256")"
printf '%s\n' "$archive"
