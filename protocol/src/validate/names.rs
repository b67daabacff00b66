//! Limits, alphabets, tokens, path components and journal names.

#[allow(unused_imports)]
use super::*;

/// Symbols allowed in tokens besides Unicode letters and numbers. Nothing at or below
/// `#` (the etcd key separator) may ever be added.
pub const TOKEN_SYMBOLS: &str = "-_+/.";
/// Symbols allowed in path components and label values: token symbols plus `=` and `%`.
pub const PATH_SYMBOLS: &str = "-_+/.=%";

pub const MIN_LABEL_LEN: usize = 2;
pub const MAX_LABEL_LEN: usize = 64;
pub const MAX_LABEL_VALUE_LEN: usize = 1024;
pub const MIN_JOURNAL_NAME_LEN: usize = 4;
pub const MAX_JOURNAL_NAME_LEN: usize = 512;
pub const MAX_JOURNAL_REPLICATION: i32 = 5;
pub const MIN_FRAGMENT_LEN: i64 = 1 << 10;
pub const MAX_FRAGMENT_LEN: i64 = 1 << 34;
pub const MIN_REFRESH_INTERVAL_NANOS: i64 = NANOS_PER_SECOND;
pub const MAX_REFRESH_INTERVAL_NANOS: i64 = 24 * 3600 * NANOS_PER_SECOND;
pub const MIN_FLUSH_INTERVAL_NANOS: i64 = 60 * NANOS_PER_SECOND;
pub const MIN_ZONE_LEN: usize = 1;
pub const MAX_ZONE_LEN: usize = 32;
pub const MIN_BROKER_SUFFIX_LEN: usize = 4;
pub const MAX_BROKER_SUFFIX_LEN: usize = 128;
pub const MAX_BROKER_JOURNAL_LIMIT: u32 = 1 << 17;
pub const MAX_FRAGMENTS_PAGE_LIMIT: i32 = 10_000;

pub(crate) const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// Label names with special meaning to Gazette.
pub mod label_names {
    pub const CONTENT_TYPE: &str = "content-type";
    pub const MESSAGE_TYPE: &str = "app.gazette.dev/message-type";
    pub const MESSAGE_SUB_TYPE: &str = "app.gazette.dev/message-subtype";
    pub const TAG: &str = "app.gazette.dev/tag";
    pub const MANAGED_BY: &str = "app.gazette.dev/managed-by";
    pub const INSTANCE: &str = "app.gazette.dev/instance";
    pub const REGION: &str = "app.gazette.dev/region";
    /// Meta-label carrying the journal name, matched by selectors but never stored.
    pub const NAME: &str = "name";
    /// Legacy meta-label: a slash-terminated prefix of the journal name.
    pub const PREFIX: &str = "prefix";
}

/// Labels which may carry at most one value.
pub const SINGLE_VALUE_LABELS: [&str; 6] = [
    label_names::CONTENT_TYPE,
    label_names::INSTANCE,
    label_names::MANAGED_BY,
    label_names::MESSAGE_SUB_TYPE,
    label_names::MESSAGE_TYPE,
    label_names::REGION,
];

// ---------------------------------------------------------------------------------------
// Tokens, path components and journal names.

pub(crate) fn unicode_class(
    pattern: &'static str,
    cell: &'static OnceLock<Regex>,
) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static pattern compiles"))
}

pub(crate) fn char_matches(re: &Regex, c: char) -> bool {
    let mut buf = [0u8; 4];
    re.is_match(c.encode_utf8(&mut buf))
}

/// Whether `c` is a Unicode letter (category L) or number (category N), the classes
/// Go's `unicode.IsLetter` and `unicode.IsNumber` test.
pub fn is_letter_or_number(c: char) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    if c.is_ascii() {
        c.is_ascii_alphanumeric()
    } else {
        char_matches(unicode_class(r"\A[\pL\pN]\z", &RE), c)
    }
}

/// Whether Go's `strconv.IsPrint` holds for `c`: letters, marks, numbers, punctuation,
/// symbols and the ASCII space.
pub(crate) fn is_go_printable(c: char) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    if c.is_ascii() {
        (' '..='~').contains(&c)
    } else {
        char_matches(unicode_class(r"\A[\pL\pM\pN\pP\pS]\z", &RE), c)
    }
}

pub(crate) fn check_token(n: &str, symbols: &str, min: usize, max: usize) -> VResult {
    let l = n.len();
    if l < min || l > max {
        return fail(format!(
            "invalid length ({l}; expected {min} <= length <= {max})"
        ));
    }
    if !n
        .chars()
        .all(|c| is_letter_or_number(c) || symbols.contains(c))
    {
        return fail(format!("not a valid token ({n})"));
    }
    Ok(())
}

