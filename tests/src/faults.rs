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
