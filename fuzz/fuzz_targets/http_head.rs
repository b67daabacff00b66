//! HTTP/1.1 request heads, chunk-size lines and query strings (`courant_broker::front::http::parse`,
//! which depends on nothing but std). Nothing may panic, and whatever
//! parses must respect the parser's bounds.
#![no_main]

use courant_broker::front::http::parse;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((head, used))) = parse::parse_head(data) {
        assert!(used <= data.len());
        assert!(head.headers.len() <= parse::MAX_HEADERS);
        assert!(head.target.starts_with('/'));
        let _ = head.body_kind();
        let _ = head.keep_alive();
        let _ = parse::parse_query(head.query());
        let _ = parse::percent_decode(head.path(), false);
    }
    if let Ok(Some((_, used))) = parse::parse_chunk_line(data) {
        assert!(used <= data.len() && used <= parse::MAX_CHUNK_LINE_BYTES);
    }
    let text = String::from_utf8_lossy(data);
    let _ = parse::parse_query(&text);
});