pub(crate) fn check_path_component(n: &str, min: usize, max: usize) -> VResult {
    check_token(n, PATH_SYMBOLS, min, max)?;
    if !n.is_empty() && go_path_clean(n) != n {
        return fail(format!("must be a clean path ({n})"));
    }
    if n.starts_with('/') {
        return fail(format!("cannot begin with '/' ({n})"));
    }
    Ok(())
}

/// Checks that `n` has a byte length within `[min, max]` and consists only of Unicode
/// letters, numbers and runes of `symbols`.
pub fn validate_token(
    n: &str,
    symbols: &str,
    min: usize,
    max: usize,
) -> Result<(), ValidationError> {
    check_token(n, symbols, min, max).map_err(Into::into)
}

/// Checks that `n` is a token over [`PATH_SYMBOLS`] of length `[min, max]` which is a
/// clean (in the sense of Go's `path.Clean`), relative path.
pub fn validate_path_component(n: &str, min: usize, max: usize) -> Result<(), ValidationError> {
    check_path_component(n, min, max).map_err(Into::into)
}

/// Splits a journal name at its first `;` into the name proper and the metadata
/// segment, which keeps its leading `;`. Without a `;` the segment is empty.
pub fn split_meta(name: &str) -> (&str, &str) {
    match name.find(';') {
        Some(i) => name.split_at(i),
        None => (name, ""),
    }
}

/// The journal name without any `;meta` suffix.
pub fn strip_meta(name: &str) -> &str {
    split_meta(name).0
}

pub(crate) fn check_journal(name: &str) -> VResult {
    let (name, meta) = split_meta(name);
    check_path_component(name, MIN_JOURNAL_NAME_LEN, MAX_JOURNAL_NAME_LEN)?;
    if let Some(meta) = meta.strip_prefix(';') {
        check_path_component(meta, 1, MAX_JOURNAL_NAME_LEN)
            .map_err(|e| e.ctx("metadata path segment"))?;
    }
    Ok(())
}

/// Validates a journal name as carried by requests: a path component of 4..=512 bytes,
/// optionally followed by a `;meta` segment which is itself a path component.
pub fn validate_journal_name(name: &str) -> Result<(), ValidationError> {
    check_journal(name).map_err(Into::into)
}

pub(crate) fn check_journal_spec_name(name: &str) -> VResult {
    check_journal(name)?;
    let (_, meta) = split_meta(name);
    if !meta.is_empty() {
        return fail(format!(
            "Name cannot have a metadata path segment ({meta}; expected no segment)"
        ));
    }
    Ok(())
}

/// Validates the name of a JournalSpec, which may not carry a `;meta` segment.
pub fn validate_journal_spec_name(name: &str) -> Result<(), ValidationError> {
    check_journal_spec_name(name).map_err(Into::into)
}

/// Go's `path.Clean`: the shortest path equivalent to `p` by purely lexical processing.
pub fn go_path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_string();
    }
    let b = p.as_bytes();
    let n = b.len();
    let rooted = b[0] == b'/';
    let mut out: Vec<u8> = Vec::with_capacity(n);
    let (mut r, mut dotdot) = (0usize, 0usize);
    if rooted {
        out.push(b'/');
        r = 1;
        dotdot = 1;
    }
    let at = |i: usize| b.get(i).copied();
    while r < n {
        let c = at(r);
        // Empty and "." elements are dropped.
        if c == Some(b'/') || (c == Some(b'.') && (r + 1 == n || at(r + 1) == Some(b'/'))) {
            r += 1;
        } else if c == Some(b'.')
            && at(r + 1) == Some(b'.')
            && (r + 2 == n || at(r + 2) == Some(b'/'))
        {
            r += 2;
            if out.len() > dotdot {
                // Back up to the previous '/', which is dropped too.
                let mut w = out.len() - 1;
                while w > dotdot && out.get(w) != Some(&b'/') {
                    w -= 1;
                }
                out.truncate(w);
            } else if !rooted {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(b"..");
                dotdot = out.len();
            }
        } else {
            if (rooted && out.len() != 1) || (!rooted && !out.is_empty()) {
                out.push(b'/');
            }
            while r < n && at(r) != Some(b'/') {
                if let Some(c) = at(r) {
                    out.push(c);
                }
                r += 1;
            }
        }
    }
    if out.is_empty() {
        return ".".to_string();
    }
    // Only whole '/'-separated segments of valid UTF-8 input were copied.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
