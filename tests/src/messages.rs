//! Builders of protocol messages and status assertions.

#[allow(unused_imports)]
use super::*;

pub fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.into(),
        value: value.into(),
        prefix: false,
    }
}

/// A LabelSet from (name, value) pairs, sorted as Gazette requires. A name ending in
/// `:prefix` becomes a prefix-match label (selectors only).
pub fn label_set(pairs: &[(&str, &str)]) -> LabelSet {
    let mut labels: Vec<Label> = pairs
        .iter()
        .map(|(n, v)| match n.strip_suffix(":prefix") {
            Some(n) => Label {
                name: n.into(),
                value: (*v).into(),
                prefix: true,
            },
            None => label(n, v),
        })
        .collect();
    labels.sort_by(|a, b| (&a.name, &a.value).cmp(&(&b.name, &b.value)));
    LabelSet { labels }
}

pub fn selector(include: &[(&str, &str)], exclude: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        include: Some(label_set(include)),
        exclude: Some(label_set(exclude)),
    }
}

pub fn duration(secs: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: secs,
        nanos: 0,
    }
}

/// A Gazette-valid JournalSpec: replication 1, fragment length 1 MiB, codec NONE, no
/// stores, refresh interval 1 s, retention/flush interval unset.
pub fn spec(name: &str, labels: &[(&str, &str)]) -> JournalSpec {
    JournalSpec {
        name: name.into(),
        replication: 1,
        labels: Some(label_set(labels)),
        fragment: Some(journal_spec::Fragment {
            length: 1 << 20,
            compression_codec: protocol::CompressionCodec::None as i32,
            stores: vec![],
            refresh_interval: Some(duration(1)),
            retention: None,
            flush_interval: None,
            path_postfix_template: String::new(),
        }),
        flags: 0,
        max_append_rate: 0,
        suspend: None,
    }
}

/// Normalizes presence-only differences (absent vs. empty non-nullable submessages), so
/// specs can be compared for meaning: Go always emits `labels`, `fragment` and its
/// durations, and a Rust broker may or may not.
pub fn normalize_spec(mut s: JournalSpec) -> JournalSpec {
    s.labels.get_or_insert_with(Default::default);
    let f = s.fragment.get_or_insert_with(Default::default);
    f.refresh_interval.get_or_insert_with(Default::default);
    f.retention.get_or_insert_with(Default::default);
    f.flush_interval.get_or_insert_with(Default::default);
    if s.suspend == Some(Default::default()) {
        s.suspend = None;
    }
    s
}

/// Upsert regardless of the current revision (expect_mod_revision −1).
pub fn upsert(spec: JournalSpec) -> Change {
    Change {
        expect_mod_revision: -1,
        upsert: Some(spec),
        delete: String::new(),
    }
}

/// Upsert that requires the journal not to exist yet (expect_mod_revision 0).
pub fn create(spec: JournalSpec) -> Change {
    Change {
        expect_mod_revision: 0,
        upsert: Some(spec),
        delete: String::new(),
    }
}

pub fn delete(name: &str, expect_mod_revision: i64) -> Change {
    Change {
        expect_mod_revision,
        upsert: None,
        delete: name.into(),
    }
}

pub fn sha1_sum(data: &[u8]) -> Sha1Sum {
    use sha1::Digest;
    protocol::sum::sum_from_bytes(&sha1::Sha1::digest(data).into())
}

pub fn status_name(s: i32) -> String {
    match Status::try_from(s) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("Status({s})"),
    }
}

/// Asserts `actual` is the Status `expect`, with a readable message.
#[track_caller]
pub fn assert_status(actual: i32, expect: Status, ctx: &str) {
    assert_eq!(
        status_name(actual),
        status_name(expect as i32),
        "unexpected status: {ctx}"
    );
}

/// Asserts an RPC failed with `code` and exactly `message`.
#[track_caller]
pub fn assert_rpc_error<T: std::fmt::Debug>(
    res: Result<T, RpcError>,
    code: Code,
    message: &str,
    ctx: &str,
) {
    match res {
        Ok(v) => panic!("{ctx}: expected gRPC error {code:?} {message:?}, got OK response {v:?}"),
        Err(e) => {
            assert_eq!(
                (e.code, e.message.as_str()),
                (code, message),
                "{ctx}: unexpected gRPC error"
            );
        }
    }
}
