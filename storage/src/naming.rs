//! Fragment naming and store layout, byte-compatible with Gazette's
//! (`broker/protocol/fragment_extensions.go`), so that Gazette and Courant
//! brokers can share one bucket.
//!
//! * Content name: `%016x-%016x-%x<ext>`: begin and end as 16 lowercase hex
//!   digits, the SHA-1 of the content as 40, then the codec's extension.
//! * Content path: `<journal>/<path_postfix>/<content name>` (the postfix and
//!   its slash are absent when the postfix is empty).
//! * Object location in a store: `<store prefix>` + the content path, where
//!   the first occurrence of a store's `find` argument in the content path is
//!   replaced by its `replace` ([`rewrite_path`]).
//!
//! A store listing under `<prefix><journal>/` yields paths relative to that
//! prefix; [`parse_relative_path`] turns one into a Fragment, or an error for
//! an object that is not a fragment (callers skip it with a log line).
//!
//! Lives on: any thread (pure functions).

use protocol::validate::Validate;
use protocol::{CompressionCodec, Fragment};

use crate::StorageError;

/// The extension Gazette writes for `codec`. GZIP_OFFLOAD_DECOMPRESSION has
/// none (Gazette plans `.gzod`, which parsing already accepts).
pub fn extension(codec: CompressionCodec) -> &'static str {
    match codec {
        CompressionCodec::None => ".raw",
        CompressionCodec::Gzip => ".gz",
        CompressionCodec::Zstandard => ".zst",
        CompressionCodec::Snappy => ".sz",
        CompressionCodec::GzipOffloadDecompression => "",
        // INVALID is rejected by fragment validation long before naming;
        // `.raw` keeps this total rather than panicking on a bad spec.
        CompressionCodec::Invalid => ".raw",
    }
}

/// The codec of a name's extension (including its dot), matched
/// case-insensitively against every alias Gazette accepts.
pub fn codec_from_extension(ext: &str) -> Option<CompressionCodec> {
    match ext.to_ascii_lowercase().as_str() {
        ".raw" => Some(CompressionCodec::None),
        ".gz" | ".gzip" => Some(CompressionCodec::Gzip),
        ".zst" | ".zstandard" => Some(CompressionCodec::Zstandard),
        ".sz" | ".snappy" => Some(CompressionCodec::Snappy),
        "" | ".gzod" => Some(CompressionCodec::GzipOffloadDecompression),
        _ => None,
    }
}

fn codec_of(f: &Fragment) -> CompressionCodec {
    CompressionCodec::try_from(f.compression_codec).unwrap_or(CompressionCodec::Invalid)
}

/// The content-addressed base name of `f`.
pub fn content_name(f: &Fragment) -> String {
    let sum = f.sum.unwrap_or_default();
    format!(
        "{:016x}-{:016x}-{}{}",
        f.begin,
        f.end,
        protocol::sum::sum_to_hex(&sum),
        extension(codec_of(f))
    )
}

/// The content-addressed path of `f`, relative to a store's prefix (before
/// any find/replace rewriting): Go's `path.Join(journal, postfix, name)`.
/// Journal names and postfixes are validated clean paths, so joining the
/// non-empty parts with `/` is what `path.Join` produces for them.
pub fn content_path(f: &Fragment) -> String {
    let name = content_name(f);
    if f.path_postfix.is_empty() {
        format!("{}/{}", f.journal, name)
    } else {
        format!("{}/{}/{}", f.journal, f.path_postfix, name)
    }
}

/// The listing prefix of `journal`, relative to a store's prefix.
pub fn journal_prefix(journal: &str) -> String {
    format!("{journal}/")
}

/// Applies a store's `find`/`replace` arguments to a path relative to the
/// store prefix: the first occurrence of `find` is replaced (no change when
/// `find` is empty or absent).
pub fn rewrite_path(find: &str, replace: &str, path: &str) -> String {
    if find.is_empty() {
        return path.to_string();
    }
    path.replacen(find, replace, 1)
}

