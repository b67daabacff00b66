//! `gs://bucket/prefix/` stores: plain reqwest on the Cloud Storage JSON API.
//!
//! Lives on: the control thread (reqwest is tokio-based).
//!
//! object_store's GCS client is not used: its writes fail against the GCS emulator
//! (fake-gcs-server), and its signer reaches Google's IAM over the network.
//!
//! * Endpoint: `STORAGE_EMULATOR_HOST` (the standard emulator variable, `host:port` or a
//!   URL) when set, requests then carry no credentials; else `https://storage.googleapis.com`.
//! * Credentials outside the emulator: the service-account JSON key named by
//!   `GOOGLE_APPLICATION_CREDENTIALS`, exchanged for OAuth2 access tokens (RS256 JWT-bearer
//!   grant at the key's `token_uri`, scope `devstorage.read_write`, cached until a minute
//!   before expiry). Other credential kinds (metadata server, user credentials) are not
//!   supported: without a service-account key the store fails to build, so it reports that
//!   as its health error and appends to journals using it answer `FRAGMENT_STORE_UNHEALTHY`.
//!   This path is checked only by unit tests (no Google account in CI).
//! * Uploads of up to [`SINGLE_PUT_MAX`] bytes are one `uploadType=media` POST; larger ones
//!   are a resumable upload in [`CHUNK`] chunks read from the staged file one at a time.
//!   `Content-Encoding: gzip` objects (GZIP_OFFLOAD_DECOMPRESSION) set `contentEncoding`.
//! * Signed URLs: V4 (`GOOG4-RSA-SHA256`, signed with the service account's key, host
//!   `storage.googleapis.com`, at most 7 days; checked against Google's conformance
//!   vector); with the emulator, the plain `?alt=media` URL of the object, *unsigned* (the
//!   emulator checks no signature).

use super::{ObjectBody, ObjectInfo, PutSource, Store, StoreError, StoreFuture, StoreResult};
use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use protocol::validate::GoUrl;
use std::time::Duration;

/// How long connecting to the GCS endpoint may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Largest upload sent as one request.
pub const SINGLE_PUT_MAX: u64 = 8 << 20;
/// Chunk of a resumable upload (a multiple of 256 KiB, as GCS requires).
pub const CHUNK: usize = 8 << 20;

/// Everything but RFC 3986 unreserved characters is escaped (`/` included).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn enc(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// As [`enc`], but `/` stays (object names in XML-API paths).
fn enc_path(s: &str) -> String {
    const PATH: &AsciiSet = &COMPONENT.remove(b'/');
    utf8_percent_encode(s, PATH).to_string()
}

/// The token lifetime asked for, and V4 signed URLs' longest validity.
const TOKEN_TTL_S: i64 = 3600;
const V4_MAX_TTL_S: u64 = 7 * 24 * 3600;
const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";

/// A service account's identity and RSA key.
struct ServiceAccount {
    email: String,
    token_uri: String,
    key: ring::signature::RsaKeyPair,
}

