//! List and Apply RPCs: conformance scenarios 30–34 of the protocol fact sheet (§10).
//! Apply validation errors are in `bad_input.rs`.
//!
//! Not covered: authorization (JWT claims) parts of scenarios 13 and 34 — the broker
//! runs without auth keys here. In scenario 30 Gazette's fixture leaves A and B
//! unassigned; on this single-node broker every journal is assigned to it, so every
//! route is [self] with primary 0.

use courant_tests::protocol::grpc::Code;
use courant_tests::protocol::{
    JournalSpec, ListRequest, ListResponse, Status, apply_request::Change,
};
use courant_tests::*;
use std::time::Duration;

fn fixture_spec(name: &str, labels: &[(&str, &str)]) -> JournalSpec {
    let mut s = spec(name, labels);
    let f = s.fragment.as_mut().unwrap();
    f.length = 1024;
    f.compression_codec = courant_tests::protocol::CompressionCodec::Snappy as i32;
    s
}

fn spec_a() -> JournalSpec {
    fixture_spec("journal/1/A", &[("foo", "bar")])
}
fn spec_b() -> JournalSpec {
    fixture_spec("journal/2/B", &[("bar", "baz")])
}
fn spec_c() -> JournalSpec {
    fixture_spec("journal/1/C", &[])
}

/// Checks listed journals are exactly `expect` (in order), each with
/// create/mod revision `rev` and route [self] primary 0.
#[track_caller]
fn verify(
    got: &[courant_tests::protocol::list_response::Journal],
    expect: &[JournalSpec],
    rev: i64,
    broker: &Broker,
    ctx: &str,
) {
    let names: Vec<&str> = got
        .iter()
        .map(|j| {
            j.spec
                .as_ref()
                .map(|s| s.name.as_str())
                .unwrap_or("<no spec>")
        })
        .collect();
    let want: Vec<&str> = expect.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, want, "{ctx}: listed journals");
    for (j, e) in got.iter().zip(expect) {
        assert_eq!(
            normalize_spec(j.spec.clone().unwrap()),
            normalize_spec(e.clone()),
            "{ctx}: spec of {}",
            e.name
        );
        assert_eq!(
            (j.create_revision, j.mod_revision),
            (rev, rev),
            "{ctx}: create/mod revision of {}",
            e.name
        );
        let route = j.route.clone().unwrap_or_default();
        assert_eq!(
            route.members.len(),
            1,
            "{ctx}: route of {}: {route:?}",
            e.name
        );
        assert_eq!(route.primary, 0, "{ctx}: primary of {}", e.name);
        assert_eq!(
            route.endpoints,
            vec![broker.endpoint()],
            "{ctx}: endpoints of {}",
            e.name
        );
    }
}

async fn watch(
    ch: &courant_tests::protocol::grpc::Channel,
    sel: courant_tests::protocol::LabelSelector,
) -> Streamed<ListResponse> {
    watch_list(
        ch,
        ListRequest {
            selector: Some(sel),
            watch: true,
            watch_resume: None,
        },
    )
    .await
}

/// Scenario 30 [TestListCases]: one Apply creates A, B, C at one revision; List returns
/// them in name order with that create/mod revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario30_apply_then_list() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let resp = apply(
            &ch,
            vec![create(spec_a()), create(spec_b()), create(spec_c())],
        )
        .await
        .expect("Apply");
        assert_status(resp.status, Status::Ok, "Apply");
        let h = resp.header.unwrap();
        check_unrouted_header(&h, "ApplyResponse header");
        let rev = h.etcd.unwrap().revision;

        let msgs = list(&ch, selector(&[], &[])).await.expect("List");
        let (lh, journals) = check_snapshot(&msgs, "List {}");
        assert!(
            lh.etcd.unwrap().revision >= rev,
            "List header revision has observed the Apply"
        );
        assert_eq!(
            lh.process_id, h.process_id,
            "List and Apply headers name the same broker"
        );
        verify(
            &journals,
            &[spec_a(), spec_c(), spec_b()],
            rev,
            &b,
            "List {}",
        );

        // A later Apply has a greater revision, and only the changed journal moves.
        let mut b2 = spec_b();
        b2.labels = Some(label_set(&[("bar", "baz"), ("foo", "qux")]));
        let rev2 = apply_specs(&ch, std::slice::from_ref(&b2)).await;
        assert!(rev2 > rev, "revisions increase ({rev2} > {rev})");
        let journals = list_journals(&ch, selector(&[], &[])).await;
        verify(
            &journals[..2],
            &[spec_a(), spec_c()],
            rev,
            &b,
            "unchanged journals",
        );
        let jb = &journals[2];
        assert_eq!(normalize_spec(jb.spec.clone().unwrap()), normalize_spec(b2));
        assert_eq!(
            (jb.create_revision, jb.mod_revision),
            (rev, rev2),
            "B after update"
        );
    })
    .await
}

