//! Authorization, as Gazette's `auth/auth.go` and `broker/protocol/auth.go`: HS256/HS384
//! JWTs signed with pre-shared keys (`--broker.auth-keys`), carrying a capability mask
//! (`cap`) and a label selector (`sel`) that scopes the journals a token may see.
//!
//! Lives on: any core. [`Auth`] is immutable after start-up and shared as an `Arc`;
//! verification is a pure function of the call's metadata and the clock.
//!
//! Token decoding itself (claims, the HMAC provider) is in `jwt.rs`, which depends on
//! nothing else in the broker (the fuzz crate uses it through the library).
//!
//! The JWT crate (`jsonwebtoken`) is built without its crypto backends; `jwt.rs`
//! installs a provider for the HMAC algorithms Gazette uses (from `hmac` + `sha2`), which
//! keeps aws-lc and the RSA/ECDSA/EdDSA crates out of the build.

pub mod jwt;

use crate::auth::jwt::install_provider;
pub use crate::auth::jwt::{APPEND, APPLY, Claims, LIST, READ, REPLICATE};
use base64::Engine;
use jsonwebtoken::DecodingKey;
use protocol::LabelSelector;
use protocol::grpc::{Code, RpcError};
use protocol::method::Method;
use std::time::{Duration, SystemTime};

/// Lifetime granted to a request without a token when `AA==` allows it.
const MISSING_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Lifetime of the tokens this broker signs for its own calls to peers (a Replicate
/// stream may live as long as the pipeline: its deadline is the token's expiry).
const PEER_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// The broker's verifier. `keys` empty means authorization is off (everything allowed).
pub struct Auth {
    keys: Vec<DecodingKey>,
    allow_missing: bool,
    /// The first key, which signs this broker's calls to its peers.
    signing: Option<Vec<u8>>,
}

impl Auth {
    /// Parses `--broker.auth-keys`: base64 keys separated by whitespace and/or commas.
    /// The special key `AA==` admits requests without a token; at least one other key
    /// is required (it signs). An empty string turns authorization off.
    pub fn new(base64_keys: &str) -> Result<Auth, String> {
        let fields: Vec<&str> = base64_keys
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        if fields.is_empty() {
            return Ok(Auth {
                keys: Vec::new(),
                allow_missing: false,
                signing: None,
            });
        }
        install_provider();
        let mut keys = Vec::new();
        let mut allow_missing = false;
        let mut signing = None;
        for (i, field) in fields.iter().enumerate() {
            if *field == "AA==" {
                allow_missing = true;
                continue;
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(field)
                .map_err(|e| format!("failed to decode key at index {i}: {e}"))?;
            let key = DecodingKey::from_secret(&raw)
                .map_err(|e| format!("failed to use key at index {i}: {e}"))?;
            keys.push(key);
            signing.get_or_insert(raw);
        }
        if keys.is_empty() {
            return Err("at least one key must be provided".into());
        }
        Ok(Auth {
            keys,
            allow_missing,
            signing,
        })
    }

    /// Verifies a gRPC call to `path`; paths that are not served need no authorization
    /// (they fail as unimplemented).
    pub fn verify_call(
        &self,
        method: Method,
        metadata: &http::HeaderMap,
    ) -> Result<Claims, RpcError> {
        self.verify(metadata, required_capability(method))
    }

    /// The `authorization` value for a call to a peer with `capability` on `journal`
    /// (`None` when authorization is off).
    pub fn peer_token(&self, capability: u32, journal: &str) -> Option<http::HeaderValue> {
        let key = self.signing.as_ref()?;
        let token = crate::auth::jwt::sign(key, capability, journal, PEER_TOKEN_TTL)
            .map_err(|e| tracing::warn!(%e, "signing a peer token"))
            .ok()?;
        http::HeaderValue::from_str(&format!("Bearer {token}")).ok()
    }

    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Verifies the call's `authorization` metadata for the `require`d capability.
    /// Failures are `Unauthenticated` with Gazette's messages.
    pub fn verify(&self, metadata: &http::HeaderMap, require: u32) -> Result<Claims, RpcError> {
        if !self.enabled() {
            return Ok(Claims::all());
        }
        let unauthenticated = |msg: String| RpcError::new(Code::Unauthenticated, msg);
        let Some(value) = metadata.get("authorization") else {
            if self.allow_missing {
                return Ok(Claims {
                    capability: require,
                    selector: LabelSelector::default(),
                    expires: Some(SystemTime::now() + MISSING_TOKEN_LIFETIME),
                });
            }
            return Err(unauthenticated(
                "missing or empty Authorization token".into(),
            ));
        };
        let bearer = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                unauthenticated(
                    "invalid or unsupported Authorization header (expected 'Bearer')".into(),
                )
            })?;
        let claims = self
            .decode(bearer)
            .map_err(|e| unauthenticated(format!("verifying Authorization: {e}")))?;
        verify_capability(claims.capability, require).map_err(unauthenticated)?;
        Ok(claims)
    }

    /// The token's claims if one of the keys signed it (`crate::auth::jwt::decode`).
    fn decode(&self, token: &str) -> Result<Claims, String> {
        crate::auth::jwt::decode(&self.keys, token)
    }
}

