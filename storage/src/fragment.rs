//! Local fragment files: the read side of a spool's content.
//!
//! A [`FragmentFile`] is the `.spool` file of one fragment; byte 0 of the file
//! is journal offset `begin`. The spool writing the fragment and any number of
//! readers share it through an `Rc`. Readers bound their reads by the
//! fragment's committed end, which they learn from the index: bytes past it
//! are uncommitted and must never be served.
//!
//! Lives on: the journal's owner core.

use std::cell::OnceCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{BufferedFile, OpenOptions};

use crate::StorageError;

/// The content file of a local fragment (a spool, current or completed).
///
/// The file is created lazily by the spool's first write, so an empty spool
/// costs no file descriptor and leaves nothing on disk.
///
/// Lives on: the journal's owner core (`!Send`).
pub struct FragmentFile {
    begin: i64,
    path: PathBuf,
    commits_path: PathBuf,
    file: OnceCell<BufferedFile>,
}

impl FragmentFile {
    pub(crate) fn new(dir: &Path, begin: i64) -> Self {
        assert!(begin >= 0);
        FragmentFile {
            begin,
            path: dir.join(format!("{begin:016x}.spool")),
            commits_path: dir.join(format!("{begin:016x}.commits")),
            file: OnceCell::new(),
        }
    }

    pub(crate) fn with_file(dir: &Path, begin: i64, file: BufferedFile) -> Self {
        let this = Self::new(dir, begin);
        assert!(this.file.set(file).is_ok());
        this
    }

    /// Journal offset of the file's first byte.
    pub fn begin(&self) -> i64 {
        self.begin
    }

    /// Path of the `.spool` content file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of the companion `.commits` log.
    pub fn commits_path(&self) -> &Path {
        &self.commits_path
    }

    /// Reads up to `max_len` bytes at journal offset `offset` (which must be
    /// at least `begin`). Returns fewer bytes only at the end of the file; the
    /// caller bounds `max_len` by the fragment's committed end.
    pub async fn read_at(&self, offset: i64, max_len: usize) -> Result<Bytes, StorageError> {
        let _op = crate::in_flight::op();
        if offset < self.begin {
            return Err(StorageError::InvalidOffset {
                offset,
                begin: self.begin,
            });
        }
        let Some(file) = self.file.get() else {
            // Nothing was ever written, so nothing can be committed.
            return Ok(Bytes::new());
        };
        let pos = (offset - self.begin) as u64;
        let content = read_up_to(file, pos, max_len)
            .await
            .map_err(|e| StorageError::io("reading", &self.path, e))?;
        assert!(content.len() <= max_len);
        Ok(Bytes::from(content))
    }

    /// Unlinks the fragment's `.spool` and `.commits` files, as the broker
    /// does once the fragment is persisted to a store. Readers holding this
    /// `FragmentFile` keep reading: the open descriptor outlives the name.
    /// Must not be called on the current spool's file.
    pub async fn remove(&self) -> Result<(), StorageError> {
        let _op = crate::in_flight::op();
        for path in [&self.path, &self.commits_path] {
            match glommio::io::remove(path).await {
                Ok(()) => {}
                Err(e) => {
                    let e = std::io::Error::from(e);
                    if e.kind() != std::io::ErrorKind::NotFound {
                        return Err(StorageError::io("removing", path, e));
                    }
                }
            }
        }
        Ok(())
    }

    /// The open content file, if it was created.
    pub(crate) fn get(&self) -> Option<&BufferedFile> {
        self.file.get()
    }

    /// The open content file, creating (and truncating) it on first use.
    pub(crate) async fn get_or_create(&self) -> Result<&BufferedFile, StorageError> {
        if self.file.get().is_none() {
            let file = open_rw(&self.path, true)
                .await
                .map_err(|e| StorageError::io("creating", &self.path, e))?;
            // Only the owning spool creates the file, from `&mut self`, so no
            // other creation can have raced this one across the await.
            assert!(self.file.set(file).is_ok());
        }
        Ok(self.file.get().expect("set above"))
    }
}

