//! Server TLS (`--broker.server-cert-file`, `-key-file`, `-ca-file`), as Gazette's: TLS wraps
//! the listener, ALPN offers `http/1.1` then `h2` (so browsers and curl get HTTP/1.1 and
//! gRPC clients, which offer only `h2`, get HTTP/2), and a CA file requires client
//! certificates signed by it. The advertised endpoint becomes `https://`.
//!
//! Lives on: the `ServerConfig` is built once at start-up and shared (`Arc`) by every core;
//! each connection's handshake runs on the core that accepted it (rustls is pure Rust on
//! ring, through `futures-rustls` over glommio's socket).

use crate::config::ServeConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The server's TLS configuration, or `None` when no certificate is configured.
pub fn server_config(cfg: &ServeConfig) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    let (cert_file, key_file) = match (&cfg.server_cert_file, &cfg.server_key_file) {
        (None, None) => {
            if cfg.server_ca_file.is_some() {
                return Err("--broker.server-ca-file requires --broker.server-cert-file".into());
            }
            return Ok(None);
        }
        (Some(c), Some(k)) => (c, k),
        _ => {
            return Err(
                "--broker.server-cert-file and --broker.server-cert-key-file go together".into(),
            );
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("reading {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", cert_file.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("reading {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &cfg.server_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca_file)
                .map_err(|e| format!("reading {}: {e}", ca_file.display()))?
            {
                let cert = cert.map_err(|e| format!("reading {}: {e}", ca_file.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", ca_file.display()))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| format!("{}: {e}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec(), b"h2".to_vec()];
    Ok(Some(Arc::new(config)))
}
