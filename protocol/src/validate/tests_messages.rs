//! Tests of the RPC messages, and of validators on odd input.

use super::testing::*;
use super::tests_specs::{fragment_fixture, spec_fixture};

#[test]
fn read_request_cases() {
    let mut req = ReadRequest {
        header: Some(bad_header()),
        journal: "/bad".into(),
        offset: -2,
        end_offset: -1,
        ..Default::default()
    };
    assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut req.header);
    assert_eq!(err(&req), "Journal: cannot begin with '/' (/bad)");
    req.journal = "good".into();
    assert_eq!(
        err(&req),
        "invalid Offset (-2; expected -1 <= Offset <= MaxInt64)"
    );
    req.offset = -1;
    assert_eq!(
        err(&req),
        "invalid EndOffset (-1; expected 0 or Offset <= EndOffset)"
    );
    req.end_offset = 100;
    ok(&req);
    req.offset = 101;
    assert_eq!(
        err(&req),
        "invalid EndOffset (100; expected 0 or Offset <= EndOffset)"
    );
    req.end_offset = 101;
    ok(&req);
    req.end_offset = 0;
    ok(&req);

    // Spec scenario 23.
    let req = ReadRequest {
        journal: "/invalid/journal".into(),
        ..Default::default()
    };
    assert_eq!(
        err(&req),
        "Journal: cannot begin with '/' (/invalid/journal)"
    );
    let req = ReadRequest {
        journal: "/invalid/name".into(),
        ..Default::default()
    };
    assert_eq!(err(&req), "Journal: cannot begin with '/' (/invalid/name)");
    // Requests may name a journal with a metadata segment.
    let req = ReadRequest {
        journal: "a/journal;with/meta".into(),
        ..Default::default()
    };
    ok(&req);
}