impl fmt::Debug for FragmentFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FragmentFile")
            .field("begin", &self.begin)
            .field("path", &self.path)
            .field("open", &self.file.get().is_some())
            .finish()
    }
}

/// A completed local fragment: its committed metadata and its content file.
/// `fragment.backing_store` is empty and `fragment.mod_time` is 0 until the
/// broker persists it to a store.
#[derive(Clone, Debug)]
pub struct LocalFragment {
    pub fragment: protocol::Fragment,
    pub file: Rc<FragmentFile>,
}

/// Opens `path` for reading and writing through glommio, creating and
/// truncating it if `create`.
pub(crate) async fn open_rw(path: &Path, create: bool) -> std::io::Result<BufferedFile> {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    if create {
        options.create(true).truncate(true);
    }
    Ok(options.buffered_open(path).await?)
}

/// A reservation covers at least this much past the write that makes it...
const RESERVE_MIN: u64 = 256 << 10;
/// ...and at most this much (otherwise as much again as the file holds).
const RESERVE_MAX: u64 = 16 << 20;

/// Reserves the file's blocks ahead of a write ending at `end` (`fallocate` with
/// `FALLOC_FL_KEEP_SIZE`: the file's length does not change, so readers and recovery see
/// nothing of it), once `end` passes `reserved`. A write into reserved blocks skips the
/// file system's per-block delayed allocation (on ext4 about a quarter of a large
/// `pwrite`'s CPU). A completed spool's `truncate` frees what lies past its end. Where the
/// file system refuses (or the disk is full), `reserved` becomes `None` and writes go on
/// without reservations.
///
/// The `fallocate` runs on the core's blocking-pool thread (`spawn_blocking`), not on the
/// core thread: allocating blocks can wait for a block bitmap to be read from the disk
/// behind the queued writeback (`ext4_wait_block_bitmap`, measured at 3-6 of about 110
/// samples of a max-rate row), and there only this journal's write waits for it, not
/// every journal of the core. The write awaits the reservation (a write into the file
/// would wait for the inode lock the `fallocate` holds anyway). The helper gets its own
/// descriptor (a `dup`), so a caller dropped meanwhile leaves it nothing to outlive.
///
/// With `extend`, the reservation also extends the file's length to its end (`fallocate`
/// with mode 0), as a spool whose content is written through a mapping needs (`Mapped`);
/// the completed spool's `truncate` then cuts the zeros past its end.
pub(crate) async fn reserve(
    file: &BufferedFile,
    reserved: &mut Option<u64>,
    end: u64,
    extend: bool,
) {
    let Some(have) = *reserved else { return };
    if end <= have {
        return;
    }
    let to = end + end.clamp(RESERVE_MIN, RESERVE_MAX);
    let mode = if extend { 0 } else { libc::FALLOC_FL_KEEP_SIZE };
    *reserved = match allocate(file, mode, have, to).await {
        Ok(()) => Some(to),
        // Out of descriptors: this write goes on without a reservation; the next one tries
        // again.
        Err(Refused::NoDescriptor) => Some(have),
        Err(Refused::Io(_)) => None,
    };
}

/// Allocates the blocks of `[from, to)` and extends the file's length to at least `to`
/// (`fallocate` with mode 0), on the core's blocking-pool thread for the reason
/// [`reserve`] gives. Bytes in the new range read as zeros.
pub(crate) async fn extend(file: &BufferedFile, from: u64, to: u64) -> std::io::Result<()> {
    allocate(file, 0, from, to)
        .await
        .map_err(|refused| match refused {
            Refused::NoDescriptor => std::io::Error::other("no descriptor left for fallocate"),
            Refused::Io(e) => e,
        })
}

/// Why [`allocate`] did nothing: no descriptor for its helper, or `fallocate` failed.
enum Refused {
    NoDescriptor,
    Io(std::io::Error),
}

