//! Helpers for the fault and operator-mistake tests (`tests/tests/faults_*.rs`): running
//! `courant` as an operator would (a second instance, a subcommand, a config file) and
//! watching whether it refuses, exits or keeps serving.
//!
//! Lives on: the test process; every child is killed on drop.

use crate::courant_bin;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A `courant` child process whose stderr goes to a file.
pub struct Proc {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Proc {
    /// Starts `courant <args>` in `cwd` (if given) with extra environment variables.
    pub fn spawn(args: &[&str], cwd: Option<&Path>, env: &[(&str, &str)]) -> Proc {
        let log = tempfile::NamedTempFile::new().expect("stderr log");
        let mut cmd = Command::new(courant_bin());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(appender(log.path()))
            .stderr(appender(log.path()));
        // Keep a developer's own config files out of the way.
        cmd.env_remove("HOME");
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawning courant");
        Proc { child, log }
    }

    /// Starts `cmd` with stdout (and, if `stderr_too`, stderr) going to the log file.
    pub fn spawn_cmd(cmd: &mut Command, stderr_too: bool) -> Proc {
        let log = tempfile::NamedTempFile::new().expect("stderr log");
        cmd.stdin(Stdio::null()).stdout(appender(log.path()));
        if stderr_too {
            cmd.stderr(appender(log.path()));
        }
        let child = cmd.spawn().expect("spawning");
        Proc { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process exits within `within`; `None` if it still runs.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Everything written to stdout and stderr so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Waits until the output contains `needle` (true) or `within` passes (false).
    pub async fn wait_output(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.output().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.output().contains(needle)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }
}

/// A handle appending to `path` (stdout and stderr share the file without overwriting).
fn appender(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("log handle")
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `courant <args>` to completion (at most 20 s) and returns (status, output).
pub async fn run(args: &[&str], cwd: Option<&Path>, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut p = Proc::spawn(args, cwd, env);
    let status = p
        .wait_exit(Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("courant {args:?} did not exit within 20 s:\n{}", p.output()));
    (status, p.output())
}

/// Opens an HTTP/2 gRPC channel to a broker on `127.0.0.1:port`.
pub async fn connect(port: u16) -> protocol::grpc::Channel {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connecting to port {port}: {e}"));
    let _ = tcp.set_nodelay(true);
    let (ch, conn) = protocol::grpc::Channel::handshake(tcp, &format!("127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("HTTP/2 handshake: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    ch
}

/// Waits until `127.0.0.1:port` accepts TCP connections (true) or `within` passes.
pub async fn wait_port(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Whether this process may create mount namespaces and mount a tmpfs (root in CI).
pub fn can_mount_tmpfs() -> bool {
    Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m none /mnt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A TCP proxy that can cut every connection through it and refuse new ones, then let
/// them through again: a network outage between a broker and a server (etcd) without
/// touching either process. It can also freeze: connections stay open but no byte moves
/// either way (a blackholed link, where nothing answers and nothing fails).
pub struct CutProxy {
    port: u16,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    flowing: tokio::sync::watch::Sender<bool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> CutProxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy listener");
        let port = listener.local_addr().expect("proxy address").port();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let upstream = upstream.to_string();
        let (flowing, _) = tokio::sync::watch::channel(true);
        let accept = {
            let open = open.clone();
            let conns = conns.clone();
            let flow = flowing.subscribe();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let upstream = upstream.clone();
                    let (f1, f2) = (flow.clone(), flow.clone());
                    let task = tokio::spawn(async move {
                        if let Ok(server) = tokio::net::TcpStream::connect(&upstream).await {
                            let (cr, cw) = client.into_split();
                            let (sr, sw) = server.into_split();
                            tokio::select! {
                                _ = pump(cr, sw, f1) => {}
                                _ = pump(sr, cw, f2) => {}
                            }
                        }
                    });
                    let mut all = conns.lock().expect("proxy connections");
                    all.retain(|t: &tokio::task::JoinHandle<()>| !t.is_finished());
                    all.push(task);
                }
            })
        };
        CutProxy {
            port,
            open,
            flowing,
            conns,
            accept,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Drops every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        for task in self.conns.lock().expect("proxy connections").drain(..) {
            task.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stops every byte, both ways, on every connection (open or new), without closing any.
    pub fn freeze(&self) {
        self.flowing.send_replace(false);
    }

    /// Lets the bytes held by [`CutProxy::freeze`] (and all later ones) through again.
    pub fn thaw(&self) {
        self.flowing.send_replace(true);
    }
}

/// Copies `from` to `to`, holding bytes (neither reading nor writing) while not `flowing`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut flowing: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if flowing.wait_for(|f| *f).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if flowing.wait_for(|f| *f).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Whether a live process answers on `127.0.0.1:port`: a request gets any reply (or a
/// clean close, as from a TLS port) within a second. A TCP connect alone is not enough: a
/// broker killed with io_uring accepts pending leaves listening sockets that complete
/// handshakes for a while after its death, but never answer.
pub async fn answers(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        tcp.write_all(b"GET /debug/ready HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 64];
        tcp.read(&mut buf).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Some(_))
    )
}