impl ServiceAccount {
    /// Parses a service-account JSON key (`type`, `client_email`, `private_key` as PKCS#8
    /// PEM, `token_uri`).
    fn from_json(json: &[u8]) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
        if v["type"].as_str() != Some("service_account") {
            return Err(format!(
                "credentials of type {} are not supported (only service_account keys)",
                v["type"]
            ));
        }
        let field = |k: &str| {
            v[k].as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("no `{k}`"))
        };
        let pem = field("private_key")?;
        let b64: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .map(str::trim)
            .collect();
        let der = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64)
            .map_err(|e| format!("private_key is not PEM: {e}"))?;
        let key = ring::signature::RsaKeyPair::from_pkcs8(&der)
            .map_err(|e| format!("private_key is not a PKCS#8 RSA key: {e}"))?;
        Ok(ServiceAccount {
            email: field("client_email")?,
            token_uri: field("token_uri")
                .unwrap_or_else(|_| "https://oauth2.googleapis.com/token".into()),
            key,
        })
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 (deterministic).
    fn sign(&self, msg: &[u8]) -> StoreResult<Vec<u8>> {
        let mut sig = vec![0u8; self.key.public().modulus_len()];
        self.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                msg,
                &mut sig,
            )
            .map_err(|_| StoreError::new("gcs: RSA signing failed"))?;
        Ok(sig)
    }

    /// A V4 signed GET URL of `object` in `bucket`, valid `ttl_s` seconds from `now`.
    fn sign_v4_get(
        &self,
        bucket: &str,
        object: &str,
        ttl_s: u64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<String> {
        use sha2::Digest;
        const HOST: &str = "storage.googleapis.com";
        let datetime = now.format("%Y%m%dT%H%M%SZ").to_string();
        let date = now.format("%Y%m%d").to_string();
        let scope = format!("{date}/auto/storage/goog4_request");
        let path = format!("/{}/{}", enc(bucket), enc_path(object));
        // Sorted by name, as the canonical query string must be.
        let query = format!(
            "X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential={}&X-Goog-Date={datetime}\
             &X-Goog-Expires={ttl_s}&X-Goog-SignedHeaders=host",
            enc(&format!("{}/{scope}", self.email))
        );
        let canonical = format!("GET\n{path}\n{query}\nhost:{HOST}\n\nhost\nUNSIGNED-PAYLOAD");
        let digest = hex::encode(sha2::Sha256::digest(canonical.as_bytes()));
        let to_sign = format!("GOOG4-RSA-SHA256\n{datetime}\n{scope}\n{digest}");
        let sig = hex::encode(self.sign(to_sign.as_bytes())?);
        Ok(format!(
            "https://{HOST}{path}?{query}&X-Goog-Signature={sig}"
        ))
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
}

enum Auth {
    /// The emulator: no credentials, unsigned URLs.
    Emulator,
    Account {
        account: Box<ServiceAccount>,
        /// The cached access token and when it stops being used.
        token: tokio::sync::Mutex<Option<(String, std::time::Instant)>>,
    },
}

pub struct GcsStore {
    client: reqwest::Client,
    auth: Auth,
    /// `http(s)://host[:port]`, no trailing `/`.
    base: String,
    bucket: String,
    /// Key prefix within the bucket (the URL path without its leading `/`).
    prefix: String,
}

fn http_err(what: &str, e: reqwest::Error) -> StoreError {
    StoreError::new(format!("gcs {what}: {e}"))
}

/// An error of a non-success response (its status and the start of its body).
async fn status_err(what: &str, resp: reqwest::Response) -> StoreError {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    let body: String = body.chars().take(300).collect();
    let message = format!("gcs {what}: status {}: {body}", status.as_u16());
    if status == reqwest::StatusCode::NOT_FOUND {
        StoreError::not_found(message)
    } else {
        StoreError::new(message)
    }
}

fn unix_of(updated: Option<&serde_json::Value>) -> StoreResult<i64> {
    let s = updated
        .and_then(|v| v.as_str())
        .ok_or_else(|| StoreError::new("gcs object metadata without `updated`"))?;
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp())
        .map_err(|e| StoreError::new(format!("gcs object `updated` {s:?}: {e}")))
}

