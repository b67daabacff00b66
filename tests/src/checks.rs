//! Validators mirroring the checks Gazette's Go clients apply to responses (`*.Validate()`).

#[allow(unused_imports)]
use super::*;

/// `Header.Validate()` as Go clients apply it, plus non-zero etcd fields.
#[track_caller]
pub fn check_header(h: &Header, ctx: &str) {
    let etcd = h.etcd.unwrap_or_default();
    assert!(
        etcd.cluster_id != 0 && etcd.member_id != 0 && etcd.revision > 0 && etcd.raft_term != 0,
        "{ctx}: header etcd fields must be non-zero (Go clients reject it): {h:?}"
    );
    if let Some(id) = &h.process_id
        && !(id.zone.is_empty() && id.suffix.is_empty())
    {
        assert!(
            !id.zone.is_empty() && id.suffix.len() >= 4,
            "{ctx}: invalid process_id {id:?}"
        );
    }
    let route = h.route.clone().unwrap_or_default();
    let mut sorted = route.members.clone();
    sorted.sort_by(|a, b| (&a.zone, &a.suffix).cmp(&(&b.zone, &b.suffix)));
    sorted.dedup();
    assert_eq!(
        sorted, route.members,
        "{ctx}: route members not sorted & unique"
    );
    assert!(
        route.primary >= -1 && route.primary < route.members.len() as i32,
        "{ctx}: route primary out of range: {route:?}"
    );
    assert!(
        route.endpoints.is_empty() || route.endpoints.len() == route.members.len(),
        "{ctx}: route endpoints don't align with members: {route:?}"
    );
}

/// The header of a journal served by this single-node broker: process_id = self, route
/// members [self], primary 0, endpoints [broker endpoint].
#[track_caller]
pub fn check_routed_header(h: &Header, broker: &Broker, ctx: &str) {
    check_header(h, ctx);
    let route = h.route.clone().unwrap_or_default();
    assert_eq!(
        route.members.len(),
        1,
        "{ctx}: expected route [self]: {h:?}"
    );
    assert_eq!(route.primary, 0, "{ctx}: expected primary 0: {h:?}");
    assert_eq!(
        route.endpoints,
        vec![broker.endpoint()],
        "{ctx}: expected endpoints [{}]: {h:?}",
        broker.endpoint()
    );
    assert_eq!(
        h.process_id.as_ref(),
        Some(&route.members[0]),
        "{ctx}: process_id must be the broker itself (the route's only member)"
    );
}

/// The header of a response that is not about a routed journal (List, Apply, or an
/// unknown journal): process_id = self, route {primary −1} with no members/endpoints.
#[track_caller]
pub fn check_unrouted_header(h: &Header, ctx: &str) {
    check_header(h, ctx);
    let route = h.route.clone().unwrap_or_default();
    assert!(
        route.members.is_empty() && route.endpoints.is_empty() && route.primary == -1,
        "{ctx}: expected an unrouted header (no members, primary -1): {h:?}"
    );
    let id = h.process_id.clone().unwrap_or_default();
    assert!(
        !id.zone.is_empty() && !id.suffix.is_empty(),
        "{ctx}: unrouted header must name the broker as process_id: {h:?}"
    );
}

/// `Fragment.Validate()`.
#[track_caller]
pub fn check_fragment(f: &Fragment, ctx: &str) {
    assert!(
        f.journal.len() >= 4 && !f.journal.starts_with('/') && !f.journal.contains(';'),
        "{ctx}: invalid fragment journal {:?}",
        f.journal
    );
    assert!(f.begin <= f.end, "{ctx}: fragment begin > end: {f:?}");
    assert!(
        f.compression_codec != 0,
        "{ctx}: fragment codec INVALID (Go clients reject it): {f:?}"
    );
}

/// `AppendResponse.Validate()`.
#[track_caller]
pub fn check_append_response(r: &AppendResponse, ctx: &str) {
    assert!(
        Status::try_from(r.status).is_ok(),
        "{ctx}: unknown status {}",
        r.status
    );
    check_header(
        r.header
            .as_ref()
            .unwrap_or_else(|| panic!("{ctx}: AppendResponse without header: {r:?}")),
        ctx,
    );
    if r.status == Status::Ok as i32 {
        assert!(
            r.commit.is_some(),
            "{ctx}: OK AppendResponse without commit"
        );
    }
    if r.status == Status::Ok as i32 || r.status == Status::RegisterMismatch as i32 {
        assert!(
            r.registers.is_some(),
            "{ctx}: AppendResponse must carry (possibly empty) registers: {r:?}"
        );
    }
    if let Some(c) = &r.commit {
        check_fragment(c, ctx);
    }
}

/// `ReadResponse.Validate()`; content chunks must carry only offset + content.
#[track_caller]
pub fn check_read_response(r: &ReadResponse, ctx: &str) {
    assert!(
        Status::try_from(r.status).is_ok(),
        "{ctx}: unknown status {}",
        r.status
    );
    if !r.content.is_empty() {
        let only = ReadResponse {
            offset: r.offset,
            content: r.content.clone(),
            ..Default::default()
        };
        assert_eq!(
            r, &only,
            "{ctx}: a content chunk must carry only offset and content"
        );
        assert!(
            r.content.len() <= READ_CHUNK_SIZE,
            "{ctx}: content chunk of {} bytes exceeds {READ_CHUNK_SIZE}",
            r.content.len()
        );
        return;
    }
    if let Some(h) = &r.header {
        check_header(h, ctx);
    }
    assert!(r.write_head >= 0, "{ctx}: negative write_head: {r:?}");
    match &r.fragment {
        Some(f) => {
            check_fragment(f, ctx);
            assert!(
                f.begin <= r.offset && r.offset < f.end,
                "{ctx}: offset {} outside fragment [{}, {}): {r:?}",
                r.offset,
                f.begin,
                f.end
            );
            assert!(
                r.write_head >= f.end,
                "{ctx}: write_head {} < fragment end {}",
                r.write_head,
                f.end
            );
        }
        None => {
            assert!(
                !(r.status == Status::Ok as i32 && r.offset != 0),
                "{ctx}: OK metadata without fragment must have offset 0: {r:?}"
            );
            assert!(
                r.fragment_url.is_empty(),
                "{ctx}: fragment_url without fragment: {r:?}"
            );
        }
    }
}