fn verify_capability(actual: u32, require: u32) -> Result<(), String> {
    if actual & require == require {
        return Ok(());
    }
    for (bit, name) in [
        (LIST, "LIST"),
        (APPLY, "APPLY"),
        (READ, "READ"),
        (APPEND, "APPEND"),
        (REPLICATE, "REPLICATE"),
    ] {
        if require & bit != 0 && actual & bit == 0 {
            return Err(format!(
                "authorization is missing required {name} capability"
            ));
        }
    }
    Err(format!(
        "authorization is missing required capability (have {actual:b}, but require {require:b})"
    ))
}

/// The capability an RPC requires.
pub fn required_capability(method: Method) -> u32 {
    match method {
        Method::List => LIST,
        Method::Apply => APPLY,
        Method::Read | Method::ListFragments | Method::FragmentStoreHealth => READ,
        Method::Append => APPEND,
        Method::Replicate => REPLICATE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::jwt::ALL;
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use std::time::UNIX_EPOCH;

    const KEY: &[u8] = b"secret-key";

    fn token(alg: Algorithm, claims: serde_json::Value) -> String {
        install_provider();
        encode(
            &Header::new(alg),
            &claims,
            &EncodingKey::from_secret(KEY).unwrap(),
        )
        .unwrap()
    }

    fn now() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    fn md(token: &str) -> http::HeaderMap {
        let mut m = http::HeaderMap::new();
        m.insert("authorization", format!("Bearer {token}").parse().unwrap());
        m
    }

    fn auth() -> Auth {
        let b64 = base64::engine::general_purpose::STANDARD.encode(KEY);
        Auth::new(&format!("c29tZXRoaW5nLWVsc2U=, {b64}")).unwrap()
    }

    #[test]
    fn verifies_capabilities_and_selectors() {
        let a = auth();
        let t = token(
            Algorithm::HS256,
            serde_json::json!({"cap": APPEND | READ, "exp": now() + 60, "iat": now(),
              "sel": {"include": {"labels": [{"name": "name", "value": "a/j"}]},
                      "exclude": {"labels": null}}}),
        );
        let claims = a.verify(&md(&t), APPEND).unwrap();
        assert!(claims.admits("a/j", None));
        assert!(!claims.admits("b/j", None));
        assert!(claims.remaining().unwrap() > Duration::from_secs(50));
        let err = a.verify(&md(&t), LIST).unwrap_err();
        assert_eq!(err.code, Code::Unauthenticated);
        assert_eq!(
            err.message,
            "authorization is missing required LIST capability"
        );
        let t384 = token(
            Algorithm::HS384,
            serde_json::json!({"cap": ALL, "exp": now() + 60}),
        );
        assert!(a.verify(&md(&t384), REPLICATE).unwrap().admits("x", None));
        // An exclude-only selector still excludes (an empty include admits the rest).
        let t = token(
            Algorithm::HS256,
            serde_json::json!({"cap": ALL, "exp": now() + 60,
              "sel": {"exclude": {"labels": [{"name": "name", "value": "a/j"}]}}}),
        );
        let claims = a.verify(&md(&t), APPEND).unwrap();
        assert!(!claims.admits("a/j", None));
        assert!(claims.admits("b/j", None));
        assert_eq!(
            verify_capability(1 << 20, 1 << 17).unwrap_err(),
            "authorization is missing required capability (have 100000000000000000000, but require 100000000000000000)"
        );
    }

    #[test]
    fn rejects_bad_tokens_with_gazettes_texts() {
        let a = auth();
        let expired = token(
            Algorithm::HS256,
            serde_json::json!({"cap": ALL, "exp": now() - 60}),
        );
        assert_eq!(
            a.verify(&md(&expired), READ).unwrap_err().message,
            "verifying Authorization: token has invalid claims: token is expired"
        );
        let no_exp = token(Algorithm::HS256, serde_json::json!({"cap": ALL}));
        assert!(
            a.verify(&md(&no_exp), READ)
                .unwrap_err()
                .message
                .contains("exp")
        );
        let future = token(
            Algorithm::HS256,
            serde_json::json!({"cap": ALL, "exp": now() + 600, "iat": now() + 300}),
        );
        assert!(
            a.verify(&md(&future), READ)
                .unwrap_err()
                .message
                .contains("used before issued")
        );
        assert_eq!(
            a.verify(&http::HeaderMap::new(), READ).unwrap_err().message,
            "missing or empty Authorization token"
        );
        let mut basic = http::HeaderMap::new();
        basic.insert("authorization", "Basic xyz".parse().unwrap());
        assert!(
            a.verify(&basic, READ)
                .unwrap_err()
                .message
                .contains("expected 'Bearer'")
        );
        let mut tampered = token(
            Algorithm::HS256,
            serde_json::json!({"cap": ALL, "exp": now() + 60}),
        );
        tampered.push('x');
        assert!(a.verify(&md(&tampered), READ).is_err());
        assert!(a.verify(&md("not.a.jwt"), READ).is_err());
        assert!(a.verify(&md(""), READ).is_err());
    }

    /// A cheap stand-in for a fuzz target over the token decoder: mutated tokens never
    /// panic (and verify only if the mutation left the signed bytes intact).
    #[test]
    fn mutated_tokens_never_panic() {
        let a = auth();
        let good = token(
            Algorithm::HS256,
            serde_json::json!({"cap": ALL, "exp": now() + 60,
              "sel": {"include": {"labels": [{"name": "name", "value": "a/j", "prefix": true}]}}}),
        );
        assert!(a.verify(&md(&good), READ).is_ok());
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let alphabet = b"._-=+/eyJABCabc0123456789{}\":, ";
        for _ in 0..5_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut t = good.clone().into_bytes();
            let at = (state as usize) % t.len();
            match state % 3 {
                0 => t[at] = alphabet[(state >> 8) as usize % alphabet.len()],
                1 => t.truncate(at),
                _ => t.insert(at, alphabet[(state >> 8) as usize % alphabet.len()]),
            }
            let t = String::from_utf8_lossy(&t).into_owned();
            if t == good {
                continue;
            }
            let Ok(value) = http::HeaderValue::from_str(&format!("Bearer {t}")) else {
                continue;
            };
            let mut m = http::HeaderMap::new();
            m.insert("authorization", value);
            // A mutation inside the base64 padding bits can leave the token intact.
            if let Ok(claims) = a.verify(&m, READ) {
                assert_eq!(claims.capability, ALL, "{t}");
            }
        }
    }

    #[test]
    fn keys_parse_like_gazette() {
        assert!(!Auth::new("").unwrap().enabled());
        assert_eq!(
            Auth::new("AA==").err().unwrap(),
            "at least one key must be provided"
        );
        assert!(
            Auth::new("!!!")
                .err()
                .unwrap()
                .starts_with("failed to decode key at index 0")
        );
        let a = Auth::new("AA== c2VjcmV0").unwrap();
        let claims = a.verify(&http::HeaderMap::new(), APPEND).unwrap();
        assert_eq!(claims.capability, APPEND);
    }
}
