//! The house rules on the source that no compiler checks (ARCHITECTURE.md, "Size"): no
//! file in `crates/*/src` over 1,000 lines, and at most five functions there over 70 lines,
//! each named in ARCHITECTURE.md with why.
//!
//! Rough on purpose: a function starts at a line that begins (after `pub`, `async`, `const`,
//! `unsafe`) with `fn NAME` and runs to its matching brace, counted outside string and char
//! literals and `//` comments. A false alarm names its file and line, so it is easy to judge.

use std::path::{Path, PathBuf};

const FILE_MAX_LINES: usize = 1_000;
const FN_MAX_LINES: usize = 70;
const LONG_FNS_ALLOWED: usize = 5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found.sort();
}

/// Every source file of every crate in `crates/`.
fn sources() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let crates = root().join("crates");
    for entry in std::fs::read_dir(&crates).expect("crates/ exists") {
        let src = entry.expect("a directory entry").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut found);
        }
    }
    assert!(found.len() > 50, "found only {} source files", found.len());
    found
}

/// The name of the function `line` starts, if it starts one.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("pub(") {
            rest = after.split_once(')')?.1.trim_start();
        } else if let Some(after) = ["pub ", "async ", "const ", "unsafe "]
            .iter()
            .find_map(|word| rest.strip_prefix(word))
        {
            rest = after.trim_start();
        } else {
            break;
        }
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}

/// The braces of `line` that are code: (opened, closed, ends with `;`). `in_string` says whether
/// the line starts inside a string literal, and is left saying whether it ends in one: a string
/// may run over several lines (a `\` at a line's end), and braces inside it are text.
fn braces(line: &str, in_string: &mut bool) -> (usize, usize, bool) {
    let chars: Vec<char> = line.chars().collect();
    let (mut opened, mut closed, mut i) = (0, 0, 0);
    let mut code_end = chars.len();
    while i < chars.len() {
        if *in_string {
            match chars[i] {
                '\\' => i += 2,
                '"' => {
                    *in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                code_end = i;
                break;
            }
            '"' => *in_string = true,
            // A char literal ('{', '\''); a lifetime ('a) is left as it is.
            '\'' if chars.get(i + 1) == Some(&'\\') => i += 3,
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 2,
            '{' => opened += 1,
            '}' => closed += 1,
            _ => {}
        }
        i += 1;
    }
    let code: String = chars[..code_end].iter().collect();
    (opened, closed, code.trim_end().ends_with(';'))
}

/// The functions of `text` over `max` lines: (first line, name, lines).
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(lines[i]) else {
            i += 1;
            continue;
        };
        let (mut depth, mut started, mut j) = (0usize, false, i);
        let mut in_string = false;
        while j < lines.len() {
            let (opened, closed, semicolon) = braces(lines[j], &mut in_string);
            started |= opened > 0;
            depth = (depth + opened).saturating_sub(closed);
            if (started && depth == 0) || (!started && semicolon) {
                break;
            }
            j += 1;
        }
        if started && j + 1 - i > max {
            long.push((i + 1, name.to_owned(), j + 1 - i));
        }
        i = if started { j + 1 } else { i + 1 };
    }
    long
}

#[test]
fn no_source_file_is_over_1000_lines() {
    let over: Vec<String> = sources()
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).ok()?.lines().count();
            (lines > FILE_MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(over.is_empty(), "over {FILE_MAX_LINES} lines: {over:#?}");
}

#[test]
fn at_most_five_functions_are_over_70_lines_each_named_in_the_architecture() {
    let architecture =
        std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut long = Vec::new();
    for path in sources() {
        let text = std::fs::read_to_string(&path).expect("a source file");
        for (line, name, lines) in long_functions(&text, FN_MAX_LINES) {
            long.push((format!("{}:{line}", path.display()), name, lines));
        }
    }
    assert!(
        long.len() <= LONG_FNS_ALLOWED,
        "{} functions over {FN_MAX_LINES} lines (at most {LONG_FNS_ALLOWED}): {long:#?}",
        long.len()
    );
    let unnamed: Vec<_> = long
        .iter()
        .filter(|(_, name, _)| !architecture.contains(&format!("`{name}`")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "over {FN_MAX_LINES} lines and not named in ARCHITECTURE.md with why: {unnamed:#?}"
    );
}

/// The counting itself: a function's lines, braces in strings, chars and comments left out.
#[test]
fn functions_are_measured_from_fn_to_their_closing_brace() {
    let text = "pub(crate) async fn short() {\n    let s = \"}}\"; // }\n    let c = '{';\n}\n\
                fn declared(x: u32) -> u32;\n\
                fn long<'a>(x: &'a str) {\n    if x.is_empty() {\n        return;\n    }\n}\n";
    assert_eq!(long_functions(text, 4), [(6, "long".to_owned(), 5)]);
    assert_eq!(long_functions(text, 5), []);
    assert_eq!(fn_name("    pub(in crate::a) unsafe fn f_1()"), Some("f_1"));
    assert_eq!(fn_name("    // fn commented()"), None);
    assert_eq!(fn_name("let fnord = 1;"), None);
}

/// A string literal that runs over lines (a `\` at their ends) hides its braces on every line.
#[test]
fn a_string_over_several_lines_hides_its_braces() {
    let text = "fn with_json() {\n    let s = \"{\\\n        {{\\\"a\\\":1}},\\\n        {\";\n}\n\
                fn after() {\n    one();\n    two();\n    three();\n}\n";
    let five_lines_each = [(1, "with_json".to_owned(), 5), (6, "after".to_owned(), 5)];
    assert_eq!(long_functions(text, 4), five_lines_each);
    assert_eq!(long_functions(text, 5), []);
}
