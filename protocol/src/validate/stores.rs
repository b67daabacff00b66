//! Fragment store URLs and their query arguments.

#[allow(unused_imports)]
use super::*;

pub(crate) fn parse_store(fs: &str) -> Result<GoUrl, Verr> {
    let url = parse_go_url(fs).map_err(Verr::new)?;
    if !url.is_abs() {
        return Err(Verr::new(format!("not absolute ({fs})")));
    }
    match url.scheme.as_str() {
        "s3" | "gs" | "azure" => {
            if url.host.is_empty() {
                return Err(Verr::new(format!("missing bucket ({fs})")));
            }
        }
        "azure-ad" => {
            let trimmed = url.path.strip_prefix('/').unwrap_or_default();
            let mut parts = trimmed.split('/');
            if url.host.is_empty() {
                return Err(Verr::new(format!("missing tenant ID ({fs})")));
            } else if parts.next().unwrap_or_default().is_empty() {
                return Err(Verr::new(format!("missing storage account ({fs})")));
            } else if parts.next().unwrap_or_default().is_empty() {
                return Err(Verr::new(format!("missing storage container ({fs})")));
            }
        }
        "file" => {
            if !url.host.is_empty() {
                return Err(Verr::new(format!("file scheme cannot have host ({fs})")));
            }
        }
        other => return Err(Verr::new(format!("invalid scheme ({other})"))),
    }
    if !url.path.ends_with('/') {
        return Err(Verr::new(format!(
            "path component doesn't end in '/' ({})",
            url.path
        )));
    }
    Ok(url)
}

/// Validates a fragment store URL's structure exactly as Gazette's
/// `FragmentStore.Validate` does: known scheme, bucket/host rules and a path ending in
/// `/`. Query arguments are *not* examined (see [`validate_fragment_store`]).
///
/// JournalSpec validation uses this form: Gazette accepts specs whose store arguments
/// are unknown (they fail only when a broker builds the store), and a spec Gazette's
/// brokers accept must not be dropped by ours.
pub fn validate_fragment_store_url(fs: &str) -> Result<GoUrl, ValidationError> {
    parse_store(fs).map_err(Into::into)
}

/// Query arguments of a fragment store URL, as Gazette's stores decode them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreQueryArgs {
    /// Rewriting of journal-relative content paths: the first occurrence of `find` is
    /// replaced by `replace`.
    pub find: String,
    pub replace: String,
    /// S3 only.
    pub profile: String,
    pub endpoint: String,
    pub acl: String,
    pub storage_class: String,
    pub sse: String,
    pub sse_kms_key_id: String,
    pub region: String,
}

/// Go's `url.ParseQuery`: `&`-separated `key=value` pairs, `+` meaning space; pairs
/// with a `;` are an error. Order of keys is kept; repeated keys keep every value.
pub fn parse_go_query(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut err: Option<String> = None;
    for pair in query.split('&') {
        if pair.contains(';') {
            err = Some("invalid semicolon separator in query".to_string());
            continue;
        }
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let parsed = go_unescape(k, Esc::QueryComponent)
            .and_then(|k| go_unescape(v, Esc::QueryComponent).map(|v| (k, v)));
        match parsed {
            Ok(kv) => out.push(kv),
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Decodes the query arguments of a fragment store URL as Gazette's stores do: field
/// names match case-insensitively, and an unknown name is an error. `s3` accepts its
/// extra arguments; every scheme accepts `find` and `replace`.
pub fn parse_store_query_args(url: &GoUrl) -> Result<StoreQueryArgs, ValidationError> {
    let pairs = parse_go_query(&url.raw_query).map_err(ValidationError)?;
    let mut args = StoreQueryArgs::default();
    let mut unknown: Vec<&str> = Vec::new();
    let s3 = url.scheme == "s3";
    for (key, value) in &pairs {
        let field = match key.to_ascii_lowercase().as_str() {
            "find" => &mut args.find,
            "replace" => &mut args.replace,
            "profile" if s3 => &mut args.profile,
            "endpoint" if s3 => &mut args.endpoint,
            "acl" if s3 => &mut args.acl,
            "storageclass" if s3 => &mut args.storage_class,
            "sse" if s3 => &mut args.sse,
            "ssekmskeyid" if s3 => &mut args.sse_kms_key_id,
            "region" if s3 => &mut args.region,
            _ => {
                if !unknown.contains(&key.as_str()) {
                    unknown.push(key);
                }
                continue;
            }
        };
        // Later values of a repeated key win.
        *field = value.clone();
    }
    unknown.sort_unstable();
    if let Some(first) = unknown.first() {
        let mut msg = format!(
            "parsing store URL arguments: schema: invalid path {}",
            go_quote(first)
        );
        match unknown.len() {
            1 => {}
            2 => msg.push_str(" (and 1 other error)"),
            n => msg.push_str(&format!(" (and {} other errors)", n - 1)),
        }
        return Err(ValidationError(msg));
    }
    Ok(args)
}

/// Validates a fragment store URL completely: its structure (see
/// [`validate_fragment_store_url`]) and then its query arguments, which must all be
/// known to the store of its scheme.
pub fn validate_fragment_store(url: &str) -> Result<(), ValidationError> {
    let parsed = validate_fragment_store_url(url)?;
    parse_store_query_args(&parsed).map(|_| ())
}
