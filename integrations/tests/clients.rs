//! The Python, TypeScript and Go clients (`clients/`), each running its own test suite against
//! a real `baton serve --turn-wait 1s` started here, over a fresh SQLite file and over
//! PostgreSQL when `BATON_TEST_POSTGRES_URL` is set (as `scripts/test.sh` sets it). One server
//! per store serves a whole suite; every test of a suite uses keys of its own.
//!
//! A suite is the language's own runner (`python3 -m unittest`, `node --test`, `go test`),
//! given the server as `BATON_URL`. Each must pass every test it has, none skipped: a suite
//! that found no server would skip them all. The toolchains come from Debian (`python3`,
//! `nodejs`, `golang-go`), installed by `scripts/test.sh`.

use baton_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{with_fresh_sqlite, with_store, Ctx};

/// One language's suite: the command, run in its client's folder, and what its output says
/// when every test passed and none was skipped.
struct Suite {
    folder: &'static str,
    program: &'static str,
    args: &'static [&'static str],
    passed: fn(&str) -> bool,
}

const PYTHON: Suite = Suite {
    folder: "python",
    program: "python3",
    args: &["-m", "unittest", "discover", "-v", "-s", "tests"],
    passed: |out| out.contains("\nOK") && !out.contains("skipped") && out.contains("Ran 14 tests"),
};

const TYPESCRIPT: Suite = Suite {
    folder: "typescript",
    program: "node",
    args: &["--test", "test/"],
    passed: |out| {
        out.contains("# pass 13") && out.contains("# fail 0") && out.contains("# skipped 0")
    },
};

const GO: Suite = Suite {
    folder: "go",
    program: "go",
    args: &["test", "-count=1", "-v", "./..."],
    passed: |out| out.matches("--- PASS").count() == 12 && !out.contains("--- SKIP"),
};

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients")
}

/// Runs `suite` against a server of its own on a fresh SQLite file, then on PostgreSQL.
fn on_each_store(suite: &Suite) {
    eprintln!("--- store: a fresh SQLite file");
    with_fresh_sqlite(|ctx| run(ctx, suite));
    match std::env::var("BATON_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            eprintln!("--- store: {url}");
            with_store(&url, |ctx| run(ctx, suite));
        }
        _ => eprintln!(
            "--- PostgreSQL not tested: BATON_TEST_POSTGRES_URL is not set (scripts/test.sh sets it)"
        ),
    }
}

fn run(ctx: &Ctx, suite: &Suite) {
    let (_server, address) = ctx.serve(&["--turn-wait", "1s"]);
    let mut command = Command::new(suite.program);
    command
        .args(suite.args)
        .current_dir(clients_dir().join(suite.folder))
        .env("BATON_URL", format!("http://{address}"))
        .env_remove("BATON_TOKEN");
    if std::env::var_os("HOME").is_none() {
        // Go keeps its build cache under the home directory: a scratch one without one.
        command.env("GOCACHE", ctx.path("go-cache"));
    }
    let output = command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {}: {e} (scripts/test.sh installs python3, nodejs and golang-go)",
            suite.program
        )
    });
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && (suite.passed)(&text),
        "the {} client's suite failed ({}):\n{text}",
        suite.folder,
        output.status
    );
}

#[test]
fn the_python_client_passes_its_suite() {
    on_each_store(&PYTHON);
}

#[test]
fn the_typescript_client_passes_its_suite() {
    on_each_store(&TYPESCRIPT);
}

#[test]
fn the_go_client_passes_its_suite() {
    on_each_store(&GO);
}

/// Each client is versioned with baton: its package says the workspace's version.
#[test]
fn every_client_has_batons_version() {
    let read = |path: &str| {
        std::fs::read_to_string(clients_dir().join(path))
            .unwrap_or_else(|e| panic!("read clients/{path}: {e}"))
    };
    let workspace =
        std::fs::read_to_string(clients_dir().join("../Cargo.toml")).expect("Cargo.toml");
    let version = workspace
        .lines()
        .find_map(|line| line.strip_prefix("version = "))
        .expect("the workspace's version")
        .trim_matches('"');
    for (file, line) in [
        ("python/pyproject.toml", format!("version = \"{version}\"")),
        (
            "python/baton/__init__.py",
            format!("__version__ = \"{version}\""),
        ),
        (
            "typescript/package.json",
            format!("\"version\": \"{version}\""),
        ),
        ("go/baton.go", format!("const Version = \"{version}\"")),
    ] {
        assert!(read(file).contains(&line), "clients/{file} says {line}");
    }
}