impl GcsStore {
    pub fn new(url: &GoUrl) -> Result<Self, String> {
        let (base, auth) = match std::env::var("STORAGE_EMULATOR_HOST")
            .ok()
            .filter(|v| !v.is_empty())
        {
            Some(host) if host.starts_with("http://") || host.starts_with("https://") => {
                (host.trim_end_matches('/').to_string(), Auth::Emulator)
            }
            Some(host) => (
                format!("http://{}", host.trim_end_matches('/')),
                Auth::Emulator,
            ),
            None => {
                let path = std::env::var("GOOGLE_APPLICATION_CREDENTIALS")
                    .ok()
                    .filter(|v| !v.is_empty())
                    .ok_or(
                        "gs:// stores need GOOGLE_APPLICATION_CREDENTIALS naming a \
                         service-account JSON key (or STORAGE_EMULATOR_HOST for an emulator); \
                         other Google credentials are not supported",
                    )?;
                let json = std::fs::read(&path)
                    .map_err(|e| format!("reading GOOGLE_APPLICATION_CREDENTIALS {path}: {e}"))?;
                let account = ServiceAccount::from_json(&json)
                    .map_err(|e| format!("GOOGLE_APPLICATION_CREDENTIALS {path}: {e}"))?;
                (
                    "https://storage.googleapis.com".to_string(),
                    Auth::Account {
                        account: Box::new(account),
                        token: tokio::sync::Mutex::new(None),
                    },
                )
            }
        };
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| format!("building the gcs http client: {e}"))?;
        Ok(GcsStore {
            client,
            auth,
            base,
            bucket: url.host.clone(),
            prefix: url.path.trim_start_matches('/').to_string(),
        })
    }

    /// A request with the access token (none with the emulator).
    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> StoreResult<reqwest::RequestBuilder> {
        let req = self.client.request(method, url);
        match &self.auth {
            Auth::Emulator => Ok(req),
            Auth::Account { account, token } => {
                let mut token = token.lock().await;
                let now = std::time::Instant::now();
                if let Some((t, until)) = token.as_ref()
                    && *until > now
                {
                    return Ok(req.bearer_auth(t));
                }
                let (t, ttl) = self.fetch_token(account).await?;
                let until = now + Duration::from_secs(ttl.saturating_sub(60));
                *token = Some((t.clone(), until));
                Ok(req.bearer_auth(t))
            }
        }
    }

    /// The OAuth2 JWT-bearer grant (RFC 7523): an RS256 assertion for an access token, and
    /// its lifetime in seconds.
    async fn fetch_token(&self, account: &ServiceAccount) -> StoreResult<(String, u64)> {
        let iat = chrono::Utc::now().timestamp();
        let header = b64url(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = serde_json::json!({
            "iss": account.email,
            "scope": SCOPE,
            "aud": account.token_uri,
            "iat": iat,
            "exp": iat + TOKEN_TTL_S,
        });
        let unsigned = format!("{header}.{}", b64url(claims.to_string().as_bytes()));
        let jwt = format!("{unsigned}.{}", b64url(&account.sign(unsigned.as_bytes())?));
        let body = format!(
            "grant_type={}&assertion={jwt}",
            enc("urn:ietf:params:oauth:grant-type:jwt-bearer")
        );
        let resp = self
            .client
            .post(&account.token_uri)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| http_err("token exchange", e))?;
        if !resp.status().is_success() {
            return Err(status_err("token exchange", resp).await);
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| http_err("token exchange", e))?;
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| StoreError::new(format!("gcs token exchange: bad JSON: {e}")))?;
        let token = v["access_token"]
            .as_str()
            .ok_or_else(|| StoreError::new("gcs token exchange: no access_token"))?;
        Ok((token.to_string(), v["expires_in"].as_u64().unwrap_or(3600)))
    }

    fn name(&self, path: &str) -> String {
        format!("{}{}", self.prefix, path)
    }

    fn object_url(&self, path: &str) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.base,
            enc(&self.bucket),
            enc(&self.name(path))
        )
    }

    fn upload_url(&self, path: &str, kind: &str, content_encoding: Option<&str>) -> String {
        let mut url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType={kind}&name={}",
            self.base,
            enc(&self.bucket),
            enc(&self.name(path))
        );
        if let Some(e) = content_encoding {
            url.push_str("&contentEncoding=");
            url.push_str(&enc(e));
        }
        url
    }

    async fn put_media(
        &self,
        path: &str,
        bytes: Bytes,
        content_encoding: Option<&str>,
    ) -> StoreResult<()> {
        let resp = self
            .request(
                reqwest::Method::POST,
                &self.upload_url(path, "media", content_encoding),
            )
            .await?
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .map_err(|e| http_err("upload", e))?;
        if !resp.status().is_success() {
            return Err(status_err("upload", resp).await);
        }
        Ok(())
    }

    async fn put_resumable(
        &self,
        path: &str,
        file: std::path::PathBuf,
        len: u64,
        content_encoding: Option<&str>,
    ) -> StoreResult<()> {
        let mut meta = serde_json::json!({ "name": self.name(path) });
        if let Some(e) = content_encoding {
            meta["contentEncoding"] = e.into();
        }
        let resp = self
            .request(
                reqwest::Method::POST,
                &self.upload_url(path, "resumable", content_encoding),
            )
            .await?
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Upload-Content-Type", "application/octet-stream")
            .header("X-Upload-Content-Length", len.to_string())
            .body(meta.to_string())
            .send()
            .await
            .map_err(|e| http_err("resumable upload start", e))?;
        if !resp.status().is_success() {
            return Err(status_err("resumable upload start", resp).await);
        }
        let session = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| StoreError::new("gcs resumable upload start: no Location"))?
            .to_string();
        let mut pos = 0u64;
        while pos < len {
            let n = (len - pos).min(CHUNK as u64) as usize;
            let chunk = super::object::read_part(file.clone(), pos, n).await?;
            let range = format!("bytes {pos}-{}/{len}", pos + n as u64 - 1);
            let resp = self
                .request(reqwest::Method::PUT, &session)
                .await?
                .header(reqwest::header::CONTENT_RANGE, range)
                .body(chunk)
                .send()
                .await
                .map_err(|e| http_err("resumable upload chunk", e))?;
            let status = resp.status().as_u16();
            let last = pos + n as u64 == len;
            match status {
                200 | 201 if last => {}
                308 if !last => {}
                _ => return Err(status_err("resumable upload chunk", resp).await),
            }
            pos += n as u64;
        }
        Ok(())
    }
}