#[test]
fn read_response_cases() {
    let mut frag = fragment_fixture();
    frag.journal = "/bad/name".into();
    frag.end = 0x8bd03835;
    frag.compression_codec = CompressionCodec::Snappy as i32;
    let mut resp = ReadResponse {
        status: 9101,
        header: Some(bad_header()),
        offset: 1234,
        write_head: 5678,
        fragment: Some(frag.clone()),
        fragment_url: ":/bad/url".into(),
        content: Default::default(),
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = 0;
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    assert_eq!(
        err(&resp),
        "Fragment.Journal: cannot begin with '/' (/bad/name)"
    );
    resp.fragment.as_mut().unwrap().journal = "a/journal".into();
    assert_eq!(
        err(&resp),
        "invalid Offset (1234; expected 1234567890 <= offset < 2345678901)"
    );
    resp.offset = 1234567891;
    assert_eq!(
        err(&resp),
        "invalid WriteHead (5678; expected >= 2345678901)"
    );
    resp.write_head = 2345678901;
    assert_eq!(
        err(&resp),
        r#"FragmentUrl: parse ":/bad/url": missing protocol scheme"#
    );
    resp.fragment_url = "http://foo".into();
    ok(&resp);

    resp.fragment = None;
    resp.write_head = -1;
    assert_eq!(err(&resp), "invalid WriteHead (-1; expected >= 0)");
    resp.write_head = 1234;
    assert_eq!(
        err(&resp),
        "unexpected Offset without Fragment or Content (1234567891)"
    );
    resp.offset = 0;
    assert_eq!(
        err(&resp),
        "unexpected FragmentUrl without Fragment (http://foo)"
    );
    resp.fragment_url = String::new();
    ok(&resp);

    resp.content = bytes::Bytes::from_static(b"foobar");
    resp.fragment = Some(frag.clone());
    resp.offset = 5678;
    resp.fragment_url = "http://foo".into();
    resp.status = Status::WrongRoute as i32;
    assert_eq!(err(&resp), "unexpected Status with Content (WRONG_ROUTE)");
    resp.status = 0;
    assert_eq!(
        err(&resp),
        r#"unexpected Header with Content (process_id:<zone:"zone" suffix:"name" > route:<members:<zone:"zone" suffix:"name" > > etcd:<cluster_id:12 member_id:34 revision:56 raft_term:78 > )"#
    );
    resp.header = None;
    assert_eq!(err(&resp), "unexpected WriteHead with Content (1234)");
    resp.write_head = 0;
    assert_eq!(
        err(&resp),
        r#"unexpected Fragment with Content (journal:"/bad/name" begin:1234567890 end:2345678901 sum:<part1:72623859790382856 part2:651345242494996240 part3:286397204 > compression_codec:SNAPPY )"#
    );
    resp.fragment = None;
    assert_eq!(
        err(&resp),
        "unexpected FragmentUrl with Content (http://foo)"
    );
    resp.fragment_url = String::new();
    ok(&resp);
}

#[test]
fn append_request_cases() {
    let bad = LabelSet {
        labels: vec![lbl("inv alid", "")],
    };
    let good = LabelSet {
        labels: vec![lbl("valid", "")],
    };
    let mut req = AppendRequest {
        header: Some(bad_header()),
        journal: "/bad".into(),
        do_not_proxy: true,
        offset: -1,
        content: bytes::Bytes::from_static(b"foo"),
        check_registers: Some(LabelSelector {
            include: Some(bad.clone()),
            exclude: None,
        }),
        union_registers: Some(bad.clone()),
        subtract_registers: Some(bad.clone()),
        suspend: 12345,
        min_etcd_revision: 0,
    };
    assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut req.header);
    assert_eq!(err(&req), "Journal: cannot begin with '/' (/bad)");
    req.journal = "/invalid/name".into();
    assert_eq!(err(&req), "Journal: cannot begin with '/' (/invalid/name)");
    req.journal = "good".into();
    assert_eq!(err(&req), "invalid Offset (-1; expected >= 0)");
    req.offset = 100;
    assert_eq!(err(&req), "unexpected Content");
    req.content = Default::default();
    assert_eq!(
        err(&req),
        "CheckRegisters.Include.Labels[0].Name: not a valid token (inv alid)"
    );
    req.check_registers.as_mut().unwrap().include = Some(good.clone());
    assert_eq!(
        err(&req),
        "UnionRegisters.Labels[0].Name: not a valid token (inv alid)"
    );
    req.union_registers = Some(good.clone());
    assert_eq!(
        err(&req),
        "SubtractRegisters.Labels[0].Name: not a valid token (inv alid)"
    );
    req.subtract_registers = Some(good.clone());
    assert_eq!(err(&req), "Suspend: invalid Suspend variant (12345)");
    req.suspend = append_request::Suspend::Now as i32;
    ok(&req);

    // A content chunk.
    req.journal = String::new();
    req.content = bytes::Bytes::from_static(b"foo");
    assert_eq!(err(&req), "unexpected Header");
    req.header = None;
    assert_eq!(err(&req), "unexpected DoNotProxy");
    req.do_not_proxy = false;
    assert_eq!(err(&req), "unexpected Offset");
    req.offset = 0;
    assert_eq!(err(&req), "unexpected CheckRegisters");
    req.check_registers = None;
    assert_eq!(err(&req), "unexpected UnionRegisters");
    req.union_registers = None;
    assert_eq!(err(&req), "unexpected SubtractRegisters");
    req.subtract_registers = None;
    assert_eq!(
        err(&req),
        "unexpected Suspend (SUSPEND_NOW; expected SUSPEND_RESUMED)"
    );
    req.suspend = 77;
    assert_eq!(
        err(&req),
        "unexpected Suspend (77; expected SUSPEND_RESUMED)"
    );
    req.suspend = 0;
    ok(&req);
    ok(&AppendRequest::default()); // The commit marker.

    // Spec scenario 1: a journal with a metadata segment.
    ok(&AppendRequest {
        journal: "a/journal;with/meta".into(),
        ..Default::default()
    });
}

