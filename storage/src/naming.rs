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
}