impl Store for GcsStore {
    fn list<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<ObjectInfo>> {
        Box::pin(async move {
            super::confine::check_key(&self.name(prefix))?;
            let full = self.name(prefix);
            let mut out = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let mut url = format!(
                    "{}/storage/v1/b/{}/o?prefix={}",
                    self.base,
                    enc(&self.bucket),
                    enc(&full)
                );
                if let Some(t) = &token {
                    url.push_str("&pageToken=");
                    url.push_str(&enc(t));
                }
                let resp = self
                    .request(reqwest::Method::GET, &url)
                    .await?
                    .send()
                    .await
                    .map_err(|e| http_err("list", e))?;
                if !resp.status().is_success() {
                    return Err(status_err("list", resp).await);
                }
                let body = resp.bytes().await.map_err(|e| http_err("list", e))?;
                let page: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| StoreError::new(format!("gcs list: bad JSON: {e}")))?;
                for item in page["items"].as_array().into_iter().flatten() {
                    let Some(name) = item["name"].as_str() else {
                        continue;
                    };
                    let Some(rel) = name.strip_prefix(full.as_str()) else {
                        continue;
                    };
                    if rel.is_empty() || rel.ends_with('/') {
                        continue;
                    }
                    let size = match &item["size"] {
                        serde_json::Value::String(s) => s.parse().unwrap_or(0),
                        v => v.as_u64().unwrap_or(0),
                    };
                    out.push(ObjectInfo {
                        path: rel.to_string(),
                        size,
                        mod_time: unix_of(item.get("updated"))?,
                    });
                }
                match page["nextPageToken"].as_str() {
                    Some(t) if !t.is_empty() => token = Some(t.to_string()),
                    _ => return Ok(out),
                }
            }
        })
    }

    fn exists<'a>(&'a self, path: &'a str) -> StoreFuture<'a, Option<i64>> {
        Box::pin(async move {
            super::confine::check_key(&self.name(path))?;
            let resp = self
                .request(reqwest::Method::GET, &self.object_url(path))
                .await?
                .send()
                .await
                .map_err(|e| http_err("metadata", e))?;
            if resp.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !resp.status().is_success() {
                return Err(status_err("metadata", resp).await);
            }
            let body = resp.bytes().await.map_err(|e| http_err("metadata", e))?;
            let meta: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| StoreError::new(format!("gcs metadata: bad JSON: {e}")))?;
            Ok(Some(unix_of(meta.get("updated"))?))
        })
    }

    fn put<'a>(
        &'a self,
        path: &'a str,
        source: PutSource,
        content_encoding: Option<&'a str>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            super::confine::check_key(&self.name(path))?;
            match source {
                PutSource::Bytes(bytes) => self.put_media(path, bytes, content_encoding).await,
                PutSource::File { path: file, len } if len <= SINGLE_PUT_MAX => {
                    let bytes = super::object::read_part(file, 0, len as usize).await?;
                    self.put_media(path, bytes, content_encoding).await
                }
                PutSource::File { path: file, len } => {
                    self.put_resumable(path, file, len, content_encoding).await
                }
            }
        })
    }

    fn get<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ObjectBody> {
        Box::pin(async move {
            super::confine::check_key(&self.name(path))?;
            let resp = self
                .request(
                    reqwest::Method::GET,
                    &format!("{}?alt=media", self.object_url(path)),
                )
                .await?
                .send()
                .await
                .map_err(|e| http_err("get", e))?;
            if !resp.status().is_success() {
                return Err(status_err("get", resp).await);
            }
            let gzip_encoded = resp
                .headers()
                .get(reqwest::header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
            let chunks = futures_util::stream::unfold(Some(resp), |resp| async move {
                let mut resp = resp?;
                match resp.chunk().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(resp))),
                    Ok(None) => None,
                    Err(e) => Some((Err(http_err("get", e)), None)),
                }
            });
            Ok(ObjectBody {
                gzip_encoded,
                chunks: Box::pin(chunks),
            })
        })
    }

    fn sign_get<'a>(&'a self, path: &'a str, ttl: Duration) -> StoreFuture<'a, String> {
        Box::pin(async move {
            super::confine::check_key(&self.name(path))?;
            match &self.auth {
                // The emulator checks no signature: the plain media URL.
                Auth::Emulator => Ok(format!("{}?alt=media", self.object_url(path))),
                Auth::Account { account, .. } => account.sign_v4_get(
                    &self.bucket,
                    &self.name(path),
                    ttl.as_secs().clamp(1, V4_MAX_TTL_S),
                    chrono::Utc::now(),
                ),
            }
        })
    }

    fn delete<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            super::confine::check_key(&self.name(path))?;
            let resp = self
                .request(reqwest::Method::DELETE, &self.object_url(path))
                .await?
                .send()
                .await
                .map_err(|e| http_err("delete", e))?;
            if !resp.status().is_success() {
                return Err(status_err("delete", resp).await);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inactive dummy service account of googleapis/conformance-tests
    /// (storage/v1/service-account), published for signing tests.
    const DUMMY_ACCOUNT: &str = include_str!("gcs_test_account.json");

    #[test]
    fn v4_signing_matches_googles_conformance_vector() {
        let account = ServiceAccount::from_json(DUMMY_ACCOUNT.as_bytes()).unwrap();
        let now = chrono::DateTime::parse_from_rfc3339("2019-02-01T09:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        // "Simple GET" of storage/v1/v4_signatures.json.
        let want = "https://storage.googleapis.com/test-bucket/test-object?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=test-iam-credentials%40dummy-project-id.iam.gserviceaccount.com%2F20190201%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20190201T090000Z&X-Goog-Expires=10&X-Goog-SignedHeaders=host&X-Goog-Signature=95e6a13d43a1d1962e667f17397f2b80ac9bdd1669210d5e08e0135df9dff4e56113485dbe429ca2266487b9d1796ebdee2d7cf682a6ef3bb9fbb4c351686fba90d7b621cf1c4eb1fdf126460dd25fa0837dfdde0a9fd98662ce60844c458448fb2b352c203d9969cb74efa4bdb742287744a4f2308afa4af0e0773f55e32e92973619249214b97283b2daa14195244444e33f938138d1e5f561088ce8011f4986dda33a556412594db7c12fc40e1ff3f1bedeb7a42f5bcda0b9567f17f65855f65071fabb88ea12371877f3f77f10e1466fff6ff6973b74a933322ff0949ce357e20abe96c3dd5cfab42c9c83e740a4d32b9e11e146f0eb3404d2e975896f74";
        assert_eq!(
            account
                .sign_v4_get("test-bucket", "test-object", 10, now)
                .unwrap(),
            want
        );
    }

    #[test]
    fn object_names_are_escaped() {
        assert_eq!(enc("a/k=v%é"), "a%2Fk%3Dv%25%C3%A9");
        assert_eq!(enc_path("a/k=v%é"), "a/k%3Dv%25%C3%A9");
    }

    #[test]
    fn other_credentials_are_refused() {
        let err = ServiceAccount::from_json(br#"{"type":"authorized_user"}"#)
            .err()
            .unwrap();
        assert!(err.contains("only service_account"), "{err}");
    }

    #[test]
    fn object_names_leaving_the_prefix_are_refused() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = GcsStore {
            client: reqwest::Client::new(),
            auth: Auth::Emulator,
            base: "http://127.0.0.1:1".into(),
            bucket: "bucket".into(),
            prefix: "tenant/".into(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let escape = "../other/j/x.raw";
        rt.block_on(async {
            let err = store
                .put(escape, PutSource::Bytes(Bytes::from_static(b"x")), None)
                .await
                .unwrap_err();
            assert!(err.message.contains("leave the store's root"), "{err}");
            for err in [
                store.exists(escape).await.unwrap_err(),
                store.get(escape).await.err().unwrap(),
                store
                    .sign_get(escape, Duration::from_secs(1))
                    .await
                    .unwrap_err(),
                store.delete(escape).await.unwrap_err(),
                store.list("../other/").await.unwrap_err(),
            ] {
                assert!(err.message.contains("leave the store's root"), "{err}");
            }
        });
    }
}
