//! Child processes: spawned so they die with the harness, stopped with a deadline, and
//! measured from `/proc` (CPU seconds over all threads, peak RSS).
//!
//! Lives on: the harness's main thread (plus one reader thread per piped stderr).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A `Command` whose process is killed (SIGKILL) if the harness dies first, so no run
/// outlives it.
pub fn command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no Rust state.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// `cmd` as one shell-quoted line, for the results.
pub fn describe(cmd: &Command) -> String {
    let mut out: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            let (k, v) = (k.to_string_lossy(), v?.to_string_lossy());
            (k != "TMPDIR").then(|| format!("{k}={}", quote(&v)))
        })
        .collect();
    out.push(quote(&cmd.get_program().to_string_lossy()));
    out.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    out.join(" ")
}

fn quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `127.0.0.1:port` accepts a connection, or `child` exits, or `limit` passes.
pub fn wait_listening(child: &mut Child, port: u16, limit: Duration) -> Result<(), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited during startup ({status})"));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("127.0.0.1:{port} not listening after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` at most `limit`, then kills it.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> (Option<ExitStatus>, bool) {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (Some(status), false),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                return (child.wait().ok(), true);
            }
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`. Returns whether SIGKILL was needed.
pub fn stop(child: &mut Child, grace: Duration) -> bool {
    if !terminate(child) {
        return false;
    }
    wait_timeout(child, grace).1
}

/// Sends SIGTERM unless `child` has exited; returns whether it was still running.
pub fn terminate(child: &mut Child) -> bool {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return false;
    }
    // SAFETY: kill(2) on the pid of a child we have not reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    true
}

/// CPU seconds (user + system, all threads, live and exited) of process `pid`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after it are space-separated.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat(5), i.e. 11 and 12 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

/// Sums `count(contents)` of file `file` over the live threads of process `pid`
/// (`/proc/PID/task/*/<file>`; threads that exited are not counted).
fn sum_over_threads(pid: u32, file: &str, count: impl Fn(&str) -> u64) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join(file)).ok())
            .map(|contents| count(&contents))
            .sum(),
    )
}

/// CPU time in nanoseconds of the live threads of process `pid` (`schedstat`, nanosecond
/// resolution where `cpu_seconds` counts 10 ms ticks).
pub fn cpu_ns(pid: u32) -> Option<u64> {
    // First field: time spent on the CPU, in nanoseconds.
    sum_over_threads(pid, "schedstat", |s| {
        s.split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// The machine's steal time so far, in nanoseconds (`/proc/stat`: time the hypervisor ran
/// something else while this VM's CPUs wanted to run), summed over its CPUs.
pub fn steal_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    let steal: u64 = cpu.split_whitespace().nth(8)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    Some(steal * (1_000_000_000 / ticks))
}

/// TCP's loss-recovery counters in the network namespace of process `pid` (all of the
/// bench's connections when it runs in a namespace of its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpLoss {
    /// Retransmission timeouts that fired (`TcpExt: TCPTimeouts`).
    pub timeouts: u64,
    /// Segments sent again (`Tcp: RetransSegs`).
    pub retrans_segs: u64,
    /// Tail-loss probes sent (`TcpExt: TCPLossProbes`).
    pub loss_probes: u64,
}

impl TcpLoss {
    /// What was counted from `earlier` to `self`.
    pub fn since(self, earlier: TcpLoss) -> TcpLoss {
        TcpLoss {
            timeouts: self.timeouts.saturating_sub(earlier.timeouts),
            retrans_segs: self.retrans_segs.saturating_sub(earlier.retrans_segs),
            loss_probes: self.loss_probes.saturating_sub(earlier.loss_probes),
        }
    }
}

/// [`TcpLoss`] as counted now in the network namespace of process `pid`.
pub fn tcp_loss(pid: u32) -> Option<TcpLoss> {
    let snmp = std::fs::read_to_string(format!("/proc/{pid}/net/snmp")).ok()?;
    let netstat = std::fs::read_to_string(format!("/proc/{pid}/net/netstat")).ok()?;
    Some(TcpLoss {
        timeouts: net_counter(&netstat, "TcpExt", "TCPTimeouts")?,
        retrans_segs: net_counter(&snmp, "Tcp", "RetransSegs")?,
        loss_probes: net_counter(&netstat, "TcpExt", "TCPLossProbes")?,
    })
}

/// Counter `name` of group `group` in a `/proc/net/{snmp,netstat}` table: each group is a
/// line of names followed by a line of values, both starting with `group:`.
fn net_counter(table: &str, group: &str, name: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut lines = table.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let at = names.split_whitespace().position(|n| n == name);
        if let Some(at) = at {
            return values.split_whitespace().nth(at)?.parse().ok();
        }
    }
    None
}

