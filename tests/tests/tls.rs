//! Server TLS (spec §8, §11 item 14): TLS wraps the port, ALPN sends gRPC clients (`h2`)
//! and HTTP clients (`http/1.1`) to the right server, the advertised endpoint is
//! `https://`, a CA file requires client certificates, and a handshake that never finishes
//! holds only its own connection, for a bounded time.
//!
//! Certificates are made per test with the `openssl` command; HTTP/1.1 over TLS is checked
//! with `curl`, gRPC with a rustls client under Courant's own gRPC channel.

use bytes::Bytes;
use courant_tests::protocol::AppendRequest;
use courant_tests::protocol::grpc::Channel;
use courant_tests::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it.
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
        };
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(pki.dir.path())
                .output()
                .expect("the openssl command");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=courant test CA",
        ]);
        for (name, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
            ),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            std::fs::write(pki.path(&format!("{name}.ext")), ext).unwrap();
            run(&[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &format!("{name}.pem"),
                "-extfile",
                &format!("{name}.ext"),
            ]);
        }
        pki
    }

    fn server_args(&self, with_ca: bool) -> Vec<String> {
        let mut args = vec![
            "--broker.server-cert-file".to_string(),
            self.path("server.pem").display().to_string(),
            "--broker.server-key-file".to_string(),
            self.path("server.key").display().to_string(),
        ];
        if with_ca {
            args.push("--broker.server-ca-file".into());
            args.push(self.path("ca.pem").display().to_string());
        }
        args
    }

    fn client_config(&self, with_cert: bool) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(self.path("ca.pem")).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = if with_cert {
            builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_file(self.path("client.pem")).unwrap()],
                    PrivateKeyDer::from_pem_file(self.path("client.key")).unwrap(),
                )
                .unwrap()
        } else {
            builder.with_no_client_auth()
        };
        // As Go's gRPC clients: h2 only.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }
}

async fn start(pki: &Pki, with_ca: bool) -> Broker {
    let args = pki.server_args(with_ca);
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    Broker::start(&refs).await
}

/// A gRPC channel over TLS.
async fn connect_tls(b: &Broker, config: Arc<rustls::ClientConfig>) -> Result<Channel, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (ch, conn) = Channel::handshake(tls, &format!("127.0.0.1:{}", b.port()))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(ch)
}

/// `curl` over TLS; returns (status code, body).
fn curl(pki: &Pki, b: &Broker, extra: &[&str], path: &str) -> (String, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code} %{http_version}",
        ])
        .arg("--cacert")
        .arg(pki.path("ca.pem"))
        .args(extra)
        .arg(format!("https://127.0.0.1:{}{path}", b.port()))
        .output()
        .expect("the curl command");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.to_string(), body.to_string())
}

fn have_tools() -> bool {
    let runs = |tool: &str, arg: &str| Command::new(tool).arg(arg).output().is_ok();
    runs("openssl", "version") && runs("curl", "--version")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_http_over_tls_on_one_port() {
    assert!(
        have_tools(),
        "these tests need the openssl and curl commands"
    );
    within(60, async {
        let pki = Pki::new();
        let b = start(&pki, false).await;
        let ch = connect_tls(&b, pki.client_config(false)).await.unwrap();
        create_journals(&ch, &["tls/journal"]).await;
        let out = append_full(
            &ch,
            AppendRequest {
                journal: "tls/journal".into(),
                ..Default::default()
            },
            &[Bytes::from_static(b"over grpc;")],
            true,
        )
        .await;
        let resp = out.result.unwrap();
        // Peers and clients choose TLS from the advertised endpoint.
        let route = resp.header.unwrap().route.unwrap();
        assert_eq!(
            route.endpoints,
            vec![format!("https://127.0.0.1:{}", b.port())]
        );

        // curl offers h2 and http/1.1; the server prefers http/1.1, as Gazette's.
        let (status, _) = curl(&pki, &b, &[], "/debug/ready");
        assert_eq!(status, "200 1.1");
        let (status, _) = curl(
            &pki,
            &b,
            &["-X", "PUT", "--data-binary", "over http"],
            "/tls/journal",
        );
        assert_eq!(status, "204 1.1");
        let (status, body) = curl(&pki, &b, &[], "/tls/journal?offset=0");
        assert_eq!(
            (status.as_str(), body.as_str()),
            ("206 1.1", "over grpc;over http")
        );
        let (status, body) = curl(&pki, &b, &[], "/debug/metrics");
        assert_eq!(status, "200 1.1");
        assert!(body.contains("gazette_append_bytes_total{journal=\"tls/journal\"} 19"));

        // Plain text on a TLS port is refused, gRPC and HTTP alike.
        let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
            .await
            .unwrap();
        plain
            .write_all(b"GET /debug/ready HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut out)).await;
        assert!(!out.starts_with(b"HTTP/1.1 200"), "{out:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_file_requires_client_certificates() {
    assert!(
        have_tools(),
        "these tests need the openssl and curl commands"
    );
    within(60, async {
        let pki = Pki::new();
        let b = start(&pki, true).await;
        // Without a client certificate: the handshake fails, or (TLS 1.3 reports it after
        // the client's side completes) the first call does.
        let denied = match connect_tls(&b, pki.client_config(false)).await {
            Err(_) => true,
            Ok(ch) => apply(&ch, vec![]).await.is_err(),
        };
        assert!(denied, "a client without a certificate was served");
        let ch = connect_tls(&b, pki.client_config(true)).await.unwrap();
        create_journals(&ch, &["tls/journal"]).await;
        let (status, _) = curl(&pki, &b, &[], "/debug/ready");
        assert!(!status.starts_with("200"), "{status}");
        let cert = pki.path("client.pem").display().to_string();
        let key = pki.path("client.key").display().to_string();
        let (status, _) = curl(&pki, &b, &["--cert", &cert, "--key", &key], "/debug/ready");
        assert_eq!(status, "200 1.1");
    })
    .await;
}

/// Handshakes that stall (nothing sent, or half a ClientHello) are closed within the
/// 10 s bound and never delay other clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_do_not_disturb_others() {
    assert!(
        have_tools(),
        "these tests need the openssl and curl commands"
    );
    within(60, async {
        let pki = Pki::new();
        let b = start(&pki, false).await;
        let mut stalled = Vec::new();
        for i in 0..40 {
            let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
                .await
                .unwrap();
            if i % 2 == 0 {
                // The start of a TLS record header claiming a large ClientHello.
                tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
                    .await
                    .unwrap();
            }
            stalled.push(tcp);
        }
        let started = Instant::now();
        let ch = connect_tls(&b, pki.client_config(false)).await.unwrap();
        create_journals(&ch, &["tls/journal"]).await;
        let (status, _) = curl(&pki, &b, &[], "/debug/ready");
        assert_eq!(status, "200 1.1");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        for tcp in stalled.iter_mut() {
            let mut buf = [0u8; 64];
            let r = tokio::time::timeout(Duration::from_secs(13), tcp.read(&mut buf)).await;
            assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
        }
    })
    .await;
}