#[test]
fn append_response_cases() {
    let mut resp = AppendResponse {
        status: 9101,
        header: Some(bad_header()),
        ..Default::default()
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = 0;
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    assert_eq!(err(&resp), "expected Commit");
    resp.commit = Some(Fragment {
        journal: "/bad/name".into(),
        compression_codec: CompressionCodec::None as i32,
        ..Default::default()
    });
    assert_eq!(err(&resp), "expected Registers");
    resp.registers = Some(LabelSet {
        labels: vec![lbl("in valid", "")],
    });
    assert_eq!(
        err(&resp),
        "Commit.Journal: cannot begin with '/' (/bad/name)"
    );
    resp.commit.as_mut().unwrap().journal = "good/name".into();
    assert_eq!(
        err(&resp),
        "Registers.Labels[0].Name: not a valid token (in valid)"
    );
    resp.registers = Some(LabelSet::default());
    ok(&resp);

    resp.status = Status::RegisterMismatch as i32;
    resp.registers = None;
    assert_eq!(err(&resp), "expected Registers");
    resp.status = Status::WrongAppendOffset as i32;
    ok(&resp);
}

#[test]
fn replicate_request_cases() {
    let mut req = ReplicateRequest {
        deprecated_journal: "bad".into(),
        proposal: Some(Fragment {
            journal: "/bad/name".into(),
            compression_codec: CompressionCodec::None as i32,
            ..Default::default()
        }),
        content: bytes::Bytes::from_static(b"foo"),
        content_delta: 100,
        header: Some(bad_header()),
        ..Default::default()
    };
    assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut req.header);
    assert_eq!(err(&req), "expected Acknowledge with Header");
    req.acknowledge = true;
    assert_eq!(
        err(&req),
        "Proposal.Journal: cannot begin with '/' (/bad/name)"
    );
    req.proposal.as_mut().unwrap().journal = "journal".into();
    req.registers = Some(LabelSet {
        labels: vec![lbl("in valid", "")],
    });
    assert_eq!(
        err(&req),
        "Registers.Labels[0].Name: not a valid token (in valid)"
    );
    req.registers.as_mut().unwrap().labels[0].name = "valid".into();
    assert_eq!(err(&req), "unexpected Content with Proposal (len 3)");
    req.content = Default::default();
    assert_eq!(err(&req), "unexpected ContentDelta with Proposal (100)");
    req.content_delta = 0;
    assert_eq!(
        err(&req),
        "DeprecatedJournal and Proposal.Journal mismatch (bad vs journal)"
    );
    req.deprecated_journal = "journal".into();
    ok(&req);
    req.registers = None; // Treated as empty, as by Gazette.
    ok(&req);
    req.registers = Some(label_set(&[("valid", "")]));

    req.proposal = None;
    req.content_delta = -1;
    assert_eq!(err(&req), "expected Content or Proposal");
    req.content = bytes::Bytes::from_static(b"foo");
    assert_eq!(err(&req), "invalid ContentDelta (-1; expected >= 0)");
    req.content_delta = 100;
    assert!(err(&req).starts_with("unexpected Header with Content (process_id:<"));
    req.header = None;
    assert_eq!(
        err(&req),
        r#"unexpected Registers with Content (labels:<name:"valid" > )"#
    );
    req.registers = None;
    assert_eq!(err(&req), "unexpected Acknowledge with Content");
    req.acknowledge = false;
    assert_eq!(err(&req), "unexpected DeprecatedJournal with Content");
    req.deprecated_journal = String::new();
    ok(&req);
}

