//! Tidy checks that run as ordinary tests: the documentation names paths and modules that
//! exist, and the repository describes the product, not its making (no counted work
//! sessions or issue numbers in files).

use std::path::{Path, PathBuf};

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("broker/ has a parent")
}

/// The documents checked: the architecture map, the top README, every crate's README (a
/// top-level directory with a `Cargo.toml` and a `README.md`), and the bench's notes.
fn documents() -> Vec<String> {
    let root = repo_root();
    let mut docs = vec![
        "ARCHITECTURE.md".to_string(),
        "README.md".to_string(),
        "bench/known-gaps.md".to_string(),
        "bench/results/README.md".to_string(),
    ];
    let mut crates: Vec<String> = std::fs::read_dir(root)
        .expect("the repository root lists")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file() && e.path().join("README.md").is_file())
        .map(|e| format!("{}/README.md", e.file_name().to_string_lossy()))
        .collect();
    crates.sort();
    docs.extend(crates);
    docs
}

/// Where a document's bare module paths (`journal::append`, `spool::summing`) start: the
/// source of the crate it describes. Crate-qualified paths (`storage::…`) work anywhere.
fn home_module_root(doc: &str) -> Option<&'static str> {
    match doc {
        "ARCHITECTURE.md" | "broker/README.md" => Some("broker/src"),
        "storage/README.md" => Some("storage/src"),
        "protocol/README.md" => Some("protocol/src"),
        _ => None,
    }
}

/// The backticked spans of a Markdown text (code spans; fences count as spans too, which
/// only ever adds candidates).
fn code_spans(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The targets of Markdown links `[text](target)` that are not URLs or anchors.
fn link_targets(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.contains(' ') {
            out.push(target);
        }
        rest = &rest[end..];
    }
    out
}

/// A span that names a file or directory of this repository.
fn looks_like_path(part: &str) -> bool {
    !part.contains(' ')
        && !part.contains("://")
        && !part.starts_with('-')
        && !part.starts_with('/')
        && !part.contains('<')
        && !part.contains('*')
        && !part.starts_with("target/") // Build output, made by a build or a CI step.
        && part.contains('/')
        && (part.ends_with(".rs")
            || part.ends_with(".md")
            || part.ends_with(".proto")
            || part.ends_with(".sh")
            || part.ends_with(".toml")
            || part.ends_with('/'))
}

fn path_exists(doc_dir: &Path, part: &str) -> bool {
    repo_root().join(part).exists() || doc_dir.join(part).exists()
}

