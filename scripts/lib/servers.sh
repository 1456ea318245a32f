# The tools and test servers baton's scripts need: sourced by scripts/test.sh and
# scripts/with-servers.sh (never run on its own). Defines need_tool, install_missing,
# start_test_servers and the EXIT trap that stops the servers by PID; sourcing it also sources
# every scripts/servers/NAME.sh, which adds the packages its server needs.
#
# The sourcing script sets `set -euo pipefail` and `baton_root` (the repository) first.

section() { printf '\n==== %s ====\n' "$*"; }

# ----- tools -------------------------------------------------------------------------------

# Debian packages to install, collected by need_tool and installed in one apt-get run.
missing_packages=()

# need_tool COMMAND PACKAGE...: install the packages when COMMAND is not on the PATH.
need_tool() {
    local tool=$1
    shift
    command -v "$tool" >/dev/null 2>&1 || missing_packages+=("$@")
}

# need_file PATH PACKAGE...: install the packages when PATH does not exist.
need_file() {
    local file=$1
    shift
    [ -e "$file" ] || missing_packages+=("$@")
}

install_missing() {
    ((${#missing_packages[@]})) || return 0
    section "installing ${missing_packages[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing tools need the packages: ${missing_packages[*]} (run as root, or install them)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing_packages[@]}"
}

# The toolchain comes from rustup, never from apt.
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is not on the PATH: install the Rust toolchain with rustup first" >&2
    exit 1
fi
need_tool cc gcc libc6-dev # rusqlite builds SQLite from source (feature "bundled")
need_tool sh dash          # the CLI tests' child commands
need_tool sleep coreutils  # ... which use sleep, mkdir, ls, wc, env
need_tool script bsdutils  # a pseudo-terminal for the interactive-command test
need_tool awk mawk        # ... which reads /proc/PID/stat
need_tool python3 python3 # free_port
need_tool openssl openssl # the certificates of the TLS test (crates/baton-cli/tests/serve.rs)
need_tool curl curl         # install.sh's downloads (integrations/tests/install.rs)
need_tool wget wget         # ... and its fallback when curl is missing
need_tool shasum perl       # ... and its digest tool when sha256sum is missing
need_tool strip binutils    # the tests pack a stripped baton with scripts/dist.sh
need_tool git git           # the CircleCI orb's tests order workflows by commit time
need_tool protoc protobuf-compiler # etcd-client compiles etcd's protocol buffers when it builds
# ... and they import protobuf's own descriptor.proto, which Debian ships in libprotobuf-dev (a
# recommendation of protobuf-compiler that --no-install-recommends leaves out)
need_file /usr/include/google/protobuf/descriptor.proto libprotobuf-dev
need_tool go golang-go      # the Go client's suite (integrations/tests/clients.rs); Python and
                            # node, for the other two, are needed above and by the browser

# The test servers' scripts (see "test servers" below) add their packages here, when sourced.
server_names=()
for server_script in "$baton_root"/scripts/servers/*.sh; do
    [ -e "$server_script" ] || continue
    # shellcheck source=/dev/null
    source "$server_script"
    server_names+=("$(basename "$server_script" .sh)")
done

# ----- test servers ------------------------------------------------------------------------
#
# Each file scripts/servers/NAME.sh, when sourced (above), adds the packages its server needs
# (need_tool, or missing_packages+=(...)) and defines start_NAME, which starts the server on
# 127.0.0.1 on a free port with its data in a temporary directory (server_dirs), records how to
# find its PID so the EXIT trap stops it (server_pids, or server_pidfiles for a server that
# scripts/restart-server.sh may restart), exports the URL its store's tests read
# (BATON_TEST_<NAME>_URL) and calls add_test_store so the CLI tests run against it too.

server_dirs=()
server_pids=()
# Pid files the server itself (or its launch function) keeps current: a server restarted by
# scripts/restart-server.sh, from a child of this shell, has a new PID that only its pid file
# knows. They are read when the servers stop; the restarted server's old PID may belong to
# another process by then, so such a server is not in server_pids.
server_pidfiles=()

# process_alive PID: PID runs (a zombie does not: the servers are daemons whose parent is PID 1,
# which may take seconds to reap them).
process_alive() {
    local stat
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# SIGINT is a fast shutdown for every server here (PostgreSQL's SIGTERM waits for its clients
# to leave); the servers are daemons, not children of this shell, so wait by polling, and kill
# what is still there after 10 s.
stop_test_servers() {
    local pid pidfile _
    local pids=("${server_pids[@]}")
    for pidfile in "${server_pidfiles[@]}"; do
        pid=$(head -n 1 "$pidfile" 2>/dev/null) || continue
        [[ "$pid" =~ ^[0-9]+$ ]] && pids+=("$pid")
    done
    for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    for _ in $(seq 100); do
        local alive=0
        for pid in "${pids[@]}"; do process_alive "$pid" && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    ((${#server_dirs[@]})) && rm -rf "${server_dirs[@]}"
    return 0
}
trap stop_test_servers EXIT

# add_test_store URL: the CLI tests run against URL too. The first call keeps the default
# (`fresh-sqlite`: a new SQLite file per test) in the list.
add_test_store() {
    BATON_TEST_STORES="${BATON_TEST_STORES:-fresh-sqlite},$1"
    export BATON_TEST_STORES
}

# A free TCP port on loopback (bound and released; good enough for a test server).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_test_servers() {
    local name
    for name in "${server_names[@]}"; do
        section "starting $name on loopback"
        "start_$name"
    done
    favour_test_servers
}

# The servers stand for services on other machines, which the tests' own load does not slow
# down: on 2 cores at a load of 13, moto's DynamoDB answered renewals of 2-3 s leases too late
# and holders rightly gave up. A higher priority (where this user may give one) keeps their
# answers about as prompt as a real service's; PostgreSQL's backends inherit it.
favour_test_servers() {
    local pid pidfile
    local pids=("${server_pids[@]}")
    for pidfile in "${server_pidfiles[@]}"; do
        pid=$(head -n 1 "$pidfile" 2>/dev/null) || continue
        [[ "$pid" =~ ^[0-9]+$ ]] && pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
        renice -n -10 -p "$pid" >/dev/null 2>&1 || true
    done
}
