//! Validation of protocol messages, with Gazette's rules and error texts.
//!
//! Go clients and tests compare error strings, so every message produced here has the
//! exact shape Gazette produces: an optional dotted context path naming the offending
//! field (`Changes[0].Upsert.Fragment`), then `": "`, then the message. Context is
//! accumulated from the innermost field outwards while an error travels up through
//! nested validators; only the final string is exposed as [`ValidationError`].
//!
//! Validators never panic, whatever the input: all slicing is bounds-checked or done
//! at positions found by searching the same string.

use crate::{
    AppendRequest, AppendResponse, ApplyRequest, ApplyResponse, BrokerSpec, CompressionCodec,
    Fragment, FragmentStoreHealthRequest, FragmentStoreHealthResponse, FragmentsRequest,
    FragmentsResponse, Header, JournalSpec, Label, LabelSelector, LabelSet, ListRequest,
    ListResponse, ProcessSpec, ReadRequest, ReadResponse, ReplicateRequest, ReplicateResponse,
    Route, Status, append_request, apply_request, fragments_response, header, journal_spec,
    list_response, process_spec,
};
use regex::Regex;
use std::fmt;
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------
// Errors.

/// A validation failure, holding the complete message (context path included), exactly
/// as Gazette would render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl ValidationError {
    /// An error with the given message and no context.
    pub fn new(msg: impl Into<String>) -> Self {
        ValidationError(msg.into())
    }

    /// The complete message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValidationError {}

/// An error under construction: the message plus the context path gathered so far
/// (outermost first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verr {
    context: Vec<String>,
    msg: String,
}

impl Verr {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        Verr {
            context: Vec::new(),
            msg: msg.into(),
        }
    }

    /// Prefixes the context path with one more (outer) field name.
    pub(crate) fn ctx(mut self, c: impl Into<String>) -> Self {
        self.context.insert(0, c.into());
        self
    }
}

impl From<Verr> for ValidationError {
    fn from(e: Verr) -> Self {
        if e.context.is_empty() {
            ValidationError(e.msg)
        } else {
            ValidationError(format!("{}: {}", e.context.join("."), e.msg))
        }
    }
}

pub(crate) type VResult = Result<(), Verr>;

fn fail(msg: impl Into<String>) -> VResult {
    Err(Verr::new(msg))
}

/// Types which can check themselves for well-formedness.
pub trait Validate {
    /// Returns the first problem found, if any, as Gazette would describe it.
    fn validate(&self) -> Result<(), ValidationError>;
}

/// Context-preserving validation, used internally so that nested failures can be
/// prefixed with the names of the fields that contain them.
pub(crate) trait Check {
    fn check(&self) -> VResult;
}

macro_rules! validate_via_check {
    ($($t:ty),* $(,)?) => {
        $(
            impl Validate for $t {
                fn validate(&self) -> Result<(), ValidationError> {
                    Check::check(self).map_err(ValidationError::from)
                }
            }
        )*
    };
}

validate_via_check!(
    Label,
    LabelSet,
    LabelSelector,
    JournalSpec,
    journal_spec::Fragment,
    journal_spec::Suspend,
    process_spec::Id,
    ProcessSpec,
    BrokerSpec,
    Fragment,
    Route,
    Header,
    header::Etcd,
    ReadRequest,
    ReadResponse,
    AppendRequest,
    AppendResponse,
    ReplicateRequest,
    ReplicateResponse,
    ListRequest,
    ListResponse,
    list_response::Journal,
    ApplyRequest,
    apply_request::Change,
    ApplyResponse,
    FragmentsRequest,
    FragmentsResponse,
    fragments_response::Fragment,
    FragmentStoreHealthRequest,
    FragmentStoreHealthResponse,
);

// ---------------------------------------------------------------------------------------
// Limits and alphabets.

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

const NANOS_PER_SECOND: i64 = 1_000_000_000;

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

fn unicode_class(pattern: &'static str, cell: &'static OnceLock<Regex>) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static pattern compiles"))
}

fn char_matches(re: &Regex, c: char) -> bool {
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
fn is_go_printable(c: char) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    if c.is_ascii() {
        (' '..='~').contains(&c)
    } else {
        char_matches(unicode_class(r"\A[\pL\pM\pN\pP\pS]\z", &RE), c)
    }
}

fn check_token(n: &str, symbols: &str, min: usize, max: usize) -> VResult {
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

fn check_path_component(n: &str, min: usize, max: usize) -> VResult {
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

fn check_journal(name: &str) -> VResult {
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

fn check_journal_spec_name(name: &str) -> VResult {
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

// ---------------------------------------------------------------------------------------
// Go-compatible formatting helpers.

/// Go's `strconv.Quote` (as used by `%q`).
pub fn go_quote(s: &str) -> String {
    go_quote_bytes(s.as_bytes())
}

/// `strconv.Quote` over bytes which may not be valid UTF-8 (invalid bytes become `\x..`).
pub fn go_quote_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() + 2);
    out.push('"');
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{b}' => out.push_str("\\v"),
                c if is_go_printable(c) => out.push(c),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push_str(&format!("\\U{:08x}", c as u32)),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out.push('"');
    out
}

/// Go's `time.Duration.String` for a count of nanoseconds: `1.5s`, `1m0s`, `24h0m0s`,
/// `250ms`, `0s`.
pub fn format_go_duration(nanos: i64) -> String {
    // Appends the fraction u / 10^prec without trailing zeros (and without a point
    // when zero), returning the integer part.
    fn frac(u: u64, prec: u32, out: &mut String) -> u64 {
        let pow = 10u64.pow(prec);
        let (int, f) = (u / pow, u % pow);
        if f != 0 {
            let digits = format!("{f:0width$}", width = prec as usize);
            out.push('.');
            out.push_str(digits.trim_end_matches('0'));
        }
        int
    }
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if u < 1_000_000_000 {
        if u == 0 {
            return "0s".to_string();
        }
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let mut fraction = String::new();
        let int = frac(u, prec, &mut fraction);
        out.push_str(&format!("{int}{fraction}{unit}"));
        return out;
    }
    let mut fraction = String::new();
    let secs = frac(u, 9, &mut fraction);
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if h > 0 {
        out.push_str(&format!("{h}h{m}m"));
    } else if secs >= 60 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{s}{fraction}s"));
    out
}

/// Converts a protobuf Duration into nanoseconds as Go's `time.Duration` holds them,
/// or `None` where Gazette's decoding would fail (out of range, or mixed signs).
pub fn duration_nanos(d: &prost_types::Duration) -> Option<i64> {
    const MAX_SECONDS: i64 = 315_576_000_000;
    if d.seconds < -MAX_SECONDS || d.seconds > MAX_SECONDS {
        return None;
    }
    if d.nanos <= -1_000_000_000 || d.nanos >= 1_000_000_000 {
        return None;
    }
    if (d.seconds < 0 && d.nanos > 0) || (d.seconds > 0 && d.nanos < 0) {
        return None;
    }
    d.seconds
        .checked_mul(NANOS_PER_SECOND)?
        .checked_add(i64::from(d.nanos))
}

fn opt_duration(d: &Option<prost_types::Duration>, field: &str) -> Result<i64, Verr> {
    match d {
        None => Ok(0),
        Some(d) => duration_nanos(d).ok_or_else(|| {
            Verr::new(format!(
                "invalid duration (seconds {}, nanos {}; out of range for time.Duration)",
                d.seconds, d.nanos
            ))
            .ctx(field)
        }),
    }
}

/// Name of an enum value as Go's generated `String()` renders it: the variant name, or
/// the bare number for values outside the enum.
fn enum_name(known: Option<&'static str>, value: i32) -> String {
    match known {
        Some(name) => name.to_string(),
        None => value.to_string(),
    }
}

fn codec_name(v: i32) -> String {
    enum_name(
        CompressionCodec::try_from(v).ok().map(|c| c.as_str_name()),
        v,
    )
}

fn status_name(v: i32) -> String {
    enum_name(Status::try_from(v).ok().map(|s| s.as_str_name()), v)
}

fn append_suspend_name(v: i32) -> String {
    enum_name(
        append_request::Suspend::try_from(v)
            .ok()
            .map(|s| s.as_str_name()),
        v,
    )
}

/// Compact protobuf text, as Go's generated `String()` methods render messages inside
/// some of Gazette's error messages.
pub(crate) mod text {
    use crate::{Fragment, Header, LabelSet, Route, Sha1Sum, header, process_spec};

    fn quote(s: &str) -> String {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        for &b in s.as_bytes() {
            match b {
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                0x20..=0x7e => out.push(b as char),
                _ => out.push_str(&format!("\\{b:03o}")),
            }
        }
        out.push('"');
        out
    }

    struct W(String);
    impl W {
        fn str(&mut self, name: &str, v: &str) {
            if !v.is_empty() {
                self.0.push_str(&format!("{name}:{} ", quote(v)));
            }
        }
        fn num<T: PartialEq + Default + std::fmt::Display>(&mut self, name: &str, v: T) {
            if v != T::default() {
                self.0.push_str(&format!("{name}:{v} "));
            }
        }
        fn raw(&mut self, name: &str, v: &str) {
            self.0.push_str(&format!("{name}:{v} "));
        }
        fn msg(&mut self, name: &str, body: String) {
            self.0.push_str(&format!("{name}:<{body}> "));
        }
    }

    pub fn process_id(id: &process_spec::Id) -> String {
        let mut w = W(String::new());
        w.str("zone", &id.zone);
        w.str("suffix", &id.suffix);
        w.0
    }

    pub fn route(r: &Route) -> String {
        let mut w = W(String::new());
        for m in &r.members {
            w.msg("members", process_id(m));
        }
        w.num("primary", r.primary);
        for ep in &r.endpoints {
            w.raw("endpoints", &quote(ep));
        }
        w.0
    }

    pub fn etcd(e: &header::Etcd) -> String {
        let mut w = W(String::new());
        w.num("cluster_id", e.cluster_id);
        w.num("member_id", e.member_id);
        w.num("revision", e.revision);
        w.num("raft_term", e.raft_term);
        w.0
    }

    pub fn header(h: &Header) -> String {
        let mut w = W(String::new());
        w.msg(
            "process_id",
            process_id(&h.process_id.clone().unwrap_or_default()),
        );
        w.msg("route", route(&h.route.clone().unwrap_or_default()));
        w.msg("etcd", etcd(&h.etcd.unwrap_or_default()));
        w.0
    }

    pub fn label_set(s: &LabelSet) -> String {
        let mut w = W(String::new());
        for l in &s.labels {
            let mut inner = W(String::new());
            inner.str("name", &l.name);
            inner.str("value", &l.value);
            if l.prefix {
                inner.raw("prefix", "true");
            }
            w.msg("labels", inner.0);
        }
        w.0
    }

    fn sum(s: &Sha1Sum) -> String {
        let mut w = W(String::new());
        w.num("part1", s.part1);
        w.num("part2", s.part2);
        w.num("part3", s.part3);
        w.0
    }

    pub fn fragment(f: &Fragment) -> String {
        let mut w = W(String::new());
        w.str("journal", &f.journal);
        w.num("begin", f.begin);
        w.num("end", f.end);
        w.msg("sum", sum(&f.sum.unwrap_or_default()));
        if f.compression_codec != 0 {
            w.raw("compression_codec", &super::codec_name(f.compression_codec));
        }
        w.str("backing_store", &f.backing_store);
        w.num("mod_time", f.mod_time);
        w.str("path_postfix", &f.path_postfix);
        w.0
    }
}

// ---------------------------------------------------------------------------------------
// Go's net/url parsing (the subset Gazette's validation depends upon).

/// A URL split the way Go's `net/url.Parse` splits it. Percent-escapes of `path`, `host`
/// and `fragment` are decoded (bytes which don't form UTF-8 are replaced).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoUrl {
    /// Lowercased scheme, or empty for a relative reference.
    pub scheme: String,
    /// The remainder of a rootless URL such as `mailto:user@host`.
    pub opaque: String,
    /// Decoded user info, if an `@` was present in the authority.
    pub user: Option<String>,
    /// Host, including any `:port`.
    pub host: String,
    pub path: String,
    /// The query, still encoded, without its `?`.
    pub raw_query: String,
    pub force_query: bool,
    pub fragment: String,
}

impl GoUrl {
    /// Whether the URL has a scheme (Go's `IsAbs`).
    pub fn is_abs(&self) -> bool {
        !self.scheme.is_empty()
    }

    /// The host without any port (and without IPv6 brackets).
    pub fn hostname(&self) -> &str {
        let (host, _) = split_host_port(&self.host);
        host
    }

    /// The port, without its colon, or empty.
    pub fn port(&self) -> &str {
        let (_, port) = split_host_port(&self.host);
        port
    }
}

fn split_host_port(host: &str) -> (&str, &str) {
    let colon = host.rfind(':');
    let (h, port) = match colon {
        Some(i) if valid_optional_port(&host[i..]) => (&host[..i], &host[i + 1..]),
        _ => (host, ""),
    };
    if let Some(inner) = h.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return (inner, port);
    }
    (h, port)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Esc {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

fn unhex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// Whether `c` must be escaped within a host (Go's `shouldEscape` in host mode).
fn host_should_escape(c: u8) -> bool {
    !(c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&c))
}

fn escape_error(b: &[u8]) -> String {
    format!("invalid URL escape {}", go_quote_bytes(b))
}

fn go_unescape(s: &str, mode: Esc) -> Result<String, String> {
    let b = s.as_bytes();
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while i < b.len() {
        match at(i) {
            b'%' => {
                if i + 2 >= b.len() || !is_hex(at(i + 1)) || !is_hex(at(i + 2)) {
                    let end = (i + 3).min(b.len());
                    return Err(escape_error(b.get(i..end).unwrap_or_default()));
                }
                let esc = b.get(i..i + 3).unwrap_or_default();
                if mode == Esc::Host && unhex(at(i + 1)) < 8 && esc != b"%25" {
                    return Err(escape_error(esc));
                }
                if mode == Esc::Zone {
                    let v = (unhex(at(i + 1)) << 4) | unhex(at(i + 2));
                    if esc != b"%25" && v != b' ' && host_should_escape(v) {
                        return Err(escape_error(esc));
                    }
                }
                i += 3;
            }
            c => {
                if matches!(mode, Esc::Host | Esc::Zone) && c < 0x80 && host_should_escape(c) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote_bytes(&[c])
                    ));
                }
                i += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match at(i) {
            b'%' => {
                out.push((unhex(at(i + 1)) << 4) | unhex(at(i + 2)));
                i += 3;
            }
            b'+' if mode == Esc::QueryComponent => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        _ if port.is_empty() => true,
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".to_string());
        };
        let colon_port = &host[i + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
        if let Some(zone) = host[..i].find("%25") {
            let h1 = go_unescape(&host[..zone], Esc::Host)?;
            let h2 = go_unescape(&host[zone..i], Esc::Zone)?;
            let h3 = go_unescape(&host[i..], Esc::Host)?;
            return Ok(h1 + &h2 + &h3);
        }
    } else if let Some(i) = host.rfind(':') {
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    go_unescape(host, Esc::Host)
}

fn valid_userinfo(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
}

fn parse_authority(authority: &str) -> Result<(Option<String>, String), String> {
    let at = authority.rfind('@');
    let host = match at {
        Some(i) => parse_host(&authority[i + 1..])?,
        None => parse_host(authority)?,
    };
    let Some(i) = at else {
        return Ok((None, host));
    };
    let userinfo = &authority[..i];
    if !valid_userinfo(userinfo) {
        return Err("net/url: invalid userinfo".to_string());
    }
    let user = match userinfo.split_once(':') {
        None => go_unescape(userinfo, Esc::UserPassword)?,
        Some((name, password)) => {
            let name = go_unescape(name, Esc::UserPassword)?;
            let password = go_unescape(password, Esc::UserPassword)?;
            format!("{name}:{password}")
        }
    };
    Ok((Some(user), host))
}

fn get_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' => {
                if i == 0 {
                    return Ok(("", raw));
                }
            }
            b':' => {
                if i == 0 {
                    return Err("missing protocol scheme".to_string());
                }
                return Ok((&raw[..i], &raw[i + 1..]));
            }
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn parse_url_inner(raw: &str) -> Result<GoUrl, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    let mut url = GoUrl::default();
    if raw == "*" {
        url.path = "*".to_string();
        return Ok(url);
    }
    let (scheme, rest) = get_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();

    let mut rest = rest;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        url.raw_query = q.to_string();
    }

    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_string();
            return Ok(url);
        }
        let segment = rest.split('/').next().unwrap_or_default();
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".to_string());
        }
    }

    if (!url.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let authority = &rest[2..];
        let (authority, tail) = match authority.find('/') {
            Some(i) => authority.split_at(i),
            None => (authority, ""),
        };
        let (user, host) = parse_authority(authority)?;
        url.user = user;
        url.host = host;
        rest = tail;
    }
    url.path = go_unescape(rest, Esc::Path)?;
    Ok(url)
}

