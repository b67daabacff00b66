//! Go-compatible formatting: quoting, durations and enum names in Gazette's texts.

#[allow(unused_imports)]
use super::*;

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

pub(crate) fn opt_duration(d: &Option<prost_types::Duration>, field: &str) -> Result<i64, Verr> {
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
pub(crate) fn enum_name(known: Option<&'static str>, value: i32) -> String {
    match known {
        Some(name) => name.to_string(),
        None => value.to_string(),
    }
}

pub(crate) fn codec_name(v: i32) -> String {
    enum_name(
        CompressionCodec::try_from(v).ok().map(|c| c.as_str_name()),
        v,
    )
}

pub(crate) fn status_name(v: i32) -> String {
    enum_name(Status::try_from(v).ok().map(|s| s.as_str_name()), v)
}

pub(crate) fn append_suspend_name(v: i32) -> String {
    enum_name(
        append_request::Suspend::try_from(v)
            .ok()
            .map(|s| s.as_str_name()),
        v,
    )
}

/// Compact protobuf text, as Go's generated `String()` methods render messages inside
/// some of Gazette's error messages.
pub mod text {
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
