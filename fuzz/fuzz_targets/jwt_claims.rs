//! JWT decoding (`courant_broker::auth::jwt`): arbitrary bytes as a bearer
//! token, and arbitrary bytes as the claims of a correctly signed token (so the claims
//! JSON itself is reached, past the signature check). Nothing may panic.
#![no_main]

use courant_broker::auth::jwt;

use base64::Engine;
use hmac::{KeyInit, Mac};
use jsonwebtoken::DecodingKey;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const KEY: &[u8] = b"fuzz-key";

fn keys() -> &'static [DecodingKey] {
    static KEYS: OnceLock<Vec<DecodingKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        jwt::install_provider();
        vec![
            DecodingKey::from_secret(b"other-key").expect("key"),
            DecodingKey::from_secret(KEY).expect("key"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let keys = keys();
    // As a whole token.
    let _ = jwt::decode(keys, &String::from_utf8_lossy(data));
    // As the claims (first byte: header variant) of a token signed with KEY.
    let Some((&variant, claims)) = data.split_first() else {
        return;
    };
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = match variant % 4 {
        0 => r#"{"alg":"HS256","typ":"JWT"}"#,
        1 => r#"{"alg":"HS384","typ":"JWT"}"#,
        2 => r#"{"alg":"HS256"}"#,
        _ => r#"{"alg":"none","typ":"JWT"}"#,
    };
    let msg = format!("{}.{}", url.encode(header), url.encode(claims));
    let sig = if variant % 4 == 1 {
        let mut mac = hmac::Hmac::<sha2::Sha384>::new_from_slice(KEY).expect("key");
        mac.update(msg.as_bytes());
        mac.finalize().into_bytes().to_vec()
    } else {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(KEY).expect("key");
        mac.update(msg.as_bytes());
        mac.finalize().into_bytes().to_vec()
    };
    let token = format!("{msg}.{}", url.encode(sig));
    if let Ok(c) = jwt::decode(keys, &token) {
        let _ = c.remaining();
        let _ = c.bound(Some(std::time::Duration::from_secs(1)));
        let _ = c.admits("a/journal", None);
    }
});
