//! HTTP/1.1 request heads and chunked bodies, parsed from untrusted bytes.
//!
//! Lives on: any (pure functions). Every parser here is bounded and returns an error for
//! anything it does not accept; none indexes past what it checked, so none can panic.

use std::fmt;

/// Largest request head (request line plus headers) accepted, in bytes.
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// Most header fields accepted in one request.
pub const MAX_HEADERS: usize = 64;
/// Longest chunk-size line (hex size plus extensions) of a chunked body.
pub const MAX_CHUNK_LINE_BYTES: usize = 256;

/// Why a request could not be parsed, with the HTTP status to answer it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The head is larger than [`MAX_HEAD_BYTES`] (431).
    HeadTooLarge,
    /// Any other malformed head or body (400).
    Malformed(&'static str),
    /// An HTTP version other than 1.0 or 1.1 (505).
    Version,
}

impl ParseError {
    pub fn status(&self) -> u16 {
        match self {
            ParseError::HeadTooLarge => 431,
            ParseError::Malformed(_) => 400,
            ParseError::Version => 505,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::HeadTooLarge => f.write_str("request header fields too large"),
            ParseError::Malformed(why) => write!(f, "malformed request: {why}"),
            ParseError::Version => f.write_str("HTTP version not supported"),
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The request target as sent (origin form: path and optional query).
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Header fields in order, names lowercased.
    pub headers: Vec<(String, String)>,
}

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
}

impl Head {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path part of the target (before any `?`).
    pub fn path(&self) -> &str {
        self.target
            .split_once('?')
            .map_or(self.target.as_str(), |(p, _)| p)
    }

    /// The raw query (after `?`), empty if none.
    pub fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }

    /// Whether the connection may serve another request after this one.
    pub fn keep_alive(&self) -> bool {
        let connection = self.header("connection").unwrap_or("").to_ascii_lowercase();
        let has = |token: &str| connection.split(',').any(|t| t.trim() == token);
        if self.minor_version == 0 {
            has("keep-alive")
        } else {
            !has("close")
        }
    }

    /// The body framing, per RFC 9112 §6.3 (Transfer-Encoding wins over Content-Length;
    /// conflicting or unparseable lengths are errors, as request smuggling guards).
    pub fn body_kind(&self) -> Result<BodyKind, ParseError> {
        let mut lengths = self
            .headers
            .iter()
            .filter(|(n, _)| n == "content-length")
            .map(|(_, v)| v.trim());
        if let Some(te) = self.header("transfer-encoding") {
            if self.header("content-length").is_some() {
                return Err(ParseError::Malformed(
                    "both Transfer-Encoding and Content-Length",
                ));
            }
            if te.trim().eq_ignore_ascii_case("chunked") {
                return Ok(BodyKind::Chunked);
            }
            return Err(ParseError::Malformed("unsupported Transfer-Encoding"));
        }
        let Some(first) = lengths.next() else {
            return Ok(BodyKind::None);
        };
        if lengths.any(|other| other != first) {
            return Err(ParseError::Malformed("conflicting Content-Length"));
        }
        if first.is_empty() || first.len() > 19 || !first.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::Malformed("invalid Content-Length"));
        }
        let n: u64 = first
            .parse()
            .map_err(|_| ParseError::Malformed("invalid Content-Length"))?;
        Ok(if n == 0 {
            BodyKind::None
        } else {
            BodyKind::Length(n)
        })
    }
}

