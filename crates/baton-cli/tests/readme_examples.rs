//! The documents' examples, run: every fenced ```` ```sh ```` block of `README.md`, of every page
//! of `docs/` and of the integrations' READMEs is either run on a fresh SQLite store and must
//! exit as its text says, or skipped with a reason written next to it, so the docs cannot drift
//! from the CLI again.
//!
//! # How a block runs
//!
//! Each block gets its own [`Ctx`] (a fresh `sqlite:` store in `BATON_STORE`, made with `baton
//! init`, as a reader of the README has a store already) and a scratch directory of its own as
//! its current directory, and runs as one `sh` script, **command by command**: the script
//! records each command's exit code and goes on (no `sh -e`). One shell, so a block's later
//! commands see what its earlier ones set (`TOKEN=$(baton acquire …)`, then `baton release …
//! "$TOKEN"`); command by command, so a failure names the README line of the command that failed,
//! and every command of every block is checked in one run, not only up to the first failure. A
//! command is a line (or lines joined by a trailing `\`) that is not blank or a `# comment`;
//! every command must exit 0 unless a marker says otherwise.
//!
//! The environment a block runs in:
//! - `PATH` starts with a stub directory: `baton` (a symlink to the binary cargo built), `make`
//!   and `apt-get` (exit 0), and `cargo` (runs `baton` with what follows `--`, so the quick
//!   start's `cargo run --release --bin baton -- run …` runs the built binary).
//! - Every `./NAME` a block mentions (`./deploy.sh`) is a stub script in the scratch directory
//!   that exits 0; `request.json` holds `{"commit":"abc123"}`; the scratch directory is a git
//!   repository with one commit (for `git show -s --format=%ct`).
//! - `USER=newcomer`, `GITHUB_RUN_NUMBER=41` and `STEP=1` (what a CI job would have set); `CI`,
//!   `GITHUB_ACTIONS`, `CIRCLECI`, `GITLAB_CI` and `BUILDKITE` are unset, so baton behaves as on
//!   a developer's machine.
//!
//! # Markers
//!
//! An HTML comment on the lines just before a fence (invisible on GitHub) changes how the block
//! runs; one comment per marker, several allowed:
//! - `<!-- example: skip (REASON) -->`: the block is not run; REASON is required.
//! - `` <!-- example: exit N `PREFIX` (REASON) --> ``: the block's command that starts with PREFIX
//!   must exit N (a documented refusal, a made-up id). REASON is optional.
//! - `` <!-- example: background `PREFIX` --> ``: the command that starts with PREFIX runs until
//!   stopped (`baton worker`, `status -w`): it is started in the background, must still be
//!   running once the block's other commands are done (it did not refuse its arguments), and is
//!   then stopped with SIGTERM.
//!
//! A block that names a server store (`--store`, `BATON_STORE=` or `store:` followed by
//! `postgres://`, `redis://`, `etcd://`, `s3://`, `dynamodb://` or `http(s)://`) is skipped
//! without a marker, the store URL being its reason. Any other block runs. A marker that matches
//! no command, an unknown marker or a skip without a reason fails the test.

use baton_testkit as common;

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{baton_bin, with_fresh_sqlite, Ctx};

/// The documents whose ```` ```sh ```` blocks are examples (paths from the workspace root),
/// besides every page of [`DOCS_DIR`].
const DOCUMENTS: &[&str] = &[
    "README.md",
    "integrations/github/README.md",
    "integrations/circleci/README.md",
    "integrations/gitlab/README.md",
    "integrations/buildkite/README.md",
    "clients/python/README.md",
    "clients/typescript/README.md",
    "clients/go/README.md",
];

/// The other documents at the top of the repository, whose links are checked too.
const TOP_LEVEL: &[&str] = &[
    "ARCHITECTURE.md",
    "BENCHMARKS.md",
    "SECURITY.md",
    "TORTURE.md",
];

/// The reference pages the README links to: every `.md` file here holds examples too.
const DOCS_DIR: &str = "docs";

/// [`DOCUMENTS`] and every page of [`DOCS_DIR`], in name order.
fn documents() -> Vec<String> {
    let dir = workspace_root().join(DOCS_DIR);
    let entries = fs::read_dir(&dir).unwrap_or_else(|error| panic!("read {DOCS_DIR}/: {error}"));
    let mut pages: Vec<String> = entries
        .map(|entry| entry.expect("a docs/ entry").file_name())
        .filter_map(|name| name.to_str().map(str::to_owned))
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("{DOCS_DIR}/{name}"))
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "{DOCS_DIR}/ holds no page");
    DOCUMENTS
        .iter()
        .map(|d| (*d).to_owned())
        .chain(pages)
        .collect()
}