/// Parses a fragment from `rel`, an object path relative to `<journal>/`
/// in a store: an optional postfix directory and a content name. The
/// returned fragment has no backing store and no mod time; the lister sets
/// them. Every failure is an error, never a panic.
pub fn parse_relative_path(journal: &str, rel: &str) -> Result<Fragment, StorageError> {
    let invalid = |reason: String| StorageError::InvalidName {
        name: rel.to_string(),
        reason,
    };
    let (postfix, name) = match rel.rfind('/') {
        None => ("", rel),
        // Go's path.Dir of "/x" is "/", which no postfix validates.
        Some(0) => return Err(invalid("empty path component".into())),
        Some(i) => (&rel[..i], &rel[i + 1..]),
    };
    // Go's path.Ext: from the last dot of the base name.
    let (stem, ext) = match name.rfind('.') {
        Some(i) => (&name[..i], &name[i..]),
        None => (name, ""),
    };
    let fields: Vec<&str> = stem.split('-').collect();
    if fields.len() != 3 {
        return Err(invalid(format!("wrong Fragment format: {stem}")));
    }
    let hex_i64 = |field: &str, what: &str| {
        i64::from_str_radix(field, 16).map_err(|e| invalid(format!("{what}: {e}")))
    };
    let begin = hex_i64(fields[0], "Begin")?;
    let end = hex_i64(fields[1], "End")?;
    let mut digest = [0u8; protocol::sum::SHA1_LEN];
    if fields[2].len() != 2 * digest.len() {
        return Err(invalid(format!("invalid SHA1Sum length: {}", fields[2])));
    }
    hex::decode_to_slice(fields[2], &mut digest).map_err(|e| invalid(format!("Sum: {e}")))?;
    let codec = codec_from_extension(ext)
        .ok_or_else(|| invalid(format!("unrecognized compression extension: {ext}")))?;
    let fragment = Fragment {
        journal: journal.to_string(),
        begin,
        end,
        sum: Some(protocol::sum::sum_from_bytes(&digest)),
        compression_codec: codec as i32,
        backing_store: String::new(),
        mod_time: 0,
        path_postfix: postfix.to_string(),
    };
    fragment.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(fragment)
}

/// What a `path_postfix_template` is evaluated over: Gazette executes it over
/// `struct { Spool; *JournalSpec }`, where the spool embeds its Fragment.
pub struct PostfixInput<'a> {
    /// The completed fragment (the spool's).
    pub fragment: &'a Fragment,
    /// The spool's first append, as Unix nanoseconds (UTC).
    pub first_append_unix_nanos: i128,
    pub spec: &'a protocol::JournalSpec,
}

/// Evaluates a `path_postfix_template` with the subset of Go's `text/template`
/// that Gazette users rely on: literal text, comments, trim markers
/// (`{{-`, `-}}`), and single-command actions that are a field chain, like
/// `{{ .Spool.Begin }}` or `{{ .JournalSpec.Name }}` (Spool's Fragment fields
/// and FirstAppendTime are promoted, as in Go), optionally ending in a
/// method of `FirstAppendTime`: `Format "<Go layout>"`, `Unix`, `Year`,
/// `YearDay`, `Month`, `Day`, `Hour`, `Minute`, `Second`. Times are in UTC
/// (Gazette formats in the broker's local zone, UTC in usual deployments).
/// Anything else (pipelines, functions, `if`/`range`, `.Registers`) is an
/// error naming the action.
pub fn eval_path_postfix(template: &str, input: &PostfixInput) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    let mut trim_next = false;
    loop {
        let Some(open) = rest.find("{{") else {
            push_text(&mut out, rest, trim_next, false);
            return Ok(out);
        };
        let mut body = &rest[open + 2..];
        let trim_before =
            body.starts_with("- ") || body.starts_with("-\t") || body.starts_with("-\n");
        if trim_before {
            body = &body[1..];
        }
        push_text(&mut out, &rest[..open], trim_next, trim_before);
        let close = find_close(body).ok_or_else(|| format!("unclosed action in {template:?}"))?;
        let mut action = &body[..close];
        rest = &body[close + 2..];
        trim_next = false;
        if let Some(a) = action.strip_suffix('-')
            && a.ends_with(|c: char| c.is_ascii_whitespace())
        {
            action = a;
            trim_next = true;
        }
        let action = action.trim();
        if action.starts_with("/*") && action.ends_with("*/") {
            continue;
        }
        out.push_str(&eval_action(action, input)?);
    }
}

fn push_text(out: &mut String, text: &str, trim_start: bool, trim_end: bool) {
    let mut t = text;
    if trim_start {
        t = t.trim_start();
    }
    if trim_end {
        t = t.trim_end();
    }
    out.push_str(t);
}