/// `fallocate(mode)` of `[from, to)` on the core's blocking-pool thread, through a `dup` of
/// the file's descriptor (a caller dropped meanwhile leaves the helper nothing to outlive).
/// An empty range does nothing.
async fn allocate(
    file: &BufferedFile,
    mode: libc::c_int,
    from: u64,
    to: u64,
) -> Result<(), Refused> {
    use std::os::fd::{AsRawFd, BorrowedFd};
    let invalid = || Refused::Io(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    let at = libc::off_t::try_from(from).map_err(|_| invalid())?;
    let len = libc::off_t::try_from(to.saturating_sub(from)).map_err(|_| invalid())?;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: `file` is open while borrowed here, and the borrow ends with this statement.
    let fd = unsafe { BorrowedFd::borrow_raw(file.as_raw_fd()) }
        .try_clone_to_owned()
        .map_err(|_| Refused::NoDescriptor)?;
    glommio::executor()
        .spawn_blocking(move || {
            // SAFETY: `fd` is owned by this closure; fallocate reads no memory.
            match unsafe { libc::fallocate(fd.as_raw_fd(), mode, at, len) } {
                0 => Ok(()),
                _ => Err(Refused::Io(std::io::Error::last_os_error())),
            }
        })
        .await
}

/// A shared, writable mapping of a file's first `len` bytes: writes into it are page-cache
/// writes without a system call (and survive `kill -9` as a `pwrite`'s do).
///
/// The caller keeps the mapped range inside the file's length and its blocks allocated
/// ([`extend`]): a page past the end of the file faults with `SIGBUS`, and so would a page
/// whose delayed allocation found the disk full. It unmaps before cutting the file.
///
/// The process holds at most [`mapping_limit`] of them at once: a kernel's mappings per
/// process are limited (`vm.max_map_count`), and the allocator and the runtime need theirs.
/// Past the limit `new` fails, and the spool writes with `pwrite` instead.
///
/// Lives on: the thread of the spool that owns it (`!Send`: a raw pointer).
pub(crate) struct Mapped {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    _live: Live,
}

impl Mapped {
    /// Maps `[0, len)` of `file`, which holds at least `len` bytes.
    pub(crate) fn new(file: &BufferedFile, len: u64) -> std::io::Result<Mapped> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let live = Live::take(&LIVE_MAPPINGS, mapping_limit())?;
        // SAFETY: a fresh mapping chosen by the kernel; nothing else is at that address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Mapped {
            ptr,
            len,
            _live: live,
        })
    }

    /// Length of the mapped range.
    pub(crate) fn len(&self) -> u64 {
        self.len as u64
    }

    /// Copies `bytes` to file position `pos`; false (writing nothing) where they do not fit
    /// in the mapped range.
    pub(crate) fn write(&self, pos: u64, bytes: &[u8]) -> bool {
        let Some(at) = usize::try_from(pos).ok().filter(|at| {
            at.checked_add(bytes.len())
                .is_some_and(|end| end <= self.len)
        }) else {
            return false;
        };
        // SAFETY: `[at, at + bytes.len())` lies inside the mapping (checked above), which
        // stays mapped while `self` lives; `bytes` is a live slice of other memory.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(at), bytes.len())
        };
        true
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `new` mapped; no reference into it outlives
        // `self` (writes copy in and return).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A spool file's mapping, mapped again larger as the file grows, or off for good once
/// mapping failed: the file's writes then go through `pwrite`. The commit log and the
/// content file each have one.
#[derive(Default)]
pub(crate) struct Window {
    map: Option<Mapped>,
    off: bool,
}

impl Window {
    /// Whether the mapping reaches `end`.
    pub(crate) fn covers(&self, end: u64) -> bool {
        self.map.as_ref().is_some_and(|m| m.len() >= end)
    }

    /// Length of the mapped range (0 when unmapped).
    pub(crate) fn len(&self) -> u64 {
        self.map.as_ref().map_or(0, Mapped::len)
    }

