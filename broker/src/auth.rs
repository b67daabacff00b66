//! Authorization, as Gazette's `auth/auth.go` and `broker/protocol/auth.go`: HS256/HS384
//! JWTs signed with pre-shared keys (`--broker.auth-keys`), carrying a capability mask
//! (`cap`) and a label selector (`sel`) that scopes the journals a token may see.
//!
//! Lives on: any core. [`Auth`] is immutable after start-up and shared as an `Arc`;
//! verification is a pure function of the call's metadata and the clock.
//!
//! The JWT crate (`jsonwebtoken`) is built without its crypto backends; this module
//! installs a provider for the HMAC algorithms Gazette uses (from `hmac` + `sha2`), which
//! keeps aws-lc and the RSA/ECDSA/EdDSA crates out of the build.

use crate::core::{Core, FirstRequest};
use base64::Engine;
use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};
use protocol::grpc::{Code, Outbound, RpcError};
use protocol::{
    AppendResponse, FragmentsResponse, Label, LabelSelector, LabelSet, ReadResponse, Status,
};
use serde::Deserialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Capability bits (Gazette's `pb.Capability`).
pub const LIST: u32 = 1 << 1;
pub const APPLY: u32 = 1 << 2;
pub const READ: u32 = 1 << 3;
pub const APPEND: u32 = 1 << 4;
pub const REPLICATE: u32 = 1 << 5;
pub const ALL: u32 = u32::MAX;

/// Leeway on `exp` and `iat`, as Gazette's verifier.
const LEEWAY_S: u64 = 5;
/// Lifetime granted to a request without a token when `AA==` allows it.
const MISSING_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// The verified scope of one call.
#[derive(Debug, Clone)]
pub struct Claims {
    pub capability: u32,
    pub selector: LabelSelector,
    /// When the authorization expires (the call's deadline); `None` without auth.
    pub expires: Option<SystemTime>,
}

impl Claims {
    /// Time left before the authorization expires, if it does.
    pub fn remaining(&self) -> Option<Duration> {
        self.expires.map(|exp| {
            exp.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        })
    }

    /// Whether the claims' selector admits a journal with `labels` (plus its `name`).
    pub fn admits(&self, name: &str, labels: Option<&LabelSet>) -> bool {
        let set = protocol::labels::with_meta_name(&labels.cloned().unwrap_or_default(), name);
        protocol::labels::matches(&self.selector, &set)
    }
}

impl Claims {
    /// Claims of a call when authorization is off, or for a path that needs none.
    pub fn all() -> Claims {
        Claims {
            capability: ALL,
            selector: LabelSelector::default(),
            expires: None,
        }
    }

    /// The call's deadline bounded by the authorization's expiry.
    pub fn bound(&self, timeout: Option<Duration>) -> Option<Duration> {
        match (timeout, self.remaining()) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        }
    }
}

/// Whether `journal` is visible to `claims`: a journal outside the claims' selector looks
/// absent (Gazette's resolver). A journal not in the keyspace is left to the handler.
pub fn in_scope(core: &Core, claims: &Claims, journal: &str) -> bool {
    let snapshot = core.keyspace.current();
    match snapshot.journals.get(journal) {
        Some(item) => claims.admits(journal, item.spec.labels.as_ref()),
        None => true,
    }
}

