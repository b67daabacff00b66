//! Journal names never leave a store's root: the mapping from a journal (and each of its
//! fragments) to a file path, S3 key, GCS object or Azure blob refuses `..` and `.`
//! segments, absolute paths, backslashes and NULs, wherever they come from (the journal
//! name, the store URL's path, or its `find`/`replace` rewriting).
//!
//! Gazette's name check admits `a/../../b`; Gazette has no store by default, but Courant's
//! default `file://` store would write such a journal's fragments outside
//! `--broker.file-root`, and object stores' HTTP clients resolve `..` in URL paths, so the
//! same name would land in another prefix (or container). Two layers:
//! * [`check_spec_stores`]: Apply refuses a journal whose name maps outside the root of one
//!   of its stores (or of the default store when it names none), with a message naming the
//!   journal and store;
//! * [`check_key`]: every store implementation checks each key it maps, so nothing is read
//!   or written outside its root even for a spec written to etcd by another broker.
//!
//! Lives on: pure functions, called on the accepting core (Apply) and the control thread
//! (stores).

use super::{StoreError, StoreResult};

/// Why `key` (relative to a store's root) would leave the root, if it would.
pub fn escapes(key: &str) -> Option<&'static str> {
    if key.starts_with('/') {
        return Some("it is absolute");
    }
    if key.contains('\\') {
        return Some("it has a backslash");
    }
    if key.contains('\0') {
        return Some("it has a NUL byte");
    }
    for seg in key.split('/') {
        match seg {
            ".." => return Some("it has a \"..\" segment"),
            "." => return Some("it has a \".\" segment"),
            _ => {}
        }
    }
    None
}

/// `key` (a path relative to a store's root) as a store error when it would leave the
/// root. The message names the key (a journal-derived name, never a server path).
pub fn check_key(key: &str) -> StoreResult<()> {
    match escapes(key) {
        None => Ok(()),
        Some(why) => Err(StoreError::new(format!(
            "refusing store path {key:?}: {why}, so it would leave the store's root"
        ))),
    }
}

/// Whether `journal` maps inside the root of the store `url`: the URL's path (the store's
/// prefix) and the journal's rewritten prefix must both stay inside. `Err` is the
/// client-facing message.
pub fn check_journal(url: &str, journal: &str) -> Result<(), String> {
    // A URL that does not parse is refused by the spec's own validation.
    let Ok(parsed) = protocol::validate::validate_fragment_store_url(url) else {
        return Ok(());
    };
    let args = protocol::validate::parse_store_query_args(&parsed).unwrap_or_default();
    let prefix = parsed.path.trim_start_matches('/');
    if let Some(why) = escapes(prefix) {
        return Err(format!(
            "fragment store {url:?}: its path {:?} leaves the store's root ({why})",
            parsed.path
        ));
    }
    let path = storage::naming::rewrite_path(
        &args.find,
        &args.replace,
        &storage::naming::journal_prefix(journal),
    );
    match escapes(&format!("{prefix}{path}")) {
        None => Ok(()),
        Some(why) => Err(format!(
            "journal {journal:?} cannot be stored in fragment store {url:?}: its path {path:?} \
             would leave the store's root ({why})"
        )),
    }
}

/// Apply's check of one upserted spec: every store the journal persists to (the default
/// store when the spec names none) keeps the journal inside its root.
pub fn check_spec_stores(spec: &protocol::JournalSpec, default_store: &str) -> Result<(), String> {
    let stores: Vec<&str> = match spec.fragment.as_ref() {
        Some(f) if !f.stores.is_empty() => f.stores.iter().map(String::as_str).collect(),
        _ if default_store.is_empty() => Vec::new(),
        _ => vec![default_store],
    };
    // Even without a store, a name with `..` is refused: the default store may change.
    if let Some(why) = escapes(&spec.name) {
        return Err(format!(
            "journal {:?} is refused: {why}, so its fragments would leave a store's root",
            spec.name
        ));
    }
    for url in stores {
        check_journal(url, &spec.name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_keys_pass() {
        for k in [
            "a/b/c",
            "a/b/",
            "x..y/z",
            "a/.hidden/b",
            "",
            "a/b..",
            "...",
            "a/..b",
        ] {
            assert_eq!(escapes(k), None, "{k}");
            assert!(check_key(k).is_ok(), "{k}");
        }
    }

    #[test]
    fn escaping_keys_are_refused() {
        for k in [
            "../x",
            "a/../../x",
            "a/..",
            "..",
            "./a",
            "a/./b",
            "/etc/passwd",
            "a\\..\\b",
            "a\0b",
        ] {
            assert!(escapes(k).is_some(), "{k:?}");
            let err = check_key(k).unwrap_err();
            assert!(err.message.contains("leave the store's root"), "{err}");
        }
    }

    #[test]
    fn journals_are_checked_against_every_store_kind() {
        for url in [
            "file:///",
            "file:///sub/dir/",
            "s3://bucket/prefix/",
            "gs://bucket/prefix/",
            "azure://container/prefix/",
        ] {
            assert!(check_journal(url, "a/b/c").is_ok(), "{url}");
            let err = check_journal(url, "../../escape/j").unwrap_err();
            assert!(err.contains("would leave the store's root"), "{url}: {err}");
            assert!(err.contains("../../escape/j"), "{err}");
            assert!(check_journal(url, "ok/../../../x").is_err(), "{url}");
        }
    }

    #[test]
    fn rewriting_and_store_paths_are_checked() {
        // find/replace that introduces `..`.
        let url = "file:///root/?find=evil%2F&replace=..%2F..%2F";
        assert!(check_journal(url, "good/j").is_ok());
        let err = check_journal(url, "evil/j").unwrap_err();
        assert!(err.contains("\"..\" segment"), "{err}");
        // A store path that itself climbs out.
        let err = check_journal("file:///../../tmp/", "a/j").unwrap_err();
        assert!(err.contains("leaves the store's root"), "{err}");
    }

    #[test]
    fn specs_use_the_default_store_when_they_name_none() {
        let mut spec = protocol::JournalSpec {
            name: "a/b".into(),
            ..Default::default()
        };
        assert!(check_spec_stores(&spec, "file:///").is_ok());
        spec.name = "a/../../b".into();
        assert!(check_spec_stores(&spec, "file:///").is_err());
        assert!(check_spec_stores(&spec, "").is_err());
        spec.name = "a/b".into();
        spec.fragment = Some(protocol::journal_spec::Fragment {
            stores: vec!["s3://bucket/?find=a%2F&replace=..%2F".into()],
            ..Default::default()
        });
        let err = check_spec_stores(&spec, "file:///").unwrap_err();
        assert!(err.contains("s3://bucket/"), "{err}");
    }
}
