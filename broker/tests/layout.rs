//! The tidy test: keeps the layout that `ARCHITECTURE.md` describes. It reads the sources
//! (no build of anything) and fails with a message that says what to fix:
//!
//! - no import circle in any folder of broker/src, storage/src and protocol/src: each
//!   folder's children (its files and sub-folders) import one another one way,
//!   so each can be read and tested from the bottom up;
//! - broker/src's top-level modules stand in layers ([`BROKER_LAYERS`]) and import only
//!   their own layer or below;
//! - no broker function over [`MAX_FN_LINES`] lines (tests aside);
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

/// A graph of modules: each edge with one place that makes it, for the message.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

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

// ---------------------------------------------------------------------------------------
// Reading Rust sources: comments and literals blanked, `#[cfg(test)]` code left out.
// ---------------------------------------------------------------------------------------

/// `text` with every comment and string or char literal replaced by spaces (newlines kept),
/// so that what is left is code: braces, paths and `fn`s that are really there.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            // r"..." or r#"..."#: no escapes inside.
            let open = 2 + hashes;
            out.extend(std::iter::repeat_n(b' ', open));
            i += open;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(blank(b[i]));
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len().min(b.len() - i)));
            i += close.len();
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let step = if b[i] == b'\\' { 2 } else { 1 };
                for k in 0..step.min(b.len() - i) {
                    out.push(blank(b[i + k]));
                }
                i += step;
            }
            out.push(b' ');
            i += 1;
        } else if let Some(len) = char_literal(rest) {
            out.extend(std::iter::repeat_n(b' ', len));
            i += len;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out.truncate(b.len());
    String::from_utf8_lossy(&out).into_owned()
}

/// The number of `#`s of a raw string literal starting `rest` (`r"`, `r#"`, `br"`...).
fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let rest = rest.strip_prefix(b"b").unwrap_or(rest);
    let after = rest.strip_prefix(b"r")?;
    let hashes = after.iter().take_while(|&&c| c == b'#').count();
    (after.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a char literal starting `rest` (`'x'`, `'\n'`, `'\u{7f}'`), not a lifetime.
fn char_literal(rest: &[u8]) -> Option<usize> {
    if rest.first() != Some(&b'\'') {
        return None;
    }
    if rest.get(1) == Some(&b'\\') {
        let end = rest.iter().skip(2).position(|&c| c == b'\'')?;
        return (end < 10).then_some(end + 3);
    }
    // One character (its UTF-8 length from its first byte), then the closing quote.
    let len = match *rest.get(1)? {
        c if c < 0x80 => 1,
        c if c < 0xE0 => 2,
        c if c < 0xF0 => 3,
        _ => 4,
    };
    (rest.get(1 + len) == Some(&b'\'')).then_some(len + 2)
}

/// `code` (from [`code_only`]) with every item marked `#[cfg(test)]` blanked, and the names of
/// the test-only modules it declares out of line (`#[cfg(test)] mod sim;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out: Vec<u8> = code.as_bytes().to_vec();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|a| a + from) {
        let mut i = at + "#[cfg(test)]".len();
        // Further attributes on the same item.
        loop {
            i += code[i..].len() - code[i..].trim_start().len();
            if code[i..].starts_with("#[") {
                i += code[i..].find(']').map_or(code.len() - i, |e| e + 1);
            } else {
                break;
            }
        }
        let item = &code[i..];
        let words: Vec<&str> = item.split_whitespace().take(3).collect();
        if words.first() == Some(&"mod") {
            let name: String = words
                .get(1)
                .unwrap_or(&"")
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if item
                .trim_start_matches("mod")
                .trim_start()
                .trim_start_matches(name.as_str())
                .trim_start()
                .starts_with(';')
            {
                test_mods.push(name);
            }
        }
        let end = i + item_end(item);
        for c in out.iter_mut().take(end).skip(at) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end.max(at + 1);
    }
    (String::from_utf8_lossy(&out).into_owned(), test_mods)
}

