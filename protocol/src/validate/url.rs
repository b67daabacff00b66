//! Go's net/url parsing (the subset Gazette's validation depends upon).

#[allow(unused_imports)]
use super::*;

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

pub(crate) fn split_host_port(host: &str) -> (&str, &str) {
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
pub(crate) enum Esc {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

pub(crate) fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

pub(crate) fn unhex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// Whether `c` must be escaped within a host (Go's `shouldEscape` in host mode).
pub(crate) fn host_should_escape(c: u8) -> bool {
    !(c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&c))
}

pub(crate) fn escape_error(b: &[u8]) -> String {
    format!("invalid URL escape {}", go_quote_bytes(b))
}

pub(crate) fn go_unescape(s: &str, mode: Esc) -> Result<String, String> {
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

pub(crate) fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        _ if port.is_empty() => true,
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

pub(crate) fn parse_host(host: &str) -> Result<String, String> {
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

pub(crate) fn valid_userinfo(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
}

pub(crate) fn parse_authority(authority: &str) -> Result<(Option<String>, String), String> {
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

pub(crate) fn get_scheme(raw: &str) -> Result<(&str, &str), String> {
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

pub(crate) fn parse_url_inner(raw: &str) -> Result<GoUrl, String> {
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

pub(crate) fn check_endpoint(ep: &str) -> VResult {
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
