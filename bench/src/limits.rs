//! The machine's own limits, measured in the same run as the brokers: loopback TCP
//! throughput, SHA-1 throughput of one core (Gazette's wire format puts a SHA-1 over every
//! appended byte), and sequential disk write with an fdatasync at the end.
//!
//! Lives on: the harness's main thread (the TCP test adds one receiver thread).

use sha1::{Digest, Sha1};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// One measured limit.
#[derive(Debug, Clone)]
pub struct Limit {
    /// Bytes per second.
    pub bytes_per_s: f64,
    /// How it was measured, for the results.
    pub method: String,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub loopback: Limit,
    pub sha1: Limit,
    pub disk: Limit,
}

pub fn measure(dir: &Path, seconds: f64, disk_bytes: u64) -> std::io::Result<Limits> {
    Ok(Limits {
        loopback: loopback_best(Duration::from_secs_f64(seconds / 3.0))?,
        sha1: sha1_one_core(Duration::from_secs_f64(seconds.min(2.0))),
        disk: disk_write(dir, disk_bytes)?,
    })
}

/// Where the two ends of a loopback test run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    /// Wherever the scheduler puts them.
    Unpinned,
    /// Sender and receiver pinned to these CPUs (the same one, or two).
    Pinned { sender: usize, receiver: usize },
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Unpinned => write!(f, "unpinned"),
            Placement::Pinned { sender, receiver } if sender == receiver => {
                write!(f, "both ends on CPU {sender}")
            }
            Placement::Pinned { sender, receiver } => {
                write!(f, "sender on CPU {sender}, receiver on CPU {receiver}")
            }
        }
    }
}

/// The placements the loopback limit tries: unpinned twice, both ends on one CPU, and the
/// ends on two CPUs both ways round (when the process may use two).
fn placements(cpus: &[usize]) -> Vec<Placement> {
    let mut out = vec![Placement::Unpinned, Placement::Unpinned];
    if let Some(&a) = cpus.first() {
        out.push(Placement::Pinned {
            sender: a,
            receiver: a,
        });
        if let Some(&b) = cpus.get(1) {
            out.push(Placement::Pinned {
                sender: a,
                receiver: b,
            });
            out.push(Placement::Pinned {
                sender: b,
                receiver: a,
            });
        }
    }
    out
}