/// The offset of the `}}` closing an action, skipping quoted strings.
fn find_close(body: &str) -> Option<usize> {
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'}' if b.get(i + 1) == Some(&b'}') => return Some(i),
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                i += 1;
                while i < b.len() && b[i] != b'`' {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

enum Value {
    Root,
    Spool,
    Fragment,
    Spec,
    Str(String),
    Int(i64),
    Codec(i32),
    Time,
    Month(usize),
}

fn eval_action(action: &str, input: &PostfixInput) -> Result<String, String> {
    let unsupported = || format!("unsupported template action {{{{{action}}}}}");
    let (chain, arg) = match action.find(|c: char| c.is_ascii_whitespace()) {
        Some(i) => (&action[..i], Some(action[i..].trim())),
        None => (action, None),
    };
    if !chain.starts_with('.') || chain.len() < 2 {
        return Err(unsupported());
    }
    let arg = match arg {
        None => None,
        Some(a) => Some(parse_string_literal(a).ok_or_else(unsupported)?),
    };
    let names: Vec<&str> = chain[1..].split('.').collect();
    let f = input.fragment;
    let mut value = Value::Root;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        value = match (&value, *name) {
            (Value::Root, "Spool") => Value::Spool,
            (Value::Root, "JournalSpec") => Value::Spec,
            (Value::Spool, "Fragment") => Value::Fragment,
            (Value::Root | Value::Spool, "FirstAppendTime") => Value::Time,
            (Value::Root | Value::Spec, "Name") => Value::Str(input.spec.name.clone()),
            (Value::Root | Value::Spec, "Replication") => Value::Int(input.spec.replication.into()),
            (Value::Root | Value::Spool | Value::Fragment, field) => match field {
                "Journal" => Value::Str(f.journal.clone()),
                "Begin" => Value::Int(f.begin),
                "End" => Value::Int(f.end),
                "CompressionCodec" => Value::Codec(f.compression_codec),
                "BackingStore" => Value::Str(f.backing_store.clone()),
                "ModTime" => Value::Int(f.mod_time),
                "PathPostfix" => Value::Str(f.path_postfix.clone()),
                _ => return Err(unsupported()),
            },
            (Value::Time, method) => {
                let t = civil(input.first_append_unix_nanos);
                if method == "Format" {
                    if !last {
                        return Err(unsupported());
                    }
                    let layout = arg.as_deref().ok_or_else(unsupported)?;
                    return Ok(go_format(&t, layout));
                }
                match method {
                    "Unix" => Value::Int(t.unix),
                    "Year" => Value::Int(t.year),
                    "YearDay" => Value::Int(t.yday),
                    "Month" => Value::Month(t.month),
                    "Day" => Value::Int(t.day),
                    "Hour" => Value::Int(t.hour),
                    "Minute" => Value::Int(t.minute),
                    "Second" => Value::Int(t.second),
                    _ => return Err(unsupported()),
                }
            }
            _ => return Err(unsupported()),
        };
    }
    if arg.is_some() {
        return Err(unsupported());
    }
    Ok(match value {
        Value::Str(s) => s,
        Value::Int(n) => n.to_string(),
        Value::Codec(c) => CompressionCodec::try_from(c)
            .map(|c| c.as_str_name().to_string())
            .unwrap_or_else(|_| c.to_string()),
        Value::Month(m) => MONTHS[m - 1].to_string(),
        Value::Time => go_format(
            &civil(input.first_append_unix_nanos),
            "2006-01-02 15:04:05.999999999 -0700 MST",
        ),
        _ => return Err(unsupported()),
    })
}

/// A Go string literal: `"…"` (common escapes) or `` `…` ``.
fn parse_string_literal(s: &str) -> Option<String> {
    if let Some(raw) = s.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        return Some(raw.to_string());
    }
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '"' {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            'n' => '\n',
            't' => '\t',
            '\\' => '\\',
            '"' => '"',
            _ => return None,
        });
    }
    Some(out)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A UTC instant broken into Go's calendar fields.
struct Civil {
    unix: i64,
    year: i64,
    month: usize,
    day: i64,
    yday: i64,
    wday: usize,
    hour: i64,
    minute: i64,
    second: i64,
    nanos: i64,
}