/// Where the item at the start of `item` ends: its block's closing brace for items with a
/// body (`fn`, `mod`, `impl`...), else its `;` or, for a field or an argument, its `,`.
fn item_end(item: &str) -> usize {
    let first = item
        .split_whitespace()
        .find(|w| !w.starts_with("pub") && !["async", "unsafe", "const", "extern"].contains(w))
        .unwrap_or("");
    let has_body = [
        "fn",
        "mod",
        "impl",
        "struct",
        "enum",
        "trait",
        "macro_rules!",
    ]
    .iter()
    .any(|k| first == *k || first.starts_with(&format!("{k}(")));
    let statement = ["use", "let", "static", "type"].contains(&first)
        || item.trim_start().starts_with("const ") && !item.trim_start().starts_with("const fn");
    let b = item.as_bytes();
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' | b'[' | b'<' => depth += 1,
            b')' | b']' => depth -= 1,
            b'>' if i > 0 && !matches!(b[i - 1], b'-' | b'=') => depth -= 1,
            b'{' if depth <= 0 && (has_body || !statement) => {
                return i + matching_brace(&item[i..]).map_or(item.len() - i, |e| e + 1);
            }
            b'{' => depth += 1,
            b'}' if depth <= 0 => return i,
            b'}' => depth -= 1,
            b';' if depth <= 0 => return i + 1,
            b',' if depth <= 0 && !has_body && !statement => return i + 1,
            _ => {}
        }
    }
    item.len()
}

/// The offset of the brace closing the one that opens `text`.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.bytes().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// A crate's modules: which file each path names, and each folder's graph of children.
// ---------------------------------------------------------------------------------------

/// One crate's sources, read once: each file's code (comments, literals and test-only items
/// blanked), keyed by path; test-only files and folders are left out.
struct Crate {
    root: PathBuf,
    files: BTreeMap<PathBuf, String>,
}

impl Crate {
    fn read(root: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut skip: BTreeSet<PathBuf> = BTreeSet::new();
        let mut all = Vec::new();
        rust_files(root, &mut all);
        all.sort();
        for file in &all {
            let text = fs::read_to_string(file).unwrap_or_default();
            let (code, test_mods) = without_tests(&code_only(&text));
            let dir = module_dir(root, file);
            for m in test_mods {
                skip.insert(dir.join(format!("{m}.rs")));
                skip.insert(dir.join(&m));
            }
            files.insert(file.clone(), code);
        }
        files.retain(|f, _| {
            !f.ends_with("main.rs")
                && f.file_name() != Some("tests.rs".as_ref())
                && !skip.iter().any(|s| f.starts_with(s))
        });
        Crate {
            root: root.to_path_buf(),
            files,
        }
    }

    /// The file that the module path `segments` (from the crate root) names: the deepest
    /// module file along it (`a::b::Item` is in `a/b.rs` or `a/b/mod.rs`).
    fn resolve(&self, segments: &[String]) -> PathBuf {
        let mut dir = self.root.clone();
        for s in segments {
            if dir.join(s).is_dir() {
                dir = dir.join(s);
            } else if dir.join(format!("{s}.rs")).is_file() {
                return dir.join(format!("{s}.rs"));
            } else {
                break;
            }
        }
        face(&dir, &self.root)
    }

    /// The module path of `file` from the crate root.
    fn module_of(&self, file: &Path) -> Vec<String> {
        let rel = file.strip_prefix(&self.root).unwrap_or(file);
        let mut segs: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let last = segs.pop().unwrap_or_default();
        if last != "mod.rs" && last != "lib.rs" {
            segs.push(last.trim_end_matches(".rs").to_string());
        }
        segs
    }

    /// Every file of this crate that `file`'s code names, with the line that names it.
    fn imports(&self, file: &Path) -> Vec<(PathBuf, usize)> {
        let code = &self.files[file];
        let me = self.module_of(file);
        let children = declared_modules(code);
        let mut found = Vec::new();
        for (line, path) in paths_in(code) {
            let first = path[0].as_str();
            let absolute: Vec<String> = match first {
                "crate" => path[1..].to_vec(),
                "self" => me.iter().chain(&path[1..]).cloned().collect(),
                "super" => {
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    let base = me.len().saturating_sub(ups);
                    me[..base].iter().chain(&path[ups..]).cloned().collect()
                }
                _ if children.contains(first) => me.iter().chain(&path).cloned().collect(),
                _ => continue,
            };
            let target = self.resolve(&absolute);
            if target != file {
                found.push((target, line));
            }
        }
        found
    }
}

/// The folder whose module `file` declares children in (`a/b.rs` declares into `a/b/`).
fn module_dir(root: &Path, file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(root).to_path_buf();
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => dir,
        Some(name) => dir.join(name.trim_end_matches(".rs")),
        None => dir,
    }
}

/// The file that stands for folder `dir`: its `mod.rs`, or `lib.rs` at the crate root.
fn face(dir: &Path, root: &Path) -> PathBuf {
    if dir == root {
        dir.join("lib.rs")
    } else {
        dir.join("mod.rs")
    }
}