/// How long one block may run: its commands are quick; a worker and a wait take a few seconds.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(60);

/// Store URL schemes that need a server: a block naming one cannot run on a fresh SQLite file.
const SERVER_SCHEMES: &[&str] = &[
    "postgres://",
    "postgresql://",
    "redis://",
    "rediss://",
    "etcd://",
    "s3://",
    "dynamodb://",
    "http://",
    "https://",
];

#[test]
fn every_sh_block_of_the_readmes_runs_or_says_why_not() {
    let mut n_run = 0;
    let mut skipped = Vec::new();
    let mut failures = Vec::new();
    let mut n_blocks = 0;
    for document in documents() {
        let text = fs::read_to_string(workspace_root().join(&document))
            .unwrap_or_else(|error| panic!("read {document}: {error}"));
        for block in sh_blocks(&document, &text) {
            n_blocks += 1;
            match plan(&block) {
                Err(problem) => failures.push(format!("{}: {problem}", block.place())),
                Ok(Plan::Skip(reason)) => skipped.push(format!("{}: {reason}", block.place())),
                Ok(Plan::Run(run)) => {
                    n_run += 1;
                    if let Some(failure) = run_block(&block, &run) {
                        failures.push(failure);
                    }
                }
            }
        }
    }
    eprintln!(
        "{n_run} blocks run, {} skipped:\n  {}",
        skipped.len(),
        skipped.join("\n  ")
    );
    assert!(
        failures.is_empty(),
        "{} README example block(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(n_run > 0, "no README example was run");
    assert_eq!(
        n_run + skipped.len(),
        n_blocks,
        "every sh block is run or skipped"
    );
}

/// The README's first screen: the quick start runs, the test suite is skipped as what it is.
#[test]
fn the_quick_start_runs_and_the_test_suite_is_skipped_as_itself() {
    let text = fs::read_to_string(workspace_root().join("README.md")).expect("read README.md");
    let blocks = sh_blocks("README.md", &text);
    let quick_start = blocks
        .iter()
        .find(|block| block.text.contains("--bin baton -- run"))
        .expect("the README's quick start is a sh block");
    assert!(
        matches!(plan(quick_start), Ok(Plan::Run(_))),
        "the quick start must run: {}",
        quick_start.place()
    );
    let suite = blocks
        .iter()
        .find(|block| block.commands().iter().any(|c| c.text == "scripts/test.sh"))
        .expect("the README shows scripts/test.sh in a sh block of its own");
    match plan(suite) {
        Ok(Plan::Skip(reason)) => assert!(reason.contains("test suite"), "{reason}"),
        other => panic!(
            "{} must be skipped as the test suite: {other:?}",
            suite.place()
        ),
    }
}

/// Every relative link of the README, the docs/ pages and the top-level documents names a file
/// or folder that exists, so a page that moves cannot leave a dead link behind.
#[test]
fn every_relative_link_of_the_documents_names_a_file_that_exists() {
    let others = TOP_LEVEL.iter().map(|d| (*d).to_owned());
    let mut dead = Vec::new();
    for document in documents().into_iter().chain(others) {
        let path = workspace_root().join(&document);
        let text =
            fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {document}: {error}"));
        let dir = path.parent().expect("a document's folder");
        for target in relative_links(&text) {
            if !dir.join(&target).exists() {
                dead.push(format!("{document}: ({target})"));
            }
        }
    }
    assert!(
        dead.is_empty(),
        "links to nothing:\n  {}",
        dead.join("\n  ")
    );
}

/// The file part of every Markdown link `[text](target)` of `text` that is neither a URL nor an
/// anchor of the same page.
fn relative_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .map(|target| target.split('#').next().unwrap_or_default().trim())
        .filter(|target| !target.is_empty() && !target.contains("://") && !target.contains(' '))
        .filter(|target| !target.starts_with("mailto:"))
        .map(str::to_owned)
        .collect()
}