fn civil(unix_nanos: i128) -> Civil {
    let unix = unix_nanos.div_euclid(1_000_000_000) as i64;
    let nanos = unix_nanos.rem_euclid(1_000_000_000) as i64;
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    const BEFORE: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = BEFORE[month as usize - 1] + day + i64::from(leap && month > 2);
    Civil {
        unix,
        year,
        month: month as usize,
        day,
        yday,
        wday: (days + 4).rem_euclid(7) as usize,
        hour: secs / 3600,
        minute: secs % 3600 / 60,
        second: secs % 60,
        nanos,
    }
}

/// Go's `time.Time.Format` for a UTC time: the layout's reference-time
/// elements (`2006`, `01`, `Jan`, `15`, `.000`, `-07:00`, `MST`, …) are
/// replaced, everything else is copied.
pub fn go_format_unix_nanos(unix_nanos: i128, layout: &str) -> String {
    go_format(&civil(unix_nanos), layout)
}

fn go_format(t: &Civil, layout: &str) -> String {
    let mut out = String::new();
    let b = layout.as_bytes();
    let mut i = 0;
    let at = |i: usize, s: &str| layout.get(i..).is_some_and(|r| r.starts_with(s));
    let hour12 = if t.hour % 12 == 0 { 12 } else { t.hour % 12 };
    while i < b.len() {
        // (replacement, layout bytes consumed)
        let std: Option<(String, usize)> = match b[i] {
            b'J' if at(i, "January") => Some((MONTHS[t.month - 1].into(), 7)),
            b'J' if at(i, "Jan") => Some((MONTHS[t.month - 1][..3].into(), 3)),
            b'M' if at(i, "Monday") => Some((DAYS[t.wday].into(), 6)),
            b'M' if at(i, "Mon") => Some((DAYS[t.wday][..3].into(), 3)),
            b'M' if at(i, "MST") => Some(("UTC".into(), 3)),
            b'0' => match b.get(i + 1) {
                Some(b'1') => Some((format!("{:02}", t.month), 2)),
                Some(b'2') => Some((format!("{:02}", t.day), 2)),
                Some(b'3') => Some((format!("{hour12:02}"), 2)),
                Some(b'4') => Some((format!("{:02}", t.minute), 2)),
                Some(b'5') => Some((format!("{:02}", t.second), 2)),
                Some(b'6') => Some((format!("{:02}", t.year.rem_euclid(100)), 2)),
                Some(b'0') if b.get(i + 2) == Some(&b'2') => Some((format!("{:03}", t.yday), 3)),
                _ => None,
            },
            b'1' if b.get(i + 1) == Some(&b'5') => Some((format!("{:02}", t.hour), 2)),
            b'1' => Some((t.month.to_string(), 1)),
            b'2' if at(i, "2006") => Some((format!("{:04}", t.year), 4)),
            b'2' => Some((t.day.to_string(), 1)),
            b'_' if at(i, "_2006") => Some((format!("_{:04}", t.year), 5)),
            b'_' if at(i, "_2") => Some((format!("{:>2}", t.day), 2)),
            b'_' if at(i, "__2") => Some((format!("{:>3}", t.yday), 3)),
            b'3' => Some((hour12.to_string(), 1)),
            b'4' => Some((t.minute.to_string(), 1)),
            b'5' => Some((t.second.to_string(), 1)),
            b'P' if at(i, "PM") => Some(((if t.hour >= 12 { "PM" } else { "AM" }).into(), 2)),
            b'p' if at(i, "pm") => Some(((if t.hour >= 12 { "pm" } else { "am" }).into(), 2)),
            b'-' | b'Z' => {
                let z = b[i] == b'Z';
                let forms = [
                    ("070000", "000000"),
                    ("07:00:00", "00:00:00"),
                    ("0700", "0000"),
                    ("07:00", "00:00"),
                    ("07", "00"),
                ];
                forms.iter().find(|(f, _)| at(i + 1, f)).map(|(f, zero)| {
                    (
                        if z {
                            "Z".to_string()
                        } else {
                            format!("+{zero}")
                        },
                        1 + f.len(),
                    )
                })
            }
            b'.' | b',' if matches!(b.get(i + 1), Some(b'0' | b'9')) => {
                let digit = b[i + 1];
                let mut j = i + 1;
                while j < b.len() && b[j] == digit {
                    j += 1;
                }
                if b.get(j).is_some_and(|c| c.is_ascii_digit()) {
                    None
                } else {
                    let n = j - i - 1;
                    let frac = format!("{:09}", t.nanos);
                    let mut digits = frac[..n.min(9)].to_string();
                    if digit == b'9' {
                        digits = digits.trim_end_matches('0').to_string();
                    }
                    let s = if digits.is_empty() {
                        String::new()
                    } else {
                        format!("{}{digits}", b[i] as char)
                    };
                    Some((s, j - i))
                }
            }
            _ => None,
        };
        match std {
            Some((s, n)) => {
                out.push_str(&s);
                i += n;
            }
            None => {
                let ch = layout[i..].chars().next().unwrap_or_default();
                out.push(ch);
                i += ch.len_utf8().max(1);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum_0102() -> protocol::Sha1Sum {
        let digest: Vec<u8> = (1..=20).collect();
        protocol::sum::sum_from_slice(&digest).unwrap()
    }

    fn fixture(codec: CompressionCodec) -> Fragment {
        Fragment {
            journal: "a/journal/name".into(),
            begin: 1234567890,
            end: i64::MAX,
            sum: Some(sum_0102()),
            compression_codec: codec as i32,
            ..Default::default()
        }
    }

    /// Spec §10 scenario 37.
    #[test]
    fn scenario_37_names_and_paths() {
        let name = "00000000499602d2-7fffffffffffffff-0102030405060708090a0b0c0d0e0f1011121314";
        assert_eq!(
            content_name(&fixture(CompressionCodec::Gzip)),
            format!("{name}.gz")
        );
        assert_eq!(
            content_name(&fixture(CompressionCodec::Snappy)),
            format!("{name}.sz")
        );
        assert_eq!(
            content_name(&fixture(CompressionCodec::GzipOffloadDecompression)),
            name
        );
        assert_eq!(
            content_name(&fixture(CompressionCodec::None)),
            format!("{name}.raw")
        );
        assert_eq!(
            content_name(&fixture(CompressionCodec::Zstandard)),
            format!("{name}.zst")
        );

        let mut f = fixture(CompressionCodec::Gzip);
        assert_eq!(content_path(&f), format!("a/journal/name/{name}.gz"));
        f.path_postfix = "a=1/b=2".into();
        assert_eq!(
            content_path(&f),
            format!("a/journal/name/a=1/b=2/{name}.gz")
        );

        let parsed = parse_relative_path("a/journal/name", &format!("a=1/b=2/{name}.gz")).unwrap();
        assert_eq!(parsed, f);
        let parsed = parse_relative_path("a/journal/name", &format!("{name}.gz")).unwrap();
        assert_eq!(parsed.path_postfix, "");
        assert_eq!(parsed.begin, 1234567890);
        assert_eq!(parsed.end, i64::MAX);
    }

    #[test]
    fn extension_aliases_parse_case_insensitively() {
        let name = "0000000000000000-0000000000000001-0102030405060708090a0b0c0d0e0f1011121314";
        for (ext, codec) in [
            (".raw", CompressionCodec::None),
            (".RAW", CompressionCodec::None),
            (".gz", CompressionCodec::Gzip),
            (".GZIP", CompressionCodec::Gzip),
            (".zst", CompressionCodec::Zstandard),
            (".ZStandard", CompressionCodec::Zstandard),
            (".sz", CompressionCodec::Snappy),
            (".Snappy", CompressionCodec::Snappy),
            ("", CompressionCodec::GzipOffloadDecompression),
            (".gzod", CompressionCodec::GzipOffloadDecompression),
        ] {
            let f = parse_relative_path("a/journal", &format!("{name}{ext}")).unwrap();
            assert_eq!(f.compression_codec, codec as i32, "{ext}");
        }
        // Every codec's own extension parses back to it.
        for codec in [
            CompressionCodec::None,
            CompressionCodec::Gzip,
            CompressionCodec::Zstandard,
            CompressionCodec::Snappy,
            CompressionCodec::GzipOffloadDecompression,
        ] {
            assert_eq!(codec_from_extension(extension(codec)), Some(codec));
        }
    }

    #[test]
    fn unparseable_names_are_errors() {
        let sum = "0102030405060708090a0b0c0d0e0f1011121314";
        for bad in [
            "README.md".to_string(),
            format!("0-1-{sum}.lz4"),                // unknown extension
            format!("0-1-{sum}-x.raw"),              // four fields
            format!("zz-1-{sum}.raw"),               // bad begin
            format!("0-1-{}.raw", &sum[..38]),       // short sum
            format!("0-1-{}xx.raw", &sum[..38]),     // not hex
            format!("2-1-{sum}.raw"),                // begin > end
            format!("0-8000000000000000-{sum}.raw"), // end overflows i64
            format!("/0-1-{sum}.raw"),               // empty postfix component
            format!("a/../0-1-{sum}.raw"),           // unclean postfix
            format!(".partial-0000000000000000-0000000000000001-{sum}.raw"),
            String::new(),
        ] {
            assert!(parse_relative_path("a/journal", &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn find_and_replace_rewrites_the_first_occurrence() {
        assert_eq!(rewrite_path("", "x", "a/b/a"), "a/b/a");
        assert_eq!(rewrite_path("a/", "z/", "a/b/a/c"), "z/b/a/c");
        assert_eq!(rewrite_path("q", "z", "a/b"), "a/b");
        assert_eq!(
            rewrite_path(
                "/bar/v1/page-views/",
                "/old-path/page-views/",
                "foo/bar/v1/page-views/part-000"
            ),
            "foo/old-path/page-views/part-000"
        );
    }

    fn postfix(template: &str) -> Result<String, String> {
        let f = Fragment {
            journal: "a/journal".into(),
            begin: 0x10,
            end: 0x20,
            compression_codec: CompressionCodec::Snappy as i32,
            ..Default::default()
        };
        let spec = protocol::JournalSpec {
            name: "a/journal".into(),
            replication: 3,
            ..Default::default()
        };
        // 2024-02-29T13:04:05.123456789Z, a Thursday.
        let input = PostfixInput {
            fragment: &f,
            first_append_unix_nanos: 1_709_211_845_123_456_789,
            spec: &spec,
        };
        eval_path_postfix(template, &input)
    }

    #[test]
    fn path_postfix_templates_evaluate_as_go() {
        let ok = |t: &str, want: &str| assert_eq!(postfix(t).unwrap(), want, "{t}");
        ok("", "");
        ok("plain", "plain");
        ok(
            r#"date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}"#,
            "date=2024-02-29/hour=13",
        );
        ok("{{.Spool.Begin}}-{{.Spool.End}}", "16-32");
        ok(
            "{{ .Spool.Fragment.Journal }}/{{.JournalSpec.Name}}/{{.Name}}",
            "a/journal/a/journal/a/journal",
        );
        ok(
            "{{.Begin}}/{{.CompressionCodec}}/{{.Replication}}",
            "16/SNAPPY/3",
        );
        ok(
            "{{ .FirstAppendTime.Unix }}/{{.Spool.FirstAppendTime.Month}}/{{.FirstAppendTime.YearDay}}",
            "1709211845/February/60",
        );
        ok("a {{- /* comment */ -}} b", "ab");
        ok("x  {{- .Spool.Begin }}  y", "x16  y");
        ok(
            r#"{{ .Spool.FirstAppendTime.Format `Mon Jan _2 03:04:05.000 PM -07:00 MST 06 002` }}"#,
            "Thu Feb 29 01:04:05.123 PM +00:00 UTC 24 060",
        );
        ok(
            r#"{{ .Spool.FirstAppendTime.Format "2006-01-02T15:04:05.999999999Z07:00" }}"#,
            "2024-02-29T13:04:05.123456789Z",
        );
        ok(
            r#"{{ .Spool.FirstAppendTime.Format "January 2, 2006 3pm .99 ,000000" }}"#,
            "February 29, 2024 1pm .12 ,123456",
        );
        for bad in [
            "{{ .Spool.Registers }}",
            "{{ .Nope }}",
            "{{ if .Spool.Begin }}x{{ end }}",
            "{{ .Spool.Begin | printf \"%d\" }}",
            "{{ .Spool.FirstAppendTime.Format }}",
            "{{ .Spool.Begin \"x\" }}",
            "{{ .Spool",
            "{{ .Spool }}",
        ] {
            assert!(postfix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn go_time_format_at_epoch_edges() {
        assert_eq!(
            go_format_unix_nanos(0, "2006-01-02 15:04:05 Monday"),
            "1970-01-01 00:00:00 Thursday"
        );
        assert_eq!(
            go_format_unix_nanos(-1_000_000_000, "2006-01-02 15:04:05.9"),
            "1969-12-31 23:59:59"
        );
        assert_eq!(
            go_format_unix_nanos(951_782_400_000_000_000, "2006-01-02 __2"),
            "2000-02-29  60"
        );
    }
}
