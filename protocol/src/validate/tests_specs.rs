//! Tests of specs, templates, Routes, Headers and Fragments.

use super::testing::*;

pub(crate) fn spec_fixture() -> JournalSpec {
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

pub(crate) fn fragment_fixture() -> Fragment {
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
