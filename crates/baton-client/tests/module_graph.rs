//! No import cycle between the client's modules: no module imports one that imports it back,
//! directly or through others.
//!
//! The test reads `src/**/*.rs`, strips comments, string literals and `#[cfg(test)]` modules,
//! and takes as an import every path a module names through `crate::`, `super::` or one of its
//! own child modules (`mod x;` then `x::…`), resolved to the deepest module it reaches (names
//! the crate root re-exports, such as `crate::Coordinator`, to the module that defines them).
//! Declaring a child (`mod x;`) is not an import. A cycle fails the test, named in full.
//!
//! It also holds the turn vocabulary to its promise: `turn` imports nothing else of the client.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`""` for the root, `"turn::lease"`).
type Module = String;

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = Graph::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.edges.len() > 20 && graph.edges.contains_key("turn"),
        "the graph was not read: {:?}",
        graph.edges.keys().collect::<Vec<_>>()
    );
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "import cycles between baton-client's modules:\n{}",
        cycles
            .iter()
            .map(|cycle| format!("  {}", cycle.join(" -> ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_turn_vocabulary_imports_nothing_else_of_the_client() {
    let graph = Graph::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let inside = |module: &str| module == "turn" || module.starts_with("turn::");
    for (module, imports) in graph.edges.iter().filter(|(m, _)| inside(m)) {
        let outside: Vec<_> = imports.iter().filter(|i| !inside(i)).collect();
        assert!(outside.is_empty(), "{module} imports {outside:?}");
    }
}

#[test]
fn the_reader_sees_imports_and_not_comments_or_strings() {
    let text = r#"
        //! crate::commented::out
        use crate::{a::{b, c::D}, e};
        use super::f;
        mod g;
        /* crate::block */
        fn x() { let s = "crate::quoted"; let c = '"'; g::h(); crate::i::j(); }
        #[cfg(test)]
        mod tests { use crate::tested; }
    "#;
    let cleaned = clean(text);
    let mut found = Vec::new();
    for (anchor, at) in anchors(&cleaned, &["g".to_owned()]) {
        let mut paths = Vec::new();
        use_tree(&cleaned, at, &mut vec![anchor], &mut paths);
        found.extend(paths.into_iter().map(|p| p.join("::")));
    }
    assert_eq!(
        found,
        [
            "crate::a::b",
            "crate::a::c::D",
            "crate::e",
            "super::f",
            "g::h",
            "crate::i::j"
        ]
    );
}

/// The modules of the crate and what each imports.
struct Graph {
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Graph {
    fn read(src: &Path) -> Graph {
        let mut texts = BTreeMap::new();
        for file in rust_files(src) {
            let relative = file.strip_prefix(src).expect("under src");
            let text = std::fs::read_to_string(&file).expect("readable source");
            texts.insert(module_of(relative), clean(&text));
        }
        let reexports = reexports(texts.get("").map_or("", String::as_str));
        let modules: BTreeSet<Module> = texts.keys().cloned().collect();
        let mut edges = BTreeMap::new();
        for (module, text) in texts.iter().filter(|(m, _)| !m.is_empty()) {
            let children = children(text);
            let mut imports = BTreeSet::new();
            for (anchor, at) in anchors(text, &children) {
                let mut paths = Vec::new();
                use_tree(text, at, &mut vec![anchor], &mut paths);
                for path in paths {
                    let absolute = absolute(module, &path);
                    let target = resolve(&modules, &reexports, &absolute)
                        .unwrap_or_else(|| panic!("{module}: cannot resolve {}", path.join("::")));
                    if &target != module && !target.is_empty() {
                        imports.insert(target);
                    }
                }
            }
            edges.insert(module.clone(), imports);
        }
        Graph { edges }
    }

    /// Every strongly connected set of more than one module, each as a path round it.
    fn cycles(&self) -> Vec<Vec<Module>> {
        let mut cycles = Vec::new();
        let mut done = BTreeSet::new();
        for start in self.edges.keys() {
            if done.contains(start) {
                continue;
            }
            let reach = self.reachable(start);
            let component: BTreeSet<Module> = reach
                .into_iter()
                .filter(|m| self.reachable(m).contains(start))
                .collect();
            done.extend(component.iter().cloned());
            if component.len() > 1 {
                cycles.push(self.path_round(start, &component));
            }
        }
        cycles
    }

    fn reachable(&self, from: &str) -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(module) = todo.pop() {
            for next in self.edges.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    }

    /// A shortest path from `start` back to it within `component` (breadth first).
    fn path_round(&self, start: &str, component: &BTreeSet<Module>) -> Vec<Module> {
        let mut came_from: BTreeMap<Module, Module> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.to_owned()]);
        while let Some(module) = queue.pop_front() {
            for next in self.edges.get(&module).into_iter().flatten() {
                if next == start {
                    let mut path = vec![start.to_owned(), module.clone()];
                    let mut at = module.clone();
                    while let Some(previous) = came_from.get(&at) {
                        path.push(previous.clone());
                        at = previous.clone();
                    }
                    path.reverse();
                    return path;
                }
                if component.contains(next) && !came_from.contains_key(next) {
                    came_from.insert(next.clone(), module.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        component.iter().cloned().collect()
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("readable src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `lib.rs` → `""`, `turn.rs` → `"turn"`, `turn/lease.rs` → `"turn::lease"`.
fn module_of(relative: &Path) -> Module {
    let parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [only] if only == "lib" => String::new(),
        [init @ .., last] if last == "mod" => init.join("::"),
        all => all.join("::"),
    }
}

/// The source without comments, string and char literals, and `#[cfg(test)] mod … { … }`.
fn clean(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        match rest {
            ['/', '/', ..] => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ['/', '*', ..] => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            ['r', '#', ..] | ['r', '"', ..] if !ident_before(&chars, i) => {
                let hashes = rest[1..].iter().take_while(|c| **c == '#').count();
                if rest.get(1 + hashes) != Some(&'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                while i < chars.len() {
                    let closes =
                        chars[i] == '"' && (0..hashes).all(|h| chars.get(i + 1 + h) == Some(&'#'));
                    i += 1;
                    if closes {
                        i += hashes;
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            ['"', ..] => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            ['\'', '\\', ..] => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            ['\'', _, '\'', ..] => i += 3,
            _ => {
                out.push(chars[i]);
                i += 1;
            }
        }
    }
    without_test_modules(out)
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

fn without_test_modules(mut text: String) -> String {
    while let Some(at) = text.find("#[cfg(test)]") {
        let Some(open) = text[at..].find('{').map(|o| at + o) else {
            break;
        };
        let mut depth = 0;
        let mut end = text.len();
        for (offset, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + offset + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        text.replace_range(at..end, "");
    }
    text
}

/// The child modules a file declares (`mod x;`).
fn children(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "mod" && w[1].ends_with(';'))
        .map(|w| w[1].trim_end_matches(';').to_owned())
        .collect()
}

/// Where a path starts: `crate::`, `super::` or `child::`, not preceded by a path or a name
/// (a path's later segments are read from its start), with the offset just after `::`.
fn anchors(text: &str, children: &[String]) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices("::") {
        let start = text[..at]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let word = &text[start..at];
        let preceded = start >= 2 && &text[start - 2..start] == "::"
            || start >= 1 && (bytes[start - 1] == b'_' || bytes[start - 1].is_ascii_alphanumeric());
        let anchor = word == "crate" || word == "super" || children.iter().any(|c| c == word);
        if anchor && !preceded {
            found.push((word.to_owned(), at + 2));
        }
    }
    found
}

/// The paths of a use tree (or an expression path) starting at `at`, each with `prefix`.
fn use_tree(
    text: &str,
    mut at: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let skip_space = |at: usize| at + text[at..].len() - text[at..].trim_start().len();
    at = skip_space(at);
    if text[at..].starts_with('{') {
        at += 1;
        loop {
            at = skip_space(at);
            if text[at..].starts_with('}') {
                return at + 1;
            }
            let mut inner = prefix.clone();
            at = use_tree(text, at, &mut inner, out);
            at = skip_space(at);
            if text[at..].starts_with(',') {
                at += 1;
            }
        }
    }
    let word_len = text[at..]
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len() - at);
    if word_len == 0 {
        out.push(prefix.clone());
        return at;
    }
    prefix.push(text[at..at + word_len].to_owned());
    at += word_len;
    if text[at..].starts_with("::") {
        return use_tree(text, at + 2, prefix, out);
    }
    out.push(prefix.clone());
    at
}

/// A path as seen from `module`, from the crate root.
fn absolute(module: &str, path: &[String]) -> Vec<String> {
    let mut parts: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") => {
            let mut parent: Vec<String> = module.split("::").map(str::to_owned).collect();
            parent.pop();
            parent
        }
        _ => module.split("::").map(str::to_owned).collect(),
    };
    let skip = usize::from(matches!(
        path.first().map(String::as_str),
        Some("crate" | "super")
    ));
    parts.extend(path[skip..].iter().filter(|p| *p != "self").cloned());
    parts
}

/// What the crate root re-exports: name → the module path it comes from.
fn reexports(root: &str) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    for (at, _) in root.match_indices("pub use ") {
        let mut paths = Vec::new();
        use_tree(root, at + "pub use ".len(), &mut Vec::new(), &mut paths);
        for path in paths {
            if let Some((name, from)) = path.split_last() {
                names.insert(name.clone(), from.to_vec());
            }
        }
    }
    names
}

/// The deepest module `path` reaches (through the root's re-exports); `None` if none.
fn resolve(
    modules: &BTreeSet<Module>,
    reexports: &BTreeMap<String, Vec<String>>,
    path: &[String],
) -> Option<Module> {
    let mut path = path.to_vec();
    if let Some(first) = path.first() {
        if !modules.contains(first) {
            if let Some(from) = reexports.get(first) {
                let mut through = from.clone();
                through.push(first.clone());
                through.extend(path[1..].iter().cloned());
                path = through;
            }
        }
    }
    (0..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}