/// The marker rules themselves, on made-up documents.
#[test]
fn markers_are_read_and_checked() {
    let doc = "text\n<!-- example: skip (needs a CI runner) -->\n```sh\nbaton x\n```\n\
               ```sh\nbaton run --store redis://h/0 k -- true\n```\n\
               <!-- example: skip -->\n```sh\nbaton y\n```\n\
               <!-- example: exit 3 `baton kv get` -->\n```sh\nbaton kv get a\n```\n\
               <!-- example: exit 3 `baton nothing` -->\n```sh\nbaton kv get a\n```\n\
               ```yaml\nrun: baton z\n```\n";
    let blocks = sh_blocks("doc.md", doc);
    let plans: Vec<_> = blocks.iter().map(plan).collect();
    assert_eq!(blocks.len(), 5, "{blocks:?}");
    assert!(matches!(&plans[0], Ok(Plan::Skip(r)) if r == "needs a CI runner"));
    assert!(matches!(&plans[1], Ok(Plan::Skip(r)) if r.contains("redis://h/0")));
    assert!(
        matches!(&plans[2], Err(e) if e.contains("reason")),
        "{:?}",
        plans[2]
    );
    match &plans[3] {
        Ok(Plan::Run(run)) => assert_eq!(run.expected_code(&blocks[3].commands()[0]), Some(3)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(&plans[4], Err(e) if e.contains("baton nothing")));
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ----- reading the documents -----

/// One ```` ```sh ```` block: where it is, its text, and the markers just before it.
#[derive(Debug)]
struct Block {
    document: String,
    /// The line of the opening fence (1-based).
    fence_line: usize,
    text: String,
    markers: Vec<String>,
}

/// One command of a block: its first line's number in the document and its text (continuation
/// lines kept, joined by `\` and a newline).
#[derive(Debug, Clone)]
struct ShellCommand {
    line: usize,
    text: String,
}

impl Block {
    fn place(&self) -> String {
        format!("{}:{} (```sh block)", self.document, self.fence_line)
    }

    fn commands(&self) -> Vec<ShellCommand> {
        let mut commands: Vec<ShellCommand> = Vec::new();
        let mut continued = false;
        for (index, line) in self.text.lines().enumerate() {
            let line_no = self.fence_line + 1 + index;
            if continued {
                let last = commands.last_mut().expect("a continued command");
                last.text.push('\n');
                last.text.push_str(line);
            } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
                commands.push(ShellCommand {
                    line: line_no,
                    text: line.to_owned(),
                });
            }
            continued = line.ends_with('\\') && !commands.is_empty();
        }
        commands
    }
}

/// Every ```` ```sh ```` block of `text`, with the `<!-- example: … -->` comments on the lines
/// just before its fence.
fn sh_blocks(document: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let opening = lines[index].trim_start();
        if !opening.starts_with("```") {
            index += 1;
            continue;
        }
        let end = (index + 1..lines.len())
            .find(|&i| lines[i].trim_start().starts_with("```"))
            .unwrap_or(lines.len());
        if opening.trim_end() == "```sh" {
            let markers = lines[..index]
                .iter()
                .rev()
                .take_while(|line| line.trim_start().starts_with("<!--"))
                .filter_map(|line| marker_of(line))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            blocks.push(Block {
                document: document.to_owned(),
                fence_line: index + 1,
                text: lines[index + 1..end].join("\n"),
                markers,
            });
        }
        index = end + 1;
    }
    blocks
}

/// The text of an `<!-- example: TEXT -->` comment; other comments are not markers.
fn marker_of(line: &str) -> Option<String> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    Some(inner.strip_prefix("example:")?.trim().to_owned())
}

// ----- deciding what to do with a block -----

#[derive(Debug)]
enum Plan {
    Skip(String),
    Run(Run),
}

/// A block to run: which commands must exit other than 0, which run in the background.
#[derive(Debug, Default)]
struct Run {
    exits: Vec<(String, i32)>,
    background: Vec<String>,
}

impl Run {
    fn expected_code(&self, command: &ShellCommand) -> Option<i32> {
        if self.is_background(command) {
            return None;
        }
        let code = self
            .exits
            .iter()
            .find(|(prefix, _)| starts(command, prefix));
        Some(code.map_or(0, |(_, code)| *code))
    }

    fn is_background(&self, command: &ShellCommand) -> bool {
        self.background.iter().any(|prefix| starts(command, prefix))
    }
}

fn starts(command: &ShellCommand, prefix: &str) -> bool {
    command.text.trim_start().starts_with(prefix)
}

