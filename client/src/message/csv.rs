//! `text/csv` records as Go's `encoding/csv` writes and reads them (RFC 4180, comma
//! separated, `\n` line ends, `LazyQuotes` off), which is what Gazette's `csvFraming` uses.
//!
//! Lives on: any thread; pure functions over bytes.

/// Appends one record, quoted as Go's `csv.Writer` does, ending in `\n`.
pub fn write_record(fields: &[String], out: &mut Vec<u8>) {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if !needs_quotes(field) {
            out.extend_from_slice(field.as_bytes());
            continue;
        }
        out.push(b'"');
        for &byte in field.as_bytes() {
            if byte == b'"' {
                out.push(b'"');
            }
            out.push(byte);
        }
        out.push(b'"');
    }
    out.push(b'\n');
}

/// Go's `fieldNeedsQuotes`: separators, quotes, line breaks, `\.`, or a leading space.
fn needs_quotes(field: &str) -> bool {
    if field.is_empty() {
        return false;
    }
    if field == r"\."
        || field
            .bytes()
            .any(|b| matches!(b, b'\n' | b'\r' | b'"' | b','))
    {
        return true;
    }
    field.chars().next().is_some_and(char::is_whitespace)
}

/// The length of the first complete record in `buf` (through its `\n`), or `None` if no
/// record is complete yet. See [`RecordScanner`].
pub fn record_len(buf: &[u8]) -> Option<usize> {
    RecordScanner::default().scan(buf)
}

#[derive(Clone, Copy, Debug, Default)]
enum State {
    #[default]
    FieldStart,
    Bare,
    Quoted,
    QuoteInQuoted,
}

/// Finds where a record ends, resuming where the last call stopped, so that a long record
/// arriving in many chunks is scanned once. As in Go's reader, only a field that opens with a
/// quote is quoted, and a `\n` inside it does not end the record; a malformed record still
/// ends at its line end, so that [`parse_record`] reports it.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordScanner {
    state: State,
    scanned: usize,
}

impl RecordScanner {
    /// The record's length if `buf` (which only grows between calls) now holds all of it.
    pub fn scan(&mut self, buf: &[u8]) -> Option<usize> {
        for (i, &byte) in buf.iter().enumerate().skip(self.scanned) {
            self.state = match (self.state, byte) {
                (State::Quoted, b'"') => State::QuoteInQuoted,
                (State::Quoted, _) => State::Quoted,
                (State::QuoteInQuoted, b'"') => State::Quoted,
                (_, b'\n') => {
                    *self = RecordScanner::default();
                    return Some(i + 1);
                }
                (_, b',') => State::FieldStart,
                (State::FieldStart, b'"') => State::Quoted,
                _ => State::Bare,
            };
        }
        self.scanned = buf.len();
        None
    }
}

/// Whether a complete record is an empty line, which Go's reader skips.
pub fn is_blank(record: &[u8]) -> bool {
    record == b"\n" || record == b"\r\n"
}

/// Parses one complete record (as delimited by [`record_len`]) into its fields.
pub fn parse_record(record: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(record).map_err(|e| format!("CSV record is not UTF-8: {e}"))?;
    let normalized = normalize_line_ends(text);
    let line = normalized.strip_suffix('\n').unwrap_or(&normalized);
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        let (field, after) = if let Some(quoted) = rest.strip_prefix('"') {
            parse_quoted(quoted)?
        } else {
            parse_bare(rest)?
        };
        fields.push(field);
        match after {
            Some(next) => rest = next,
            None => return Ok(fields),
        }
    }
}