/// Parses a request head from the start of `buf`. `Ok(None)` means more bytes are needed;
/// `Ok(Some((head, used)))` consumed `used` bytes (through the blank line).
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, ParseError> {
    // Tolerate (RFC 9112 §2.2) empty lines before the request line.
    let mut start = 0;
    while let Some(rest) = buf.get(start..) {
        if rest.starts_with(b"\r\n") {
            start += 2;
        } else if rest.starts_with(b"\n") {
            start += 1;
        } else {
            break;
        }
    }
    let body = buf.get(start..).unwrap_or_default();
    let Some(end) = find_head_end(body) else {
        if buf.len() > MAX_HEAD_BYTES {
            return Err(ParseError::HeadTooLarge);
        }
        return Ok(None);
    };
    if start + end.0 > MAX_HEAD_BYTES {
        return Err(ParseError::HeadTooLarge);
    }
    let text = std::str::from_utf8(body.get(..end.0).unwrap_or_default())
        .map_err(|_| ParseError::Malformed("head is not UTF-8"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::Malformed("bad request line"));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(ParseError::Malformed("bad method"));
    }
    if !target.starts_with('/') || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ParseError::Malformed("bad request target"));
    }
    let minor_version = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        v if v.starts_with("HTTP/") => return Err(ParseError::Version),
        _ => return Err(ParseError::Malformed("bad HTTP version")),
    };
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(ParseError::Malformed("obsolete line folding"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(ParseError::Malformed("header line without a colon"));
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(ParseError::Malformed("bad header name"));
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(ParseError::Malformed("control character in header value"));
        }
        if headers.len() == MAX_HEADERS {
            return Err(ParseError::HeadTooLarge);
        }
        headers.push((name.to_ascii_lowercase(), value.to_string()));
    }
    let head = Head {
        method: method.to_string(),
        target: target.to_string(),
        minor_version,
        headers,
    };
    Ok(Some((head, start + end.1)))
}

/// Finds the blank line ending a head: (length of the head text, bytes through the blank
/// line). Accepts CRLF or bare LF line endings.
fn find_head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let limit = buf.len().min(MAX_HEAD_BYTES + 4);
    let buf = buf.get(..limit)?;
    let mut i = 0;
    while i < buf.len() {
        if buf.get(i) == Some(&b'\n') {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses a chunk-size line (`<hex>[;ext]\r\n`) at the start of `buf`. `Ok(None)` means
/// more bytes are needed; `Ok(Some((size, used)))` consumed the line.
pub fn parse_chunk_line(buf: &[u8]) -> Result<Option<(u64, usize)>, ParseError> {
    let window = buf
        .get(..buf.len().min(MAX_CHUNK_LINE_BYTES))
        .unwrap_or(buf);
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() >= MAX_CHUNK_LINE_BYTES {
            return Err(ParseError::Malformed("chunk-size line too long"));
        }
        return Ok(None);
    };
    let line = window.get(..nl).unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let hex = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if hex.is_empty() || hex.len() > 15 {
        return Err(ParseError::Malformed("bad chunk size"));
    }
    let mut size: u64 = 0;
    for &b in hex {
        let digit = (b as char)
            .to_digit(16)
            .ok_or(ParseError::Malformed("bad chunk size"))?;
        size = size * 16 + u64::from(digit);
    }
    Ok(Some((size, nl + 1)))
}

/// Decodes `%XX` escapes and (for query strings) `+` as space. Invalid escapes are errors,
/// as in Go's `url.ParseQuery`.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Result<String, ParseError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = |at: usize| bytes.get(at).and_then(|&c| (c as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                    return Err(ParseError::Malformed("invalid URL escape"));
                };
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| ParseError::Malformed("URL is not UTF-8"))
}