/// What the block's markers (or the store it names) say to do with it; an error for a marker
/// that cannot be followed.
fn plan(block: &Block) -> Result<Plan, String> {
    let mut run = Run::default();
    for marker in &block.markers {
        let (verb, rest) = marker.split_once(' ').unwrap_or((marker, ""));
        match verb {
            "skip" => {
                let reason = parenthesised(rest).unwrap_or_default();
                if reason.is_empty() {
                    return Err(format!("`{marker}` gives no reason: write skip (REASON)"));
                }
                return Ok(Plan::Skip(reason));
            }
            "exit" => {
                let (code, rest) = rest.trim().split_once(' ').unwrap_or((rest, ""));
                let code = code
                    .parse()
                    .map_err(|_| format!("`{marker}`: `{code}` is not an exit code"))?;
                run.exits.push((backticked(marker, rest)?, code));
            }
            "background" => run.background.push(backticked(marker, rest)?),
            _ => {
                return Err(format!(
                    "unknown marker `{marker}` (skip, exit, background)"
                ))
            }
        }
    }
    if let Some(url) = server_store(&block.text) {
        return Ok(Plan::Skip(format!("uses the server store {url}")));
    }
    let commands = block.commands();
    let prefixes = run.exits.iter().map(|(prefix, _)| prefix);
    for prefix in prefixes.chain(&run.background) {
        if !commands.iter().any(|command| starts(command, prefix)) {
            return Err(format!(
                "a marker names `{prefix}`, which no command starts with"
            ));
        }
    }
    Ok(Plan::Run(run))
}

fn parenthesised(text: &str) -> Option<String> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.trim().to_owned())
}

fn backticked(marker: &str, text: &str) -> Result<String, String> {
    text.trim()
        .strip_prefix('`')
        .and_then(|rest| rest.split_once('`'))
        .map(|(prefix, _)| prefix.to_owned())
        .filter(|prefix| !prefix.is_empty())
        .ok_or_else(|| format!("`{marker}` names no command: add `PREFIX` in backticks"))
}

/// The first server store URL the block names, if any.
fn server_store(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.iter().enumerate().find_map(|(index, word)| {
        let url = if let Some(url) = word.strip_prefix("BATON_STORE=") {
            url
        } else if let Some(url) = word.strip_prefix("--store=") {
            url
        } else if matches!(*word, "--store" | "store:") {
            words.get(index + 1)?
        } else {
            return None;
        };
        let url = url.trim_matches(|c| c == '"' || c == '\'');
        SERVER_SCHEMES
            .iter()
            .any(|scheme| url.starts_with(scheme))
            .then(|| url.to_owned())
    })
}

// ----- running a block -----

