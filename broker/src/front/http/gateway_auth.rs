//! Authorization of the `/` HTTP gateway (GET/HEAD reads, PUT appends) when
//! `--broker.auth-keys` is set: a deliberate difference from Gazette, whose gateway calls
//! the broker as the broker itself and so is open to anyone who reaches the port.
//!
//! The token comes from the `Authorization: Bearer <jwt>` header or, for clients that
//! cannot set headers (browsers, `curl -T` scripts), the `token` query parameter. It must
//! verify against one of the keys (else 401), carry the method's capability (READ for
//! GET/HEAD, APPEND for PUT; else 403), and its selector must admit the journal (else 403).
//! `AA==` among the keys admits requests without a token, as it does for gRPC.
//!
//! Lives on: the accepting core; pure over the request head, the keyspace snapshot and the
//! immutable `Auth`.

use super::parse;
use crate::auth::Claims;
use crate::core::Core;

/// Name of the query parameter that may carry the token.
pub const TOKEN_PARAM: &str = "token";

/// A refused request: HTTP status and message.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

/// The bearer token of the request: the `Authorization` header, else `?token=`.
fn token_of(authorization: Option<&str>, query: &str) -> Option<String> {
    if let Some(value) = authorization {
        return Some(value.to_string());
    }
    let pairs = parse::parse_query(query).ok()?;
    pairs
        .into_iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(TOKEN_PARAM))
        .map(|(_, v)| format!("Bearer {v}"))
}

/// Authorizes a gateway request for `require` on `journal`. With auth off, admits all.
pub fn authorize(
    core: &Core,
    authorization: Option<&str>,
    query: &str,
    require: u32,
    journal: &str,
) -> Result<Claims, Refused> {
    if !core.auth.enabled() {
        return Ok(Claims::all());
    }
    let mut metadata = http::HeaderMap::new();
    let token = token_of(authorization, query);
    if let Some(token) = &token {
        let value = http::HeaderValue::from_str(token).map_err(|_| Refused {
            status: 401,
            message: "invalid Authorization header".into(),
        })?;
        metadata.insert(http::header::AUTHORIZATION, value);
    }
    let unauthorized = |e: protocol::grpc::RpcError| Refused {
        status: 401,
        message: e.message,
    };
    let claims = if token.is_none() {
        // Admitted only when `AA==` allows tokenless requests.
        core.auth.verify(&metadata, require).map_err(unauthorized)?
    } else {
        let claims = core.auth.verify(&metadata, 0).map_err(unauthorized)?;
        if claims.capability & require != require {
            let name = if require == crate::auth::APPEND {
                "APPEND"
            } else {
                "READ"
            };
            return Err(Refused {
                status: 403,
                message: format!("authorization is missing required {name} capability"),
            });
        }
        claims
    };
    if !crate::front::authorize::in_scope(core, &claims, journal) {
        return Err(Refused {
            status: 403,
            message: format!("not authorized to {journal}"),
        });
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_wins_over_the_query() {
        assert_eq!(
            token_of(Some("Bearer h"), "token=q").as_deref(),
            Some("Bearer h")
        );
        assert_eq!(
            token_of(None, "offset=1&token=a%2Eb").as_deref(),
            Some("Bearer a.b")
        );
        assert_eq!(token_of(None, "offset=1"), None);
        assert_eq!(token_of(None, "token=%zz"), None);
    }
}