/// Context switches (voluntary and involuntary) of the live threads of process `pid`
/// (threads that exited, such as io-wq workers that came and went, are not counted).
pub fn ctx_switches(pid: u32) -> Option<u64> {
    sum_over_threads(pid, "status", |status| {
        status
            .lines()
            .filter_map(|line| {
                line.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .map(|v| v.trim().parse::<u64>().unwrap_or(0))
            .sum()
    })
}

/// Threads of process `pid` in uninterruptible sleep (state `D`: blocked in the kernel, on
/// a disk, the file system's journal or dirty-page throttling) now, each as
/// "`comm` in `wchan`".
pub fn blocked_threads(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // The state is the first field after the parenthesised command name.
        let state = stat.rfind(')').and_then(|i| stat.get(i + 2..i + 3));
        if state != Some("D") {
            continue;
        }
        let read = |name: &str| {
            std::fs::read_to_string(task.path().join(name)).map(|s| s.trim().to_string())
        };
        let comm = read("comm").unwrap_or_default();
        let wchan = read("wchan").unwrap_or_default();
        out.push(format!(
            "{comm} in {}",
            if wchan.is_empty() { "?" } else { &wchan }
        ));
    }
    out
}

/// Thread ids of process `pid`'s io_uring worker threads (io-wq, named `iou-wrk-*`)
/// alive now.
pub fn io_wq_threads(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("iou-wrk"))
        })
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// The sum of every sample of the Prometheus counter `name` that the broker at
/// `http://host:port` serves on `/debug/metrics`; `None` if it serves none (Gazette has no
/// such counter) or does not answer within a second.
pub fn scrape_counter(address: &str, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let hostport = address.trim_start_matches("http://").trim_end_matches('/');
    let addr: SocketAddr = hostport.parse().ok()?;
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let req =
        format!("GET /debug/metrics HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).ok()?;
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    sum_counter(&body, name)
}

/// The sum of the samples of counter `name` in a Prometheus text exposition.
pub fn sum_counter(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value: f64 = rest.rsplit(' ').next()?.trim().parse().ok()?;
        *found.get_or_insert(0.0) += value;
    }
    found
}

/// Peak resident set size (VmHWM) of process `pid`, in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads `child`'s stderr line by line on a thread; each line arrives with its time.
pub fn stderr_lines(child: &mut Child) -> mpsc::Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` prints them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters are found by name in their group (names line, then values line), in any
    /// group's position, and the process's own namespace has them.
    #[test]
    fn tcp_counters_are_read_by_name() {
        let table = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                     Tcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 17 0\n\
                     TcpExt: SyncookiesSent TCPLossProbes TCPTimeouts\nTcpExt: 0 5 3\n";
        assert_eq!(net_counter(table, "Tcp", "RetransSegs"), Some(17));
        assert_eq!(net_counter(table, "TcpExt", "TCPTimeouts"), Some(3));
        assert_eq!(net_counter(table, "TcpExt", "TCPLossProbes"), Some(5));
        assert_eq!(net_counter(table, "TcpExt", "NoSuchCounter"), None);
        assert_eq!(net_counter(table, "Udp", "InDatagrams"), None);
        let later = TcpLoss {
            timeouts: 4,
            retrans_segs: 20,
            loss_probes: 5,
        };
        let earlier = TcpLoss {
            timeouts: 3,
            retrans_segs: 17,
            loss_probes: 5,
        };
        assert_eq!(
            later.since(earlier),
            TcpLoss {
                timeouts: 1,
                retrans_segs: 3,
                loss_probes: 0
            }
        );
        assert!(tcp_loss(std::process::id()).is_some());
    }

    #[test]
    fn own_process_is_measurable() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_some());
        assert!(peak_rss_bytes(pid).unwrap() > 0);
        assert_eq!(load_average().split(' ').count(), 3);
    }

    #[test]
    fn own_threads_and_counters_are_read() {
        assert!(ctx_switches(std::process::id()).unwrap() > 0);
        assert!(io_wq_threads(std::process::id()).is_empty());
        // CPU time only grows: spin until this thread has used some more.
        let before = cpu_ns(std::process::id()).unwrap();
        let mut after = before;
        while after <= before {
            std::hint::black_box((0..10_000u64).sum::<u64>());
            after = cpu_ns(std::process::id()).unwrap();
        }
        assert_eq!(cpu_ns(u32::MAX), None);
        assert!(steal_ns().is_some());
        let text = "# TYPE x counter\nx{core=\"0\"} 3\nx{core=\"1\"} 4\nx_other 9\nx 1\n";
        assert_eq!(sum_counter(text, "x"), Some(8.0));
        assert_eq!(sum_counter(text, "y"), None);
        assert_eq!(scrape_counter("http://127.0.0.1:1", "x"), None);
    }

    #[test]
    fn commands_are_quoted() {
        let mut cmd = Command::new("a b");
        cmd.arg("--x").arg("it's").env("GOMAXPROCS", "1");
        assert_eq!(describe(&cmd), r"GOMAXPROCS=1 'a b' --x 'it'\''s'");
    }
}
