# The browser for the dashboard's end-to-end test (crates/baton-cli/tests/dashboard.rs): sourced
# by scripts/test.sh, which defines need_tool. Not a server: Debian's Chromium, and
# playwright-core (npm, pinned by tools/dashboard-test/package-lock.json) to drive it. Playwright
# cannot download a browser build here, and needs none: it drives /usr/bin/chromium.
#
# The test reads BATON_TEST_BROWSER (the browser's path); without it, it says it was skipped.

need_tool chromium chromium
need_tool node nodejs npm

start_browser() {
    (cd "$baton_root/tools/dashboard-test" && npm ci --no-audit --no-fund --loglevel=error)
    BATON_TEST_BROWSER=$(command -v chromium)
    export BATON_TEST_BROWSER
    echo "browser: $BATON_TEST_BROWSER ($("$BATON_TEST_BROWSER" --version 2>/dev/null || true))"
}
