//! The broker process harness: a real `courant serve` on a free loopback port.

#[allow(unused_imports)]
use super::*;

/// Path of the `courant` binary: `$COURANT_BIN`, else `courant` in the cargo target
/// directory holding this test executable (`target/<profile>/deps/<test>` ⇒
/// `target/<profile>/courant`).
pub fn courant_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("COURANT_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    for dir in exe.ancestors().skip(1) {
        let candidate = dir.join("courant");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "no `courant` binary found above {} (build it first: `cargo build -p courant-broker`, \
         or set COURANT_BIN)",
        exe.display()
    );
}

pub(crate) fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local_addr").port()
}

pub(crate) static STARTS: AtomicUsize = AtomicUsize::new(0);

/// A running `courant serve` process. Killed (SIGKILL) on drop; if the test is
/// panicking, the tail of the broker's stderr is printed to help diagnose it.
pub struct Broker {
    child: Option<Child>,
    port: u16,
    data_dir: PathBuf,
    extra_args: Vec<String>,
    /// Holds logs and (unless a data dir was given) the data dir.
    tmp: tempfile::TempDir,
    log_path: PathBuf,
}

impl Broker {
    /// Starts a broker on a free port with a fresh data dir.
    pub async fn start(extra_args: &[&str]) -> Broker {
        Self::start_in(None, extra_args).await
    }

    /// Starts a broker on a free port; with `data_dir`, reuses that directory.
    pub async fn start_in(data_dir: Option<&Path>, extra_args: &[&str]) -> Broker {
        let tmp = tempfile::Builder::new()
            .prefix("courant-test-")
            .tempdir()
            .expect("create tempdir");
        let data_dir = match data_dir {
            Some(d) => d.to_path_buf(),
            None => {
                let d = tmp.path().join("data");
                std::fs::create_dir_all(&d).expect("create data dir");
                d
            }
        };
        let mut broker = Broker {
            child: None,
            port: 0,
            data_dir,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tmp,
            log_path: PathBuf::new(),
        };
        broker.spawn(None).await;
        broker
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The broker process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The endpoint the broker advertises in Routes.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything the current (or last) broker process wrote to stderr.
    pub fn stderr(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn stderr_tail(&self, lines: usize) -> String {
        let s = self.stderr();
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Spawns the process, on `port` if given (falling back to a fresh port if that one
    /// cannot be bound), and waits until it accepts TCP connections.
    async fn spawn(&mut self, port: Option<u16>) {
        let bin = courant_bin();
        let mut want_port = port;
        for attempt in 0..4 {
            let port = want_port.take().unwrap_or_else(free_port);
            let n = STARTS.fetch_add(1, Ordering::Relaxed);
            self.log_path = self.tmp.path().join(format!("broker-{n}.stderr"));
            let log = std::fs::File::create(&self.log_path).expect("create stderr log");
            let out = log.try_clone().expect("clone log handle");
            let mut cmd = Command::new(&bin);
            cmd.arg("serve")
                .args(["--broker.port", &port.to_string()])
                .args(["--broker.host", "127.0.0.1"])
                // Test servers listen on loopback only.
                .args(["--broker.bind", "127.0.0.1"])
                .arg("--data-dir")
                .arg(&self.data_dir)
                .args(&self.extra_args)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(log);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
            self.child = Some(child);
            self.port = port;
            match self.wait_ready().await {
                Ok(()) => return,
                Err(exited) => {
                    let stderr = self.stderr();
                    let in_use = stderr.contains("in use") || stderr.contains("AddrInUse");
                    if exited && in_use && attempt < 3 {
                        eprintln!("broker could not bind port {port}; retrying on another port");
                        continue;
                    }
                    self.kill9();
                    panic!(
                        "broker (`{} serve --broker.port {port} ...`) {}\n--- broker stderr ---\n{}",
                        bin.display(),
                        if exited {
                            "exited during startup"
                        } else {
                            "did not accept TCP connections within 20 s"
                        },
                        stderr
                    );
                }
            }
        }
        unreachable!()
    }

    /// Ok once the port accepts connections and the child is still alive;
    /// Err(true) if the child exited, Err(false) on timeout.
    async fn wait_ready(&mut self) -> Result<(), bool> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.exited() {
                return Err(true);
            }
            if crate::faults::answers(self.port).await {
                // Guard against having reached someone else's listener on a reused port.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if self.exited() {
                    return Err(true);
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(false);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// True while the broker process runs.
    pub fn is_running(&mut self) -> bool {
        !self.exited()
    }

    /// SIGKILLs the broker and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERMs the broker (a graceful shutdown) and waits up to `secs` for it to exit;
    /// returns whether it did.
    pub async fn terminate(&mut self, secs: u64) -> bool {
        let Some(c) = self.child.as_mut() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                self.child = None;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Kills the broker (if running) and starts it again on the same port and data dir.
    pub async fn restart(&mut self) {
        self.kill9();
        let port = self.port;
        self.spawn(Some(port)).await;
    }

    /// Opens a new HTTP/2 connection and returns a gRPC channel on it.
    pub async fn connect(&self) -> Channel {
        self.connect_with_handle().await.0
    }

    /// Like [`Broker::connect`], also returning the task driving the connection:
    /// aborting it drops the TCP connection abruptly.
    pub async fn connect_with_handle(&self) -> (Channel, tokio::task::JoinHandle<()>) {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap_or_else(|e| panic!("connecting to broker on port {}: {e}", self.port));
        let _ = tcp.set_nodelay(true);
        let (ch, conn) = Channel::handshake(tcp, &format!("127.0.0.1:{}", self.port))
            .await
            .unwrap_or_else(|e| panic!("HTTP/2 handshake with broker: {e}"));
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        (ch, task)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!(
                "--- courant broker stderr (last 60 lines, port {}) ---\n{}\n--- end ---",
                self.port,
                self.stderr_tail(60)
            );
        }
    }
}
