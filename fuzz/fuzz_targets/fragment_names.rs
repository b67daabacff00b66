//! Fragment names and store listings (`storage::naming`): object paths from a store listing through
//! `parse_relative_path`, extensions through `codec_from_extension`, and
//! `path_postfix_template`s through `eval_path_postfix`. Nothing may panic; a path that
//! parses must name itself again (`content_path` round trip).
#![no_main]

use storage::naming;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte picks how the rest splits into a journal and a relative path.
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let at = (split as usize).min(text.len());
    let (journal, rel) = match text.is_char_boundary(at) {
        true => text.split_at(at),
        false => ("a/journal", &*text),
    };
    let _ = naming::codec_from_extension(rel);
    for journal in [journal, "a/journal"] {
        if let Ok(f) = naming::parse_relative_path(journal, rel) {
            assert_eq!(f.journal, journal);
            // What parsed is a fragment whose own name parses back to it.
            let path = naming::content_path(&f);
            let again = naming::parse_relative_path(journal, &path[journal.len() + 1..])
                .expect("a content path parses");
            assert_eq!((again.begin, again.end, again.sum), (f.begin, f.end, f.sum));
        }
    }
    let spec = protocol::JournalSpec {
        name: "a/journal".into(),
        ..Default::default()
    };
    let fragment = protocol::Fragment {
        journal: "a/journal".into(),
        begin: 1,
        end: 2,
        ..Default::default()
    };
    let input = naming::PostfixInput {
        fragment: &fragment,
        first_append_unix_nanos: i128::from(split) * 1_000_000_007_000_000_000 - (1i128 << 62),
        spec: &spec,
    };
    let _ = naming::eval_path_postfix(&text, &input);
});
