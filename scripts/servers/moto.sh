# moto for the S3 and DynamoDB stores' tests and the CLI tests: sourced by scripts/test.sh, which
# defines need_tool, free_port, add_test_store, server_dirs and server_pids.
#
# moto (PyPI `moto[server]`) speaks S3 and DynamoDB on one loopback port, keeping everything in
# memory, and implements S3's conditional writes (If-None-Match, If-Match) and DynamoDB's
# conditions and transactions (s3s-fs, s3rver and dynalite do not). But moto_server runs each
# request on its own thread and checks a condition apart from the write it guards: 16 threads
# incrementing one object through If-Match lose updates (seen here with moto 5.2.5). So the
# server below is moto's own WSGI application behind one lock: a request is handled whole
# before the next starts, which makes every condition atomic, as S3 and DynamoDB make them.
# It lives in a virtualenv cached at ${XDG_CACHE_HOME:-$HOME/.cache}/baton/moto-venv, so local
# runs install it once; CI's fresh machines create it.
#
# The stores' tests read BATON_TEST_S3_URL and BATON_TEST_DYNAMODB_URL; the AWS variables below
# point aws-config's chain (and so both stores) at the server.

need_tool python3 python3
# Debian's python3 ships without venv and ensurepip; they come with python3-venv.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing_packages+=(python3-venv)

moto_venv="${XDG_CACHE_HOME:-$HOME/.cache}/baton/moto-venv"
# Pinned: the server below uses moto's WSGI application and request handler, which are internal.
moto_version=5.2.5

# ensure_moto: the virtualenv with moto_server, created or repaired when needed.
ensure_moto() {
    if "$moto_venv/bin/python" -c 'import sys, boto3, importlib.metadata as metadata
sys.exit(metadata.version("moto") != sys.argv[1])' "$moto_version" >/dev/null 2>&1; then
        return 0
    fi
    echo "installing moto[server]==$moto_version into $moto_venv"
    rm -rf "$moto_venv"
    mkdir -p "$(dirname "$moto_venv")"
    python3 -m venv "$moto_venv"
    "$moto_venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
        "moto[server]==$moto_version" </dev/null
}

# The server: moto_server's application and request handler (moto/server.py), one request at a
# time. Arguments: host, port.
moto_serialized_server='
import signal, sys, threading
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app)

app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()

def serialized(environ, start_response):
    with lock:
        body = app(environ, start_response)
        try:
            return [b"".join(body)]
        finally:
            if hasattr(body, "close"):
                body.close()

signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
run_simple(sys.argv[1], int(sys.argv[2]), serialized, threaded=True,
           request_handler=MotoRequestHandler)
'


# start_moto: starts the server, waits until it answers, creates the test bucket, points the
# AWS chain at the server and exports BATON_TEST_S3_URL and BATON_TEST_DYNAMODB_URL.
start_moto() {
    local dir port pid tries=0
    ensure_moto
    dir=$(mktemp -d "${TMPDIR:-/tmp}/baton-moto.XXXXXX")
    server_dirs+=("$dir")
    port=$(free_port)
    MOTO_PORT="$port" TMPDIR="$dir" "$moto_venv/bin/python" -c "$moto_serialized_server" \
        127.0.0.1 "$port" </dev/null >"$dir/moto.log" 2>&1 &
    pid=$!
    server_pids+=("$pid")
    # Any HTTP answer will do: the server is up once it answers at all.
    until "$moto_venv/bin/python" -c 'import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=1)
except urllib.error.HTTPError:
    pass' "http://127.0.0.1:$port/" >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -ge 150 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "moto did not answer on 127.0.0.1:$port; its log:" >&2
            cat "$dir/moto.log" >&2
            return 1
        fi
        sleep 0.2
    done

    # Only these reach aws-config's chain: no profile, no shared files, no instance role.
    unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_ENDPOINT_URL_DYNAMODB
    export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
    export AWS_ACCESS_KEY_ID=test
    export AWS_SECRET_ACCESS_KEY=test
    export AWS_REGION=us-east-1
    # Empty files rather than none: aws-config warns about a named file that does not exist.
    : >"$dir/aws-config"
    : >"$dir/aws-credentials"
    export AWS_CONFIG_FILE="$dir/aws-config" AWS_SHARED_CREDENTIALS_FILE="$dir/aws-credentials"
    export AWS_EC2_METADATA_DISABLED=true

    "$moto_venv/bin/python" -c 'import boto3, sys
boto3.client("s3", endpoint_url=sys.argv[1]).create_bucket(Bucket="baton-test")' "$AWS_ENDPOINT_URL" || {
        echo "could not create the bucket baton-test on moto; its log:" >&2
        cat "$dir/moto.log" >&2
        return 1
    }

    # The S3 store's permission test starts a moto of its own, which enforces IAM.
    export BATON_TEST_MOTO_VENV="$moto_venv"
    export BATON_TEST_S3_URL="s3://baton-test/baton-test"
    export BATON_TEST_DYNAMODB_URL="dynamodb://baton-test"
    echo "moto on 127.0.0.1:$port (pid $pid, log $dir/moto.log)"
    add_test_store "$BATON_TEST_S3_URL"
    add_test_store "$BATON_TEST_DYNAMODB_URL"
}
