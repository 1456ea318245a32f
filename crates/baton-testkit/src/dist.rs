//! Release archives for the tests of `install.sh` and of the CI integrations that install
//! baton with it: `scripts/dist.sh` packing this build's `baton`, stripped of its symbols and
//! debug information (a fraction of the size, so gzip takes seconds).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// `[workspace.package] version` in the root Cargo.toml.
pub fn workspace_version() -> String {
    let text = fs::read_to_string(repo_root().join("Cargo.toml")).expect("read Cargo.toml");
    let mut in_section = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[workspace.package]";
            continue;
        }
        let value = line
            .strip_prefix("version")
            .and_then(|rest| rest.trim_start().strip_prefix('='));
        if let (true, Some(value)) = (in_section, value) {
            return value.trim().trim_matches('"').to_owned();
        }
    }
    panic!("Cargo.toml has no [workspace.package] version");
}

/// The target triple install.sh's default URL names on this machine.
pub fn this_target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// A program's path on the test's PATH; fails the test, naming the package, if it is missing
/// (a test never silently skips).
pub fn tool(name: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("these tests need `{name}` on PATH (Debian package {package}): install it")
        })
}

pub fn run_checked(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("run {what}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout:\n{}\n--- stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// This build's `baton`, stripped, at `dir/baton`.
pub fn stripped_baton(dir: &Path) -> PathBuf {
    let stripped = dir.join("baton");
    run_checked(
        Command::new(tool("strip", "binutils"))
            .arg("-o")
            .arg(&stripped)
            .arg(crate::baton_bin()),
        "strip",
    );
    stripped
}

/// `bash scripts/dist.sh --binary BINARY --out OUT`, SOURCE_DATE_EPOCH set to `epoch` or unset.
pub fn dist_command(binary: &Path, out: &Path, epoch: Option<&str>) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(repo_root().join("scripts/dist.sh"))
        .arg("--binary")
        .arg(binary)
        .arg("--out")
        .arg(out)
        .env_remove("SOURCE_DATE_EPOCH");
    if let Some(epoch) = epoch {
        command.env("SOURCE_DATE_EPOCH", epoch);
    }
    command
}