/// Every backticked path and every relative link in the documents must exist, relative to
/// the root or to the document.
#[test]
fn documented_paths_exist() {
    let mut missing = Vec::new();
    for doc in documents() {
        let path = repo_root().join(&doc);
        let Ok(text) = std::fs::read_to_string(&path) else {
            missing.push(format!("{doc} itself"));
            continue;
        };
        let dir = path.parent().expect("a file has a parent");
        for part in code_spans(&text).filter(|p| looks_like_path(p)) {
            if !path_exists(dir, part) {
                missing.push(format!("{doc}: `{part}`"));
            }
        }
        for target in link_targets(&text) {
            if !path_exists(dir, target) {
                missing.push(format!("{doc}: link to {target}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented paths that do not exist: {missing:#?}"
    );
}

/// The source file of module `name` under `dir`, and the directory of its submodules.
fn module_file(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let file = dir.join(format!("{name}.rs"));
    let sub = dir.join(name);
    if file.is_file() {
        return Some((file, sub));
    }
    let file = sub.join("mod.rs");
    file.is_file().then_some((file, sub))
}

/// The text of a module: its file, and every file below its submodule directory (items
/// are often defined in a submodule and re-exported).
fn module_text(file: &Path, sub: &Path) -> String {
    let mut text = std::fs::read_to_string(file).unwrap_or_default();
    let mut stack = vec![sub.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                text += &std::fs::read_to_string(&p).unwrap_or_default();
            }
        }
    }
    text
}

fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// Checks a module path such as `storage::spool::summing` or `journal::pipeline::Turn`:
/// its leading segments must be module files under `src` (the first at least), and the rest
/// items named in the last module's text. None if the path does not start at `src`.
fn check_module_path(src: &Path, segments: &[&str]) -> Option<Result<(), String>> {
    let (mut file, mut sub) = module_file(src, segments[0])?;
    let mut rest = &segments[1..];
    while let Some((next, more)) = rest.split_first() {
        match module_file(&sub, next) {
            Some((f, s)) => (file, sub, rest) = (f, s, more),
            None => break,
        }
    }
    let text = module_text(&file, &sub);
    Some(match rest.iter().find(|item| !has_word(&text, item)) {
        Some(item) => Err(format!("`{item}` is not in {}", file.display())),
        None => Ok(()),
    })
}

/// Checks items named at a crate's root (`storage::Summer::update_lanes`,
/// `protocol::Fragment`): each must be named in the crate's sources, or, for the protocol's
/// generated messages, in its `.proto` files.
fn check_crate_items(src: &Path, items: &[&str]) -> Result<(), String> {
    let mut text = module_text(&src.join("lib.rs"), src);
    let proto = src.with_file_name("proto");
    for entry in std::fs::read_dir(&proto).into_iter().flatten().flatten() {
        text += &std::fs::read_to_string(entry.path()).unwrap_or_default();
    }
    match items.iter().find(|item| !has_word(&text, item)) {
        Some(item) => Err(format!("`{item}` is not in {}", src.display())),
        None => Ok(()),
    }
}

/// Every backticked module path in the documents names modules that exist and items they
/// hold: crate-qualified (`storage::`, `protocol::`, `courant_broker::`) anywhere, bare
/// ones (`journal::append::append`) in the document of their crate.
#[test]
fn documented_modules_exist() {
    let root = repo_root();
    let crates = [
        ("storage", "storage/src"),
        ("protocol", "protocol/src"),
        ("courant_broker", "broker/src"),
    ];
    let mut missing = Vec::new();
    for doc in documents() {
        let Ok(text) = std::fs::read_to_string(root.join(&doc)) else {
            continue;
        };
        for span in code_spans(&text) {
            let path = span.trim_end_matches("()");
            let ok_chars = path
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == ':');
            if !ok_chars || !path.contains("::") {
                continue;
            }
            let segments: Vec<&str> = path.split("::").collect();
            if segments.iter().any(|s| s.is_empty()) {
                continue;
            }
            let checked = match crates.iter().find(|(name, _)| *name == segments[0]) {
                Some((_, src)) if segments.len() > 1 => {
                    check_module_path(&root.join(src), &segments[1..])
                        .or_else(|| Some(check_crate_items(&root.join(src), &segments[1..])))
                }
                Some(_) => None,
                None => home_module_root(&doc)
                    .and_then(|src| check_module_path(&root.join(src), &segments)),
            };
            if let Some(Err(why)) = checked {
                missing.push(format!("{doc}: `{span}`: {why}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented modules that do not exist: {missing:#?}"
    );
}

/// The files git tracks (else every file below the root), outside the vendored glommio,
/// build output and tool caches.
fn repository_files() -> Vec<PathBuf> {
    let root = repo_root();
    let skip = |rel: &str| {
        rel.starts_with("vendor/")
            || rel.starts_with(".git/")
            || rel.split('/').any(|c| c == "target" || c == "node_modules")
    };
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(out) = listed {
        return String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|rel| !rel.is_empty() && !skip(rel))
            .map(|rel| root.join(rel))
            .filter(|p| p.is_file())
            .collect();
    }
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = entry.path();
            let rel = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            if skip(&format!("{rel}/")) || skip(&rel) {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files
}

/// Where `text` counts development history, as `git grep -E` would find it with
/// `\bstops? [0-9]+|\bsessions? [0-9]+|issue ?#?[0-9]+`: the matched text, if any.
fn history_mention(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let digit_at = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    let word_start =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    for (word, bounded) in [("stop", true), ("session", true), ("issue", false)] {
        for (at, _) in text.match_indices(word) {
            if bounded && !word_start(at) {
                continue;
            }
            let mut i = at + word.len();
            if bounded {
                i += usize::from(bytes.get(i) == Some(&b's'));
                if bytes.get(i) != Some(&b' ') || !digit_at(i + 1) {
                    continue;
                }
            } else {
                i += usize::from(bytes.get(i) == Some(&b' '));
                i += usize::from(bytes.get(i) == Some(&b'#'));
                if !digit_at(i) {
                    continue;
                }
            }
            let end = text[at..].find('\n').map_or(text.len(), |n| at + n);
            return Some(text[at..end.min(at + 60)].to_string());
        }
    }
    None
}

#[test]
fn history_matcher_finds_what_git_grep_would() {
    let hits = [
        ["stop", " 3"].concat(),
        ["stops", " 25 and 26"].concat(),
        ["session", " 4"].concat(),
        ["issue", "13"].concat(),
        ["Issue? no: ", "issue", " #7"].concat(),
        ["(", "issue", " 14)"].concat(),
    ];
    for text in &hits {
        assert!(history_mention(text).is_some(), "{text:?} is not found");
    }
    let misses = [
        "stop N",
        "nonstop 3",
        "a session",
        "issues",
        "Issue 3", // git grep -E is case-sensitive
        "stopped 3",
    ];
    for text in misses {
        assert_eq!(history_mention(text), None, "{text:?} is found");
    }
}

/// No file names counted work sessions ("stop" or "session" and a number) or issue numbers,
/// in its name or its text; the vendored glommio is someone else's.
#[test]
fn no_development_history() {
    let root = repo_root();
    let mut found = Vec::new();
    for path in repository_files() {
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        if let Some(hit) = history_mention(&rel) {
            found.push(format!("{rel}: its name ({hit})"));
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // Not text.
        };
        if let Some(hit) = history_mention(&text) {
            found.push(format!("{rel}: {hit}"));
        }
    }
    assert!(
        found.is_empty(),
        "development history in the repository: {found:#?}"
    );
}
