//! `s3://` and `azure://` stores through the `object_store` crate.
//!
//! Lives on: the control thread (object_store is tokio-based).
//!
//! * `s3://bucket/prefix/?endpoint=…&region=…`: credentials from the AWS environment
//!   variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, …);
//!   region from the URL, else `AWS_REGION` / `AWS_DEFAULT_REGION`, else the store fails to
//!   build, as Gazette's does. With `endpoint`, requests are path-style (and plain http is
//!   allowed), as in Gazette. `SSE=aws:kms` with `SSEKMSKeyId` and `storageClass` are sent;
//!   `profile` and `ACL` are not supported (the store fails to build rather than silently
//!   ignore them). Signed URLs are SigV4 presigned GETs.
//! * `azure://container/prefix/`: account and key from `AZURE_ACCOUNT_NAME` /
//!   `AZURE_ACCOUNT_KEY` (as Gazette); `AZURE_STORAGE_USE_EMULATOR=true` targets azurite
//!   (its well-known account, `AZURITE_BLOB_STORAGE_URL` or `http://127.0.0.1:10000`).
//!   Signed URLs are read-only Service SAS URLs (`sr=b`, `sp=r`), signed here rather than by
//!   object_store, whose signature covers the percent-encoded blob path where Azure's
//!   covers the decoded one (names with `%` or non-ASCII letters were refused).
//!
//! Uploads of up to [`SINGLE_PUT_MAX`] bytes are one PUT; larger ones are multipart in
//! [`PART_SIZE`] parts with at most [`PARTS_IN_FLIGHT`] in flight, read from the staged file
//! one part at a time: an upload holds at most `(PARTS_IN_FLIGHT + 1) × PART_SIZE` bytes.

use super::{ObjectBody, ObjectInfo, PutSource, Store, StoreError, StoreFuture, StoreResult};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjPath;
use object_store::signer::Signer;
use object_store::{
    Attribute, AttributeValue, Attributes, ObjectStore, ObjectStoreExt, PutOptions, PutPayload,
    RetryConfig, WriteMultipart,
};
use protocol::validate::{GoUrl, StoreQueryArgs};
use std::time::Duration;

/// How long object_store retries one request before giving up.
const RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub const SINGLE_PUT_MAX: u64 = 8 << 20;
pub const PART_SIZE: usize = 5 << 20;
pub const PARTS_IN_FLIGHT: usize = 2;

enum Backend {
    S3(object_store::aws::AmazonS3),
    Azure(object_store::azure::MicrosoftAzure, AzureSas),
}

/// azurite's well-known account and key.
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The `sv` of signed URLs (the version object_store 0.14 signs with).
const SAS_VERSION: &str = "2023-11-03";

/// Signs Azure Service SAS URLs itself. object_store 0.14 signs over the percent-encoded
/// blob path, while Azure and azurite sign the decoded one, so its URLs of blobs with `%`
/// or non-ASCII names are refused.
struct AzureSas {
    account: String,
    key: Vec<u8>,
    /// `https://<account>.blob.core.windows.net`, or azurite's `<url>/<account>`.
    base: String,
    container: String,
}

/// Escapes all but RFC 3986 unreserved characters and `/`.
const SAS_PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');
const SAS_QUERY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

impl AzureSas {
    /// A read-only (`sp=r`) blob (`sr=b`) SAS URL of `blob`, valid from 15 minutes ago
    /// (clock skew) until `ttl` from now. The string to sign uses the decoded canonicalized
    /// resource `/blob/<account>/<container>/<blob>`.
    fn sign(&self, blob: &str, ttl: Duration) -> StoreResult<String> {
        use hmac::{KeyInit, Mac};
        let now = chrono::Utc::now();
        let fmt =
            |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let start = fmt(now - chrono::Duration::minutes(15));
        let expiry = fmt(now
            + chrono::Duration::from_std(ttl)
                .map_err(|e| StoreError::new(format!("SAS ttl {ttl:?}: {e}")))?);
        let resource = format!("/blob/{}/{}/{blob}", self.account, self.container);
        let to_sign = sas_string_to_sign(&start, &expiry, &resource);
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key)
            .map_err(|e| StoreError::new(format!("azure account key: {e}")))?;
        mac.update(to_sign.as_bytes());
        let sig = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            mac.finalize().into_bytes(),
        );
        let q = |v: &str| percent_encoding::utf8_percent_encode(v, SAS_QUERY).to_string();
        Ok(format!(
            "{}/{}/{}?sv={SAS_VERSION}&sp=r&st={}&se={}&sr=b&sig={}",
            self.base,
            self.container,
            percent_encoding::utf8_percent_encode(blob, SAS_PATH),
            q(&start),
            q(&expiry),
            q(&sig)
        ))
    }
}