/// Parses `raw` as Go's `net/url.Parse` does, with Go's error texts
/// (`parse ":x": missing protocol scheme`).
pub fn parse_go_url(raw: &str) -> Result<GoUrl, String> {
    let (u, frag) = match raw.split_once('#') {
        Some((u, f)) => (u, f),
        None => (raw, ""),
    };
    let mut url = parse_url_inner(u).map_err(|e| format!("parse {}: {e}", go_quote(u)))?;
    if !frag.is_empty() {
        url.fragment = go_unescape(frag, Esc::Fragment)
            .map_err(|e| format!("parse {}: {e}", go_quote(raw)))?;
    }
    Ok(url)
}

fn check_endpoint(ep: &str) -> VResult {
    let url = parse_go_url(ep).map_err(Verr::new)?;
    if !url.is_abs() {
        return fail(format!("not absolute: {ep}"));
    }
    if url.host.is_empty() {
        return fail(format!("missing host: {ep}"));
    }
    Ok(())
}

/// Validates a process endpoint: an absolute URL with a host.
pub fn validate_endpoint(ep: &str) -> Result<(), ValidationError> {
    check_endpoint(ep).map_err(Into::into)
}

// ---------------------------------------------------------------------------------------
// Fragment stores.

fn parse_store(fs: &str) -> Result<GoUrl, Verr> {
    let url = parse_go_url(fs).map_err(Verr::new)?;
    if !url.is_abs() {
        return Err(Verr::new(format!("not absolute ({fs})")));
    }
    match url.scheme.as_str() {
        "s3" | "gs" | "azure" => {
            if url.host.is_empty() {
                return Err(Verr::new(format!("missing bucket ({fs})")));
            }
        }
        "azure-ad" => {
            let trimmed = url.path.strip_prefix('/').unwrap_or_default();
            let mut parts = trimmed.split('/');
            if url.host.is_empty() {
                return Err(Verr::new(format!("missing tenant ID ({fs})")));
            } else if parts.next().unwrap_or_default().is_empty() {
                return Err(Verr::new(format!("missing storage account ({fs})")));
            } else if parts.next().unwrap_or_default().is_empty() {
                return Err(Verr::new(format!("missing storage container ({fs})")));
            }
        }
        "file" => {
            if !url.host.is_empty() {
                return Err(Verr::new(format!("file scheme cannot have host ({fs})")));
            }
        }
        other => return Err(Verr::new(format!("invalid scheme ({other})"))),
    }
    if !url.path.ends_with('/') {
        return Err(Verr::new(format!(
            "path component doesn't end in '/' ({})",
            url.path
        )));
    }
    Ok(url)
}

/// Validates a fragment store URL's structure exactly as Gazette's
/// `FragmentStore.Validate` does: known scheme, bucket/host rules and a path ending in
/// `/`. Query arguments are *not* examined (see [`validate_fragment_store`]).
///
/// JournalSpec validation uses this form: Gazette accepts specs whose store arguments
/// are unknown (they fail only when a broker builds the store), and a spec Gazette's
/// brokers accept must not be dropped by ours.
pub fn validate_fragment_store_url(fs: &str) -> Result<GoUrl, ValidationError> {
    parse_store(fs).map_err(Into::into)
}

/// Query arguments of a fragment store URL, as Gazette's stores decode them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreQueryArgs {
    /// Rewriting of journal-relative content paths: the first occurrence of `find` is
    /// replaced by `replace`.
    pub find: String,
    pub replace: String,
    /// S3 only.
    pub profile: String,
    pub endpoint: String,
    pub acl: String,
    pub storage_class: String,
    pub sse: String,
    pub sse_kms_key_id: String,
    pub region: String,
}

/// Go's `url.ParseQuery`: `&`-separated `key=value` pairs, `+` meaning space; pairs
/// with a `;` are an error. Order of keys is kept; repeated keys keep every value.
pub fn parse_go_query(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut err: Option<String> = None;
    for pair in query.split('&') {
        if pair.contains(';') {
            err = Some("invalid semicolon separator in query".to_string());
            continue;
        }
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let parsed = go_unescape(k, Esc::QueryComponent)
            .and_then(|k| go_unescape(v, Esc::QueryComponent).map(|v| (k, v)));
        match parsed {
            Ok(kv) => out.push(kv),
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Decodes the query arguments of a fragment store URL as Gazette's stores do: field
/// names match case-insensitively, and an unknown name is an error. `s3` accepts its
/// extra arguments; every scheme accepts `find` and `replace`.
pub fn parse_store_query_args(url: &GoUrl) -> Result<StoreQueryArgs, ValidationError> {
    let pairs = parse_go_query(&url.raw_query).map_err(ValidationError)?;
    let mut args = StoreQueryArgs::default();
    let mut unknown: Vec<&str> = Vec::new();
    let s3 = url.scheme == "s3";
    for (key, value) in &pairs {
        let field = match key.to_ascii_lowercase().as_str() {
            "find" => &mut args.find,
            "replace" => &mut args.replace,
            "profile" if s3 => &mut args.profile,
            "endpoint" if s3 => &mut args.endpoint,
            "acl" if s3 => &mut args.acl,
            "storageclass" if s3 => &mut args.storage_class,
            "sse" if s3 => &mut args.sse,
            "ssekmskeyid" if s3 => &mut args.sse_kms_key_id,
            "region" if s3 => &mut args.region,
            _ => {
                if !unknown.contains(&key.as_str()) {
                    unknown.push(key);
                }
                continue;
            }
        };
        // Later values of a repeated key win.
        *field = value.clone();
    }
    unknown.sort_unstable();
    if let Some(first) = unknown.first() {
        let mut msg = format!(
            "parsing store URL arguments: schema: invalid path {}",
            go_quote(first)
        );
        match unknown.len() {
            1 => {}
            2 => msg.push_str(" (and 1 other error)"),
            n => msg.push_str(&format!(" (and {} other errors)", n - 1)),
        }
        return Err(ValidationError(msg));
    }
    Ok(args)
}

/// Validates a fragment store URL completely: its structure (see
/// [`validate_fragment_store_url`]) and then its query arguments, which must all be
/// known to the store of its scheme.
pub fn validate_fragment_store(url: &str) -> Result<(), ValidationError> {
    let parsed = validate_fragment_store_url(url)?;
    parse_store_query_args(&parsed).map(|_| ())
}

// ---------------------------------------------------------------------------------------
// Labels.

fn check_label(l: &Label, allow_prefix: bool) -> VResult {
    check_token(&l.name, TOKEN_SYMBOLS, MIN_LABEL_LEN, MAX_LABEL_LEN).map_err(|e| e.ctx("Name"))?;
    check_token(&l.value, PATH_SYMBOLS, 0, MAX_LABEL_VALUE_LEN).map_err(|e| e.ctx("Value"))?;
    if l.prefix && !allow_prefix {
        return fail("Prefix may not be set outside of a LabelSelector");
    }
    Ok(())
}

pub(crate) fn check_label_set(s: &LabelSet, allow_prefix: bool) -> VResult {
    let mut prev: Option<&Label> = None;
    for (i, l) in s.labels.iter().enumerate() {
        check_label(l, allow_prefix).map_err(|e| e.ctx(format!("Labels[{i}]")))?;
        let Some(p) = prev.replace(l) else {
            continue;
        };
        if p.name < l.name {
            continue;
        } else if p.name == l.name {
            if p.value >= l.value {
                return fail(format!(
                    "Labels not in unique, sorted order (index {i}; label {} value {} <= {})",
                    l.name, l.value, p.value
                ));
            } else if p.value.is_empty() {
                return fail(format!(
                    "Label has empty & non-empty values (index {i}; label {} value {})",
                    l.name, l.value
                ));
            }
        } else {
            return fail(format!(
                "Labels not in unique, sorted order (index {i}; label name {} <= {})",
                l.name, p.name
            ));
        }
    }
    Ok(())
}

impl Check for Label {
    fn check(&self) -> VResult {
        check_label(self, false)
    }
}

impl Check for LabelSet {
    fn check(&self) -> VResult {
        check_label_set(self, false)
    }
}

impl Check for LabelSelector {
    fn check(&self) -> VResult {
        check_label_set(&self.include.clone().unwrap_or_default(), true)
            .map_err(|e| e.ctx("Include"))?;
        check_label_set(&self.exclude.clone().unwrap_or_default(), true)
            .map_err(|e| e.ctx("Exclude"))?;
        Ok(())
    }
}

/// Validates a LabelSet which may hold prefix labels (as inside a LabelSelector).
pub fn validate_selector_label_set(s: &LabelSet) -> Result<(), ValidationError> {
    check_label_set(s, true).map_err(Into::into)
}

fn check_single_value_labels(s: &LabelSet) -> VResult {
    let mut prev: Option<&Label> = None;
    for (i, l) in s.labels.iter().enumerate() {
        if let Some(p) = prev.replace(l)
            && p.name == l.name
            && SINGLE_VALUE_LABELS.contains(&l.name.as_str())
        {
            return fail(format!(
                "expected single-value Label has multiple values (index {i}; label {} value {})",
                l.name, l.value
            ));
        }
    }
    Ok(())
}

/// Fails if a label which may carry only one value (see [`SINGLE_VALUE_LABELS`]) has
/// several.
pub fn validate_single_value_labels(s: &LabelSet) -> Result<(), ValidationError> {
    check_single_value_labels(s).map_err(Into::into)
}

fn first_value<'a>(s: &'a LabelSet, name: &str) -> Option<&'a str> {
    crate::labels::values_of(s, name).next()
}

/// Go's `mime.ParseMediaType`, restricted to its verdict on the media type itself.
/// Returns the error text on failure.
fn check_media_type(v: &str) -> Result<(), &'static str> {
    fn is_token_char(c: char) -> bool {
        c > ' ' && c < '\u{7f}' && !"()<>@,;:\\\"/[]?=".contains(c)
    }
    fn consume_token(v: &str) -> (&str, &str) {
        match v.find(|c: char| !is_token_char(c)) {
            None => (v, ""),
            Some(i) => v.split_at(i),
        }
    }
    let base = v.split(';').next().unwrap_or_default();
    // Go lowercases rune by rune with the simple case mapping.
    let lowered: String = base
        .chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect();
    let media = lowered.trim_matches(|c: char| c.is_whitespace());

    let (typ, rest) = consume_token(media);
    if typ.is_empty() {
        return Err("mime: no media type");
    }
    if rest.is_empty() {
        return Ok(());
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return Err("mime: expected slash after first token");
    };
    let (sub, rest) = consume_token(rest);
    if sub.is_empty() {
        return Err("mime: expected token after slash");
    }
    if !rest.is_empty() {
        return Err("mime: unexpected content after media subtype");
    }
    Ok(())
}

