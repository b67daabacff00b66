//! Broker addresses: Gazette's endpoints are URLs (`http://host:port`); Courant's client
//! dials plain HTTP/2 over TCP.
//!
//! Lives on: values only; no state.

use crate::Error;

/// A broker address: what to dial, and the HTTP/2 authority to send.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub authority: String,
}

impl Endpoint {
    /// Accepts `http://host:port[/]` or `host:port`; a missing port means 80.
    pub fn parse(s: &str) -> Result<Endpoint, Error> {
        let s = s.trim();
        let rest = if let Some(rest) = s.strip_prefix("http://") {
            rest
        } else if s.contains("://") {
            return Err(Error::Invalid(format!(
                "broker address {s:?}: only http:// endpoints are supported (no TLS or unix sockets)"
            )));
        } else {
            s
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(Error::Invalid(format!(
                "broker address {s:?}: expected http://host:port"
            )));
        }
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.contains(']'));
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint { authority })
    }

    /// The endpoint as a URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.authority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let auth = |s: &str| Endpoint::parse(s).unwrap().authority;
        assert_eq!(auth("http://127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(auth("http://localhost:8080/"), "localhost:8080");
        assert_eq!(auth("broker:9000"), "broker:9000");
        assert_eq!(auth("http://broker"), "broker:80");
        assert_eq!(auth("http://[::1]:7"), "[::1]:7");
        assert_eq!(auth("http://[::1]"), "[::1]:80");
        for bad in [
            "https://broker:443",
            "unix:///tmp/sock",
            "http://a:1/path",
            "",
        ] {
            let err = Endpoint::parse(bad).unwrap_err().to_string();
            assert!(err.contains("broker address"), "{bad}: {err}");
        }
    }
}