/// The Service SAS string to sign (version 2020-12-06 and later) of a read-only blob SAS.
fn sas_string_to_sign(start: &str, expiry: &str, resource: &str) -> String {
    // sp, st, se, canonicalized resource, si, sip, spr, sv, sr, snapshot time, encryption
    // scope, rscc, rscd, rsce, rscl, rsct.
    format!("r\n{start}\n{expiry}\n{resource}\n\n\n\n{SAS_VERSION}\nb\n\n\n\n\n\n\n")
}

pub struct ObjectStoreBackend {
    backend: Backend,
    /// Key prefix within the bucket or container (the URL path without its leading `/`).
    prefix: String,
    storage_class: Option<String>,
}

/// Retries inside object_store stay short: the persister and the health checker retry on
/// their own schedules, and a store that is down must not hold a task for minutes.
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        retry_timeout: RETRY_TIMEOUT,
        ..Default::default()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl ObjectStoreBackend {
    pub fn s3(url: &GoUrl, args: &StoreQueryArgs) -> Result<Self, String> {
        if !args.profile.is_empty() {
            return Err("the s3 `profile` argument is not supported by Courant; use AWS_* environment credentials".into());
        }
        if !args.acl.is_empty() {
            return Err("the s3 `ACL` argument is not supported by Courant".into());
        }
        let region = Some(args.region.clone())
            .filter(|r| !r.is_empty())
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                "missing AWS region configuration (set the `region` argument or AWS_REGION)"
                    .to_string()
            })?;
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(url.host.clone())
            .with_region(region)
            .with_retry(retry());
        if !args.endpoint.is_empty() {
            builder = builder
                .with_endpoint(args.endpoint.trim_end_matches('/'))
                .with_allow_http(true)
                .with_virtual_hosted_style_request(false);
        }
        match (args.sse.as_str(), args.sse_kms_key_id.as_str()) {
            ("", "") | ("AES256", "") => {}
            ("aws:kms", key) if !key.is_empty() => builder = builder.with_sse_kms_encryption(key),
            (sse, key) => {
                return Err(format!(
                    "unsupported s3 encryption arguments SSE={sse:?} SSEKMSKeyId={key:?}"
                ));
            }
        }
        let s3 = builder
            .build()
            .map_err(|e| format!("building s3 store: {e}"))?;
        Ok(ObjectStoreBackend {
            backend: Backend::S3(s3),
            prefix: url.path.trim_start_matches('/').to_string(),
            storage_class: Some(args.storage_class.clone()).filter(|s| !s.is_empty()),
        })
    }

    pub fn azure(url: &GoUrl) -> Result<Self, String> {
        let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_container_name(url.host.clone())
            .with_retry(retry());
        let (account, key, base);
        if env("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| v == "true" || v == "1") {
            builder = builder.with_use_emulator(true).with_allow_http(true);
            account = AZURITE_ACCOUNT.to_string();
            key = AZURITE_KEY.to_string();
            let emulator =
                env("AZURITE_BLOB_STORAGE_URL").unwrap_or_else(|| "http://127.0.0.1:10000".into());
            base = format!("{}/{account}", emulator.trim_end_matches('/'));
        } else {
            account = env("AZURE_ACCOUNT_NAME").ok_or("AZURE_ACCOUNT_NAME is not set")?;
            key = env("AZURE_ACCOUNT_KEY").ok_or("AZURE_ACCOUNT_KEY is not set")?;
            builder = builder.with_account(&account).with_access_key(&key);
            base = format!("https://{account}.blob.core.windows.net");
        }
        let key = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, key.trim())
            .map_err(|e| format!("AZURE_ACCOUNT_KEY is not base64: {e}"))?;
        let azure = builder
            .build()
            .map_err(|e| format!("building azure store: {e}"))?;
        let sas = AzureSas {
            account,
            key,
            base,
            container: url.host.clone(),
        };
        Ok(ObjectStoreBackend {
            backend: Backend::Azure(azure, sas),
            prefix: url.path.trim_start_matches('/').to_string(),
            storage_class: None,
        })
    }

    fn store(&self) -> &dyn ObjectStore {
        match &self.backend {
            Backend::S3(s) => s,
            Backend::Azure(a, _) => a,
        }
    }

    /// The object key of `path`, refused when it would leave the store's root
    /// ([`super::confine`]).
    fn key(&self, path: &str) -> StoreResult<ObjPath> {
        super::confine::check_key(&format!("{}{}", self.prefix, path))?;
        ObjPath::parse(format!("{}{}", self.prefix, path))
            .map_err(|e| StoreError::new(format!("invalid object path {path:?}: {e}")))
    }

    fn attributes(&self, content_encoding: Option<&str>) -> Attributes {
        let mut attrs = Attributes::new();
        if let Some(enc) = content_encoding {
            attrs.insert(
                Attribute::ContentEncoding,
                AttributeValue::from(enc.to_string()),
            );
        }
        if let Some(class) = &self.storage_class {
            attrs.insert(Attribute::StorageClass, AttributeValue::from(class.clone()));
        }
        attrs
    }
}