    /// Mapping failed, or was turned off: writes go through `pwrite`.
    pub(crate) fn is_off(&self) -> bool {
        self.off
    }

    /// Maps `[0, len)` of `file` afresh, where `grown` is the file's new length (its blocks
    /// allocated, see [`Mapped`]) or why it could not grow; false, and off for good, where
    /// either failed. The old mapping goes first (it counts against [`mapping_limit`]).
    pub(crate) fn remap(&mut self, file: &BufferedFile, grown: std::io::Result<u64>) -> bool {
        self.map = None;
        match grown.and_then(|len| Mapped::new(file, len)) {
            Ok(map) => {
                self.map = Some(map);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "spool file not mapped; its writes use pwrite");
                self.off = true;
                false
            }
        }
    }

    /// Unmaps, as before the file is cut; the next write maps again.
    pub(crate) fn unmap(&mut self) {
        self.map = None;
    }

    /// Unmaps for good.
    pub(crate) fn turn_off(&mut self) {
        self.map = None;
        self.off = true;
    }

    /// Copies `bytes` to file position `pos`; false (writing nothing) where they do not
    /// fit in the mapped range or nothing is mapped.
    pub(crate) fn write(&self, pos: u64, bytes: &[u8]) -> bool {
        self.map.as_ref().is_some_and(|m| m.write(pos, bytes))
    }
}

/// Spool mappings live in this process.
static LIVE_MAPPINGS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of a count of mappings (the process's: [`LIVE_MAPPINGS`]), given back when dropped.
struct Live(&'static std::sync::atomic::AtomicUsize);

impl Live {
    /// One more of `count`, unless it holds `limit` already.
    fn take(count: &'static std::sync::atomic::AtomicUsize, limit: usize) -> std::io::Result<Live> {
        use std::sync::atomic::Ordering::Relaxed;
        match count.fetch_update(Relaxed, Relaxed, |n| (n < limit).then_some(n + 1)) {
            Ok(_) => Ok(Live(count)),
            Err(_) => Err(std::io::Error::other("too many spool mappings")),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How many spool mappings the process may hold: a quarter of the kernel's limit of
/// mappings per process (`/proc/sys/vm/max_map_count`, 65,530 by default), the rest left to
/// everything else.
pub(crate) fn mapping_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(65_530)
            / 4
    })
}

/// Writes all of `content` at `pos`, resubmitting after short writes.
///
/// A plain `pwrite(2)` on the core's own thread, not an io_uring request: ext4 cannot take
/// a buffered write without blocking (`RWF_NOWAIT` is refused), so io_uring hands every
/// such write to an io-wq worker thread, which costs two thread switches and a copy of the
/// content per write (measured: 26 ring requests and 5.2 context switches per 100-byte
/// append, against 10.7 and 1.2 with this). A page-cache write of an append's bytes takes
/// microseconds; when the kernel throttles a writer that dirties pages faster than the disk
/// takes them, this core waits with it, as a Kafka broker's request thread does.
pub(crate) async fn write_all(
    file: &BufferedFile,
    content: &[u8],
    pos: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut written = 0usize;
    while let Some(rest) = content.get(written..).filter(|rest| !rest.is_empty()) {
        let at = libc::off_t::try_from(pos + written as u64)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `fd` stays open while `file` is borrowed; `rest` is a live slice and the
        // kernel reads at most `rest.len()` bytes from it.
        let n = unsafe { libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), at) };
        match n {
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            n if n < 0 => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
            n => written += n as usize,
        }
    }
    Ok(())
}