fn check_journal_label_constraints(s: &LabelSet) -> VResult {
    use label_names::*;
    check_single_value_labels(s)?;
    let ct = first_value(s, CONTENT_TYPE);
    if let Some(ct) = ct
        && let Err(e) = check_media_type(ct)
    {
        return fail(format!("parsing {CONTENT_TYPE}: {e}"));
    }
    if first_value(s, MESSAGE_TYPE).is_some() {
        if ct.is_none() {
            return fail(format!(
                "expected {CONTENT_TYPE} label alongside {MESSAGE_TYPE}"
            ));
        }
    } else if first_value(s, MESSAGE_SUB_TYPE).is_some() {
        return fail(format!(
            "expected {MESSAGE_TYPE} label alongside {MESSAGE_SUB_TYPE}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Path postfix templates.

/// A conservative syntax check of a Go `text/template`, rejecting only what Go's parser
/// certainly rejects: unclosed actions, comments and quotes, empty actions, and
/// unbalanced `if`/`range`/`with`/`block`/`define` ... `end` blocks. Field references
/// and functions are not checked. Errors read as Go's
/// (`template: postfix:1: unclosed action`).
fn check_template(t: &str, name: &str) -> Result<(), String> {
    let err = |pos: usize, msg: &str| {
        let line = 1 + t.get(..pos).unwrap_or_default().matches('\n').count();
        format!("template: {name}:{line}: {msg}")
    };
    let mut depth = 0usize;
    let mut pos = 0;
    while let Some(off) = t.get(pos..).and_then(|s| s.find("{{")) {
        let start = pos + off;
        let mut i = start + 2;
        let rest = |i: usize| t.get(i..).unwrap_or_default();
        if rest(i).starts_with('-') && rest(i + 1).starts_with(|c: char| c.is_ascii_whitespace()) {
            i += 2;
        }
        // Comments: "{{/* ... */}}", allowing trim markers.
        if rest(i).starts_with("/*") {
            let Some(close) = rest(i + 2).find("*/") else {
                return Err(err(start, "unclosed comment"));
            };
            let after = i + 2 + close + 2;
            let tail = rest(after);
            let tail = tail
                .strip_prefix(|c: char| c.is_ascii_whitespace())
                .and_then(|t| t.strip_prefix('-'))
                .unwrap_or(tail);
            if !tail.starts_with("}}") {
                return Err(err(start, "comment ends before closing delimiter"));
            }
            pos = t.len() - tail.len() + 2;
            continue;
        }
        // Scan to the closing delimiter, skipping over quoted text.
        let body_start = i;
        let bytes = t.as_bytes();
        let end = loop {
            match bytes.get(i) {
                None => return Err(err(start, "unclosed action")),
                Some(b'}') if bytes.get(i + 1) == Some(&b'}') => break i,
                Some(&q @ (b'"' | b'\'')) => {
                    i += 1;
                    loop {
                        match bytes.get(i) {
                            None | Some(b'\n') => {
                                let what = if q == b'"' {
                                    "unterminated quoted string"
                                } else {
                                    "unterminated character constant"
                                };
                                return Err(err(start, what));
                            }
                            Some(b'\\') => i += 2,
                            Some(&c) if c == q => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                }
                Some(b'`') => match rest(i + 1).find('`') {
                    None => return Err(err(start, "unterminated raw quoted string")),
                    Some(n) => i += n + 2,
                },
                Some(_) => i += 1,
            }
        };
        let mut body = t.get(body_start..end).unwrap_or_default();
        if let Some(b) = body.strip_suffix('-')
            && b.ends_with(|c: char| c.is_ascii_whitespace())
        {
            body = b;
        }
        let body = body.trim();
        if body.is_empty() {
            return Err(err(start, "missing value for command"));
        }
        let word = body
            .split(|c: char| c.is_whitespace() || c == '(' || c == '|')
            .next()
            .unwrap_or_default();
        match word {
            "if" | "range" | "with" | "block" | "define" => depth += 1,
            "end" => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| err(start, "unexpected {{end}}"))?
            }
            "else" if depth == 0 => return Err(err(start, "unexpected {{else}}")),
            _ => {}
        }
        pos = end + 2;
    }
    if depth != 0 {
        return Err(err(t.len(), "unexpected EOF"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Specs.

fn check_codec(v: i32) -> VResult {
    match CompressionCodec::try_from(v) {
        Ok(c) if c != CompressionCodec::Invalid => Ok(()),
        _ => fail(format!("invalid value ({})", codec_name(v))),
    }
}

/// Validates a CompressionCodec value: a known codec other than INVALID.
pub fn validate_compression_codec(v: i32) -> Result<(), ValidationError> {
    check_codec(v).map_err(Into::into)
}

fn check_status(v: i32) -> VResult {
    match Status::try_from(v) {
        Ok(_) => Ok(()),
        Err(_) => fail(format!("invalid status ({})", status_name(v))),
    }
}

impl Check for journal_spec::Fragment {
    fn check(&self) -> VResult {
        if self.length < MIN_FRAGMENT_LEN || self.length > MAX_FRAGMENT_LEN {
            return fail(format!(
                "invalid Length ({}; expected {MIN_FRAGMENT_LEN} <= length <= {MAX_FRAGMENT_LEN})",
                self.length
            ));
        }
        check_codec(self.compression_codec).map_err(|e| e.ctx("CompressionCodec"))?;
        for (i, store) in self.stores.iter().enumerate() {
            let url = parse_store(store).map_err(|e| e.ctx(format!("Stores[{i}]")))?;
            if i == 0
                && url.scheme == "file"
                && self.compression_codec == CompressionCodec::GzipOffloadDecompression as i32
            {
                return fail(format!(
                    "GZIP_OFFLOAD_DECOMPRESSION is incompatible with file:// stores ({store})"
                ));
            }
        }
        let refresh = opt_duration(&self.refresh_interval, "RefreshInterval")?;
        if !(MIN_REFRESH_INTERVAL_NANOS..=MAX_REFRESH_INTERVAL_NANOS).contains(&refresh) {
            return fail(format!(
                "invalid RefreshInterval ({}; expected {} <= interval <= {})",
                format_go_duration(refresh),
                format_go_duration(MIN_REFRESH_INTERVAL_NANOS),
                format_go_duration(MAX_REFRESH_INTERVAL_NANOS)
            ));
        }
        let flush = opt_duration(&self.flush_interval, "FlushInterval")?;
        if flush != 0 && flush < MIN_FLUSH_INTERVAL_NANOS {
            return fail(format!(
                "invalid FlushInterval ({}; expected >= {})",
                format_go_duration(flush),
                format_go_duration(MIN_FLUSH_INTERVAL_NANOS)
            ));
        }
        // Any retention is allowed, so long as Go could decode it.
        opt_duration(&self.retention, "Retention")?;
        check_template(&self.path_postfix_template, "postfix")
            .map_err(|e| Verr::new(e).ctx("PathPostfixTemplate"))?;
        Ok(())
    }
}

impl Check for journal_spec::Suspend {
    fn check(&self) -> VResult {
        if journal_spec::suspend::Level::try_from(self.level).is_err() {
            return Err(Verr::new(format!("invalid Level variant ({})", self.level)).ctx("Level"));
        }
        if self.offset < 0 {
            return Err(
                Verr::new(format!("invalid Offset ({}; expected >= 0)", self.offset)).ctx("Offset"),
            );
        }
        Ok(())
    }
}

fn check_flags(flags: u32) -> VResult {
    match flags {
        0 | 1 | 2 | 4 => Ok(()),
        // Go holds the flag in an int32.
        f => fail(format!("invalid combination ({})", f as i32)),
    }
}

impl Check for JournalSpec {
    fn check(&self) -> VResult {
        use label_names::{NAME, PREFIX};
        check_journal(&self.name).map_err(|e| e.ctx("Name"))?;
        let (_, meta) = split_meta(&self.name);
        if !meta.is_empty() {
            return fail(format!(
                "Name cannot have a metadata path segment ({meta}; expected no segment)"
            ));
        }
        if self.replication < 1 || self.replication > MAX_JOURNAL_REPLICATION {
            return fail(format!(
                "invalid Replication ({}; expected 1 <= Replication <= {MAX_JOURNAL_REPLICATION})",
                self.replication
            ));
        }
        let labels = self.labels.clone().unwrap_or_default();
        check_label_set(&labels, false).map_err(|e| e.ctx("Labels"))?;
        if first_value(&labels, NAME).is_some() {
            return fail(format!("Labels cannot include label {}", go_quote(NAME)));
        }
        if first_value(&labels, PREFIX).is_some() {
            return fail(format!("Labels cannot include label {}", go_quote(PREFIX)));
        }
        check_journal_label_constraints(&labels).map_err(|e| e.ctx("Labels"))?;
        self.fragment
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Fragment"))?;
        check_flags(self.flags).map_err(|e| e.ctx("Flags"))?;
        if self.max_append_rate < 0 {
            return fail(format!(
                "invalid MaxAppendRate ({}; expected >= 0)",
                self.max_append_rate
            ));
        }
        self.suspend
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Suspend"))?;
        Ok(())
    }
}

impl Check for process_spec::Id {
    fn check(&self) -> VResult {
        check_token(&self.zone, TOKEN_SYMBOLS, MIN_ZONE_LEN, MAX_ZONE_LEN)
            .map_err(|e| e.ctx("Zone"))?;
        check_token(
            &self.suffix,
            TOKEN_SYMBOLS,
            MIN_BROKER_SUFFIX_LEN,
            MAX_BROKER_SUFFIX_LEN,
        )
        .map_err(|e| e.ctx("Suffix"))?;
        Ok(())
    }
}

impl Check for ProcessSpec {
    fn check(&self) -> VResult {
        self.id
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Id"))?;
        check_endpoint(&self.endpoint).map_err(|e| e.ctx("Endpoint"))?;
        Ok(())
    }
}

impl Check for BrokerSpec {
    fn check(&self) -> VResult {
        self.process_spec.clone().unwrap_or_default().check()?;
        if self.journal_limit > MAX_BROKER_JOURNAL_LIMIT {
            return fail(format!(
                "invalid JournalLimit ({}; expected 0 <= JournalLimit <= {MAX_BROKER_JOURNAL_LIMIT})",
                self.journal_limit
            ));
        }
        Ok(())
    }
}

fn id_struct(id: &process_spec::Id) -> String {
    format!("{{Zone:{} Suffix:{}}}", id.zone, id.suffix)
}

impl Check for Route {
    fn check(&self) -> VResult {
        let mut prev: Option<&process_spec::Id> = None;
        for (i, m) in self.members.iter().enumerate() {
            m.check().map_err(|e| e.ctx(format!("Members[{i}]")))?;
            if let Some(p) = prev.replace(m)
                && (&p.zone, &p.suffix) >= (&m.zone, &m.suffix)
            {
                return fail(format!(
                    "Members not in unique, sorted order (index {i}; {} <= {})",
                    id_struct(p),
                    id_struct(m)
                ));
            }
        }
        let n = self.members.len();
        if self.primary < -1 || i64::from(self.primary) >= n as i64 {
            return fail(format!(
                "invalid Primary ({}; expected -1 <= Primary < {n})",
                self.primary
            ));
        }
        let l = self.endpoints.len();
        if l != 0 && l != n {
            return fail(format!(
                "len(Endpoints) != 0, and != len(Members) ({l} vs {n})"
            ));
        }
        for (i, ep) in self.endpoints.iter().enumerate() {
            if !ep.is_empty() {
                check_endpoint(ep).map_err(|e| e.ctx(format!("Endpoints[{i}]")))?;
            }
        }
        Ok(())
    }
}

impl Check for header::Etcd {
    fn check(&self) -> VResult {
        if self.cluster_id == 0 {
            fail("invalid ClusterId (expected != 0)")
        } else if self.member_id == 0 {
            fail("invalid MemberId (expected != 0)")
        } else if self.revision <= 0 {
            fail(format!(
                "invalid Revision ({}; expected 0 < revision)",
                self.revision
            ))
        } else if self.raft_term == 0 {
            fail("invalid RaftTerm (expected != 0)")
        } else {
            Ok(())
        }
    }
}

impl Check for Header {
    fn check(&self) -> VResult {
        if let Some(id) = &self.process_id
            && *id != process_spec::Id::default()
        {
            id.check().map_err(|e| e.ctx("ProcessId"))?;
        }
        self.route
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Route"))?;
        self.etcd
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Etcd"))?;
        Ok(())
    }
}

impl Check for Fragment {
    fn check(&self) -> VResult {
        check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
        if self.begin > self.end {
            return fail(format!(
                "expected Begin <= End (have {}, {})",
                self.begin, self.end
            ));
        }
        check_codec(self.compression_codec).map_err(|e| e.ctx("CompressionCodec"))?;
        check_path_component(&self.path_postfix, 0, MAX_JOURNAL_NAME_LEN)
            .map_err(|e| e.ctx("PathPostfix"))?;
        Ok(())
    }
}

fn check_opt_header(h: &Option<Header>) -> VResult {
    match h {
        Some(h) => h.check().map_err(|e| e.ctx("Header")),
        None => Ok(()),
    }
}

fn check_header(h: &Option<Header>) -> VResult {
    h.clone()
        .unwrap_or_default()
        .check()
        .map_err(|e| e.ctx("Header"))
}

// ---------------------------------------------------------------------------------------
// RPC messages.

impl Check for ReadRequest {
    fn check(&self) -> VResult {
        check_opt_header(&self.header)?;
        check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
        if self.offset < -1 {
            return fail(format!(
                "invalid Offset ({}; expected -1 <= Offset <= MaxInt64)",
                self.offset
            ));
        }
        if self.end_offset < 0 || (self.end_offset != 0 && self.end_offset < self.offset) {
            return fail(format!(
                "invalid EndOffset ({}; expected 0 or Offset <= EndOffset)",
                self.end_offset
            ));
        }
        Ok(())
    }
}

impl Check for ReadResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        if !self.content.is_empty() {
            if self.status != Status::Ok as i32 {
                return fail(format!(
                    "unexpected Status with Content ({})",
                    status_name(self.status)
                ));
            } else if let Some(h) = &self.header {
                return fail(format!(
                    "unexpected Header with Content ({})",
                    text::header(h)
                ));
            } else if self.write_head != 0 {
                return fail(format!(
                    "unexpected WriteHead with Content ({})",
                    self.write_head
                ));
            } else if let Some(f) = &self.fragment {
                return fail(format!(
                    "unexpected Fragment with Content ({})",
                    text::fragment(f)
                ));
            } else if !self.fragment_url.is_empty() {
                return fail(format!(
                    "unexpected FragmentUrl with Content ({})",
                    self.fragment_url
                ));
            }
            return Ok(());
        }
        check_opt_header(&self.header)?;
        if self.write_head < 0 {
            return fail(format!(
                "invalid WriteHead ({}; expected >= 0)",
                self.write_head
            ));
        }
        if let Some(f) = &self.fragment {
            f.check().map_err(|e| e.ctx("Fragment"))?;
            if self.offset < f.begin || self.offset >= f.end {
                return fail(format!(
                    "invalid Offset ({}; expected {} <= offset < {})",
                    self.offset, f.begin, f.end
                ));
            } else if self.write_head < f.end {
                return fail(format!(
                    "invalid WriteHead ({}; expected >= {})",
                    self.write_head, f.end
                ));
            }
            if !self.fragment_url.is_empty() {
                parse_go_url(&self.fragment_url).map_err(|e| Verr::new(e).ctx("FragmentUrl"))?;
            }
        } else if self.status == Status::Ok as i32 && self.offset != 0 {
            return fail(format!(
                "unexpected Offset without Fragment or Content ({})",
                self.offset
            ));
        } else if !self.fragment_url.is_empty() {
            return fail(format!(
                "unexpected FragmentUrl without Fragment ({})",
                self.fragment_url
            ));
        }
        Ok(())
    }
}

/// Validates an AppendRequest as Gazette does. A request naming a journal is the first
/// message of the stream: it may carry a header, offset, register operations and a
/// suspend mode, but no content. Any other message is a content chunk (or, when wholly
/// empty, the commit marker) and may carry nothing but content.
impl Check for AppendRequest {
    fn check(&self) -> VResult {
        if !self.journal.is_empty() {
            check_opt_header(&self.header)?;
            check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
            if self.offset < 0 {
                return fail(format!("invalid Offset ({}; expected >= 0)", self.offset));
            }
            if !self.content.is_empty() {
                return fail("unexpected Content");
            }
            if let Some(sel) = &self.check_registers {
                sel.check().map_err(|e| e.ctx("CheckRegisters"))?;
            }
            if let Some(set) = &self.union_registers {
                set.check().map_err(|e| e.ctx("UnionRegisters"))?;
            }
            if let Some(set) = &self.subtract_registers {
                set.check().map_err(|e| e.ctx("SubtractRegisters"))?;
            }
            if append_request::Suspend::try_from(self.suspend).is_err() {
                return Err(
                    Verr::new(format!("invalid Suspend variant ({})", self.suspend)).ctx("Suspend"),
                );
            }
            Ok(())
        } else if self.header.is_some() {
            fail("unexpected Header")
        } else if self.do_not_proxy {
            fail("unexpected DoNotProxy")
        } else if self.offset != 0 {
            fail("unexpected Offset")
        } else if self.check_registers.is_some() {
            fail("unexpected CheckRegisters")
        } else if self.union_registers.is_some() {
            fail("unexpected UnionRegisters")
        } else if self.subtract_registers.is_some() {
            fail("unexpected SubtractRegisters")
        } else if self.suspend != append_request::Suspend::Resume as i32 {
            fail(format!(
                "unexpected Suspend ({}; expected SUSPEND_RESUMED)",
                append_suspend_name(self.suspend)
            ))
        } else {
            Ok(())
        }
    }
}

impl Check for AppendResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)?;
        let ok = self.status == Status::Ok as i32;
        if ok && self.commit.is_none() {
            return fail("expected Commit");
        }
        if (ok || self.status == Status::RegisterMismatch as i32) && self.registers.is_none() {
            return fail("expected Registers");
        }
        if let Some(c) = &self.commit {
            c.check().map_err(|e| e.ctx("Commit"))?;
        }
        if let Some(r) = &self.registers {
            r.check().map_err(|e| e.ctx("Registers"))?;
        }
        Ok(())
    }
}

/// Validates a ReplicateRequest as Gazette does. Proposals (optionally with the header
/// of the stream's first message) carry registers but no content; other messages carry
/// only content. An empty `content` counts as absent, as protobuf cannot tell them
/// apart; a missing `registers` alongside a proposal counts as empty, as in Gazette.
impl Check for ReplicateRequest {
    fn check(&self) -> VResult {
        if let Some(proposal) = &self.proposal {
            if let Some(h) = &self.header {
                h.check().map_err(|e| e.ctx("Header"))?;
                if !self.acknowledge {
                    return fail("expected Acknowledge with Header");
                }
            }
            proposal.check().map_err(|e| e.ctx("Proposal"))?;
            if let Some(r) = &self.registers {
                r.check().map_err(|e| e.ctx("Registers"))?;
            }
            if !self.content.is_empty() {
                return fail(format!(
                    "unexpected Content with Proposal (len {})",
                    self.content.len()
                ));
            }
            if self.content_delta != 0 {
                return fail(format!(
                    "unexpected ContentDelta with Proposal ({})",
                    self.content_delta
                ));
            }
            if !self.deprecated_journal.is_empty() && self.deprecated_journal != proposal.journal {
                return fail(format!(
                    "DeprecatedJournal and Proposal.Journal mismatch ({} vs {})",
                    self.deprecated_journal, proposal.journal
                ));
            }
            return Ok(());
        }
        if self.content.is_empty() {
            fail("expected Content or Proposal")
        } else if self.content_delta < 0 {
            fail(format!(
                "invalid ContentDelta ({}; expected >= 0)",
                self.content_delta
            ))
        } else if let Some(h) = &self.header {
            fail(format!(
                "unexpected Header with Content ({})",
                text::header(h)
            ))
        } else if let Some(r) = &self.registers {
            fail(format!(
                "unexpected Registers with Content ({})",
                text::label_set(r)
            ))
        } else if self.acknowledge {
            fail("unexpected Acknowledge with Content")
        } else if !self.deprecated_journal.is_empty() {
            fail("unexpected DeprecatedJournal with Content")
        } else {
            Ok(())
        }
    }
}

impl Check for ReplicateResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        if self.status == Status::WrongRoute as i32 {
            match &self.header {
                None => return fail("expected Header"),
                Some(h) => h.check().map_err(|e| e.ctx("Header"))?,
            }
        } else if let Some(h) = &self.header {
            return fail(format!("unexpected Header ({})", text::header(h)));
        }
        if self.status == Status::ProposalMismatch as i32 {
            let Some(f) = &self.fragment else {
                return fail("expected Fragment");
            };
            f.check().map_err(|e| e.ctx("Fragment"))?;
            let Some(r) = &self.registers else {
                return fail("expected Registers");
            };
            r.check().map_err(|e| e.ctx("Registers"))?;
        } else if let Some(f) = &self.fragment {
            return fail(format!("unexpected Fragment ({})", text::fragment(f)));
        } else if let Some(r) = &self.registers {
            return fail(format!("unexpected Registers ({})", text::label_set(r)));
        }
        Ok(())
    }
}

impl Check for ListRequest {
    fn check(&self) -> VResult {
        let sel = self.selector.clone().unwrap_or_default();
        sel.check().map_err(|e| e.ctx("Selector"))?;
        for (which, set) in [("Include", &sel.include), ("Exclude", &sel.exclude)] {
            let set = set.clone().unwrap_or_default();
            for v in crate::labels::values_of(&set, label_names::PREFIX) {
                if !v.ends_with('/') {
                    return fail(format!(
                        "Selector.{which}.Labels[\"prefix\"]: expected trailing '/' ({v})"
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Check for list_response::Journal {
    fn check(&self) -> VResult {
        self.spec
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Spec"))?;
        if self.mod_revision <= 0 {
            return fail(format!(
                "invalid ModRevision ({}; expected > 0)",
                self.mod_revision
            ));
        }
        self.route
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Route"))?;
        Ok(())
    }
}

impl Check for ListResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)?;
        for (i, j) in self.journals.iter().enumerate() {
            j.check().map_err(|e| e.ctx(format!("Journals[{i}]")))?;
        }
        Ok(())
    }
}

impl Check for apply_request::Change {
    fn check(&self) -> VResult {
        if let Some(spec) = &self.upsert {
            if !self.delete.is_empty() {
                return fail("both Upsert and Delete are set (expected exactly one)");
            }
            spec.check().map_err(|e| e.ctx("Upsert"))?;
            if self.expect_mod_revision < -1 {
                return fail(format!(
                    "invalid ExpectModRevision ({}; expected >= 0 or -1)",
                    self.expect_mod_revision
                ));
            }
        } else if !self.delete.is_empty() {
            check_journal(&self.delete).map_err(|e| e.ctx("Delete"))?;
            if self.expect_mod_revision <= 0 && self.expect_mod_revision != -1 {
                return fail(format!(
                    "invalid ExpectModRevision ({}; expected > 0 or -1)",
                    self.expect_mod_revision
                ));
            }
        } else {
            return fail("neither Upsert nor Delete are set (expected exactly one)");
        }
        Ok(())
    }
}

impl Check for ApplyRequest {
    fn check(&self) -> VResult {
        for (i, c) in self.changes.iter().enumerate() {
            c.check().map_err(|e| e.ctx(format!("Changes[{i}]")))?;
        }
        Ok(())
    }
}

impl Check for ApplyResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)
    }
}

impl Check for FragmentsRequest {
    fn check(&self) -> VResult {
        check_opt_header(&self.header)?;
        check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
        if self.end_mod_time != 0 && self.end_mod_time < self.begin_mod_time {
            return fail(format!(
                "invalid EndModTime ({} must be after {})",
                self.end_mod_time, self.begin_mod_time
            ));
        }
        if self.next_page_token < 0 {
            return fail(format!(
                "invalid NextPageToken ({}; must be >= 0)",
                self.next_page_token
            ));
        }
        if self.page_limit < 0 || self.page_limit > MAX_FRAGMENTS_PAGE_LIMIT {
            return fail(format!(
                "invalid PageLimit ({}; must be >= 0 and <= {MAX_FRAGMENTS_PAGE_LIMIT})",
                self.page_limit
            ));
        }
        if self.signature_ttl.is_some() {
            let ttl = opt_duration(&self.signature_ttl, "SignatureTTL")?;
            if ttl <= 0 {
                return fail(format!(
                    "invalid SignatureTTL ({}; must be > 0s)",
                    format_go_duration(ttl)
                ));
            }
        }
        Ok(())
    }
}

impl Check for fragments_response::Fragment {
    fn check(&self) -> VResult {
        self.spec
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Spec"))?;
        parse_go_url(&self.signed_url).map_err(|e| Verr::new(e).ctx("SignedUrl"))?;
        Ok(())
    }
}

impl Check for FragmentsResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)?;
        for (i, f) in self.fragments.iter().enumerate() {
            f.check().map_err(|e| e.ctx(format!("Fragments[{i}]")))?;
        }
        Ok(())
    }
}