/// Scenario 31: selectors, meta-labels and the legacy `prefix` label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario31_list_selectors() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let rev = apply_specs(&ch, &[spec_a(), spec_b(), spec_c()]).await;

        let cases: Vec<(&str, courant_tests::protocol::LabelSelector, Vec<JournalSpec>)> = vec![
            ("missing=label", selector(&[("missing", "label")], &[]), vec![]),
            ("exclude foo", selector(&[], &[("foo", "")]), vec![spec_c(), spec_b()]),
            ("foo (exists)", selector(&[("foo", "")], &[]), vec![spec_a()]),
            ("name=journal/2/B", selector(&[("name", "journal/2/B")], &[]), vec![spec_b()]),
            ("name:prefix=journal/1", selector(&[("name:prefix", "journal/1")], &[]), vec![spec_a(), spec_c()]),
            ("prefix=journal/1/", selector(&[("prefix", "journal/1/")], &[]), vec![spec_a(), spec_c()]),
            ("exclude prefix=journal/1/", selector(&[], &[("prefix", "journal/1/")]), vec![spec_b()]),
            ("bar=baz", selector(&[("bar", "baz")], &[]), vec![spec_b()]),
            ("bar=other", selector(&[("bar", "other")], &[]), vec![]),
        ];
        for (ctx, sel, expect) in cases {
            let journals = list_journals(&ch, sel).await;
            verify(&journals, &expect, rev, &b, ctx);
        }

        let res = list(&ch, selector(&[("prefix", "invalid/because/missing/trailing/slash")], &[])).await;
        assert_rpc_error(
            res,
            Code::Unknown,
            "Selector.Include.Labels[\"prefix\"]: expected trailing '/' (invalid/because/missing/trailing/slash)",
            "prefix without trailing slash",
        );
        let res = list(&ch, selector(&[], &[("prefix", "no/slash")])).await;
        assert_rpc_error(
            res,
            Code::Unknown,
            "Selector.Exclude.Labels[\"prefix\"]: expected trailing '/' (no/slash)",
            "exclude prefix without trailing slash",
        );
        assert_serving(&b).await;
    })
    .await
}

/// Scenario 32: more than 25 journals are split across messages; a watch marks the end
/// of each snapshot with an empty ListResponse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario32_list_chunking() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let specs: Vec<JournalSpec> = (0..60)
            .map(|i| spec(&format!("many/j{i:03}"), &[]))
            .collect();
        let rev = apply_specs(&ch, &specs).await;

        let msgs = list(&ch, selector(&[("name:prefix", "many/")], &[]))
            .await
            .expect("List");
        let sizes: Vec<usize> = msgs.iter().map(|m| m.journals.len()).collect();
        assert_eq!(sizes, vec![25, 25, 10], "25 journals per message");
        let (_, journals) = check_snapshot(&msgs, "chunked List");
        verify(&journals, &specs, rev, &b, "chunked List");

        let mut w = watch(&ch, selector(&[("name:prefix", "many/")], &[])).await;
        let (_, journals) = next_watch_snapshot(&mut w, "watch snapshot").await;
        verify(&journals, &specs, rev, &b, "watch snapshot");
    })
    .await
}