#[test]
fn replicate_response_cases() {
    let frag = Fragment {
        journal: "/bad/name".into(),
        compression_codec: CompressionCodec::None as i32,
        ..Default::default()
    };
    let mut resp = ReplicateResponse {
        status: 9101,
        header: Some(bad_header()),
        fragment: Some(frag.clone()),
        registers: Some(LabelSet::default()),
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = 0;
    assert!(err(&resp).starts_with("unexpected Header (process_id:"));
    resp.header = None;
    assert_eq!(
        err(&resp),
        r#"unexpected Fragment (journal:"/bad/name" sum:<> compression_codec:NONE )"#
    );
    resp.fragment = None;
    assert_eq!(err(&resp), "unexpected Registers ()");
    resp.registers = None;
    ok(&resp);

    resp.status = Status::WrongRoute as i32;
    assert_eq!(err(&resp), "expected Header");
    resp.header = Some(bad_header());
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    ok(&resp);

    resp.status = Status::ProposalMismatch as i32;
    resp.header = None;
    assert_eq!(err(&resp), "expected Fragment");
    resp.fragment = Some(frag);
    assert_eq!(
        err(&resp),
        "Fragment.Journal: cannot begin with '/' (/bad/name)"
    );
    resp.fragment.as_mut().unwrap().journal = "journal".into();
    assert_eq!(err(&resp), "expected Registers");
    resp.registers = Some(LabelSet {
        labels: vec![lbl("in valid", "")],
    });
    assert_eq!(
        err(&resp),
        "Registers.Labels[0].Name: not a valid token (in valid)"
    );
    resp.registers = Some(LabelSet::default());
    ok(&resp);
}

#[test]
fn list_request_cases() {
    let mut req = ListRequest {
        selector: Some(LabelSelector {
            include: Some(LabelSet {
                labels: vec![
                    lbl("a invalid name", "foo"),
                    lbl("prefix", "no/trailing/slash"),
                ],
            }),
            exclude: Some(LabelSet {
                labels: vec![lbl("bar", "baz"), lbl("prefix", "no/trailing/slash")],
            }),
        }),
        ..Default::default()
    };
    fn sel(r: &mut ListRequest) -> &mut LabelSelector {
        r.selector.as_mut().unwrap()
    }
    assert_eq!(
        err(&req),
        "Selector.Include.Labels[0].Name: not a valid token (a invalid name)"
    );
    sel(&mut req).include.as_mut().unwrap().labels[0].name = "a-valid-name".into();
    assert_eq!(
        err(&req),
        r#"Selector.Include.Labels["prefix"]: expected trailing '/' (no/trailing/slash)"#
    );
    sel(&mut req).include.as_mut().unwrap().labels[1].value = "trailing/slash/".into();
    assert_eq!(
        err(&req),
        r#"Selector.Exclude.Labels["prefix"]: expected trailing '/' (no/trailing/slash)"#
    );
    sel(&mut req).exclude.as_mut().unwrap().labels[1].value = "trailing/slash/".into();
    ok(&req);
    ok(&ListRequest::default());

    // Spec scenario 31.
    let req = ListRequest {
        selector: Some(crate::labels::parse_selector("prefix=invalid/no/slash").unwrap()),
        ..Default::default()
    };
    assert_eq!(
        err(&req),
        r#"Selector.Include.Labels["prefix"]: expected trailing '/' (invalid/no/slash)"#
    );
}

fn good_spec() -> JournalSpec {
    JournalSpec {
        name: "a/journal".into(),
        replication: 1,
        fragment: Some(journal_spec::Fragment {
            length: 1024,
            compression_codec: CompressionCodec::None as i32,
            refresh_interval: secs(60),
            retention: secs(3600),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn list_response_cases() {
    let mut spec = good_spec();
    spec.name = "a/journal invalid name".into();
    let mut resp = ListResponse {
        status: 9101,
        header: Some(bad_header()),
        journals: vec![list_response::Journal {
            spec: Some(spec),
            mod_revision: 0,
            route: Some(Route {
                primary: 0,
                ..Default::default()
            }),
            create_revision: 0,
        }],
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = 0;
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    assert_eq!(
        err(&resp),
        "Journals[0].Spec.Name: not a valid token (a/journal invalid name)"
    );
    resp.journals[0].spec.as_mut().unwrap().name = "a/journal".into();
    assert_eq!(
        err(&resp),
        "Journals[0]: invalid ModRevision (0; expected > 0)"
    );
    resp.journals[0].mod_revision = 1;
    assert_eq!(
        err(&resp),
        "Journals[0].Route: invalid Primary (0; expected -1 <= Primary < 0)"
    );
    resp.journals[0].route.as_mut().unwrap().primary = -1;
    ok(&resp);
}

#[test]
fn apply_request_cases() {
    let mut req = ApplyRequest {
        changes: vec![
            apply_request::Change {
                expect_mod_revision: -2,
                upsert: Some(JournalSpec {
                    name: "a/journal".into(),
                    ..Default::default()
                }),
                delete: "a/journal".into(),
            },
            apply_request::Change {
                expect_mod_revision: 0,
                upsert: None,
                delete: "a/journal invalid name".into(),
            },
            apply_request::Change {
                expect_mod_revision: 1,
                upsert: None,
                delete: String::new(),
            },
        ],
    };
    assert_eq!(
        err(&req),
        "Changes[0]: both Upsert and Delete are set (expected exactly one)"
    );
    req.changes[0].delete = String::new();
    assert_eq!(
        err(&req),
        "Changes[0].Upsert: invalid Replication (0; expected 1 <= Replication <= 5)"
    );
    req.changes[0].upsert = Some(good_spec());
    assert_eq!(
        err(&req),
        "Changes[0]: invalid ExpectModRevision (-2; expected >= 0 or -1)"
    );
    req.changes[0].expect_mod_revision = 0;
    // Spec scenario 34.
    assert_eq!(
        err(&req),
        "Changes[1].Delete: not a valid token (a/journal invalid name)"
    );
    req.changes[1].delete = "a/journal".into();
    assert_eq!(
        err(&req),
        "Changes[1]: invalid ExpectModRevision (0; expected > 0 or -1)"
    );
    req.changes[1].expect_mod_revision = 1;
    assert_eq!(
        err(&req),
        "Changes[2]: neither Upsert nor Delete are set (expected exactly one)"
    );
    req.changes[2].delete = "other/journal".into();
    ok(&req);
    req.changes[0].expect_mod_revision = -1;
    req.changes[1].expect_mod_revision = -1;
    ok(&req);

    let req = ApplyRequest {
        changes: vec![apply_request::Change {
            expect_mod_revision: -1,
            upsert: None,
            delete: "invalid journal name".into(),
        }],
    };
    assert_eq!(
        err(&req),
        "Changes[0].Delete: not a valid token (invalid journal name)"
    );
    let mut spec = good_spec();
    spec.fragment.as_mut().unwrap().stores = vec!["s3://bucket".into()];
    let req = ApplyRequest {
        changes: vec![apply_request::Change {
            expect_mod_revision: 0,
            upsert: Some(spec),
            delete: String::new(),
        }],
    };
    assert_eq!(
        err(&req),
        "Changes[0].Upsert.Fragment.Stores[0]: path component doesn't end in '/' ()"
    );
    ok(&ApplyRequest::default());
}

#[test]
fn unary_response_cases() {
    let mut resp = ApplyResponse {
        status: 9101,
        header: Some(bad_header()),
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = 0;
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    ok(&resp);
    assert_eq!(
        err(&ApplyResponse::default()),
        "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)"
    );

    let mut resp = FragmentStoreHealthResponse {
        status: 9101,
        header: Some(bad_header()),
        store_health_error: String::new(),
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = Status::FragmentStoreUnhealthy as i32;
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    ok(&resp);
}

#[test]
fn fragments_request_cases() {
    let mut req = FragmentsRequest {
        header: Some(bad_header()),
        journal: "/bad".into(),
        signature_ttl: secs(0),
        begin_mod_time: 10,
        end_mod_time: 5,
        next_page_token: -1,
        page_limit: -1,
        do_not_proxy: false,
    };
    assert_eq!(err(&req), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut req.header);
    assert_eq!(err(&req), "Journal: cannot begin with '/' (/bad)");
    req.journal = "good".into();
    assert_eq!(err(&req), "invalid EndModTime (5 must be after 10)");
    (req.begin_mod_time, req.end_mod_time) = (50, 40);
    assert_eq!(err(&req), "invalid EndModTime (40 must be after 50)");
    req.end_mod_time = 0;
    assert_eq!(err(&req), "invalid NextPageToken (-1; must be >= 0)");
    req.next_page_token = 10;
    assert_eq!(
        err(&req),
        "invalid PageLimit (-1; must be >= 0 and <= 10000)"
    );
    req.page_limit = 10001;
    assert_eq!(
        err(&req),
        "invalid PageLimit (10001; must be >= 0 and <= 10000)"
    );
    req.page_limit = 10;
    assert_eq!(err(&req), "invalid SignatureTTL (0s; must be > 0s)");
    req.signature_ttl = secs(-5);
    assert_eq!(err(&req), "invalid SignatureTTL (-5s; must be > 0s)");
    req.signature_ttl = secs(1);
    ok(&req);
    req.signature_ttl = None;
    ok(&req);
    req.end_mod_time = 50;
    ok(&req); // End equal to begin is allowed.
}

#[test]
fn fragments_response_cases() {
    let mut resp = FragmentsResponse {
        status: 9101,
        header: Some(bad_header()),
        fragments: vec![fragments_response::Fragment {
            spec: Some(Fragment {
                journal: "in valid".into(),
                compression_codec: CompressionCodec::None as i32,
                ..Default::default()
            }),
            signed_url: ":gar: :bage:".into(),
        }],
        next_page_token: 0,
    };
    assert_eq!(err(&resp), "Status: invalid status (9101)");
    resp.status = 0;
    assert_eq!(err(&resp), "Header.Etcd: invalid ClusterId (expected != 0)");
    fix_header(&mut resp.header);
    assert_eq!(
        err(&resp),
        "Fragments[0].Spec.Journal: not a valid token (in valid)"
    );
    resp.fragments[0].spec.as_mut().unwrap().journal = "valid/name".into();
    assert_eq!(
        err(&resp),
        r#"Fragments[0].SignedUrl: parse ":gar: :bage:": missing protocol scheme"#
    );
    resp.fragments[0].signed_url = "http://host/path".into();
    ok(&resp);
    resp.fragments[0].signed_url = String::new();
    ok(&resp);
}

#[test]
fn fragment_store_health_request_cases() {
    let mut req = FragmentStoreHealthRequest {
        fragment_store: "s3://bad".into(),
        check_delete: false,
        check_delete_prefix: String::new(),
    };
    assert_eq!(
        err(&req),
        "FragmentStore: path component doesn't end in '/' ()"
    );
    req.fragment_store = "s3://bucket/".into();
    ok(&req);

    req.check_delete_prefix = "recovery/".into();
    assert_eq!(
        err(&req),
        "CheckDeletePrefix: cannot be set when CheckDelete is false"
    );
    req.check_delete = true;
    ok(&req);
    req.check_delete_prefix = "recovery/sub/".into();
    ok(&req);
    req.check_delete_prefix = String::new();
    ok(&req);

    let cases = [
        ("recovery", "CheckDeletePrefix: must end in '/' (recovery)"),
        (
            "recovery/sub",
            "CheckDeletePrefix: must end in '/' (recovery/sub)",
        ),
        (
            "../../etc/",
            "CheckDeletePrefix: cannot traverse outside the store (../../etc/)",
        ),
        (
            "../",
            "CheckDeletePrefix: cannot traverse outside the store (../)",
        ),
        (
            "recovery/../../etc/",
            "CheckDeletePrefix: must be a clean path (recovery/../../etc)",
        ),
        (
            "/rooted/",
            "CheckDeletePrefix: cannot begin with '/' (/rooted)",
        ),
        (
            "in valid/",
            "CheckDeletePrefix: not a valid token (in valid)",
        ),
        (
            "/",
            "CheckDeletePrefix: invalid length (0; expected 1 <= length <= 512)",
        ),
    ];
    for (prefix, expect) in cases {
        req.check_delete_prefix = prefix.into();
        assert_eq!(err(&req), expect, "{prefix}");
    }
}

#[test]
fn validators_never_panic_on_odd_input() {
    let odd = [
        "",
        ";",
        ";;",
        "/",
        "//",
        ".",
        "..",
        "%",
        "%%",
        "é",
        "\u{0}",
        "a;é",
        "\u{10ffff}",
        "s3://",
        "azure-ad://",
        "azure-ad://t",
        "file:",
        "http://[",
        "http://]",
        "http://:",
    ];
    for s in odd {
        let _ = validate_journal_name(s);
        let _ = validate_journal_spec_name(s);
        let _ = validate_fragment_store(s);
        let _ = validate_endpoint(s);
        let _ = parse_go_url(s);
        let _ = go_path_clean(s);
        let _ = check_template(s, "postfix");
        let _ = check_media_type(s);
        let mut spec = spec_fixture();
        spec.name = s.into();
        spec.labels = Some(label_set(&[("content-type", s)]));
        spec.fragment.as_mut().unwrap().stores = vec![s.into()];
        spec.fragment.as_mut().unwrap().path_postfix_template = s.into();
        let _ = spec.validate();
    }
    let _ = JournalSpec::default().validate();
    let _ = ReadResponse::default().validate();
    let _ = ReplicateRequest::default().validate();
    let _ = FragmentsRequest {
        signature_ttl: Some(Duration {
            seconds: i64::MIN,
            nanos: i32::MIN,
        }),
        journal: "good".into(),
        ..Default::default()
    }
    .validate();
}
