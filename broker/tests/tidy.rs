//! Tidy checks that run as ordinary tests: the documentation names paths that exist.

use std::path::Path;

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("broker/ has a parent")
}

/// Every backticked path in the architecture map and crate READMEs that looks like a file in
/// this repository (`dir/file.ext` or `dir/`) must exist, relative to the root or the crate.
#[test]
fn documented_paths_exist() {
    let docs = [
        "ARCHITECTURE.md",
        "README.md",
        "broker/README.md",
        "storage/README.md",
        "protocol/README.md",
        "loadgen/README.md",
        "bench/known-gaps.md",
    ];
    let mut missing = Vec::new();
    for doc in docs {
        let path = repo_root().join(doc);
        let Ok(text) = std::fs::read_to_string(&path) else {
            missing.push(format!("{doc} itself"));
            continue;
        };
        let base = path.parent().expect("a file has a parent");
        for (i, part) in text.split('`').enumerate() {
            if i % 2 == 0 || part.contains(' ') || part.contains("://") || part.starts_with('-') {
                continue;
            }
            let looks_like_path = part.contains('/')
                && (part.ends_with(".rs")
                    || part.ends_with(".md")
                    || part.ends_with(".proto")
                    || part.ends_with(".sh")
                    || part.ends_with('/'))
                && !part.contains('<')
                && !part.starts_with("/");
            if looks_like_path && !repo_root().join(part).exists() && !base.join(part).exists() {
                missing.push(format!("{doc}: {part}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented paths that do not exist: {missing:#?}"
    );
}