fn os_err(e: object_store::Error) -> StoreError {
    match e {
        object_store::Error::NotFound { .. } => StoreError::not_found(e.to_string()),
        e => StoreError::new(e.to_string()),
    }
}

impl Store for ObjectStoreBackend {
    fn list<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<ObjectInfo>> {
        Box::pin(async move {
            // object_store lists by path segments: list the directory and keep the paths
            // under it (a prefix always ends in `/` here).
            let full = format!("{}{}", self.prefix, prefix);
            let dir = self.key(prefix.trim_end_matches('/'))?;
            let mut out = Vec::new();
            let mut stream = self.store().list(Some(&dir));
            while let Some(meta) = stream.next().await {
                let meta = meta.map_err(os_err)?;
                let key = meta.location.as_ref();
                let Some(rel) = key.strip_prefix(full.as_str()) else {
                    continue;
                };
                if rel.is_empty() || rel.ends_with('/') {
                    continue;
                }
                out.push(ObjectInfo {
                    path: rel.to_string(),
                    size: meta.size,
                    mod_time: meta.last_modified.timestamp(),
                });
            }
            Ok(out)
        })
    }

    fn exists<'a>(&'a self, path: &'a str) -> StoreFuture<'a, Option<i64>> {
        Box::pin(async move {
            match self.store().head(&self.key(path)?).await {
                Ok(meta) => Ok(Some(meta.last_modified.timestamp())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(os_err(e)),
            }
        })
    }

    fn put<'a>(
        &'a self,
        path: &'a str,
        source: PutSource,
        content_encoding: Option<&'a str>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let key = self.key(path)?;
            let attributes = self.attributes(content_encoding);
            let (file, len) = match source {
                PutSource::Bytes(bytes) => {
                    return self.put_one(&key, bytes, attributes).await;
                }
                PutSource::File { path, len } => (path, len),
            };
            if len <= SINGLE_PUT_MAX {
                let bytes = read_part(file, 0, len as usize).await?;
                return self.put_one(&key, bytes, attributes).await;
            }
            let opts = object_store::PutMultipartOptions {
                attributes,
                ..Default::default()
            };
            let upload = self
                .store()
                .put_multipart_opts(&key, opts)
                .await
                .map_err(os_err)?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut pos = 0u64;
            while pos < len {
                let n = (len - pos).min(PART_SIZE as u64) as usize;
                if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    let _ = writer.abort().await;
                    return Err(os_err(e));
                }
                let part = match read_part(file.clone(), pos, n).await {
                    Ok(part) => part,
                    Err(e) => {
                        let _ = writer.abort().await;
                        return Err(e);
                    }
                };
                writer.put(part);
                pos += n as u64;
            }
            writer.finish().await.map_err(os_err)?;
            Ok(())
        })
    }

    fn get<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ObjectBody> {
        Box::pin(async move {
            let got = self.store().get(&self.key(path)?).await.map_err(os_err)?;
            let gzip_encoded = got
                .attributes
                .get(&Attribute::ContentEncoding)
                .is_some_and(|v| v.as_ref().eq_ignore_ascii_case("gzip"));
            let chunks = got.into_stream().map(|r| r.map_err(os_err));
            Ok(ObjectBody {
                gzip_encoded,
                chunks: Box::pin(chunks),
            })
        })
    }

    fn sign_get<'a>(&'a self, path: &'a str, ttl: Duration) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let key = self.key(path)?;
            match &self.backend {
                Backend::S3(s) => s
                    .signed_url(http::Method::GET, &key, ttl)
                    .await
                    .map(|u| u.to_string())
                    .map_err(os_err),
                Backend::Azure(_, sas) => sas.sign(key.as_ref(), ttl),
            }
        })
    }

    fn delete<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.store().delete(&self.key(path)?).await.map_err(os_err) })
    }
}

