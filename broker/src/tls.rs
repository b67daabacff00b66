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

// ---- Peer TLS (Gazette's --broker.peer-cert-file, -peer-cert-key-file, -peer-ca-file) ----
//
// Lives on: the client configuration is built once at start-up ([`init_peer`]) and kept in
// a process-wide `OnceLock`; each core's dial (`peer.rs`) wraps its glommio socket in a
// TLS client stream when the peer's endpoint is `https://`.

/// A byte stream to a peer: a glommio socket, or TLS over one.
pub trait PeerStream: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> PeerStream for T {}

/// A connection to a peer: a plain glommio socket, which h2's reads receive from directly
/// ([`crate::io::RawRead`]), or TLS over one.
pub enum PeerConn {
    Plain(glommio::net::TcpStream),
    Tls(Box<dyn PeerStream>),
}

impl PeerConn {
    fn get(self: std::pin::Pin<&mut Self>) -> std::pin::Pin<&mut dyn PeerStream> {
        match self.get_mut() {
            PeerConn::Plain(s) => std::pin::Pin::new(s),
            PeerConn::Tls(s) => std::pin::Pin::new(s.as_mut()),
        }
    }
}

impl crate::io::RawRead for PeerConn {
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            PeerConn::Plain(s) => s.raw_fd(),
            PeerConn::Tls(_) => None,
        }
    }

    fn arm_readable(&mut self) {
        if let PeerConn::Plain(s) = self {
            s.arm_readable()
        }
    }

    fn wait_armed(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        match self {
            PeerConn::Plain(s) => s.wait_armed(cx),
            PeerConn::Tls(_) => false,
        }
    }
}

impl futures_lite::AsyncRead for PeerConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.get().poll_read(cx, buf)
    }
}

impl futures_lite::AsyncWrite for PeerConn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.get().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.get().poll_write_vectored(cx, bufs)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.get().poll_flush(cx)
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.get().poll_close(cx)
    }
}

static PEER_TLS: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();

/// Reads PEM certificates from `path`.
fn pem_certs(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(certs)
}

/// The client TLS configuration for calls to `https://` peers: roots from
/// `--broker.peer-ca-file` (else the system CA pool, as Gazette), and the client certificate
/// of `--broker.peer-cert-file` / `--broker.peer-cert-key-file` when set.
pub fn peer_client_config(cfg: &ServeConfig) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &cfg.peer_ca_file {
        Some(ca) => {
            for cert in pem_certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let mut config = match (&cfg.peer_cert_file, &cfg.peer_cert_key_file) {
        (Some(cert), Some(key)) => {
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("reading {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(pem_certs(cert)?, key)
                .map_err(|e| format!("peer TLS certificate and key: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(
                "--broker.peer-cert-file and --broker.peer-cert-key-file go together".into(),
            );
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Builds the peer client configuration once, at start-up (so a bad file fails the start).
pub fn init_peer(cfg: &ServeConfig) -> Result<(), String> {
    let config = peer_client_config(cfg)?;
    let _ = PEER_TLS.set(config);
    Ok(())
}

/// The `host:port` of a peer endpoint (`http://` or `https://`, optional trailing `/`) and
/// whether it is TLS.
pub fn peer_addr(endpoint: &str) -> Result<(String, bool), protocol::grpc::RpcError> {
    use protocol::grpc::RpcError;
    let (rest, secure) = if let Some(rest) = endpoint.strip_prefix("https://") {
        (rest, true)
    } else if let Some(rest) = endpoint.strip_prefix("http://") {
        (rest, false)
    } else {
        return Err(RpcError::unavailable(format!(
            "peer endpoint {endpoint:?}: only http:// and https:// endpoints are supported for broker-to-broker calls"
        )));
    };
    let addr = rest.trim_end_matches('/');
    if addr.is_empty() || addr.contains('/') {
        return Err(RpcError::unavailable(format!(
            "peer endpoint {endpoint:?} is not http(s)://host:port"
        )));
    }
    Ok((addr.to_string(), secure))
}

/// Wraps a connected socket to the peer at `addr` in TLS when `secure`, verifying the
/// peer's certificate for its host name.
pub async fn peer_stream(
    stream: glommio::net::TcpStream,
    addr: &str,
    secure: bool,
) -> Result<PeerConn, protocol::grpc::RpcError> {
    use protocol::grpc::RpcError;
    if !secure {
        return Ok(PeerConn::Plain(stream));
    }
    let config = PEER_TLS
        .get()
        .cloned()
        .ok_or_else(|| RpcError::unavailable("peer TLS is not configured"))?;
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| RpcError::unavailable(format!("peer {addr}: invalid TLS name: {e}")))?;
    let tls = futures_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| RpcError::unavailable(format!("TLS handshake with peer {addr}: {e}")))?;
    Ok(PeerConn::Tls(Box::new(tls)))
}

#[cfg(test)]
mod peer_tests {
    use super::*;

    #[test]
    fn peer_endpoints_parse() {
        assert_eq!(
            peer_addr("https://host:1/").unwrap(),
            ("host:1".to_string(), true)
        );
        assert_eq!(
            peer_addr("http://127.0.0.1:8080").unwrap(),
            ("127.0.0.1:8080".to_string(), false)
        );
        assert!(peer_addr("unix:///tmp/x").is_err());
        assert!(peer_addr("https://host:1/path").is_err());
    }
}