/// The fastest run over [`placements`]. One TCP connection's throughput on this 2-vCPU VM
/// depends on where its ends run: unpinned runs measured from 1.3 to 3.3 GB/s between
/// benchmark runs. A limit is what the machine can do, so the best placement counts: a
/// low figure would flatter the brokers' share of it.
fn loopback_best(window: Duration) -> std::io::Result<Limit> {
    let tried = placements(&allowed_cpus());
    let mut best: Option<Limit> = None;
    for &placement in &tried {
        let next = loopback_tcp(window, placement)?;
        if best
            .as_ref()
            .is_none_or(|b| next.bytes_per_s > b.bytes_per_s)
        {
            best = Some(next);
        }
    }
    let mut best = best.ok_or_else(|| std::io::Error::other("no loopback run"))?;
    best.method += &format!(
        " (the best of {} runs: unpinned twice, both ends on one CPU, and on two CPUs both \
         ways round)",
        tried.len()
    );
    Ok(best)
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set the kernel fills; its size is passed with it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu` (best effort: a refusal leaves it unpinned).
fn pin_current_thread(cpu: usize) {
    // SAFETY: as in `allowed_cpus`; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One TCP connection over 127.0.0.1: a sender thread writes 64 KiB buffers for `window`,
/// a receiver thread reads until EOF, each placed as `placement` says (the harness's own
/// thread is never pinned).
pub fn loopback_tcp(window: Duration, placement: Placement) -> std::io::Result<Limit> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<u64> {
        if let Placement::Pinned { receiver, .. } = placement {
            pin_current_thread(receiver);
        }
        let (mut conn, _) = listener.accept()?;
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        loop {
            match conn.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let sender = std::thread::spawn(move || -> std::io::Result<Instant> {
        if let Placement::Pinned { sender, .. } = placement {
            pin_current_thread(sender);
        }
        let mut conn = TcpStream::connect(addr)?;
        conn.set_nodelay(true)?;
        let chunk = vec![0x5au8; 64 << 10];
        let start = Instant::now();
        while start.elapsed() < window {
            conn.write_all(&chunk)?;
        }
        conn.shutdown(Shutdown::Write)?;
        Ok(start)
    });
    let start = sender
        .join()
        .map_err(|_| std::io::Error::other("sender panicked"))??;
    let received = receiver
        .join()
        .map_err(|_| std::io::Error::other("receiver panicked"))??;
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Limit {
        bytes_per_s: received as f64 / elapsed,
        method: format!(
            "one TCP connection over 127.0.0.1, 64 KiB writes for {:.1} s, std threads, \
             {placement}",
            window.as_secs_f64()
        ),
    })
}

/// SHA-1 (the `sha1` crate, which uses the SHA-NI instructions when the CPU has them)
/// over a 64 KiB buffer, repeatedly, on one thread.
pub fn sha1_one_core(window: Duration) -> Limit {
    let chunk = vec![0xa5u8; 64 << 10];
    let mut hasher = Sha1::new();
    let mut total = 0u64;
    let start = Instant::now();
    while start.elapsed() < window {
        for _ in 0..16 {
            hasher.update(&chunk);
        }
        total += 16 * chunk.len() as u64;
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::hint::black_box(hasher.finalize());
    let sha_ni = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.split_whitespace().any(|w| w == "sha_ni"))
        .unwrap_or(false);
    Limit {
        bytes_per_s: total as f64 / elapsed,
        method: format!(
            "sha1 crate 0.11, 64 KiB updates for {:.1} s on one thread (CPU flag sha_ni: {})",
            window.as_secs_f64(),
            if sha_ni { "yes" } else { "no" }
        ),
    }
}

/// Writes `bytes` sequentially in 1 MiB writes to a new file in `dir`, then fdatasync;
/// the time includes the sync. The file is removed afterwards.
pub fn disk_write(dir: &Path, bytes: u64) -> std::io::Result<Limit> {
    let path = dir.join("courant-bench-disk-test");
    let chunk = vec![0x3cu8; 1 << 20];
    let start = Instant::now();
    let result = (|| {
        let mut file = std::fs::File::create(&path)?;
        let mut written = 0u64;
        while written < bytes {
            file.write_all(&chunk)?;
            written += chunk.len() as u64;
        }
        file.sync_data()?;
        Ok::<u64, std::io::Error>(written)
    })();
    let elapsed = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let written = result?;
    Ok(Limit {
        bytes_per_s: written as f64 / elapsed,
        method: format!(
            "{} MiB in 1 MiB write(2)s through the page cache, then one fdatasync, in {}",
            written >> 20,
            dir.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_runs_cover_one_and_two_cpus() {
        let two = placements(&[0, 1]);
        assert_eq!(two.len(), 5);
        assert!(two.contains(&Placement::Pinned {
            sender: 0,
            receiver: 0
        }));
        assert!(two.contains(&Placement::Pinned {
            sender: 1,
            receiver: 0
        }));
        assert_eq!(placements(&[3]).len(), 3);
        assert_eq!(placements(&[]), vec![Placement::Unpinned; 2]);
        assert_eq!(
            Placement::Pinned {
                sender: 0,
                receiver: 1
            }
            .to_string(),
            "sender on CPU 0, receiver on CPU 1"
        );
    }

    #[test]
    fn free_space_is_read_and_judged() {
        let space = free_space(&std::env::temp_dir()).unwrap();
        assert!(space.total_bytes > 0 && space.free_bytes <= space.total_bytes);
        let gb = 1_000_000_000;
        let full = FreeSpace {
            free_bytes: 9 * gb,
            total_bytes: 250 * gb,
        };
        assert!(full.nearly_full());
        assert_eq!(full.describe(), "9.0 GB free of 250.0 GB (4 %)");
        let roomy = FreeSpace {
            free_bytes: 53 * gb,
            total_bytes: 250 * gb,
        };
        assert!(!roomy.nearly_full());
        assert!(free_space(Path::new("/no/such/dir")).is_none());
    }

    #[test]
    fn page_reporting_is_read_where_the_kernel_counts_it() {
        let dir = std::env::temp_dir().join(format!("courant-bench-pr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // No count of reported memory: nothing to go by.
        std::fs::write(dir.join("page_reporting_order"), "9\n").unwrap();
        assert_eq!(PageReporting::read(&dir), None);
        std::fs::write(dir.join("reported_kib"), "19330436\n").unwrap();
        let only_count = PageReporting::read(&dir).unwrap();
        assert_eq!(only_count.reported_kib, 19330436);
        assert_eq!(only_count.describe(), "blocks of order 9");
        std::fs::write(dir.join("min_free_ms"), "0\n").unwrap();
        assert_eq!(
            PageReporting::read(&dir).unwrap().describe(),
            "blocks of order 9, once free for 0 ms"
        );
        std::fs::write(dir.join("reported_kib"), "garbage").unwrap();
        assert_eq!(PageReporting::read(&dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn limits_are_positive() {
        for placement in placements(&allowed_cpus()) {
            let limit = loopback_tcp(Duration::from_millis(50), placement).unwrap();
            assert!(limit.bytes_per_s > 0.0, "{placement}");
        }
        assert!(sha1_one_core(Duration::from_millis(20)).bytes_per_s > 0.0);
        let dir = std::env::temp_dir();
        let disk = disk_write(&dir, 4 << 20).unwrap();
        assert!(disk.bytes_per_s > 0.0);
        assert!(!dir.join("courant-bench-disk-test").exists());
    }
}

/// The free space of the filesystem holding a directory.
#[derive(Debug, Clone, PartialEq)]
pub struct FreeSpace {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl FreeSpace {
    /// "53.1 GB free of 270.6 GB (20 %)".
    pub fn describe(&self) -> String {
        format!(
            "{:.1} GB free of {:.1} GB ({:.0} %)",
            self.free_bytes as f64 / 1e9,
            self.total_bytes as f64 / 1e9,
            100.0 * self.free_bytes as f64 / self.total_bytes.max(1) as f64
        )
    }

    /// What a nearly full scratch filesystem does to a run (said where it is reported).
    pub const NEARLY_FULL_EFFECT: &'static str =
        "ext4 allocates blocks more slowly then, and both brokers' spool writes pay for it";

    /// Under a tenth free, or under 30 GB (the full profile needs about 25 GB).
    pub fn nearly_full(&self) -> bool {
        self.free_bytes * 10 < self.total_bytes || self.free_bytes < 30_000_000_000
    }
}

/// The free space (available to an unprivileged user) of the filesystem holding `dir`.
pub fn free_space(dir: &Path) -> Option<FreeSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a valid C string and `st` a plain struct the kernel fills.
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) != 0 {
            return None;
        }
        st
    };
    let block = st.f_frsize as u64;
    Some(FreeSpace {
        free_bytes: st.f_bavail as u64 * block,
        total_bytes: st.f_blocks as u64 * block,
    })
}

/// What [`prefault_memory`] did, for the results.
#[derive(Debug, Clone)]
pub struct Prefault {
    pub bytes: u64,
    pub seconds: f64,
}

impl Prefault {
    /// "19.0 GiB in 48.8 s".
    pub fn describe(&self) -> String {
        format!(
            "{:.1} GiB in {:.1} s",
            self.bytes as f64 / (1u64 << 30) as f64,
            self.seconds
        )
    }
}

/// Where a kernel with free page reporting shows its parameters and counters.
pub const PAGE_REPORTING: &str = "/sys/module/page_reporting/parameters";

/// A guest's free page reporting: it hands free memory back to its host, which backs a
/// page again at its next first write. Read from `dir` (normally [`PAGE_REPORTING`]);
/// `None` where the kernel shows no count of reported memory (no reporting, or a kernel
/// that does not count it).
#[derive(Debug, Clone, PartialEq)]
pub struct PageReporting {
    /// Memory reported to the host since boot.
    pub reported_kib: u64,
    /// How long a free block waits before it is reported, where the kernel says.
    pub min_free_ms: Option<u64>,
    /// The smallest block reported (2^order pages), where the kernel says.
    pub order: Option<u32>,
}

impl PageReporting {
    pub fn read(dir: &Path) -> Option<PageReporting> {
        let field = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        Some(PageReporting {
            reported_kib: field("reported_kib")?.trim().parse().ok()?,
            min_free_ms: field("min_free_ms").and_then(|v| v.trim().parse().ok()),
            order: field("page_reporting_order").and_then(|v| v.trim().parse().ok()),
        })
    }

    /// "blocks of order 9, once free for 0 ms".
    pub fn describe(&self) -> String {
        let order = self.order.map_or("order unknown".to_string(), |o| {
            format!("blocks of order {o}")
        });
        match self.min_free_ms {
            Some(ms) => format!("{order}, once free for {ms} ms"),
            None => order,
        }
    }
}

/// Touches most of the machine's available memory once, then frees it.
///
/// On a freshly booted VM the host backs guest memory lazily: the first write to each
/// guest page traps to the hypervisor. Measured on a freshly booted 2-vCPU VM: writing
/// 20 GiB to tmpfs ran at 459 MB/s the first time and at 2.5 GB/s the next. The page cache
/// that brokers write their spools through takes such pages, and since Courant runs first
/// in each row, it paid for them and Gazette, reusing the pages the deleted spools freed,
/// did not: `copy_folio_from_iter_atomic` (the copy of a `pwrite` into the page cache) took
/// 60 % of Courant's broker CPU in the max-100b row. Touching the memory first takes that
/// bias out of the first rows.
///
/// It does not last where the guest reports free memory back to its host ([`PageReporting`]):
/// on a VM with `min_free_ms` 0, 5.3 of 8 GiB freed went back within 5 s. A max-1kib
/// load spent 65 % of Courant's broker CPU in that copy two minutes after touching 19 GiB,
/// and 39 % right after touching 18 GiB; the results say how much went back during the run.
pub fn prefault_memory() -> Prefault {
    let started = Instant::now();
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    // Leave 1 GiB and a tenth of what is available to everything else.
    let target = (available_kib * 1024 / 10 * 9).saturating_sub(1 << 30);
    const CHUNK: usize = 256 << 20;
    const PAGE: usize = 4096;
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut touched = 0u64;
    while touched + CHUNK as u64 <= target {
        let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK);
        let base = chunk.as_mut_ptr();
        for offset in (0..CHUNK).step_by(PAGE) {
            // SAFETY: `offset < CHUNK`, the capacity just allocated; writing a byte of the
            // spare capacity through its pointer is allowed (the Vec's length stays 0).
            unsafe { std::ptr::write_volatile(base.add(offset), 1) };
        }
        held.push(chunk);
        touched += CHUNK as u64;
    }
    // Held until now, so that each chunk took pages of its own.
    drop(held);
    Prefault {
        bytes: touched,
        seconds: started.elapsed().as_secs_f64(),
    }
}
