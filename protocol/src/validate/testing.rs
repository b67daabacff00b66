//! Helpers shared by the validation tests.

#![allow(dead_code)]

pub(crate) use super::*;
pub(crate) use crate::labels::label_set;
pub(crate) use crate::{Label, list_response};
pub(crate) use prost_types::Duration;

pub(crate) fn err<T: Validate>(v: &T) -> String {
    match v.validate() {
        Ok(()) => "OK".to_string(),
        Err(e) => e.0,
    }
}

pub(crate) fn ok<T: Validate>(v: &T) {
    assert_eq!(v.validate(), Ok(()));
}

pub(crate) fn secs(s: i64) -> Option<Duration> {
    Some(Duration {
        seconds: s,
        nanos: 0,
    })
}

pub(crate) fn id(zone: &str, suffix: &str) -> process_spec::Id {
    process_spec::Id {
        zone: zone.into(),
        suffix: suffix.into(),
    }
}

pub(crate) fn bad_header() -> Header {
    Header {
        process_id: Some(id("zone", "name")),
        route: Some(Route {
            members: vec![id("zone", "name")],
            primary: 0,
            endpoints: vec![],
        }),
        etcd: Some(header::Etcd {
            cluster_id: 0,
            member_id: 34,
            revision: 56,
            raft_term: 78,
        }),
    }
}

pub(crate) fn fix_header(h: &mut Option<Header>) {
    if let Some(e) = h.as_mut().and_then(|h| h.etcd.as_mut()) {
        e.cluster_id = 12;
    }
}

pub(crate) fn lbl(name: &str, value: &str) -> Label {
    Label {
        name: name.into(),
        value: value.into(),
        prefix: false,
    }
}