impl ObjectStoreBackend {
    async fn put_one(
        &self,
        key: &ObjPath,
        bytes: Bytes,
        attributes: Attributes,
    ) -> StoreResult<()> {
        let opts = PutOptions {
            attributes,
            ..Default::default()
        };
        self.store()
            .put_opts(key, PutPayload::from(bytes), opts)
            .await
            .map_err(os_err)?;
        Ok(())
    }
}

/// Reads `len` bytes at `pos` of a staged file on the blocking pool.
pub(crate) async fn read_part(
    file: std::path::PathBuf,
    pos: u64,
    len: usize,
) -> StoreResult<Bytes> {
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&file)
            .map_err(|e| StoreError::new(format!("opening {}: {e}", file.display())))?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, pos)
            .map_err(|e| StoreError::new(format!("reading {}: {e}", file.display())))?;
        Ok(Bytes::from(buf))
    })
    .await
    .map_err(|e| StoreError::new(format!("read task failed: {e}")))?
}

#[cfg(test)]
mod confine_tests {
    use super::*;

    fn check_refuses(store: &ObjectStoreBackend) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let escape = "../other/j/x.raw";
        rt.block_on(async {
            for err in [
                store
                    .put(
                        escape,
                        PutSource::Bytes(bytes::Bytes::from_static(b"x")),
                        None,
                    )
                    .await
                    .unwrap_err(),
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
        assert!(store.key("j/x.raw").is_ok());
    }

    #[test]
    fn s3_keys_leaving_the_prefix_are_refused() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = protocol::validate::validate_fragment_store_url(
            "s3://bucket/tenant/?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A1",
        )
        .unwrap();
        let args = protocol::validate::parse_store_query_args(&url).unwrap();
        check_refuses(&ObjectStoreBackend::s3(&url, &args).unwrap());
    }

    #[test]
    fn azure_blobs_leaving_the_prefix_are_refused() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let azure = object_store::azure::MicrosoftAzureBuilder::new()
            .with_account("acct")
            .with_access_key(AZURITE_KEY)
            .with_container_name("container")
            .build()
            .unwrap();
        let store = ObjectStoreBackend {
            backend: Backend::Azure(
                azure,
                AzureSas {
                    account: "acct".into(),
                    key: b"key".to_vec(),
                    base: "http://127.0.0.1:1/acct".into(),
                    container: "container".into(),
                },
            ),
            prefix: "tenant/".into(),
            storage_class: None,
        };
        check_refuses(&store);
    }
}
