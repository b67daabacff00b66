//! Route helpers shared by every crate that compares Routes.

use crate::Route;

/// Gazette's Route equivalence: the same members in the same order and the same primary.
/// Endpoints are ignored (they are filled in from the keyspace, and may be missing).
pub fn equivalent(a: &Route, b: &Route) -> bool {
    a.primary == b.primary && a.members == b.members
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process_spec::Id;

    fn id(suffix: &str) -> Id {
        Id {
            zone: "z".into(),
            suffix: suffix.into(),
        }
    }

    #[test]
    fn equivalence_ignores_endpoints_only() {
        let a = Route {
            members: vec![id("a"), id("b")],
            primary: 0,
            endpoints: vec!["http://a:1".into(), "http://b:1".into()],
        };
        let mut b = a.clone();
        b.endpoints.clear();
        assert!(equivalent(&a, &b));
        b.primary = 1;
        assert!(!equivalent(&a, &b));
        let mut c = a.clone();
        c.members.reverse();
        assert!(!equivalent(&a, &c));
    }
}