/// Scenario 33: a watch re-sends a snapshot only when the matched set changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario33_list_watch() {
    within(40, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let rev = apply_specs(&ch, &[spec_a(), spec_b(), spec_c()]).await;

        let mut w = watch(&ch, selector(&[("name:prefix", "journal/1/")], &[])).await;
        let (h1, journals) = next_watch_snapshot(&mut w, "initial snapshot").await;
        verify(
            &journals,
            &[spec_a(), spec_c()],
            rev,
            &b,
            "initial snapshot",
        );
        let r1 = h1.etcd.unwrap().revision;

        // Deleting B (not matched) must not produce a snapshot; deleting A must.
        let resp = apply(&ch, vec![delete("journal/2/B", rev)])
            .await
            .expect("delete B");
        assert_status(resp.status, Status::Ok, "delete B");
        let resp = apply(&ch, vec![delete("journal/1/A", rev)])
            .await
            .expect("delete A");
        assert_status(resp.status, Status::Ok, "delete A");
        let rev_a = resp.header.unwrap().etcd.unwrap().revision;
        let (h2, journals) = next_watch_snapshot(&mut w, "after deleting A").await;
        verify(
            &journals,
            &[spec_c()],
            rev,
            &b,
            "after deleting A (a snapshot [A, C] would mean the B delete re-sent one)",
        );
        let r2 = h2.etcd.unwrap().revision;
        assert!(
            r2 >= rev_a && r2 > r1,
            "snapshot revision {r2} must reflect the delete ({rev_a})"
        );

        // Deleting C leaves an empty snapshot: header only, then the marker.
        let resp = apply(&ch, vec![delete("journal/1/C", rev)])
            .await
            .expect("delete C");
        assert_status(resp.status, Status::Ok, "delete C");
        let (h3, journals) = next_watch_snapshot(&mut w, "after deleting C").await;
        assert!(journals.is_empty(), "empty snapshot: {journals:?}");
        assert!(h3.etcd.unwrap().revision > r2);

        // Changes outside the selector keep the watch quiet.
        apply_specs(&ch, &[spec("other/journal", &[])]).await;
        if let Some(m) = w.next_within(Duration::from_millis(500)).await {
            panic!("unexpected watch message after an unmatched change: {m:?}");
        }
        drop(w);
        assert_serving(&b).await;
    })
    .await
}

/// watch_resume: the first snapshot waits until the keyspace passes the resume revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_watch_resume() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        apply_specs(&ch, &[spec_a()]).await;
        let msgs = list(&ch, selector(&[], &[])).await.unwrap();
        let (h, _) = check_snapshot(&msgs, "List");
        let r = h.etcd.as_ref().unwrap().revision;

        let mut w = watch_list(
            &ch,
            ListRequest {
                selector: Some(selector(&[("name:prefix", "journal/")], &[])),
                watch: true,
                watch_resume: Some(h.clone()),
            },
        )
        .await;
        if let Some(m) = w.next_within(Duration::from_millis(500)).await {
            panic!("watch_resume at the current revision must wait, got {m:?}");
        }
        apply_specs(&ch, &[spec_c()]).await;
        let (h2, journals) = next_watch_snapshot(&mut w, "resumed watch").await;
        assert!(
            h2.etcd.unwrap().revision > r,
            "snapshot revision must exceed the resume revision"
        );
        let names: Vec<String> = journals
            .iter()
            .map(|j| j.spec.clone().unwrap().name)
            .collect();
        assert_eq!(names, vec!["journal/1/A", "journal/1/C"]);
    })
    .await
}

