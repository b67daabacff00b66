//! The tidy test: keeps the layout that `ARCHITECTURE.md` describes. It reads the sources
//! (no build of anything) and fails with a message that says what to fix:
//!
//! - no import circle between the broker's top-level modules (`broker/src/<module>`): the
//!   layers stay one-way, so each can be read and tested from the bottom up;
//! - every broker module starts with a doc comment that says where its state lives
//!   (a `Lives on:` line), so a reader knows which core or thread owns what;
//! - no `#[ignore]` without a reason, and the only reasons are a measurement (`a
//!   measurement: ...`) or a test body that another test runs (`run by ...`);
//! - no source file over [`MAX_LINES`] lines in the workspace.
//!
//! Lives on: the test thread; it only reads files.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest source file the workspace keeps.
const MAX_LINES: usize = 1500;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("broker/ has a parent")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn rel(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The broker's top-level modules: `src/<m>.rs` and `src/<m>/`, but not the crate roots.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    let mut mods = BTreeSet::new();
    for entry in fs::read_dir(src).expect("broker/src").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            mods.insert(name);
        } else if let Some(m) = name.strip_suffix(".rs")
            && m != "lib"
            && m != "main"
        {
            mods.insert(m.to_string());
        }
    }
    mods
}

/// The top-level module a file of `src` belongs to.
fn owner(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first.as_os_str().to_string_lossy();
    let m = name.strip_suffix(".rs").unwrap_or(&name).to_string();
    (m != "lib" && m != "main").then_some(m)
}

/// Top-level modules named by `crate::` paths on a line (`crate::a::b`, `crate::{a, b::c}`).
fn crate_refs(line: &str, mods: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group
                .split('}')
                .next()
                .unwrap_or("")
                .split(',')
                .map(|s| s.trim())
                .collect(),
            None => vec![rest],
        };
        for name in names {
            let ident: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if mods.contains(&ident) {
                found.push(ident);
            }
        }
    }
    found
}

/// An edge of the module graph with one place that makes it, for the message.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn module_graph(src: &Path, mods: &BTreeSet<String>) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: Graph = mods.iter().map(|m| (m.clone(), BTreeMap::new())).collect();
    for file in files {
        let Some(from) = owner(src, &file) else {
            continue;
        };
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for to in crate_refs(line, mods) {
                if to != from {
                    graph
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_insert_with(|| format!("{}:{}", rel(&file), n + 1));
                }
            }
        }
    }
    graph
}

/// One circle of the graph, if any, as the list of modules along it.
fn find_circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut circle = stack[at..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(node, graph, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let src = workspace().join("broker/src");
    let mods = top_level_modules(&src);
    let graph = module_graph(&src, &mods);
    if let Some(circle) = find_circle(&graph) {
        let mut msg = format!(
            "import circle between broker's top-level modules: {}\n",
            circle.join(" -> ")
        );
        for pair in circle.windows(2) {
            let at = &graph[&pair[0]][&pair[1]];
            msg.push_str(&format!("  {} -> {} at {at}\n", pair[0], pair[1]));
        }
        msg.push_str(
            "Fix: move the code that makes one of these edges into the module it depends on \
             (or a lower layer), so that dependencies run one way (see ARCHITECTURE.md).",
        );
        panic!("{msg}");
    }
}

#[test]
fn every_broker_module_says_where_its_state_lives() {
    let mut files = Vec::new();
    rust_files(&workspace().join("broker/src"), &mut files);
    let mut missing = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap_or_default();
        let doc: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        if doc.is_empty() || !doc.iter().any(|l| l.contains("Lives on")) {
            missing.push(rel(&file));
        }
    }
    assert!(
        missing.is_empty(),
        "these broker modules do not start with a doc comment (`//!`) that has a \
         `Lives on:` line saying which core or thread owns their state:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn ignored_tests_say_why() {
    let mut files = Vec::new();
    for dir in ["broker", "storage", "protocol", "tests", "loadgen", "bench"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    let mut bad = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if !line.starts_with("#[ignore") {
                continue;
            }
            let reason = line
                .strip_prefix("#[ignore = \"")
                .map(|r| r.trim_end_matches("\"]"));
            let ok =
                reason.is_some_and(|r| r.starts_with("a measurement") || r.starts_with("run by "));
            if !ok {
                bad.push(format!("{}:{}: {line}", rel(&file), n + 1));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "ignored tests must be measurements (`#[ignore = \"a measurement: ...\"]`) or bodies \
         another test runs (`#[ignore = \"run by <test>\"]`); fix or un-ignore:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn no_source_file_is_too_long() {
    let mut files = Vec::new();
    for dir in [
        "broker", "storage", "protocol", "tests", "loadgen", "bench", "fuzz",
    ] {
        rust_files(&workspace().join(dir), &mut files);
    }
    let mut long = Vec::new();
    for file in files {
        let n = fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .count();
        if n > MAX_LINES {
            long.push(format!("{} ({n} lines)", rel(&file)));
        }
    }
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines; split them by concern:\n  {}",
        long.join("\n  ")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // The circle finder finds a planted circle and the reference parser reads groups.
    let mut graph: Graph = BTreeMap::new();
    graph
        .entry("a".into())
        .or_default()
        .insert("b".into(), "x".into());
    graph
        .entry("b".into())
        .or_default()
        .insert("c".into(), "y".into());
    graph
        .entry("c".into())
        .or_default()
        .insert("a".into(), "z".into());
    assert_eq!(find_circle(&graph).map(|c| c.len()), Some(4));
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_circle(&graph), None);
    let mods: BTreeSet<String> = ["a", "b", "core"].iter().map(|s| s.to_string()).collect();
    assert_eq!(
        crate_refs("use crate::{a::X, core, zz};", &mods),
        vec!["a".to_string(), "core".to_string()]
    );
    assert_eq!(
        crate_refs("crate::b::f(crate::a::g())", &mods),
        vec!["b", "a"]
    );
    // The real source tree has several top-level modules to check.
    assert!(top_level_modules(&workspace().join("broker/src")).len() > 5);
}
