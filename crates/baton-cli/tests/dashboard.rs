//! The dashboard at `/`, end to end in a real headless Chromium: the Playwright script
//! `tools/dashboard-test/dashboard.test.mjs` against a `baton serve` with a tokens file, every
//! CLI command of it going through the server. What it checks is listed at the script's top;
//! its screenshots are kept in `$CARGO_TARGET_TMPDIR/dashboard/`.
//!
//! It needs Debian's Chromium and the script's `node_modules` (`scripts/test.sh` installs both
//! and sets `BATON_TEST_BROWSER`); without `BATON_TEST_BROWSER` it says it was skipped.

use baton_testkit as common;

use std::path::Path;
use std::process::Command;

use common::{baton_bin, with_fresh_sqlite};

#[test]
fn the_dashboard_shows_keys_live_and_cancels_from_a_real_browser() {
    let Some(browser) = std::env::var_os("BATON_TEST_BROWSER").filter(|b| !b.is_empty()) else {
        eprintln!(
            "skipped: BATON_TEST_BROWSER is not set (scripts/test.sh installs Chromium and \
             playwright-core and sets it)"
        );
        return;
    };
    let script_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/dashboard-test");
    assert!(
        script_dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci` in {}",
        script_dir.display()
    );
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    with_fresh_sqlite(|ctx| {
        let made = ctx
            .baton([
                "tokens",
                "new",
                "operator",
                "--scope",
                &format!("admin:{}", ctx.prefix),
                "--json",
            ])
            .run();
        made.assert_code(0);
        let made: serde_json::Value = serde_json::from_str(made.stdout.trim()).expect("JSON");
        let token = made["token"].as_str().expect("a token");
        let file = serde_json::json!({ "tokens": [made["entry"]] }).to_string();
        std::fs::write(ctx.path("tokens.json"), file).expect("write the tokens file");
        let tokens = ctx.path("tokens.json");
        let (_server, address) = ctx.serve(&["--tokens", tokens.to_str().expect("a path")]);
        let output = Command::new("node")
            .arg("dashboard.test.mjs")
            .current_dir(&script_dir)
            .env("BATON_BIN", baton_bin())
            .env("BATON_URL", format!("http://{address}"))
            .env("ADMIN_TOKEN", token)
            .env("PREFIX", &ctx.prefix)
            .env("ARTIFACTS", &artifacts)
            .env("CHROMIUM", &browser)
            .env("TEST_DIR", ctx.dir())
            .output()
            .expect("run node");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "the dashboard test failed ({}); screenshots in {}\n{stdout}\n{stderr}",
            output.status,
            artifacts.display()
        );
        eprintln!("{stdout}");
    });
}