/// Scenario 34 [TestApplyCases]: expect_mod_revision semantics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario34_apply_revisions() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let a = fixture_spec("journal/A", &[]);
        let bb = fixture_spec("journal/B", &[]);

        let ok = |r: Result<courant_tests::protocol::ApplyResponse, _>, ctx: &str| {
            let r = r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            check_unrouted_header(r.header.as_ref().unwrap(), ctx);
            r.status
        };
        let mod_rev = |name: &'static str| {
            let ch = ch.clone();
            async move {
                let j = list_journals(&ch, selector(&[("name", name)], &[])).await;
                assert_eq!(j.len(), 1, "{name} listed");
                j[0].mod_revision
            }
        };

        let st = ok(
            apply(&ch, vec![create(a.clone()), create(bb.clone())]).await,
            "create A, B",
        );
        assert_status(st, Status::Ok, "create A and B with expect 0");
        let st = ok(apply(&ch, vec![create(a.clone())]).await, "re-create A");
        assert_status(
            st,
            Status::EtcdTransactionFailed,
            "expect 0 requires absence",
        );

        let mut b2 = bb.clone();
        b2.labels = Some(label_set(&[("foo", "bar")]));
        let rb = mod_rev("journal/B").await;
        let st = ok(
            apply(
                &ch,
                vec![Change {
                    expect_mod_revision: rb,
                    upsert: Some(b2.clone()),
                    delete: String::new(),
                }],
            )
            .await,
            "update B",
        );
        assert_status(st, Status::Ok, "update B at its mod_revision");
        let rb2 = mod_rev("journal/B").await;
        assert!(rb2 > rb);
        let listed = list_journals(&ch, selector(&[("name", "journal/B")], &[])).await;
        assert_eq!(
            normalize_spec(listed[0].spec.clone().unwrap()),
            normalize_spec(b2.clone())
        );

        let ra = mod_rev("journal/A").await;
        let st = ok(apply(&ch, vec![delete("journal/A", ra)]).await, "delete A");
        assert_status(st, Status::Ok, "delete A at its mod_revision");
        assert!(
            list_journals(&ch, selector(&[("name", "journal/A")], &[]))
                .await
                .is_empty()
        );
        let resp = append(&ch, "journal/A", &[b"x"]).await.expect("Append");
        assert_status(
            resp.status,
            Status::JournalNotFound,
            "append to a deleted journal",
        );

        let st = ok(
            apply(&ch, vec![delete("journal/B", rb2 - 1)]).await,
            "stale delete",
        );
        assert_status(
            st,
            Status::EtcdTransactionFailed,
            "delete at mod_revision-1",
        );
        let st = ok(
            apply(
                &ch,
                vec![Change {
                    expect_mod_revision: rb2 - 1,
                    upsert: Some(bb.clone()),
                    delete: String::new(),
                }],
            )
            .await,
            "stale update",
        );
        assert_status(
            st,
            Status::EtcdTransactionFailed,
            "update at mod_revision-1",
        );
        assert_eq!(
            mod_rev("journal/B").await,
            rb2,
            "failed transactions change nothing"
        );

        // Atomicity: one failing compare fails the whole transaction.
        let c = fixture_spec("journal/C", &[]);
        let st = ok(
            apply(&ch, vec![create(c.clone()), delete("journal/B", rb2 - 1)]).await,
            "mixed txn",
        );
        assert_status(
            st,
            Status::EtcdTransactionFailed,
            "txn with one stale compare",
        );
        assert!(
            list_journals(&ch, selector(&[("name", "journal/C")], &[]))
                .await
                .is_empty(),
            "no change of a failed transaction may apply"
        );

        let st = ok(apply(&ch, vec![upsert(bb.clone())]).await, "upsert -1");
        assert_status(st, Status::Ok, "update with -1");
        let st = ok(apply(&ch, vec![delete("journal/B", -1)]).await, "delete -1");
        assert_status(st, Status::Ok, "delete with -1");
        assert!(list_journals(&ch, selector(&[], &[])).await.is_empty());
    })
    .await
}

/// Response headers report the keyspace revision: the revision of the last change
/// (Gazette's KeySpace header), on List, Read and Append alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_report_the_keyspace_revision() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let r1 = apply_specs(&ch, &[spec("rev/a", &[])]).await;
        let r2 = apply_specs(&ch, &[spec("rev/b", &[])]).await;
        assert!(r2 > r1);

        let msgs = list(&ch, selector(&[], &[])).await.unwrap();
        let (h, journals) = check_snapshot(&msgs, "List");
        assert_eq!(h.etcd.unwrap().revision, r2, "List header revision");
        let revs: Vec<i64> = journals.iter().map(|j| j.mod_revision).collect();
        assert_eq!(revs, vec![r1, r2]);

        let resp = append_ok(&ch, "rev/a", b"x").await;
        assert_eq!(
            resp.header.unwrap().etcd.unwrap().revision,
            r2,
            "Append header revision"
        );
        let mut call = read_stream(
            &ch,
            &courant_tests::protocol::ReadRequest {
                journal: "rev/a".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let (msgs, _) = collect::<courant_tests::protocol::ReadResponse>(&mut call).await;
        assert_eq!(
            msgs[0].header.clone().unwrap().etcd.unwrap().revision,
            r2,
            "Read header revision"
        );
        // A failed transaction doesn't move the keyspace revision.
        let r = apply(&ch, vec![create(spec("rev/a", &[]))]).await.unwrap();
        assert_status(r.status, Status::EtcdTransactionFailed, "re-create");
        let msgs = list(&ch, selector(&[], &[])).await.unwrap();
        assert_eq!(check_snapshot(&msgs, "List").0.etcd.unwrap().revision, r2);
    })
    .await
}