/// The modules `code` declares out of line (`mod x;`).
fn declared_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let l = line.trim();
        let l = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        if let Some(name) = l.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            found.insert(name.trim().to_string());
        }
    }
    found
}

/// Every path of two segments or more in `code` (`a::b`, and each leaf of a `use` tree),
/// with its line number (from 1).
fn paths_in(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].bytes().filter(|&c| c == b'\n').count() + 1;
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) || (i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        // A `use` tree: every leaf path.
        if code[i..].starts_with("use ") {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            for path in use_tree(&code[i + 4..end], &[]) {
                if path.len() >= 2 {
                    out.push((line_of(i), path));
                }
            }
            i = end;
            continue;
        }
        let mut j = i;
        let mut path = Vec::new();
        loop {
            let start = j;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            path.push(code[start..j].to_string());
            if code[j..].starts_with("::") && b.get(j + 2).is_some_and(|&c| is_ident(c)) {
                j += 2;
            } else {
                break;
            }
        }
        if path.len() >= 2 {
            out.push((line_of(i), path));
        }
        i = j.max(i + 1);
    }
    out
}

/// The leaf paths of a `use` tree (`a::{b, c::{d, self}}`), each with `prefix` before it.
fn use_tree(tree: &str, prefix: &[String]) -> Vec<Vec<String>> {
    let tree = tree.trim().trim_start_matches("::");
    let mut path: Vec<String> = prefix.to_vec();
    let mut rest = tree;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.strip_suffix('}').unwrap_or(group);
            return split_top(inner)
                .into_iter()
                .flat_map(|part| use_tree(part, &path))
                .collect();
        }
        let (seg, more) = match rest.find("::") {
            Some(at) => (&rest[..at], Some(&rest[at + 2..])),
            None => (rest, None),
        };
        let seg = seg.split_whitespace().next().unwrap_or("");
        if seg == "self" && more.is_none() {
            return vec![path];
        }
        if !seg.is_empty() && seg != "*" {
            path.push(seg.to_string());
        }
        match more {
            Some(m) => rest = m.trim(),
            None => return vec![path],
        }
    }
}

/// `text` split at its top-level commas (not those inside braces).
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Each folder's graph: its children (files and sub-folders; its `mod.rs` or `lib.rs` is the
/// folder itself) and, for each edge between two of them, one place that makes it.
type Folders = BTreeMap<PathBuf, Graph>;

/// The child of `dir` that `file` lies in: `x.rs`, `x/` or the face, as a name.
fn child_of(dir: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(dir).ok()?.components().next()?;
    let name = first.as_os_str().to_string_lossy().into_owned();
    Some(if dir.join(&name).is_dir() {
        format!("{name}/")
    } else {
        name
    })
}

fn folder_graphs(krate: &Crate) -> Folders {
    let mut folders: Folders = BTreeMap::new();
    for file in krate.files.keys() {
        let mut dir = file.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&krate.root)) {
            folders.entry(d.to_path_buf()).or_default();
            dir = d.parent();
        }
    }
    for file in krate.files.keys() {
        for (target, line) in krate.imports(file) {
            // The folder where the two files part: the deepest one holding both.
            let mut dir = file.parent().map(Path::to_path_buf);
            while let Some(d) = dir.as_ref().filter(|d| !target.starts_with(d)) {
                dir = d.parent().map(Path::to_path_buf);
            }
            let Some(dir) = dir else { continue };
            let (Some(from), Some(to)) = (child_of(&dir, file), child_of(&dir, &target)) else {
                continue;
            };
            // A folder's face (`mod.rs`, `lib.rs`) is the folder itself, not one of its
            // children: what it holds belongs to the whole folder.
            let face = |n: &str| n == "mod.rs" || n == "lib.rs";
            if from != to && !face(&from) && !face(&to) {
                folders
                    .entry(dir)
                    .or_default()
                    .entry(from)
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("{}:{line}", rel(file)));
            }
        }
    }
    folders
}

/// The circles of each folder of `krate`, less the edges `allowed` (folder, from, to).
fn folder_circles(krate: &Crate, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let mut found = Vec::new();
    for (dir, mut graph) in folder_graphs(krate) {
        for (folder, from, to) in allowed {
            if rel(&dir) == *folder
                && let Some(edges) = graph.get_mut(*from)
            {
                edges.remove(*to);
            }
        }
        if let Some(circle) = find_circle(&graph) {
            let mut msg = format!("in {}/: {}\n", rel(&dir), circle.join(" -> "));
            for pair in circle.windows(2) {
                let at = &graph[&pair[0]][&pair[1]];
                msg.push_str(&format!("    {} -> {} at {at}\n", pair[0], pair[1]));
            }
            found.push(msg);
        }
    }
    found
}