/// Reads up to `len` bytes at `pos`, stopping early only at end of file.
pub(crate) async fn read_up_to(
    file: &BufferedFile,
    pos: u64,
    len: usize,
) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let chunk = file
            .read_at(pos + out.len() as u64, len - out.len())
            .await?;
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Runs `test` on a glommio executor with a new, empty file and its path.
    fn on_new_file<F, Fut>(test: F)
    where
        F: FnOnce(BufferedFile, PathBuf) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("content");
        crate::testing::run(|| async move {
            let file = open_rw(&path, true).await.unwrap();
            test(file, path).await;
        });
    }

    #[test]
    fn mappings_past_the_limit_are_refused_until_one_is_dropped() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let first = Live::take(&COUNT, 2).unwrap();
        let second = Live::take(&COUNT, 2).unwrap();
        assert!(Live::take(&COUNT, 2).is_err());
        assert_eq!(COUNT.load(Relaxed), 2);
        drop(first);
        let third = Live::take(&COUNT, 2).unwrap();
        drop((second, third));
        assert_eq!(COUNT.load(Relaxed), 0);
        assert!(mapping_limit() >= 1000, "a quarter of vm.max_map_count");
    }

    /// A reservation extends ahead of the write that needs it, and one the file system
    /// refuses (here a range past the largest file offset) leaves the file without
    /// reservations: `None`, and later writes go on without them.
    #[test]
    fn a_refused_reservation_leaves_the_file_without_reservations() {
        on_new_file(|file, path| async move {
            let mut reserved = Some(0);
            reserve(&file, &mut reserved, 10, false).await;
            assert_eq!(reserved, Some(10 + RESERVE_MIN));
            reserve(&file, &mut reserved, 100, false).await;
            assert_eq!(
                reserved,
                Some(10 + RESERVE_MIN),
                "already covered: nothing to do"
            );
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "KEEP_SIZE");
            reserve(&file, &mut reserved, 1 << 20, true).await;
            assert_eq!(reserved, Some(2 << 20));
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 << 20, "extended");
            reserve(&file, &mut reserved, i64::MAX as u64 + 1, false).await;
            assert_eq!(reserved, None);
            reserve(&file, &mut reserved, 4 << 20, false).await;
            assert_eq!(reserved, None, "no more reservations once refused");
        });
    }

    /// A window copies writes that fit its range into the file, refuses (writing nothing)
    /// those that do not, maps again larger as the file grows, and turns off for good when
    /// the file could not grow.
    #[test]
    fn a_window_writes_what_fits_and_turns_off_where_the_file_cannot_grow() {
        on_new_file(|file, path| async move {
            let mut window = Window::default();
            assert!(
                !window.covers(1) && !window.write(0, b"x"),
                "nothing mapped yet"
            );
            extend(&file, 0, 4096).await.unwrap();
            assert!(window.remap(&file, Ok(4096)));
            assert!(window.covers(4096) && !window.covers(4097));
            assert!(window.write(0, b"head"));
            assert!(
                window.write(4093, b"end"),
                "a write ending at the range's end fits"
            );
            assert!(!window.write(4094, b"end"), "past the range: refused");
            assert!(
                !window.write(u64::MAX - 1, b"end"),
                "an overflowing end: refused"
            );
            // Grown, mapped again: what the first mapping wrote is in the file.
            extend(&file, 4096, 8192).await.unwrap();
            assert!(window.remap(&file, Ok(8192)));
            assert!(window.write(8000, b"later") && window.len() == 8192);
            window.unmap();
            assert!(
                !window.is_off() && !window.write(0, b"x"),
                "unmapped, not off"
            );
            let content = std::fs::read(&path).unwrap();
            assert_eq!(content.len(), 8192);
            assert_eq!(
                (&content[..4], &content[4093..4096]),
                (&b"head"[..], &b"end"[..])
            );
            assert_eq!(&content[8000..8005], b"later");
            // The file could not grow (a full disk, a file system without `fallocate`).
            let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
            assert!(!window.remap(&file, Err(full)));
            assert!(window.is_off() && window.len() == 0 && !window.write(0, b"x"));
            // Nothing to map (a zero length): refused by `Mapped::new`, and off.
            let mut zero = Window::default();
            assert!(!zero.remap(&file, Ok(0)) && zero.is_off());
        });
    }
}
