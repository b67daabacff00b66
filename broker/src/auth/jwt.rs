//! The pure part of authorization: decoding a JWT into verified [`Claims`] (HS256/HS384,
//! `exp` required, `iat` checked, Gazette's `pb.Claims` JSON) and the HMAC-only crypto
//! provider `jsonwebtoken` runs on.
//!
//! Lives on: any (pure functions of the token, the keys and the clock). It depends on
//! nothing else in the broker, only on `protocol` and the JWT crates; the fuzz crate uses it
//! through the library (`fuzz/fuzz_targets/jwt_claims.rs`). `auth/mod.rs` holds the
//! broker's side: keys, metadata, capabilities per RPC and scoping.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};
use protocol::{Label, LabelSelector, LabelSet};
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
pub const LEEWAY_S: u64 = 5;

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
        let empty = |s: &Option<LabelSet>| s.as_ref().is_none_or(|s| s.labels.is_empty());
        if empty(&self.selector.include) && empty(&self.selector.exclude) {
            // Admits everything (authorization off, or a token without a selector),
            // checked on every append: no label set is built.
            return true;
        }
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

/// Signs a token for a broker-to-broker call (Gazette's self-signed narrow claims): the
/// `capability` on the one journal `name`, valid for `ttl`, HS256 with `key`.
pub fn sign(key: &[u8], capability: u32, name: &str, ttl: Duration) -> Result<String, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "cap": capability,
        "sel": {"include": {"labels": [{"name": "name", "value": name}]}},
        "iat": now,
        "exp": now + ttl.as_secs(),
    });
    let header = jsonwebtoken::Header::new(Algorithm::HS256);
    let key = EncodingKey::from_secret(key).map_err(|e| e.to_string())?;
    jsonwebtoken::encode(&header, &claims, &key).map_err(|e| e.to_string())
}

/// Decodes and verifies `token` against `keys` (any may have signed it), returning its
/// claims or golang-jwt's text for why not. Never panics, whatever the token.
pub fn decode(keys: &[DecodingKey], token: &str) -> Result<Claims, String> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.algorithms = vec![Algorithm::HS256, Algorithm::HS384];
    validation.leeway = LEEWAY_S;
    validation.validate_exp = true;
    validation.set_required_spec_claims(&["exp"]);
    let mut last = String::from("token is unverifiable");
    for key in keys {
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

pub fn install_provider() {
    // A second install (tests, or a restarted Auth) finds ours already in place.
    let _ = PROVIDER.install_default();
}