/// Runs `block` on a fresh SQLite store; `None` when every command exited as expected, else
/// what went wrong, naming the block, the failing commands' lines and the block's output.
fn run_block(block: &Block, run: &Run) -> Option<String> {
    let failure = std::cell::RefCell::new(None);
    with_fresh_sqlite(|ctx| {
        // The README's readers have a store already: a block that starts by reading one (`baton
        // status`) must find it, as it would on their machine.
        ctx.baton(["init"]).run().assert_code(0);
        let work = prepare_scratch(ctx, block);
        let commands = block.commands();
        let codes_path = ctx.path("codes");
        let script = script_of(&commands, run, &codes_path);
        fs::write(ctx.path("block.sh"), &script).expect("write the block's script");
        let path = format!(
            "{}:{}",
            ctx.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut proc = ctx
            .program(&block.place(), "env", ["-u", "CI", "-u", "GITHUB_ACTIONS"])
            .arg("-u")
            .arg("CIRCLECI")
            .arg("-u")
            .arg("GITLAB_CI")
            .arg("-u")
            .arg("BUILDKITE")
            .arg("sh")
            .arg(ctx.path("block.sh"))
            .current_dir(&work)
            .env("PATH", path)
            .env("HOME", &work)
            .env("XDG_STATE_HOME", ctx.path("state"))
            .env("USER", "newcomer")
            .env("GITHUB_RUN_NUMBER", "41")
            .env("STEP", "1")
            .spawn();
        let deadline = std::time::Instant::now() + BLOCK_TIMEOUT;
        while !proc.has_exited() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let codes = fs::read_to_string(&codes_path).unwrap_or_default();
        let mut wrong = wrong_commands(&commands, run, &codes);
        if !proc.has_exited() {
            proc.kill();
            wrong.push(format!(
                "  it did not finish within {BLOCK_TIMEOUT:?}: its last command (the last `+` \
                 line below) runs until stopped? Mark it `background`\n"
            ));
        }
        if !wrong.is_empty() {
            failure.replace(Some(format!(
                "{} failed:\n{}--- stdout:\n{}\n--- stderr (each command's `+` line first):\n{}",
                block.place(),
                wrong.join(""),
                proc.stdout(),
                proc.stderr()
            )));
        }
    });
    failure.into_inner()
}

/// The block's scratch directory: a git repository with one commit, a stub script for every
/// `./NAME` the block mentions, `request.json`; and the stub directory `bin` put first on PATH.
fn prepare_scratch(ctx: &Ctx, block: &Block) -> PathBuf {
    let work = ctx.path("work");
    let bin = ctx.path("bin");
    for dir in [&work, &bin] {
        fs::create_dir_all(dir).expect("create a scratch directory");
    }
    std::os::unix::fs::symlink(baton_bin(), bin.join("baton")).expect("link baton into bin");
    stub(&bin.join("make"), "exit 0");
    stub(&bin.join("apt-get"), "exit 0");
    // `cargo run --release --bin baton -- ARGS`: the built baton, with ARGS.
    stub(
        &bin.join("cargo"),
        "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n\
         [ $# -gt 0 ] || { echo 'stub cargo: only `cargo run … -- ARGS`' >&2; exit 2; }\n\
         shift; exec baton \"$@\"",
    );
    for name in dot_slash_names(&block.text) {
        stub(&work.join(name), "exit 0");
    }
    fs::write(work.join("request.json"), r#"{"commit":"abc123"}"#).expect("write request.json");
    git(&work, &["init", "-q"]);
    git(
        &work,
        &[
            "-c",
            "user.name=baton",
            "-c",
            "user.email=baton@example.invalid",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "an example's commit",
        ],
    );
    work
}

fn git(work: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(work)
        .status()
        .expect("run git");
    assert!(status.success(), "git {args:?} in {}", work.display());
}

/// An executable `sh` script at `path`.
fn stub(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write a stub");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("make a stub executable");
}

/// Every `NAME` in a `./NAME` of `text`.
fn dot_slash_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split("./")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                .collect::<String>()
        })
        .filter(|name| !name.is_empty() && name.chars().any(|c| c.is_ascii_alphanumeric()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The block as a script that runs each command in turn and appends `LINE CODE` to `codes`
/// (`LINE running` or `LINE ended`, then `LINE stopped CODE`, for a background command).
fn script_of(commands: &[ShellCommand], run: &Run, codes: &Path) -> String {
    let codes = quoted(&codes.display().to_string());
    let mut script = String::new();
    let mut background = Vec::new();
    for command in commands {
        let line = command.line;
        let first = command.text.lines().next().unwrap_or_default();
        let _ = writeln!(
            script,
            "printf '%s\\n' {} >&2",
            quoted(&format!("+ {first}"))
        );
        if run.is_background(command) {
            // On a line of its own after the command, so a trailing `# comment` ends there.
            let _ = writeln!(script, "{{ exec {}\n}} &\nbg_{line}=$!", command.text);
            background.push(line);
        } else {
            let _ = writeln!(script, "{}\necho \"{line} $?\" >> {codes}", command.text);
        }
    }
    if !background.is_empty() {
        // Time for a background command to refuse its arguments, had it a reason to.
        script.push_str("sleep 1\n");
    }
    for line in background {
        let _ = writeln!(
            script,
            "if kill -0 $bg_{line} 2>/dev/null; then echo '{line} running' >> {codes}; \
             kill -TERM $bg_{line}; else echo '{line} ended' >> {codes}; fi\n\
             wait $bg_{line}; echo \"{line} stopped $?\" >> {codes}"
        );
    }
    script
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// One line per command that did not exit as expected (or never ran).
fn wrong_commands(commands: &[ShellCommand], run: &Run, codes: &str) -> Vec<String> {
    let reported = |line: usize| -> Vec<&str> {
        codes
            .lines()
            .filter_map(|entry| entry.split_once(' '))
            .filter(|(at, _)| at.parse() == Ok(line))
            .map(|(_, what)| what)
            .collect()
    };
    let mut wrong = Vec::new();
    for command in commands {
        let what = reported(command.line);
        let first = command.text.lines().next().unwrap_or_default().trim();
        let expected = match run.expected_code(command) {
            Some(code) => code.to_string(),
            None => "running".to_owned(),
        };
        let got = what.first().copied().unwrap_or("nothing: it never ran");
        if got != expected {
            let stopped = what
                .get(1)
                .map(|s| format!(", then {s}"))
                .unwrap_or_default();
            wrong.push(format!(
                "  line {}: `{first}`: expected {expected}, got {got}{stopped}\n",
                command.line
            ));
        }
    }
    wrong
}