/// Go's reader turns each `\r\n` line end into `\n`, inside quoted fields too.
fn normalize_line_ends(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// A bare field up to the next comma; a quote inside it is Go's `ErrBareQuote`.
fn parse_bare(rest: &str) -> Result<(String, Option<&str>), String> {
    let (field, after) = match rest.find(',') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    if field.contains('"') {
        return Err(format!("bare \" in non-quoted CSV field {field:?}"));
    }
    Ok((field.to_string(), after))
}

/// A quoted field (after its opening quote): `""` is a quote, and the closing quote must be
/// followed by a comma or the end of the record (else Go's `ErrQuote`).
fn parse_quoted(rest: &str) -> Result<(String, Option<&str>), String> {
    let mut field = String::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            field.push(c);
            continue;
        }
        match chars.peek() {
            Some((_, '"')) => {
                field.push('"');
                chars.next();
            }
            Some((_, ',')) => return Ok((field, Some(&rest[i + 2..]))),
            None => return Ok((field, None)),
            Some(_) => return Err("extraneous or missing \" in quoted CSV field".to_string()),
        }
    }
    Err("missing closing \" in quoted CSV field".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn writes_as_go_csv_writer() {
        // Cases from Go's encoding/csv writer_test.go.
        let cases: [(&[&str], &str); 9] = [
            (&["abc"], "abc\n"),
            (&[r#""abc""#], "\"\"\"abc\"\"\"\n"),
            (&[r#"a"b"#], "\"a\"\"b\"\n"),
            (&[" abc"], "\" abc\"\n"),
            (&["abc,def"], "\"abc,def\"\n"),
            (&["abc", "def"], "abc,def\n"),
            (&["abc\ndef"], "\"abc\ndef\"\n"),
            (&["", ""], ",\n"),
            (&[r"\."], "\"\\.\"\n"),
        ];
        for (fields, expect) in cases {
            let mut out = Vec::new();
            write_record(&strings(fields), &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), expect, "{fields:?}");
        }
    }

    #[test]
    fn matches_go_outputs() {
        // Observed from Go 1.26's encoding/csv: Writer.Write of these fields, and Reader.Read
        // of a stream with CRLF line ends, blank lines and doubled quotes.
        let fields = strings(&[
            "a\"b", "c,d", "e\nf", "", " g", "h", r"\.", "\u{a0}x", "x\ry",
        ]);
        let mut out = Vec::new();
        write_record(&fields, &mut out);
        let go = "\"a\"\"b\",\"c,d\",\"e\nf\",,\" g\",h,\"\\.\",\"\u{a0}x\",\"x\ry\"\n";
        assert_eq!(String::from_utf8(out).unwrap(), go);

        let mut stream: &[u8] = b"\"a\r\nb\",c\r\n\n\nx,\"y\"\"z\"\n";
        let mut records = Vec::new();
        while let Some(n) = record_len(stream) {
            if !is_blank(&stream[..n]) {
                records.push(parse_record(&stream[..n]).unwrap());
            }
            stream = &stream[n..];
        }
        assert_eq!(records, [strings(&["a\nb", "c"]), strings(&["x", "y\"z"])]);
    }

    #[test]
    fn reads_what_it_writes() {
        let fields = strings(&["a\"b", "c,d", "e\nf", "", " g", "h"]);
        let mut out = Vec::new();
        write_record(&fields, &mut out);
        out.extend_from_slice(b"next,record\n");
        let n = record_len(&out).unwrap();
        assert_eq!(parse_record(&out[..n]).unwrap(), fields);
        assert_eq!(
            parse_record(&out[n..]).unwrap(),
            strings(&["next", "record"])
        );
    }

    #[test]
    fn a_scanner_resumes_across_chunks() {
        let record = b"\"a\nb\",\"c\"\"\nd\"\n";
        let mut scanner = RecordScanner::default();
        for end in 0..record.len() {
            assert_eq!(scanner.scan(&record[..end]), None, "{end}");
        }
        assert_eq!(scanner.scan(record), Some(record.len()));
        assert_eq!(
            scanner.scan(b"x\n"),
            Some(2),
            "a found record resets the scanner"
        );
    }

    #[test]
    fn crlf_and_incomplete_records() {
        assert_eq!(parse_record(b"a,b\r\n").unwrap(), strings(&["a", "b"]));
        assert_eq!(parse_record(b"\"a\r\nb\"\r\n").unwrap(), strings(&["a\nb"]));
        assert_eq!(record_len(b"\"a\nb"), None);
        assert_eq!(record_len(b"a,b"), None);
        assert!(is_blank(b"\r\n"));
    }

    #[test]
    fn malformed_quotes_are_errors() {
        for bad in [&b"a\"b,c\n"[..], b"\"ab\"c\n", b"\"abc\n", b"\xff\n"] {
            assert!(parse_record(bad).is_err(), "{bad:?}");
        }
    }
}