/// The broker's top-level modules, bottom layer first. A module imports only modules of
/// its own layer or below (and the folder check keeps each layer's imports one-way).
const BROKER_LAYERS: &[&[&str]] = &[
    // Leaves: plain helpers that know nothing of cores or journals.
    &[
        "errors", "guards", "idle", "io", "limits", "metrics", "mutation", "time",
    ],
    // The process's settings, its shutdown, and who may call what.
    &["config", "shutdown", "auth", "tls"],
    // The control thread: keyspace and fragment stores.
    &["control"],
    // Cluster membership and the allocator, over the keyspace.
    &["cluster"],
    // The per-core runtime.
    &["core"],
    // Journals and their RPCs, on a core.
    &["journal"],
    // The front door: connections, dispatch by method, HTTP.
    &["front"],
    // Process start-up.
    &["start"],
];

/// Where top-level module `m` stands in [`BROKER_LAYERS`].
fn layer_of(m: &str) -> Option<usize> {
    let m = m.trim_end_matches('/').trim_end_matches(".rs");
    BROKER_LAYERS.iter().position(|l| l.contains(&m))
}

/// Edges of broker/src's top level that run up the layers, and top-level modules that no
/// layer lists.
fn layer_breaks(graph: &Graph, nodes: &BTreeSet<String>) -> Vec<String> {
    let mut bad = Vec::new();
    for n in nodes.iter().filter(|n| *n != "lib.rs") {
        if layer_of(n).is_none() {
            bad.push(format!("{n} is in no layer of BROKER_LAYERS: place it"));
        }
    }
    for (from, edges) in graph {
        for (to, at) in edges {
            if let (Some(a), Some(b)) = (layer_of(from), layer_of(to))
                && b > a
            {
                bad.push(format!(
                    "{from} (layer {a}) imports {to} (layer {b}) at {at}"
                ));
            }
        }
    }
    bad
}

// ---------------------------------------------------------------------------------------
// Function length.
// ---------------------------------------------------------------------------------------

/// Each function of `code` with a body: its name, first line (from 1) and length in lines,
/// from its `fn` to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut from = 0;
    while let Some(at) = code[from..].find("fn").map(|a| a + from) {
        from = at + 2;
        let word = (at == 0 || !is_ident(b[at - 1]))
            && b.get(at + 2).is_some_and(|c| c.is_ascii_whitespace());
        if !word {
            continue;
        }
        let name: String = code[at + 2..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside parentheses; a `;` first means none.
        let mut depth = 0i32;
        let mut open = None;
        for (i, &c) in b.iter().enumerate().skip(at) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let Some(close) = matching_brace(&code[open..]).map(|e| open + e) else {
            continue;
        };
        let first = code[..at].bytes().filter(|&c| c == b'\n').count() + 1;
        let lines = code[at..=close].bytes().filter(|&c| c == b'\n').count() + 1;
        out.push((name, first, lines));
    }
    out
}

/// The longest function broker, storage and protocol keep, in lines from `fn` to its
/// closing brace.
const MAX_FN_LINES: usize = 100;

