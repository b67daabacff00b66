//! Tests of names, Go formatting, URLs and store URLs.

use super::testing::*;

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