impl Check for FragmentStoreHealthRequest {
    fn check(&self) -> VResult {
        parse_store(&self.fragment_store).map_err(|e| e.ctx("FragmentStore"))?;
        let prefix = self.check_delete_prefix.as_str();
        if !prefix.is_empty() && !self.check_delete {
            return Err(
                Verr::new("cannot be set when CheckDelete is false").ctx("CheckDeletePrefix")
            );
        }
        if !prefix.is_empty() {
            let Some(trimmed) = prefix.strip_suffix('/') else {
                return Err(
                    Verr::new(format!("must end in '/' ({prefix})")).ctx("CheckDeletePrefix")
                );
            };
            if trimmed == ".." || trimmed.starts_with("../") {
                return Err(
                    Verr::new(format!("cannot traverse outside the store ({prefix})"))
                        .ctx("CheckDeletePrefix"),
                );
            }
            check_path_component(trimmed, 1, MAX_JOURNAL_NAME_LEN)
                .map_err(|e| e.ctx("CheckDeletePrefix"))?;
        }
        Ok(())
    }
}

impl Check for FragmentStoreHealthResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::label_set;
    use crate::{Label, list_response};
    use prost_types::Duration;

    fn err<T: Validate>(v: &T) -> String {
        match v.validate() {
            Ok(()) => "OK".to_string(),
            Err(e) => e.0,
        }
    }

    fn ok<T: Validate>(v: &T) {
        assert_eq!(v.validate(), Ok(()));
    }

    fn secs(s: i64) -> Option<Duration> {
        Some(Duration {
            seconds: s,
            nanos: 0,
        })
    }

    fn id(zone: &str, suffix: &str) -> process_spec::Id {
        process_spec::Id {
            zone: zone.into(),
            suffix: suffix.into(),
        }
    }

    fn bad_header() -> Header {
        Header {
            process_id: Some(id("zone", "name")),
            route: Some(Route {
                members: vec![id("zone", "name")],
                primary: 0,
                endpoints: vec![],
            }),
            etcd: Some(header::Etcd {
                cluster_id: 0,
                member_id: 34,
                revision: 56,
                raft_term: 78,
            }),
        }
    }

    fn fix_header(h: &mut Option<Header>) {
        if let Some(e) = h.as_mut().and_then(|h| h.etcd.as_mut()) {
            e.cluster_id = 12;
        }
    }

    fn lbl(name: &str, value: &str) -> Label {
        Label {
            name: name.into(),
            value: value.into(),
            prefix: false,
        }
    }

    #[test]
    fn journal_name_cases() {
        let cases: &[(&str, &str)] = &[
            ("a/valid/path/to/a/journal", ""),
            ("/leading/slash", "cannot begin with '/' (/leading/slash)"),
            ("trailing/slash/", "must be a clean path (trailing/slash/)"),
            (
                "extra-middle//slash",
                "must be a clean path (extra-middle//slash)",
            ),
            (
                "not-$%|-a valid token",
                "not a valid token (not-$%|-a valid token)",
            ),
            ("", "invalid length (0; expected 4 <= length <= 512)"),
            ("zz", "invalid length (2; expected 4 <= length <= 512)"),
            ("a/./b", "must be a clean path (a/./b)"),
            ("a/../b", "must be a clean path (a/../b)"),
            ("../a", ""),
            ("./abc", "must be a clean path (./abc)"),
            ("journal/é/日本", ""),
            ("foo/bar;baz/bing", ""),
            (
                "foo/bar/webhook;foo/bar/webhook/http%3A%2F%2Fexample.com%3A9000%2F",
                "",
            ),
            (
                "foo/bar;disallowed#rune",
                "metadata path segment: not a valid token (disallowed#rune)",
            ),
            (
                "foo/bar;",
                "metadata path segment: invalid length (0; expected 1 <= length <= 512)",
            ),
            (
                "foo/bar;a;b",
                "metadata path segment: not a valid token (a;b)",
            ),
        ];
        for (name, expect) in cases {
            let got = match validate_journal_name(name) {
                Ok(()) => String::new(),
                Err(e) => e.0,
            };
            assert_eq!(&got, expect, "{name}");
        }
        let long = "a".repeat(513);
        assert_eq!(
            validate_journal_name(&long).unwrap_err().0,
            "invalid length (513; expected 4 <= length <= 512)"
        );
        assert!(validate_journal_name(&"a".repeat(512)).is_ok());
    }

    #[test]
    fn journal_name_bad_meta_prefix() {
        // "/bad" is not the name; the split happens at ';' first.
        assert_eq!(
            validate_journal_name("/bad;meta").unwrap_err().0,
            "cannot begin with '/' (/bad)"
        );
    }

    #[test]
    fn meta_splits() {
        assert_eq!(strip_meta("foo/bar;meta-part"), "foo/bar");
        assert_eq!(split_meta("foo/bar;meta-part"), ("foo/bar", ";meta-part"));
        assert_eq!(strip_meta("foo/bar"), "foo/bar");
        assert_eq!(split_meta("foo/bar"), ("foo/bar", ""));
        assert_eq!(split_meta(";x"), ("", ";x"));
        assert!(validate_journal_spec_name("a/journal").is_ok());
        assert_eq!(
            validate_journal_spec_name("a/journal;disallowed/meta")
                .unwrap_err()
                .0,
            "Name cannot have a metadata path segment (;disallowed/meta; expected no segment)"
        );
    }

    #[test]
    fn path_clean_matches_go() {
        let cases = [
            ("", "."),
            ("abc", "abc"),
            ("abc/def", "abc/def"),
            ("a/b/c", "a/b/c"),
            (".", "."),
            ("..", ".."),
            ("../..", "../.."),
            ("../../abc", "../../abc"),
            ("/abc", "/abc"),
            ("/", "/"),
            ("abc/", "abc"),
            ("abc/def/", "abc/def"),
            ("/abc/", "/abc"),
            ("//abc", "/abc"),
            ("///abc", "/abc"),
            ("abc//def//ghi", "abc/def/ghi"),
            ("abc/./def", "abc/def"),
            ("/./abc/def", "/abc/def"),
            ("abc/.", "abc"),
            ("abc/def/ghi/../jkl", "abc/def/jkl"),
            ("abc/def/../ghi/../jkl", "abc/jkl"),
            ("abc/def/..", "abc"),
            ("abc/def/../..", "."),
            ("/abc/def/../..", "/"),
            ("abc/def/../../..", ".."),
            ("/abc/def/../../..", "/"),
            ("abc/def/../../../ghi/jkl/../../../mno", "../../mno"),
            ("abc/./../def", "def"),
            ("abc//./../def", "def"),
            ("abc/../../././../def", "../../def"),
        ];
        for (input, want) in cases {
            assert_eq!(go_path_clean(input), want, "{input}");
        }
    }

    #[test]
    fn token_validation() {
        assert!(validate_token("a-zone", TOKEN_SYMBOLS, 1, 32).is_ok());
        // Unicode numbers other than decimal digits count, as Go's IsNumber.
        assert!(validate_token("½Ⅻ", TOKEN_SYMBOLS, 1, 32).is_ok());
        // Marks and other symbols do not, even where Rust deems them alphabetic.
        assert!(validate_token("Ⓐb", TOKEN_SYMBOLS, 1, 32).is_err());
        assert!(validate_token("a\u{301}", TOKEN_SYMBOLS, 1, 32).is_err());
        assert_eq!(
            validate_token("a=b", TOKEN_SYMBOLS, 1, 32).unwrap_err().0,
            "not a valid token (a=b)"
        );
        assert!(validate_token("a=b%", PATH_SYMBOLS, 1, 32).is_ok());
        // Lengths are in bytes.
        assert_eq!(
            validate_token("éé", TOKEN_SYMBOLS, 1, 3).unwrap_err().0,
            "invalid length (4; expected 1 <= length <= 3)"
        );
        assert_eq!(
            validate_path_component("a//b", 1, 10).unwrap_err().0,
            "must be a clean path (a//b)"
        );
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("abc"), r#""abc""#);
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\n\t\u{0}\u{7f}"), r#""\n\t\x00\x7f""#);
        assert_eq!(go_quote("é日"), "\"é日\"");
        assert_eq!(go_quote("\u{a0}\u{200b}"), r#""\u00a0\u200b""#);
        assert_eq!(go_quote_bytes(b"a\xffb"), r#""a\xffb""#);
    }

    #[test]
    fn go_durations() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (1_000_000, "1ms"),
            (3_300_000_000, "3.3s"),
            (1_000_000_000, "1s"),
            (60_000_000_000, "1m0s"),
            (4 * 60_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60_000_000_000 + 5_001_000_000, "4m5.001s"),
            (
                5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000,
                "5h6m7.001s",
            ),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (24 * 3_600_000_000_000, "24h0m0s"),
            (25 * 3_600_000_000_000, "25h0m0s"),
            (-1_000_000_000, "-1s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (n, want) in cases {
            assert_eq!(format_go_duration(n), want, "{n}");
        }
        assert_eq!(
            duration_nanos(&Duration {
                seconds: 1,
                nanos: 5
            }),
            Some(1_000_000_005)
        );
        assert_eq!(
            duration_nanos(&Duration {
                seconds: -1,
                nanos: -5
            }),
            Some(-1_000_000_005)
        );
        assert_eq!(
            duration_nanos(&Duration {
                seconds: 1,
                nanos: -5
            }),
            None
        );
        assert_eq!(
            duration_nanos(&Duration {
                seconds: 0,
                nanos: 1_000_000_000
            }),
            None
        );
        assert_eq!(
            duration_nanos(&Duration {
                seconds: i64::MAX,
                nanos: 0
            }),
            None
        );
        assert_eq!(
            duration_nanos(&Duration {
                seconds: 10_000_000_000,
                nanos: 0
            }),
            None
        );
    }

    #[test]
    fn url_parsing() {
        let u = parse_go_url("s3://bucket/sub/path/?query").unwrap();
        assert_eq!(
            u,
            GoUrl {
                scheme: "s3".into(),
                host: "bucket".into(),
                path: "/sub/path/".into(),
                raw_query: "query".into(),
                ..Default::default()
            }
        );
        let u = parse_go_url("HTTP://user:pw@host:1234/p%20ath?q=1#frag%21").unwrap();
        assert_eq!(u.scheme, "http");
        assert_eq!(u.user.as_deref(), Some("user:pw"));
        assert_eq!(u.host, "host:1234");
        assert_eq!((u.hostname(), u.port()), ("host", "1234"));
        assert_eq!(u.path, "/p ath");
        assert_eq!(u.raw_query, "q=1");
        assert_eq!(u.fragment, "frag!");
        let u = parse_go_url("unix://some-host/a/path").unwrap();
        assert_eq!((u.host.as_str(), u.path.as_str()), ("some-host", "/a/path"));
        let u = parse_go_url("http://[::1]:80/").unwrap();
        assert_eq!((u.hostname(), u.port()), ("::1", "80"));
        let u = parse_go_url("mailto:someone").unwrap();
        assert_eq!(u.opaque, "someone");
        let u = parse_go_url("file:///mnt/path/").unwrap();
        assert_eq!((u.host.as_str(), u.path.as_str()), ("", "/mnt/path/"));

        let errors = [
            (
                ":garbage: :garbage:",
                r#"parse ":garbage: :garbage:": missing protocol scheme"#,
            ),
            (":/bad/url", r#"parse ":/bad/url": missing protocol scheme"#),
            (
                "a b:c",
                r#"parse "a b:c": first path segment in URL cannot contain colon"#,
            ),
            (
                "http://ho st/",
                r#"parse "http://ho st/": invalid character " " in host name"#,
            ),
            (
                "http://host:port/",
                r#"parse "http://host:port/": invalid port ":port" after host"#,
            ),
            (
                "http://[::1/",
                r#"parse "http://[::1/": missing ']' in host"#,
            ),
            (
                "http://host/%zz",
                r#"parse "http://host/%zz": invalid URL escape "%zz""#,
            ),
            (
                "http://host/%4",
                r#"parse "http://host/%4": invalid URL escape "%4""#,
            ),
            (
                "http://ho%41st/",
                r#"parse "http://ho%41st/": invalid URL escape "%41""#,
            ),
            (
                "http://a\nb/",
                r#"parse "http://a\nb/": net/url: invalid control character in URL"#,
            ),
            (
                "http://us er@host/",
                r#"parse "http://us er@host/": net/url: invalid userinfo"#,
            ),
            (
                "http://host/#%zz",
                r#"parse "http://host/#%zz": invalid URL escape "%zz""#,
            ),
        ];
        for (raw, want) in errors {
            assert_eq!(parse_go_url(raw).unwrap_err(), want, "{raw}");
        }
        // Never panics on truncated escapes around multi-byte characters.
        for raw in [
            "http://h/%é",
            "http://h/%",
            "%",
            "http://%é/",
            "http://[é%25é]/",
            "s3://é/",
        ] {
            let _ = parse_go_url(raw);
        }
    }

    #[test]
    fn endpoint_cases() {
        assert!(validate_endpoint("http://host:1234/path?query").is_ok());
        assert!(validate_endpoint("unix://host/a/socket").is_ok());
        assert_eq!(
            validate_endpoint(":garbage: :garbage:").unwrap_err().0,
            r#"parse ":garbage: :garbage:": missing protocol scheme"#
        );
        assert_eq!(
            validate_endpoint("/baz/bing").unwrap_err().0,
            "not absolute: /baz/bing"
        );
        assert_eq!(
            validate_endpoint("http:///baz/bing").unwrap_err().0,
            "missing host: http:///baz/bing"
        );
    }

    #[test]
    fn fragment_store_cases() {
        let cases: &[(&str, &str)] = &[
            ("s3://my-bucket/?query", ""),
            ("s3://my-bucket/subpath/?query", ""),
            ("file:///mnt/path/", ""),
            ("file:///mnt/path/?query", ""),
            ("azure://container/prefix/", ""),
            ("azure-ad://tenant/account/container/", ""),
            ("s3://my-bucket", "path component doesn't end in '/' ()"),
            (
                "s3://my-bucket/subpath?query",
                "path component doesn't end in '/' (/subpath)",
            ),
            (
                ":garbage: :garbage:",
                r#"parse ":garbage: :garbage:": missing protocol scheme"#,
            ),
            ("foobar://baz/", "invalid scheme (foobar)"),
            ("/baz/bing/", "not absolute (/baz/bing/)"),
            ("gs:///baz/bing/", "missing bucket (gs:///baz/bing/)"),
            (
                "file://host/mnt/path/",
                "file scheme cannot have host (file://host/mnt/path/)",
            ),
            (
                "file:///mnt/path",
                "path component doesn't end in '/' (/mnt/path)",
            ),
            (
                "azure-ad:///account/container/",
                "missing tenant ID (azure-ad:///account/container/)",
            ),
            (
                "azure-ad://tenant",
                "missing storage account (azure-ad://tenant)",
            ),
            (
                "azure-ad://tenant/",
                "missing storage account (azure-ad://tenant/)",
            ),
            (
                "azure-ad://tenant/account",
                "missing storage container (azure-ad://tenant/account)",
            ),
            (
                "azure-ad://tenant/account/",
                "missing storage container (azure-ad://tenant/account/)",
            ),
            ("s3:bucket/", "missing bucket (s3:bucket/)"),
            ("file:rel/", "path component doesn't end in '/' ()"),
        ];
        for (fs, expect) in cases {
            let got = match validate_fragment_store_url(fs) {
                Ok(_) => String::new(),
                Err(e) => e.0,
            };
            assert_eq!(&got, expect, "{fs}");
        }
    }

    #[test]
    fn fragment_store_query_args() {
        assert_eq!(validate_fragment_store("s3://bucket/"), Ok(()));
        assert_eq!(
            validate_fragment_store("file:///root/?find=a&replace=b"),
            Ok(())
        );
        let url = validate_fragment_store_url(
            "s3://bucket/pre/?Profile=p&endpoint=http%3A%2F%2Fminio%3A9000&REGION=us-east-1&acl=x&storageClass=y&SSE=z&ssekmskeyid=k&find=a+b&replace=c",
        )
        .unwrap();
        assert_eq!(
            parse_store_query_args(&url).unwrap(),
            StoreQueryArgs {
                find: "a b".into(),
                replace: "c".into(),
                profile: "p".into(),
                endpoint: "http://minio:9000".into(),
                acl: "x".into(),
                storage_class: "y".into(),
                sse: "z".into(),
                sse_kms_key_id: "k".into(),
                region: "us-east-1".into(),
            }
        );
        assert_eq!(
            validate_fragment_store("s3://my-bucket/?query")
                .unwrap_err()
                .0,
            r#"parsing store URL arguments: schema: invalid path "query""#
        );
        assert_eq!(
            validate_fragment_store("gs://bucket/?region=x")
                .unwrap_err()
                .0,
            r#"parsing store URL arguments: schema: invalid path "region""#
        );
        assert_eq!(
            validate_fragment_store("file:///r/?b=1&a=2&c")
                .unwrap_err()
                .0,
            r#"parsing store URL arguments: schema: invalid path "a" (and 2 other errors)"#
        );
        assert_eq!(
            validate_fragment_store("file:///r/?find=1;x=2")
                .unwrap_err()
                .0,
            "invalid semicolon separator in query"
        );
        assert_eq!(
            validate_fragment_store("file:///r/?find=%zz")
                .unwrap_err()
                .0,
            r#"invalid URL escape "%zz""#
        );
        // Structural errors come first.
        assert_eq!(
            validate_fragment_store("s3://bucket?x=1").unwrap_err().0,
            "path component doesn't end in '/' ()"
        );
    }

    fn spec_fixture() -> JournalSpec {
        JournalSpec {
            name: "a/journal".into(),
            replication: 3,
            labels: Some(label_set(&[("aaa", "bbb")])),
            fragment: Some(journal_spec::Fragment {
                length: 1 << 18,
                compression_codec: CompressionCodec::Gzip as i32,
                stores: vec!["s3://bucket/path/".into(), "gs://other-bucket/path/".into()],
                refresh_interval: secs(300),
                retention: secs(365 * 24 * 3600),
                flush_interval: None,
                path_postfix_template: r#"date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}"#.into(),
            }),
            flags: journal_spec::Flag::ORdwr as u32,
            max_append_rate: 12345,
            suspend: None,
        }
    }

    #[test]
    fn journal_spec_cases() {
        use label_names::*;
        let mut spec = spec_fixture();
        ok(&spec);

        spec.name = "/bad/name".into();
        assert_eq!(err(&spec), "Name: cannot begin with '/' (/bad/name)");
        spec.name = "a/journal;disallowed/meta".into();
        assert_eq!(
            err(&spec),
            "Name cannot have a metadata path segment (;disallowed/meta; expected no segment)"
        );
        spec.name = "a/journal".into();

        spec.replication = 0;
        assert_eq!(
            err(&spec),
            "invalid Replication (0; expected 1 <= Replication <= 5)"
        );
        spec.replication = 1024;
        assert_eq!(
            err(&spec),
            "invalid Replication (1024; expected 1 <= Replication <= 5)"
        );
        spec.replication = 3;

        spec.labels = Some(LabelSet {
            labels: vec![lbl("xxx xxx", "bbb")],
        });
        assert_eq!(
            err(&spec),
            "Labels.Labels[0].Name: not a valid token (xxx xxx)"
        );
        spec.labels = Some(label_set(&[("name", "bbb")]));
        assert_eq!(err(&spec), r#"Labels cannot include label "name""#);
        spec.labels = Some(label_set(&[("name", "")]));
        assert_eq!(err(&spec), r#"Labels cannot include label "name""#);
        spec.labels = Some(label_set(&[("prefix", "")]));
        assert_eq!(err(&spec), r#"Labels cannot include label "prefix""#);

        let label_cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[(MESSAGE_TYPE, "a"), (MESSAGE_TYPE, "b")],
                "Labels: expected single-value Label has multiple values (index 1; label app.gazette.dev/message-type value b)",
            ),
            (
                &[(CONTENT_TYPE, "invalid/content/type")],
                "Labels: parsing content-type: mime: unexpected content after media subtype",
            ),
            (
                &[(CONTENT_TYPE, "")],
                "Labels: parsing content-type: mime: no media type",
            ),
            (
                &[(CONTENT_TYPE, "/x")],
                "Labels: parsing content-type: mime: no media type",
            ),
            (
                &[(CONTENT_TYPE, "text=x")],
                "Labels: parsing content-type: mime: expected slash after first token",
            ),
            (
                &[(CONTENT_TYPE, "text/")],
                "Labels: parsing content-type: mime: expected token after slash",
            ),
            (
                &[(MESSAGE_SUB_TYPE, "subtype")],
                "Labels: expected app.gazette.dev/message-type label alongside app.gazette.dev/message-subtype",
            ),
            (
                &[(MESSAGE_SUB_TYPE, "subtype"), (MESSAGE_TYPE, "type")],
                "Labels: expected content-type label alongside app.gazette.dev/message-type",
            ),
            (
                &[
                    (MESSAGE_TYPE, "type"),
                    (CONTENT_TYPE, "application/x-ndjson"),
                ],
                "OK",
            ),
            (
                &[
                    (MESSAGE_SUB_TYPE, "subtype"),
                    (MESSAGE_TYPE, "type"),
                    (CONTENT_TYPE, "application/x-ndjson"),
                ],
                "OK",
            ),
            (&[(CONTENT_TYPE, "text")], "OK"),
            (&[(CONTENT_TYPE, "Text/CSV")], "OK"),
        ];
        for (labels, expect) in label_cases {
            spec.labels = Some(label_set(labels));
            assert_eq!(&err(&spec), expect, "{labels:?}");
        }
        spec.labels = None;
        ok(&spec);

        fn frag(s: &mut JournalSpec) -> &mut journal_spec::Fragment {
            s.fragment.get_or_insert_default()
        }
        frag(&mut spec).length = 0;
        assert_eq!(
            err(&spec),
            "Fragment: invalid Length (0; expected 1024 <= length <= 17179869184)"
        );
        frag(&mut spec).length = 4096;

        for f in [3u32, 6, 5, 8, 0x8000_0001] {
            spec.flags = f;
            assert_eq!(
                err(&spec),
                format!("Flags: invalid combination ({})", f as i32)
            );
        }
        for f in [0u32, 1, 2, 4] {
            spec.flags = f;
            ok(&spec);
        }

        spec.max_append_rate = -1;
        assert_eq!(err(&spec), "invalid MaxAppendRate (-1; expected >= 0)");
        spec.max_append_rate = 0;

        let f = frag(&mut spec);
        f.length = MAX_FRAGMENT_LEN + 1;
        assert_eq!(
            err(f),
            "invalid Length (17179869185; expected 1024 <= length <= 17179869184)"
        );
        f.length = 1024;
        f.compression_codec = 9999;
        assert_eq!(err(f), "CompressionCodec: invalid value (9999)");
        f.compression_codec = 0;
        assert_eq!(err(f), "CompressionCodec: invalid value (INVALID)");
        f.compression_codec = CompressionCodec::GzipOffloadDecompression as i32;
        f.stores[0] = "file:///a/root/".into();
        assert_eq!(
            err(f),
            "GZIP_OFFLOAD_DECOMPRESSION is incompatible with file:// stores (file:///a/root/)"
        );
        f.compression_codec = CompressionCodec::Snappy as i32;

        f.refresh_interval = Some(Duration {
            seconds: 0,
            nanos: 1_000_000,
        });
        assert_eq!(
            err(f),
            "invalid RefreshInterval (1ms; expected 1s <= interval <= 24h0m0s)"
        );
        f.refresh_interval = secs(25 * 3600);
        assert_eq!(
            err(f),
            "invalid RefreshInterval (25h0m0s; expected 1s <= interval <= 24h0m0s)"
        );
        f.refresh_interval = None;
        assert_eq!(
            err(f),
            "invalid RefreshInterval (0s; expected 1s <= interval <= 24h0m0s)"
        );
        f.refresh_interval = Some(Duration {
            seconds: 1,
            nanos: -1,
        });
        assert_eq!(
            err(f),
            "RefreshInterval: invalid duration (seconds 1, nanos -1; out of range for time.Duration)"
        );
        f.refresh_interval = secs(3600);

        f.flush_interval = secs(1);
        assert_eq!(err(f), "invalid FlushInterval (1s; expected >= 1m0s)");
        f.flush_interval = secs(7200);

        f.path_postfix_template = "{{ bad template".into();
        assert_eq!(
            err(f),
            "PathPostfixTemplate: template: postfix:1: unclosed action"
        );
        f.path_postfix_template = String::new();
        ok(&spec);

        let f = frag(&mut spec);
        f.stores.push("invalid".into());
        assert_eq!(err(f), "Stores[2]: not absolute (invalid)");
        f.stores.truncate(1);
        // Unknown store arguments are accepted, as Gazette accepts them.
        f.stores.push("s3://bucket/?unknown=1".into());
        ok(&spec);

        spec.suspend = Some(journal_spec::Suspend {
            level: 0,
            offset: -1,
        });
        assert_eq!(
            err(&spec),
            "Suspend.Offset: invalid Offset (-1; expected >= 0)"
        );
        spec.suspend = Some(journal_spec::Suspend {
            level: 12345,
            offset: 1234,
        });
        assert_eq!(err(&spec), "Suspend.Level: invalid Level variant (12345)");
        spec.suspend = Some(journal_spec::Suspend {
            level: journal_spec::suspend::Level::Full as i32,
            offset: 1234,
        });
        ok(&spec);

        // A spec without a fragment fails on its length.
        spec.fragment = None;
        assert_eq!(
            err(&spec),
            "Fragment: invalid Length (0; expected 1024 <= length <= 17179869184)"
        );
    }

    #[test]
    fn postfix_templates() {
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("plain/text", ""),
            ("{{ .Spool.Journal }}", ""),
            ("{{- .Spool.Journal -}}", ""),
            (r#"{{ printf "%s}}" .Name }}"#, ""),
            ("{{ `raw }}` }}", ""),
            ("{{/* a comment */}}x", ""),
            ("{{- /* a comment */ -}}x", ""),
            ("{{ if .Name }}a{{ else }}b{{ end }}", ""),
            ("{{range .Labels}}{{.Name}}{{end}}", ""),
            ("{{ bad template", "template: postfix:1: unclosed action"),
            ("a\nb\n{{ x", "template: postfix:3: unclosed action"),
            ("{{}}", "template: postfix:1: missing value for command"),
            ("{{ }}", "template: postfix:1: missing value for command"),
            (
                "{{ \"abc }}",
                "template: postfix:1: unterminated quoted string",
            ),
            (
                "{{ `abc }}",
                "template: postfix:1: unterminated raw quoted string",
            ),
            ("{{/* abc }}", "template: postfix:1: unclosed comment"),
            (
                "{{/* abc */ x}}",
                "template: postfix:1: comment ends before closing delimiter",
            ),
            ("{{ end }}", "template: postfix:1: unexpected {{end}}"),
            ("{{ else }}", "template: postfix:1: unexpected {{else}}"),
            ("{{ if .X }}a", "template: postfix:1: unexpected EOF"),
        ];
        for (t, expect) in cases {
            let got = check_template(t, "postfix").err().unwrap_or_default();
            assert_eq!(&got, expect, "{t}");
        }
        for t in [
            "{{", "{{-", "{{- ", "{{\"", "{{'", "{{`", "{{/*", "{{/**/", "}}{{", "é{{é",
        ] {
            let _ = check_template(t, "postfix");
        }
    }

    #[test]
    fn process_and_broker_spec_cases() {
        let cases: &[(&str, &str, &str)] = &[
            ("a-zone", "a-name", "OK"),
            (
                "",
                "a-name",
                "Zone: invalid length (0; expected 1 <= length <= 32)",
            ),
            ("&*", "a-name", "Zone: not a valid token (&*)"),
            (
                "a-very-very-very-very-looong-zone",
                "a-name",
                "Zone: invalid length (33; expected 1 <= length <= 32)",
            ),
            (
                "a-zone",
                "ae",
                "Suffix: invalid length (2; expected 4 <= length <= 128)",
            ),
            ("a-zone", "&*($", "Suffix: not a valid token (&*($)"),
        ];
        for (zone, suffix, expect) in cases {
            assert_eq!(&err(&id(zone, suffix)), expect);
        }

        let mut model = BrokerSpec {
            process_spec: Some(ProcessSpec {
                id: Some(id("a-zone", "a-name")),
                endpoint: "http://foo".into(),
            }),
            journal_limit: 5,
            exiting: false,
        };
        ok(&model);
        let ps = model.process_spec.as_mut().unwrap();
        ps.id.as_mut().unwrap().zone = String::new();
        assert_eq!(
            err(&model),
            "Id.Zone: invalid length (0; expected 1 <= length <= 32)"
        );
        let ps = model.process_spec.as_mut().unwrap();
        ps.id.as_mut().unwrap().zone = "a-zone".into();
        ps.endpoint = "invalid".into();
        assert_eq!(err(&model), "Endpoint: not absolute: invalid");
        model.process_spec.as_mut().unwrap().endpoint = "http://foo".into();
        model.journal_limit = MAX_BROKER_JOURNAL_LIMIT + 1;
        assert_eq!(
            err(&model),
            "invalid JournalLimit (131073; expected 0 <= JournalLimit <= 131072)"
        );
        assert_eq!(
            err(&BrokerSpec::default()),
            "Id.Zone: invalid length (0; expected 1 <= length <= 32)"
        );
    }

    #[test]
    fn route_cases() {
        let mut rt = Route {
            primary: -1,
            members: vec![
                id("zone-a", "member-1"),
                id("zone-a", "member-3"),
                id("zone-b", "member-2"),
            ],
            endpoints: vec![
                "http://foo".into(),
                "http://bar".into(),
                "http://baz".into(),
            ],
        };
        ok(&rt);
        rt.members[0].zone = "invalid zone".into();
        assert_eq!(
            err(&rt),
            "Members[0].Zone: not a valid token (invalid zone)"
        );
        rt.members[0].zone = "zone-a".into();

        rt.members.swap(1, 2);
        assert_eq!(
            err(&rt),
            "Members not in unique, sorted order (index 2; {Zone:zone-b Suffix:member-2} <= {Zone:zone-a Suffix:member-3})"
        );
        rt.members.swap(1, 2);
        rt.members[1] = rt.members[0].clone();
        assert!(err(&rt).starts_with("Members not in unique, sorted order (index 1;"));
        rt.members[1] = id("zone-a", "member-3");

        rt.primary = -2;
        assert_eq!(err(&rt), "invalid Primary (-2; expected -1 <= Primary < 3)");
        rt.primary = 3;
        assert_eq!(err(&rt), "invalid Primary (3; expected -1 <= Primary < 3)");
        rt.primary = 2;

        rt.endpoints.push("http://bing".into());
        assert_eq!(
            err(&rt),
            "len(Endpoints) != 0, and != len(Members) (4 vs 3)"
        );
        rt.endpoints.truncate(3);
        rt.endpoints[2] = "invalid".into();
        assert_eq!(err(&rt), "Endpoints[2]: not absolute: invalid");
        rt.endpoints[2] = String::new(); // Members without an endpoint are allowed.
        ok(&rt);
        rt.endpoints.clear();
        ok(&rt);
        // As in Gazette, the zero Route is invalid: it has no member to be primary.
        assert_eq!(
            err(&Route::default()),
            "invalid Primary (0; expected -1 <= Primary < 0)"
        );
    }

    #[test]
    fn header_cases() {
        let mut etcd = header::Etcd {
            cluster_id: 0,
            member_id: 0,
            revision: -42,
            raft_term: 0,
        };
        assert_eq!(err(&etcd), "invalid ClusterId (expected != 0)");
        etcd.cluster_id = 12;
        assert_eq!(err(&etcd), "invalid MemberId (expected != 0)");
        etcd.member_id = 34;
        assert_eq!(err(&etcd), "invalid Revision (-42; expected 0 < revision)");
        etcd.revision = 56;
        assert_eq!(err(&etcd), "invalid RaftTerm (expected != 0)");
        etcd.raft_term = 78;
        ok(&etcd);

        let mut model = Header {
            process_id: Some(id("no-suffix", "")),
            route: Some(Route {
                primary: 2,
                members: vec![id("zone", "name")],
                endpoints: vec![],
            }),
            etcd: Some(header::Etcd {
                cluster_id: 0,
                ..etcd
            }),
        };
        assert_eq!(
            err(&model),
            "ProcessId.Suffix: invalid length (0; expected 4 <= length <= 128)"
        );
        model.process_id = Some(id("zone", "name"));
        assert_eq!(
            err(&model),
            "Route: invalid Primary (2; expected -1 <= Primary < 1)"
        );
        model.route.as_mut().unwrap().primary = 0;
        assert_eq!(err(&model), "Etcd: invalid ClusterId (expected != 0)");
        model.etcd.as_mut().unwrap().cluster_id = 12;
        ok(&model);
        model.process_id = Some(id("", ""));
        ok(&model);
        model.process_id = None;
        ok(&model);
        assert_eq!(
            err(&Header::default()),
            "Route: invalid Primary (0; expected -1 <= Primary < 0)"
        );
    }

    fn fragment_fixture() -> Fragment {
        Fragment {
            journal: "a/journal/name".into(),
            begin: 1234567890,
            end: i64::MAX,
            sum: Some(Sha1Sum {
                part1: 0x0102030405060708,
                part2: 0x090a0b0c0d0e0f10,
                part3: 0x11121314,
            }),
            compression_codec: CompressionCodec::Gzip as i32,
            backing_store: String::new(),
            mod_time: 0,
            path_postfix: String::new(),
        }
    }

    use crate::Sha1Sum;

    #[test]
    fn fragment_cases() {
        let mut f = fragment_fixture();
        ok(&f);
        (f.begin, f.end) = (f.end, f.begin);
        assert_eq!(
            err(&f),
            "expected Begin <= End (have 9223372036854775807, 1234567890)"
        );
        (f.begin, f.end) = (f.end, f.begin);
        f.journal = "a".into();
        assert_eq!(
            err(&f),
            "Journal: invalid length (1; expected 4 <= length <= 512)"
        );
        f.journal = "foo/bar/baz".into();
        f.compression_codec = 1 << 20;
        assert_eq!(err(&f), "CompressionCodec: invalid value (1048576)");
        f.compression_codec = CompressionCodec::Gzip as i32;
        f.path_postfix = "a=b/c=2".into();
        ok(&f);
        f.path_postfix = "/a=b".into();
        assert_eq!(err(&f), "PathPostfix: cannot begin with '/' (/a=b)");
    }

    #[test]
    fn read_request_cases() {
        let mut req = ReadRequest {
            header: Some(bad_header()),
            journal: "/bad".into(),
            offset: -2,
            end_offset: -1,
            ..Default::default()
        };
        assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut req.header);
        assert_eq!(err(&req), "Journal: cannot begin with '/' (/bad)");
        req.journal = "good".into();
        assert_eq!(
            err(&req),
            "invalid Offset (-2; expected -1 <= Offset <= MaxInt64)"
        );
        req.offset = -1;
        assert_eq!(
            err(&req),
            "invalid EndOffset (-1; expected 0 or Offset <= EndOffset)"
        );
        req.end_offset = 100;
        ok(&req);
        req.offset = 101;
        assert_eq!(
            err(&req),
            "invalid EndOffset (100; expected 0 or Offset <= EndOffset)"
        );
        req.end_offset = 101;
        ok(&req);
        req.end_offset = 0;
        ok(&req);

        // Spec scenario 23.
        let req = ReadRequest {
            journal: "/invalid/journal".into(),
            ..Default::default()
        };
        assert_eq!(
            err(&req),
            "Journal: cannot begin with '/' (/invalid/journal)"
        );
        let req = ReadRequest {
            journal: "/invalid/name".into(),
            ..Default::default()
        };
        assert_eq!(err(&req), "Journal: cannot begin with '/' (/invalid/name)");
        // Requests may name a journal with a metadata segment.
        let req = ReadRequest {
            journal: "a/journal;with/meta".into(),
            ..Default::default()
        };
        ok(&req);
    }

    #[test]
    fn read_response_cases() {
        let mut frag = fragment_fixture();
        frag.journal = "/bad/name".into();
        frag.end = 0x8bd03835;
        frag.compression_codec = CompressionCodec::Snappy as i32;
        let mut resp = ReadResponse {
            status: 9101,
            header: Some(bad_header()),
            offset: 1234,
            write_head: 5678,
            fragment: Some(frag.clone()),
            fragment_url: ":/bad/url".into(),
            content: Default::default(),
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = 0;
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        assert_eq!(
            err(&resp),
            "Fragment.Journal: cannot begin with '/' (/bad/name)"
        );
        resp.fragment.as_mut().unwrap().journal = "a/journal".into();
        assert_eq!(
            err(&resp),
            "invalid Offset (1234; expected 1234567890 <= offset < 2345678901)"
        );
        resp.offset = 1234567891;
        assert_eq!(
            err(&resp),
            "invalid WriteHead (5678; expected >= 2345678901)"
        );
        resp.write_head = 2345678901;
        assert_eq!(
            err(&resp),
            r#"FragmentUrl: parse ":/bad/url": missing protocol scheme"#
        );
        resp.fragment_url = "http://foo".into();
        ok(&resp);

        resp.fragment = None;
        resp.write_head = -1;
        assert_eq!(err(&resp), "invalid WriteHead (-1; expected >= 0)");
        resp.write_head = 1234;
        assert_eq!(
            err(&resp),
            "unexpected Offset without Fragment or Content (1234567891)"
        );
        resp.offset = 0;
        assert_eq!(
            err(&resp),
            "unexpected FragmentUrl without Fragment (http://foo)"
        );
        resp.fragment_url = String::new();
        ok(&resp);

        resp.content = bytes::Bytes::from_static(b"foobar");
        resp.fragment = Some(frag.clone());
        resp.offset = 5678;
        resp.fragment_url = "http://foo".into();
        resp.status = Status::WrongRoute as i32;
        assert_eq!(err(&resp), "unexpected Status with Content (WRONG_ROUTE)");
        resp.status = 0;
        assert_eq!(
            err(&resp),
            r#"unexpected Header with Content (process_id:<zone:"zone" suffix:"name" > route:<members:<zone:"zone" suffix:"name" > > etcd:<cluster_id:12 member_id:34 revision:56 raft_term:78 > )"#
        );
        resp.header = None;
        assert_eq!(err(&resp), "unexpected WriteHead with Content (1234)");
        resp.write_head = 0;
        assert_eq!(
            err(&resp),
            r#"unexpected Fragment with Content (journal:"/bad/name" begin:1234567890 end:2345678901 sum:<part1:72623859790382856 part2:651345242494996240 part3:286397204 > compression_codec:SNAPPY )"#
        );
        resp.fragment = None;
        assert_eq!(
            err(&resp),
            "unexpected FragmentUrl with Content (http://foo)"
        );
        resp.fragment_url = String::new();
        ok(&resp);
    }

    #[test]
    fn append_request_cases() {
        let bad = LabelSet {
            labels: vec![lbl("inv alid", "")],
        };
        let good = LabelSet {
            labels: vec![lbl("valid", "")],
        };
        let mut req = AppendRequest {
            header: Some(bad_header()),
            journal: "/bad".into(),
            do_not_proxy: true,
            offset: -1,
            content: bytes::Bytes::from_static(b"foo"),
            check_registers: Some(LabelSelector {
                include: Some(bad.clone()),
                exclude: None,
            }),
            union_registers: Some(bad.clone()),
            subtract_registers: Some(bad.clone()),
            suspend: 12345,
            min_etcd_revision: 0,
        };
        assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut req.header);
        assert_eq!(err(&req), "Journal: cannot begin with '/' (/bad)");
        req.journal = "/invalid/name".into();
        assert_eq!(err(&req), "Journal: cannot begin with '/' (/invalid/name)");
        req.journal = "good".into();
        assert_eq!(err(&req), "invalid Offset (-1; expected >= 0)");
        req.offset = 100;
        assert_eq!(err(&req), "unexpected Content");
        req.content = Default::default();
        assert_eq!(
            err(&req),
            "CheckRegisters.Include.Labels[0].Name: not a valid token (inv alid)"
        );
        req.check_registers.as_mut().unwrap().include = Some(good.clone());
        assert_eq!(
            err(&req),
            "UnionRegisters.Labels[0].Name: not a valid token (inv alid)"
        );
        req.union_registers = Some(good.clone());
        assert_eq!(
            err(&req),
            "SubtractRegisters.Labels[0].Name: not a valid token (inv alid)"
        );
        req.subtract_registers = Some(good.clone());
        assert_eq!(err(&req), "Suspend: invalid Suspend variant (12345)");
        req.suspend = append_request::Suspend::Now as i32;
        ok(&req);

        // A content chunk.
        req.journal = String::new();
        req.content = bytes::Bytes::from_static(b"foo");
        assert_eq!(err(&req), "unexpected Header");
        req.header = None;
        assert_eq!(err(&req), "unexpected DoNotProxy");
        req.do_not_proxy = false;
        assert_eq!(err(&req), "unexpected Offset");
        req.offset = 0;
        assert_eq!(err(&req), "unexpected CheckRegisters");
        req.check_registers = None;
        assert_eq!(err(&req), "unexpected UnionRegisters");
        req.union_registers = None;
        assert_eq!(err(&req), "unexpected SubtractRegisters");
        req.subtract_registers = None;
        assert_eq!(
            err(&req),
            "unexpected Suspend (SUSPEND_NOW; expected SUSPEND_RESUMED)"
        );
        req.suspend = 77;
        assert_eq!(
            err(&req),
            "unexpected Suspend (77; expected SUSPEND_RESUMED)"
        );
        req.suspend = 0;
        ok(&req);
        ok(&AppendRequest::default()); // The commit marker.

        // Spec scenario 1: a journal with a metadata segment.
        ok(&AppendRequest {
            journal: "a/journal;with/meta".into(),
            ..Default::default()
        });
    }

    #[test]
    fn append_response_cases() {
        let mut resp = AppendResponse {
            status: 9101,
            header: Some(bad_header()),
            ..Default::default()
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = 0;
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        assert_eq!(err(&resp), "expected Commit");
        resp.commit = Some(Fragment {
            journal: "/bad/name".into(),
            compression_codec: CompressionCodec::None as i32,
            ..Default::default()
        });
        assert_eq!(err(&resp), "expected Registers");
        resp.registers = Some(LabelSet {
            labels: vec![lbl("in valid", "")],
        });
        assert_eq!(
            err(&resp),
            "Commit.Journal: cannot begin with '/' (/bad/name)"
        );
        resp.commit.as_mut().unwrap().journal = "good/name".into();
        assert_eq!(
            err(&resp),
            "Registers.Labels[0].Name: not a valid token (in valid)"
        );
        resp.registers = Some(LabelSet::default());
        ok(&resp);

        resp.status = Status::RegisterMismatch as i32;
        resp.registers = None;
        assert_eq!(err(&resp), "expected Registers");
        resp.status = Status::WrongAppendOffset as i32;
        ok(&resp);
    }

    #[test]
    fn replicate_request_cases() {
        let mut req = ReplicateRequest {
            deprecated_journal: "bad".into(),
            proposal: Some(Fragment {
                journal: "/bad/name".into(),
                compression_codec: CompressionCodec::None as i32,
                ..Default::default()
            }),
            content: bytes::Bytes::from_static(b"foo"),
            content_delta: 100,
            header: Some(bad_header()),
            ..Default::default()
        };
        assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut req.header);
        assert_eq!(err(&req), "expected Acknowledge with Header");
        req.acknowledge = true;
        assert_eq!(
            err(&req),
            "Proposal.Journal: cannot begin with '/' (/bad/name)"
        );
        req.proposal.as_mut().unwrap().journal = "journal".into();
        req.registers = Some(LabelSet {
            labels: vec![lbl("in valid", "")],
        });
        assert_eq!(
            err(&req),
            "Registers.Labels[0].Name: not a valid token (in valid)"
        );
        req.registers.as_mut().unwrap().labels[0].name = "valid".into();
        assert_eq!(err(&req), "unexpected Content with Proposal (len 3)");
        req.content = Default::default();
        assert_eq!(err(&req), "unexpected ContentDelta with Proposal (100)");
        req.content_delta = 0;
        assert_eq!(
            err(&req),
            "DeprecatedJournal and Proposal.Journal mismatch (bad vs journal)"
        );
        req.deprecated_journal = "journal".into();
        ok(&req);
        req.registers = None; // Treated as empty, as by Gazette.
        ok(&req);
        req.registers = Some(label_set(&[("valid", "")]));

        req.proposal = None;
        req.content_delta = -1;
        assert_eq!(err(&req), "expected Content or Proposal");
        req.content = bytes::Bytes::from_static(b"foo");
        assert_eq!(err(&req), "invalid ContentDelta (-1; expected >= 0)");
        req.content_delta = 100;
        assert!(err(&req).starts_with("unexpected Header with Content (process_id:<"));
        req.header = None;
        assert_eq!(
            err(&req),
            r#"unexpected Registers with Content (labels:<name:"valid" > )"#
        );
        req.registers = None;
        assert_eq!(err(&req), "unexpected Acknowledge with Content");
        req.acknowledge = false;
        assert_eq!(err(&req), "unexpected DeprecatedJournal with Content");
        req.deprecated_journal = String::new();
        ok(&req);
    }

    #[test]
    fn replicate_response_cases() {
        let frag = Fragment {
            journal: "/bad/name".into(),
            compression_codec: CompressionCodec::None as i32,
            ..Default::default()
        };
        let mut resp = ReplicateResponse {
            status: 9101,
            header: Some(bad_header()),
            fragment: Some(frag.clone()),
            registers: Some(LabelSet::default()),
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = 0;
        assert!(err(&resp).starts_with("unexpected Header (process_id:"));
        resp.header = None;
        assert_eq!(
            err(&resp),
            r#"unexpected Fragment (journal:"/bad/name" sum:<> compression_codec:NONE )"#
        );
        resp.fragment = None;
        assert_eq!(err(&resp), "unexpected Registers ()");
        resp.registers = None;
        ok(&resp);

        resp.status = Status::WrongRoute as i32;
        assert_eq!(err(&resp), "expected Header");
        resp.header = Some(bad_header());
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        ok(&resp);

        resp.status = Status::ProposalMismatch as i32;
        resp.header = None;
        assert_eq!(err(&resp), "expected Fragment");
        resp.fragment = Some(frag);
        assert_eq!(
            err(&resp),
            "Fragment.Journal: cannot begin with '/' (/bad/name)"
        );
        resp.fragment.as_mut().unwrap().journal = "journal".into();
        assert_eq!(err(&resp), "expected Registers");
        resp.registers = Some(LabelSet {
            labels: vec![lbl("in valid", "")],
        });
        assert_eq!(
            err(&resp),
            "Registers.Labels[0].Name: not a valid token (in valid)"
        );
        resp.registers = Some(LabelSet::default());
        ok(&resp);
    }

    #[test]
    fn list_request_cases() {
        let mut req = ListRequest {
            selector: Some(LabelSelector {
                include: Some(LabelSet {
                    labels: vec![
                        lbl("a invalid name", "foo"),
                        lbl("prefix", "no/trailing/slash"),
                    ],
                }),
                exclude: Some(LabelSet {
                    labels: vec![lbl("bar", "baz"), lbl("prefix", "no/trailing/slash")],
                }),
            }),
            ..Default::default()
        };
        fn sel(r: &mut ListRequest) -> &mut LabelSelector {
            r.selector.as_mut().unwrap()
        }
        assert_eq!(
            err(&req),
            "Selector.Include.Labels[0].Name: not a valid token (a invalid name)"
        );
        sel(&mut req).include.as_mut().unwrap().labels[0].name = "a-valid-name".into();
        assert_eq!(
            err(&req),
            r#"Selector.Include.Labels["prefix"]: expected trailing '/' (no/trailing/slash)"#
        );
        sel(&mut req).include.as_mut().unwrap().labels[1].value = "trailing/slash/".into();
        assert_eq!(
            err(&req),
            r#"Selector.Exclude.Labels["prefix"]: expected trailing '/' (no/trailing/slash)"#
        );
        sel(&mut req).exclude.as_mut().unwrap().labels[1].value = "trailing/slash/".into();
        ok(&req);
        ok(&ListRequest::default());

        // Spec scenario 31.
        let req = ListRequest {
            selector: Some(crate::labels::parse_selector("prefix=invalid/no/slash").unwrap()),
            ..Default::default()
        };
        assert_eq!(
            err(&req),
            r#"Selector.Include.Labels["prefix"]: expected trailing '/' (invalid/no/slash)"#
        );
    }

    fn good_spec() -> JournalSpec {
        JournalSpec {
            name: "a/journal".into(),
            replication: 1,
            fragment: Some(journal_spec::Fragment {
                length: 1024,
                compression_codec: CompressionCodec::None as i32,
                refresh_interval: secs(60),
                retention: secs(3600),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn list_response_cases() {
        let mut spec = good_spec();
        spec.name = "a/journal invalid name".into();
        let mut resp = ListResponse {
            status: 9101,
            header: Some(bad_header()),
            journals: vec![list_response::Journal {
                spec: Some(spec),
                mod_revision: 0,
                route: Some(Route {
                    primary: 0,
                    ..Default::default()
                }),
                create_revision: 0,
            }],
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = 0;
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        assert_eq!(
            err(&resp),
            "Journals[0].Spec.Name: not a valid token (a/journal invalid name)"
        );
        resp.journals[0].spec.as_mut().unwrap().name = "a/journal".into();
        assert_eq!(
            err(&resp),
            "Journals[0]: invalid ModRevision (0; expected > 0)"
        );
        resp.journals[0].mod_revision = 1;
        assert_eq!(
            err(&resp),
            "Journals[0].Route: invalid Primary (0; expected -1 <= Primary < 0)"
        );
        resp.journals[0].route.as_mut().unwrap().primary = -1;
        ok(&resp);
    }

    #[test]
    fn apply_request_cases() {
        let mut req = ApplyRequest {
            changes: vec![
                apply_request::Change {
                    expect_mod_revision: -2,
                    upsert: Some(JournalSpec {
                        name: "a/journal".into(),
                        ..Default::default()
                    }),
                    delete: "a/journal".into(),
                },
                apply_request::Change {
                    expect_mod_revision: 0,
                    upsert: None,
                    delete: "a/journal invalid name".into(),
                },
                apply_request::Change {
                    expect_mod_revision: 1,
                    upsert: None,
                    delete: String::new(),
                },
            ],
        };
        assert_eq!(
            err(&req),
            "Changes[0]: both Upsert and Delete are set (expected exactly one)"
        );
        req.changes[0].delete = String::new();
        assert_eq!(
            err(&req),
            "Changes[0].Upsert: invalid Replication (0; expected 1 <= Replication <= 5)"
        );
        req.changes[0].upsert = Some(good_spec());
        assert_eq!(
            err(&req),
            "Changes[0]: invalid ExpectModRevision (-2; expected >= 0 or -1)"
        );
        req.changes[0].expect_mod_revision = 0;
        // Spec scenario 34.
        assert_eq!(
            err(&req),
            "Changes[1].Delete: not a valid token (a/journal invalid name)"
        );
        req.changes[1].delete = "a/journal".into();
        assert_eq!(
            err(&req),
            "Changes[1]: invalid ExpectModRevision (0; expected > 0 or -1)"
        );
        req.changes[1].expect_mod_revision = 1;
        assert_eq!(
            err(&req),
            "Changes[2]: neither Upsert nor Delete are set (expected exactly one)"
        );
        req.changes[2].delete = "other/journal".into();
        ok(&req);
        req.changes[0].expect_mod_revision = -1;
        req.changes[1].expect_mod_revision = -1;
        ok(&req);

        let req = ApplyRequest {
            changes: vec![apply_request::Change {
                expect_mod_revision: -1,
                upsert: None,
                delete: "invalid journal name".into(),
            }],
        };
        assert_eq!(
            err(&req),
            "Changes[0].Delete: not a valid token (invalid journal name)"
        );
        let mut spec = good_spec();
        spec.fragment.as_mut().unwrap().stores = vec!["s3://bucket".into()];
        let req = ApplyRequest {
            changes: vec![apply_request::Change {
                expect_mod_revision: 0,
                upsert: Some(spec),
                delete: String::new(),
            }],
        };
        assert_eq!(
            err(&req),
            "Changes[0].Upsert.Fragment.Stores[0]: path component doesn't end in '/' ()"
        );
        ok(&ApplyRequest::default());
    }

    #[test]
    fn unary_response_cases() {
        let mut resp = ApplyResponse {
            status: 9101,
            header: Some(bad_header()),
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = 0;
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        ok(&resp);
        assert_eq!(
            err(&ApplyResponse::default()),
            "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)"
        );

        let mut resp = FragmentStoreHealthResponse {
            status: 9101,
            header: Some(bad_header()),
            store_health_error: String::new(),
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = Status::FragmentStoreUnhealthy as i32;
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        ok(&resp);
    }

    #[test]
    fn fragments_request_cases() {
        let mut req = FragmentsRequest {
            header: Some(bad_header()),
            journal: "/bad".into(),
            signature_ttl: secs(0),
            begin_mod_time: 10,
            end_mod_time: 5,
            next_page_token: -1,
            page_limit: -1,
            do_not_proxy: false,
        };
        assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut req.header);
        assert_eq!(err(&req), "Journal: cannot begin with '/' (/bad)");
        req.journal = "good".into();
        assert_eq!(err(&req), "invalid EndModTime (5 must be after 10)");
        (req.begin_mod_time, req.end_mod_time) = (50, 40);
        assert_eq!(err(&req), "invalid EndModTime (40 must be after 50)");
        req.end_mod_time = 0;
        assert_eq!(err(&req), "invalid NextPageToken (-1; must be >= 0)");
        req.next_page_token = 10;
        assert_eq!(
            err(&req),
            "invalid PageLimit (-1; must be >= 0 and <= 10000)"
        );
        req.page_limit = 10001;
        assert_eq!(
            err(&req),
            "invalid PageLimit (10001; must be >= 0 and <= 10000)"
        );
        req.page_limit = 10;
        assert_eq!(err(&req), "invalid SignatureTTL (0s; must be > 0s)");
        req.signature_ttl = secs(-5);
        assert_eq!(err(&req), "invalid SignatureTTL (-5s; must be > 0s)");
        req.signature_ttl = secs(1);
        ok(&req);
        req.signature_ttl = None;
        ok(&req);
        req.end_mod_time = 50;
        ok(&req); // End equal to begin is allowed.
    }

    #[test]
    fn fragments_response_cases() {
        let mut resp = FragmentsResponse {
            status: 9101,
            header: Some(bad_header()),
            fragments: vec![fragments_response::Fragment {
                spec: Some(Fragment {
                    journal: "in valid".into(),
                    compression_codec: CompressionCodec::None as i32,
                    ..Default::default()
                }),
                signed_url: ":gar: :bage:".into(),
            }],
            next_page_token: 0,
        };
        assert_eq!(err(&resp), "Status: invalid status (9101)");
        resp.status = 0;
        assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
        fix_header(&mut resp.header);
        assert_eq!(
            err(&resp),
            "Fragments[0].Spec.Journal: not a valid token (in valid)"
        );
        resp.fragments[0].spec.as_mut().unwrap().journal = "valid/name".into();
        assert_eq!(
            err(&resp),
            r#"Fragments[0].SignedUrl: parse ":gar: :bage:": missing protocol scheme"#
        );
        resp.fragments[0].signed_url = "http://host/path".into();
        ok(&resp);
        resp.fragments[0].signed_url = String::new();
        ok(&resp);
    }

    #[test]
    fn fragment_store_health_request_cases() {
        let mut req = FragmentStoreHealthRequest {
            fragment_store: "s3://bad".into(),
            check_delete: false,
            check_delete_prefix: String::new(),
        };
        assert_eq!(
            err(&req),
            "FragmentStore: path component doesn't end in '/' ()"
        );
        req.fragment_store = "s3://bucket/".into();
        ok(&req);

        req.check_delete_prefix = "recovery/".into();
        assert_eq!(
            err(&req),
            "CheckDeletePrefix: cannot be set when CheckDelete is false"
        );
        req.check_delete = true;
        ok(&req);
        req.check_delete_prefix = "recovery/sub/".into();
        ok(&req);
        req.check_delete_prefix = String::new();
        ok(&req);

        let cases = [
            ("recovery", "CheckDeletePrefix: must end in '/' (recovery)"),
            (
                "recovery/sub",
                "CheckDeletePrefix: must end in '/' (recovery/sub)",
            ),
            (
                "../../etc/",
                "CheckDeletePrefix: cannot traverse outside the store (../../etc/)",
            ),
            (
                "../",
                "CheckDeletePrefix: cannot traverse outside the store (../)",
            ),
            (
                "recovery/../../etc/",
                "CheckDeletePrefix: must be a clean path (recovery/../../etc)",
            ),
            (
                "/rooted/",
                "CheckDeletePrefix: cannot begin with '/' (/rooted)",
            ),
            (
                "in valid/",
                "CheckDeletePrefix: not a valid token (in valid)",
            ),
            (
                "/",
                "CheckDeletePrefix: invalid length (0; expected 1 <= length <= 512)",
            ),
        ];
        for (prefix, expect) in cases {
            req.check_delete_prefix = prefix.into();
            assert_eq!(err(&req), expect, "{prefix}");
        }
    }

    #[test]
    fn validators_never_panic_on_odd_input() {
        let odd = [
            "",
            ";",
            ";;",
            "/",
            "//",
            ".",
            "..",
            "%",
            "%%",
            "é",
            "\u{0}",
            "a;é",
            "\u{10ffff}",
            "s3://",
            "azure-ad://",
            "azure-ad://t",
            "file:",
            "http://[",
            "http://]",
            "http://:",
        ];
        for s in odd {
            let _ = validate_journal_name(s);
            let _ = validate_journal_spec_name(s);
            let _ = validate_fragment_store(s);
            let _ = validate_endpoint(s);
            let _ = parse_go_url(s);
            let _ = go_path_clean(s);
            let _ = check_template(s, "postfix");
            let _ = check_media_type(s);
            let mut spec = spec_fixture();
            spec.name = s.into();
            spec.labels = Some(label_set(&[("content-type", s)]));
            spec.fragment.as_mut().unwrap().stores = vec![s.into()];
            spec.fragment.as_mut().unwrap().path_postfix_template = s.into();
            let _ = spec.validate();
        }
        let _ = JournalSpec::default().validate();
        let _ = ReadResponse::default().validate();
        let _ = ReplicateRequest::default().validate();
        let _ = FragmentsRequest {
            signature_ttl: Some(Duration {
                seconds: i64::MIN,
                nanos: i32::MIN,
            }),
            journal: "good".into(),
            ..Default::default()
        }
        .validate();
    }
}