/// Answers a journal call whose journal is out of the token's scope as if the journal
/// did not exist: status JOURNAL_NOT_FOUND and a header with an empty Route.
pub async fn answer_out_of_scope(core: &Core, first: &FirstRequest, mut out: Outbound) {
    let snapshot = core.keyspace.current();
    let header = Some(crate::resolver::unrouted_header(core, &snapshot));
    let status = Status::JournalNotFound as i32;
    let sent = match first {
        FirstRequest::Append(_) => {
            out.send(&AppendResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
        FirstRequest::Read(_) => {
            out.send(&ReadResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
        FirstRequest::Fragments(_) => {
            out.send(&FragmentsResponse {
                status,
                header,
                ..Default::default()
            })
            .await
        }
    };
    out.finish(sent);
}

/// The broker's verifier. `keys` empty means authorization is off (everything allowed).
pub struct Auth {
    keys: Vec<DecodingKey>,
    allow_missing: bool,
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
            });
        }
        install_provider();
        let mut keys = Vec::new();
        let mut allow_missing = false;
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
        }
        if keys.is_empty() {
            return Err("at least one key must be provided".into());
        }
        Ok(Auth {
            keys,
            allow_missing,
        })
    }

    /// Verifies a gRPC call to `path`; paths that are not served need no authorization
    /// (they fail as unimplemented).
    pub fn verify_call(&self, path: &str, metadata: &http::HeaderMap) -> Result<Claims, RpcError> {
        match required_capability(path) {
            Some(require) => self.verify(metadata, require),
            None => Ok(Claims::all()),
        }
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

    fn decode(&self, token: &str) -> Result<Claims, String> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256, Algorithm::HS384];
        validation.leeway = LEEWAY_S;
        validation.validate_exp = true;
        validation.set_required_spec_claims(&["exp"]);
        let mut last = String::from("token is unverifiable");
        for key in &self.keys {
            match jsonwebtoken::decode::<WireClaims>(token, key, &validation) {
                Ok(data) => return data.claims.into_claims(),
                Err(err) => {
                    last = describe(err.kind());
                    // Another key may have signed it; anything else is final.
                    if *err.kind() != ErrorKind::InvalidSignature {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }
}

/// Gazette's texts (golang-jwt's) for the common verification failures.
fn describe(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::InvalidSignature => "token signature is invalid: signature is invalid".into(),
        ErrorKind::ExpiredSignature => "token has invalid claims: token is expired".into(),
        ErrorKind::MissingRequiredClaim(c) if c == "exp" => {
            "token has invalid claims: token is missing required claim: exp claim is required"
                .into()
        }
        ErrorKind::InvalidAlgorithm => "token is unverifiable: signing method is invalid".into(),
        other => format!("token is malformed: {other:?}"),
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

/// The capability an RPC requires, by its gRPC path; `None` for paths not served.
pub fn required_capability(path: &str) -> Option<u32> {
    Some(match path {
        "/protocol.Journal/List" => LIST,
        "/protocol.Journal/Apply" => APPLY,
        "/protocol.Journal/Read" => READ,
        "/protocol.Journal/ListFragments" => READ,
        "/protocol.Journal/FragmentStoreHealth" => READ,
        "/protocol.Journal/Append" => APPEND,
        "/protocol.Journal/Replicate" => REPLICATE,
        _ => return None,
    })
}

/// Claims as Go's `pb.Claims` marshals them.
#[derive(Deserialize)]
struct WireClaims {
    #[serde(default)]
    cap: u32,
    #[serde(default)]
    sel: WireSelector,
    exp: Option<f64>,
    iat: Option<f64>,
}

#[derive(Deserialize, Default)]
struct WireSelector {
    #[serde(default)]
    include: WireLabelSet,
    #[serde(default)]
    exclude: WireLabelSet,
}

#[derive(Deserialize, Default)]
struct WireLabelSet {
    /// `null` in Go's JSON for an empty set.
    #[serde(default)]
    labels: Option<Vec<WireLabel>>,
}

#[derive(Deserialize)]
struct WireLabel {
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    prefix: bool,
}

impl WireLabelSet {
    fn into_set(self) -> LabelSet {
        LabelSet {
            labels: self
                .labels
                .unwrap_or_default()
                .into_iter()
                .map(|l| Label {
                    name: l.name,
                    value: l.value,
                    prefix: l.prefix,
                })
                .collect(),
        }
    }
}

impl WireClaims {
    fn into_claims(self) -> Result<Claims, String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if let Some(iat) = self.iat
            && iat > now + LEEWAY_S as f64
        {
            return Err("token has invalid claims: token used before issued".into());
        }
        let exp = self.exp.unwrap_or(0.0).max(0.0);
        // As Gazette, the call's deadline is `exp` itself (the leeway only admits the token).
        let expires = UNIX_EPOCH + Duration::from_secs_f64(exp.min(1e11));
        Ok(Claims {
            capability: self.cap,
            selector: LabelSelector {
                include: Some(self.sel.include.into_set()),
                exclude: Some(self.sel.exclude.into_set()),
            },
            expires: Some(expires),
        })
    }
}

// The HMAC-only crypto provider.

macro_rules! hmac_alg {
    ($signer:ident, $verifier:ident, $alg:expr, $hash:ty) => {
        struct $signer(hmac::Hmac<$hash>);
        struct $verifier(hmac::Hmac<$hash>);

        impl $signer {
            fn new(secret: &[u8]) -> jsonwebtoken::errors::Result<Self> {
                use hmac::KeyInit;
                hmac::Hmac::<$hash>::new_from_slice(secret)
                    .map(Self)
                    .map_err(|_| ErrorKind::InvalidKeyFormat.into())
            }
        }
        impl $verifier {
            fn new(secret: &[u8]) -> jsonwebtoken::errors::Result<Self> {
                use hmac::KeyInit;
                hmac::Hmac::<$hash>::new_from_slice(secret)
                    .map(Self)
                    .map_err(|_| ErrorKind::InvalidKeyFormat.into())
            }
        }

        impl signature::Signer<Vec<u8>> for $signer {
            fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
                use hmac::Mac;
                let mut mac = self.0.clone();
                mac.update(msg);
                Ok(mac.finalize().into_bytes().to_vec())
            }
        }
        impl JwtSigner for $signer {
            fn algorithm(&self) -> Algorithm {
                $alg
            }
        }
        impl signature::Verifier<Vec<u8>> for $verifier {
            fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> Result<(), signature::Error> {
                use hmac::Mac;
                let mut mac = self.0.clone();
                mac.update(msg);
                mac.verify_slice(sig).map_err(|_| signature::Error::new())
            }
        }
        impl JwtVerifier for $verifier {
            fn algorithm(&self) -> Algorithm {
                $alg
            }
        }
    };
}

hmac_alg!(Hs256Signer, Hs256Verifier, Algorithm::HS256, sha2::Sha256);
hmac_alg!(Hs384Signer, Hs384Verifier, Algorithm::HS384, sha2::Sha384);

fn signer_factory(
    alg: &Algorithm,
    key: &EncodingKey,
) -> jsonwebtoken::errors::Result<Box<dyn JwtSigner>> {
    let secret = key.as_bytes();
    Ok(match alg {
        Algorithm::HS256 => Box::new(Hs256Signer::new(secret)?),
        Algorithm::HS384 => Box::new(Hs384Signer::new(secret)?),
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    })
}

fn verifier_factory(
    alg: &Algorithm,
    key: &DecodingKey,
) -> jsonwebtoken::errors::Result<Box<dyn JwtVerifier>> {
    let secret = key.try_get_as_bytes()?;
    Ok(match alg {
        Algorithm::HS256 => Box::new(Hs256Verifier::new(secret)?),
        Algorithm::HS384 => Box::new(Hs384Verifier::new(secret)?),
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    })
}

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory,
    verifier_factory,
    key_utils: KeyUtils::new_unimplemented(),
};

fn install_provider() {
    // A second install (tests, or a restarted Auth) finds ours already in place.
    let _ = PROVIDER.install_default();
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{Header, encode};

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