/// Splits a query string into decoded (name, value) pairs, as Go's `url.ParseQuery`.
pub fn parse_query(query: &str) -> Result<Vec<(String, String)>, ParseError> {
    let mut out = Vec::new();
    for pair in query.split('&') {
        if pair.is_empty() {
            continue;
        }
        if pair.contains(';') {
            return Err(ParseError::Malformed(
                "invalid semicolon separator in query",
            ));
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((percent_decode(k, true)?, percent_decode(v, true)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_head_split_anywhere() {
        let raw = b"GET /a/journal?offset=5 HTTP/1.1\r\nHost: x\r\nX-Thing:  v \r\n\r\nrest";
        for split in 0..raw.len() - 4 {
            if let Some((head, used)) = parse_head(&raw[..split]).unwrap() {
                panic!("complete at {split}: {head:?} {used}");
            }
        }
        let (head, used) = parse_head(raw).unwrap().unwrap();
        assert_eq!(&raw[used..], b"rest");
        assert_eq!(head.method, "GET");
        assert_eq!(head.path(), "/a/journal");
        assert_eq!(head.query(), "offset=5");
        assert_eq!(head.header("x-thing"), Some("v"));
        assert!(head.keep_alive());
        assert_eq!(head.body_kind().unwrap(), BodyKind::None);
    }

    #[test]
    fn rejects_bad_heads_without_panicking() {
        let cases: &[&[u8]] = &[
            b"GET\r\n\r\n",
            b"GET / HTTP/1.1 extra\r\n\r\n",
            b"GET nopath HTTP/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET / FTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: \x01\r\n\r\n",
            b"GET /\xff HTTP/1.1\r\n\r\n",
        ];
        for raw in cases {
            assert!(
                matches!(parse_head(raw), Err(ParseError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        assert_eq!(
            parse_head(b"GET / HTTP/2.0\r\n\r\n").unwrap_err(),
            ParseError::Version
        );
    }

    #[test]
    fn bounds_head_size_and_header_count() {
        let mut raw = b"GET / HTTP/1.1\r\nX: ".to_vec();
        raw.resize(MAX_HEAD_BYTES + 10, b'a');
        assert_eq!(parse_head(&raw).unwrap_err(), ParseError::HeadTooLarge);
        let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&raw).unwrap_err(), ParseError::HeadTooLarge);
    }

    #[test]
    fn body_framing() {
        let head = |extra: &str| {
            let raw = format!("PUT /j HTTP/1.1\r\n{extra}\r\n");
            parse_head(raw.as_bytes()).unwrap().unwrap().0
        };
        assert_eq!(
            head("Content-Length: 12\r\n").body_kind().unwrap(),
            BodyKind::Length(12)
        );
        assert_eq!(
            head("Transfer-Encoding: chunked\r\n").body_kind().unwrap(),
            BodyKind::Chunked
        );
        for bad in [
            "Content-Length: -1\r\n",
            "Content-Length: 1\r\nContent-Length: 2\r\n",
            "Content-Length: 99999999999999999999\r\n",
            "Transfer-Encoding: gzip\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
        ] {
            assert!(head(bad).body_kind().is_err(), "{bad}");
        }
        let http10 = parse_head(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().0;
        assert!(!http10.keep_alive());
        assert!(!head("Connection: close\r\n").keep_alive());
    }

    #[test]
    fn chunk_lines() {
        assert_eq!(parse_chunk_line(b"1a\r\nxx").unwrap(), Some((26, 4)));
        assert_eq!(parse_chunk_line(b"0;ext=1\r\n").unwrap(), Some((0, 9)));
        assert_eq!(parse_chunk_line(b"1a").unwrap(), None);
        assert!(parse_chunk_line(b"zz\r\n").is_err());
        assert!(parse_chunk_line(b"\r\n").is_err());
        assert!(parse_chunk_line(b"ffffffffffffffffff\r\n").is_err());
        assert!(parse_chunk_line(&[b'1'; MAX_CHUNK_LINE_BYTES]).is_err());
    }

    /// A cheap stand-in for a fuzz target: random and mutated inputs never panic, and
    /// whatever parses respects the bounds.
    #[test]
    fn random_inputs_never_panic() {
        let seeds: &[&[u8]] = &[
            b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
            b"PUT /j HTTP/1.0\nTransfer-Encoding: chunked\n\n",
            b"1a;x=y\r\n",
            b"a=%41&b=+&c",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"\r\n :/?%=&;+-0123456789abcdefGHPTU\x00\xff\t";
        for round in 0..200_000u32 {
            let seed = seeds[round as usize % seeds.len()];
            let mut input = seed.to_vec();
            for _ in 0..(next() % 8) {
                let at = (next() as usize) % (input.len() + 1);
                let byte = alphabet[(next() as usize) % alphabet.len()];
                match next() % 3 {
                    0 => input.insert(at, byte),
                    1 if at < input.len() => input[at] = byte,
                    _ => input.truncate(at),
                }
            }
            if let Ok(Some((head, used))) = parse_head(&input) {
                assert!(used <= input.len() && head.headers.len() <= MAX_HEADERS);
                let _ = head.body_kind();
                let _ = head.keep_alive();
            }
            if let Ok(Some((_, used))) = parse_chunk_line(&input) {
                assert!(used <= input.len());
            }
            let text = String::from_utf8_lossy(&input);
            let _ = parse_query(&text);
            let _ = percent_decode(&text, false);
        }
    }

    #[test]
    fn queries_decode_like_go() {
        assert_eq!(
            parse_query("Offset=1&block=true&x=a%2Fb+c").unwrap(),
            vec![
                ("Offset".into(), "1".into()),
                ("block".into(), "true".into()),
                ("x".into(), "a/b c".into())
            ]
        );
        assert!(parse_query("a=%zz").is_err());
        assert!(parse_query("a=1;b=2").is_err());
        assert!(parse_query("a=%").is_err());
    }
}
