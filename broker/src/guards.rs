//! Start-up guards against operator mistakes that would otherwise lose data or split
//! traffic: a second broker on the same `--data-dir` (both would write the same spools and
//! embedded keyspace), and a second broker on a port another broker already serves (every
//! core's listener uses SO_REUSEPORT, so a second process would silently join the group).
//!
//! Lives on: the main thread, at start-up. Each guard returns a handle the process keeps
//! open until it exits; the kernel releases both when the process dies, also on kill -9.

use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Wait between attempts to claim a port held by a dead broker's listeners.
const PORT_RETRY: std::time::Duration = std::time::Duration::from_millis(20);
/// A port claim slower than this is logged.
const SLOW_CLAIM: std::time::Duration = std::time::Duration::from_millis(100);

/// Name of the lock file in the data dir. It holds the PID of the broker holding it.
pub const LOCK_FILE: &str = "courant.lock";

/// An exclusive `flock` on `<data-dir>/courant.lock`, held while the process lives.
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Takes the data dir's lock, or explains who holds it. The file records this process's
/// PID (informational: the lock itself is the `flock`, which dies with its process, so a
/// file left by a killed broker is never stale).
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock, String> {
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() {
                "another process".to_string()
            } else {
                format!("another broker (PID {holder})")
            };
            return Err(format!(
                "--data-dir {} is in use by {who}: {} is locked; two brokers on one data dir \
                 would overwrite each other's journals",
                dir.display(),
                path.display()
            ));
        }
        return Err(format!("locking {}: {err}", path.display()));
    }
    let pid = std::process::id().to_string();
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(format!("{pid}\n").as_bytes()))
        .and_then(|()| file.sync_data());
    if let Err(err) = written {
        // The lock holds regardless; only the PID shown to a second broker is missing.
        tracing::warn!(path = %path.display(), %err, "writing the PID into the data dir lock");
    }
    Ok(DataDirLock { _file: file })
}

/// A claim on a port, held while the process lives: an abstract Unix socket named after
/// the bind address and port (exclusive within the network namespace, which is also the scope of TCP ports;
/// freed by the kernel when the process dies).
pub struct PortClaim {
    _socket: OwnedFd,
}

/// How long a probe waits for the listeners of a broker that just died: a process killed
/// with io_uring accepts pending keeps its listening sockets until the kernel tears its
/// rings down, shortly after the exit (a restarted broker would otherwise join them, and
/// connections the kernel hands to them are reset).
const DEAD_LISTENER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Refuses a port that another process serves, before this broker binds its SO_REUSEPORT
/// listeners: first a claim another Courant broker would hold (closing the window between
/// two brokers starting at once), then a probe bind without SO_REUSEPORT, which fails if
/// anything listens on the port (including another broker's SO_REUSEPORT group). With the
/// claim held, a listener can only be a dead broker's (see [`DEAD_LISTENER_GRACE`]) or
/// another program's: the probe is retried for a while before giving up.
pub fn claim_port(host: &str, port: u16) -> Result<PortClaim, String> {
    claim_port_within(host, port, DEAD_LISTENER_GRACE)
}

fn claim_port_within(
    host: &str,
    port: u16,
    grace: std::time::Duration,
) -> Result<PortClaim, String> {
    // Named by the address as configured: two brokers on different addresses of one host
    // may share a port number (overlaps, such as 0.0.0.0 and 127.0.0.1, the probe finds).
    let claim = claim_abstract(&format!("courant-bind-{host}:{port}")).map_err(|err| {
        if err.raw_os_error() == Some(libc::EADDRINUSE) {
            format!(
                "{host}:{port} is already in use by another courant broker on this host; \
                 refusing to share the port (choose another --broker.port)"
            )
        } else {
            format!("claiming {host}:{port}: {err}")
        }
    })?;
    let started = std::time::Instant::now();
    loop {
        match probe_bind(host, port) {
            Ok(()) => break,
            Err((true, _)) if started.elapsed() < grace => {
                std::thread::sleep(PORT_RETRY);
            }
            Err((_, msg)) => return Err(msg),
        }
    }
    if started.elapsed() > SLOW_CLAIM {
        tracing::info!(port, waited = ?started.elapsed(), "the port was held by a listener that went away");
    }
    Ok(claim)
}

/// Binds an abstract Unix datagram socket called `name` (no file, no cleanup needed).
fn claim_abstract(name: &str) -> std::io::Result<PortClaim> {
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor no one else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract namespace: a leading NUL, then the name (not NUL-terminated).
    let bytes = name.as_bytes();
    let room = addr.sun_path.len() - 1;
    let n = bytes.len().min(room);
    for (dst, src) in addr.sun_path.iter_mut().skip(1).zip(&bytes[..n]) {
        *dst = *src as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + n;
    // SAFETY: addr is a valid sockaddr_un and len does not exceed its size.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PortClaim { _socket: socket })
}

/// Binds and listens on `host:port` without SO_REUSEPORT, then closes the socket again.
/// Errors say whether the address was in use.
fn probe_bind(host: &str, port: u16) -> Result<(), (bool, String)> {
    use socket2::{Domain, Socket, Type};
    use std::net::ToSocketAddrs;
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| (false, format!("resolving --broker.bind {host}: {e}")))?
        .next()
        .ok_or_else(|| {
            (
                false,
                format!("--broker.bind {host} resolves to no address"),
            )
        })?;
    let probe = || -> std::io::Result<()> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        // SO_REUSEADDR only skips TIME_WAIT leftovers; it never joins a listening socket.
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1)?;
        Ok(())
    };
    probe().map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            let msg = format!(
                "binding {host}:{port}: address already in use by another process \
                 (refusing to share the port)"
            );
            (true, msg)
        } else {
            (false, format!("binding {host}:{port}: {e}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder() {
        let dir = std::env::temp_dir().join(format!("courant-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = lock_data_dir(&dir).unwrap();
        // flock locks belong to the open file description: a second open conflicts, as a
        // second process would.
        let err = lock_data_dir(&dir).err().expect("second lock refused");
        assert!(
            err.contains(&format!("PID {}", std::process::id())),
            "{err}"
        );
        drop(first);
        let again = lock_data_dir(&dir).expect("lock free once dropped");
        drop(again);
        assert!(dir.join(LOCK_FILE).is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_claimed_or_listening_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let none = std::time::Duration::ZERO;
        let err = claim_port_within("127.0.0.1", port, none)
            .err()
            .expect("port in use");
        assert!(err.contains("already in use"), "{err}");
        // A listener that goes away within the grace period (a dead broker's) is waited for.
        let closer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(listener);
        });
        let claim = claim_port("127.0.0.1", port).expect("the listener went away");
        closer.join().unwrap();
        drop(claim);
        let claim = claim_port("127.0.0.1", port).expect("port free again");
        let err = claim_port("127.0.0.1", port).err().expect("port claimed");
        assert!(err.contains("another courant broker"), "{err}");
        drop(claim);
        assert!(claim_port("127.0.0.1", port).is_ok());
    }
}
