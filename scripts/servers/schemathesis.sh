# schemathesis (PyPI), for the schema-driven fuzz run of `baton serve`'s API
# (crates/baton-cli/tests/openapi.rs): sourced by scripts/test.sh, which defines need_tool. Not
# a server: a virtualenv cached at ${XDG_CACHE_HOME:-$HOME/.cache}/baton/schemathesis-venv, so
# local runs install it once; CI's fresh machines create it.
#
# The test reads BATON_TEST_SCHEMATHESIS (the `st` command); without it, it says it was skipped.

need_tool python3 python3
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing_packages+=(python3-venv)

schemathesis_venv="${XDG_CACHE_HOME:-$HOME/.cache}/baton/schemathesis-venv"
schemathesis_version=4.32.5

start_schemathesis() {
    if ! "$schemathesis_venv/bin/st" --version 2>/dev/null | grep -qF "$schemathesis_version"; then
        echo "installing schemathesis==$schemathesis_version into $schemathesis_venv"
        rm -rf "$schemathesis_venv"
        mkdir -p "$(dirname "$schemathesis_venv")"
        python3 -m venv "$schemathesis_venv"
        "$schemathesis_venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
            "schemathesis==$schemathesis_version" </dev/null
    fi
    BATON_TEST_SCHEMATHESIS="$schemathesis_venv/bin/st"
    export BATON_TEST_SCHEMATHESIS
    echo "schemathesis: $("$BATON_TEST_SCHEMATHESIS" --version)"
}