#[test]
fn no_function_is_too_long() {
    let mut long = Vec::new();
    for src in ["broker/src", "storage/src", "protocol/src"] {
        let krate = Crate::read(&workspace().join(src));
        for (file, code) in &krate.files {
            for (name, line, lines) in functions(code) {
                if lines > MAX_FN_LINES {
                    long.push(format!("{}:{line}: fn {name} ({lines} lines)", rel(file)));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines in broker, storage or protocol (tests aside); split each into \
         steps that read one level of the story each:\n  {}",
        long.join("\n  ")
    );
}

#[test]
fn no_import_circle_in_any_folder() {
    let mut circles = Vec::new();
    for src in ["broker/src", "storage/src", "protocol/src"] {
        let krate = Crate::read(&workspace().join(src));
        circles.extend(folder_circles(&krate, &[]));
    }
    assert!(
        circles.is_empty(),
        "import circles between the children of a folder (each folder's files and \
         sub-folders must import one another one way only):\n  {}\
         Fix: move the code that makes one of these edges into the child it depends on \
         (or a lower one), so that dependencies run one way (see ARCHITECTURE.md).",
        circles.join("  ")
    );
}

#[test]
fn broker_layers_run_one_way() {
    let src = workspace().join("broker/src");
    let krate = Crate::read(&src);
    let graph = folder_graphs(&krate).remove(&src).unwrap_or_default();
    let nodes: BTreeSet<String> = krate
        .files
        .keys()
        .filter_map(|f| child_of(&src, f))
        .collect();
    let bad = layer_breaks(&graph, &nodes);
    assert!(
        bad.is_empty(),
        "broker/src's top-level modules must import only their own layer or below \
         (BROKER_LAYERS in this file, as ARCHITECTURE.md draws them):\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // The circle finder finds a planted circle.
    let mut graph: Graph = BTreeMap::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a")] {
        graph
            .entry(from.into())
            .or_default()
            .insert(to.into(), "x".into());
    }
    assert_eq!(find_circle(&graph).map(|c| c.len()), Some(4));
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_circle(&graph), None);
    // Use trees and comments are read as code is.
    assert_eq!(
        use_tree("crate::{a::X, b::{self, c::Y}}", &[]),
        vec![
            vec!["crate", "a", "X"],
            vec!["crate", "b"],
            vec!["crate", "b", "c", "Y"]
        ]
    );
    let code = code_only("let s = \"crate::a::b\"; // crate::c::d\nlet c = '{';");
    assert!(paths_in(&code).is_empty(), "{code}");
    assert!(!code.contains('{'));
    // Layers: an edge up is refused, an unplaced module is named.
    let mut up: Graph = BTreeMap::new();
    up.entry("core/".into())
        .or_default()
        .insert("front/".into(), "x.rs:1".into());
    let nodes = ["core/", "front/", "nowhere.rs"].map(String::from).into();
    assert_eq!(layer_breaks(&up, &nodes).len(), 2);
}

/// A crate tree made on disk for the checks to read: `files` as (path, text).
fn planted(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn a_planted_circle_is_found_in_a_nested_folder() {
    let tree = planted(&[
        ("lib.rs", "pub mod a;\n"),
        ("a/mod.rs", "pub mod b;\npub mod c;\n"),
        ("a/b.rs", "use super::c::C;\npub struct B;\n"),
        ("a/c/mod.rs", "pub mod d;\n"),
        (
            "a/c/d.rs",
            "pub fn f() -> crate::a::b::B { crate::a::b::B }\n",
        ),
    ]);
    let krate = Crate::read(tree.path());
    let circles = folder_circles(&krate, &[]);
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(circles[0].contains("b.rs -> c/ -> b.rs") || circles[0].contains("c/ -> b.rs -> c/"));
    // The same edge in test-only code, or a comment, is no import.
    let tree = planted(&[
        ("lib.rs", "pub mod a;\n"),
        ("a/mod.rs", "pub mod b;\npub mod c;\n"),
        ("a/b.rs", "use super::c::C;\npub struct B;\n"),
        ("a/c/mod.rs", "pub mod d;\n#[cfg(test)]\nmod tests;\n"),
        ("a/c/tests.rs", "use crate::a::b::B;\n"),
        (
            "a/c/d.rs",
            "// crate::a::b::B\n#[cfg(test)]\nmod t { use crate::a::b::B; }\n",
        ),
    ]);
    assert!(folder_circles(&Crate::read(tree.path()), &[]).is_empty());
    // An allowed edge opens its circle, and only that one.
    let tree = planted(&[
        ("lib.rs", "pub mod x;\npub mod y;\n"),
        ("x.rs", "use crate::y::Y;\n"),
        ("y.rs", "use crate::x::X;\n"),
    ]);
    let krate = Crate::read(tree.path());
    let root = rel(tree.path());
    assert_eq!(folder_circles(&krate, &[(&root, "x.rs", "y.rs")]).len(), 0);
    assert_eq!(folder_circles(&krate, &[(&root, "x.rs", "z.rs")]).len(), 1);
}

#[test]
fn function_lengths_are_measured_from_fn_to_its_brace() {
    let code = code_only(
        "fn short() { 1 }\n\nfn long(\n    a: u8,\n) -> u8 {\n    let s = \"}\";\n    a\n}\ntrait T { fn decl(&self); }\n",
    );
    let fns = functions(&code);
    assert_eq!(
        fns,
        vec![("short".to_string(), 1, 1), ("long".to_string(), 3, 6)]
    );
    let (code, mods) = without_tests(&code_only(
        "fn kept() {}\n#[cfg(test)]\nmod tests {\n    fn gone() {}\n}\n#[cfg(test)]\nmod sim;\n",
    ));
    assert_eq!(functions(&code).len(), 1);
    assert_eq!(mods, vec!["sim".to_string()]);
}
