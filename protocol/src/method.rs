//! The methods of the `protocol.Journal` gRPC service, by their wire paths.

/// One method of `protocol.Journal`. Servers dispatch on this, never on path strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    List,
    Apply,
    Read,
    Append,
    Replicate,
    ListFragments,
    FragmentStoreHealth,
}

impl Method {
    /// Every method, in the service's declaration order.
    pub const ALL: [Method; 7] = [
        Method::List,
        Method::Apply,
        Method::Read,
        Method::Append,
        Method::Replicate,
        Method::ListFragments,
        Method::FragmentStoreHealth,
    ];

    /// The method's name, as in the service definition (and in metrics labels).
    pub fn name(self) -> &'static str {
        match self {
            Method::List => "List",
            Method::Apply => "Apply",
            Method::Read => "Read",
            Method::Append => "Append",
            Method::Replicate => "Replicate",
            Method::ListFragments => "ListFragments",
            Method::FragmentStoreHealth => "FragmentStoreHealth",
        }
    }

    /// The gRPC path: `/protocol.Journal/<name>`.
    pub fn path(self) -> &'static str {
        match self {
            Method::List => "/protocol.Journal/List",
            Method::Apply => "/protocol.Journal/Apply",
            Method::Read => "/protocol.Journal/Read",
            Method::Append => "/protocol.Journal/Append",
            Method::Replicate => "/protocol.Journal/Replicate",
            Method::ListFragments => "/protocol.Journal/ListFragments",
            Method::FragmentStoreHealth => "/protocol.Journal/FragmentStoreHealth",
        }
    }

    /// The method a gRPC path names, if `protocol.Journal` has it.
    pub fn from_path(path: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.path() == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_unknown_paths_are_none() {
        for m in Method::ALL {
            assert_eq!(Method::from_path(m.path()), Some(m));
            assert!(m.path().ends_with(m.name()));
        }
        assert_eq!(Method::from_path("/protocol.Journal/Nope"), None);
        assert_eq!(Method::from_path("/protocol.Journal/"), None);
        assert_eq!(Method::from_path(""), None);
    }
}
