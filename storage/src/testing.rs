//! Test helpers: a glommio executor per test, and fixtures.

use std::future::Future;

use protocol::{Label, LabelSet};

/// Runs `f` on a fresh glommio `LocalExecutor`. io_memory is kept small so
/// that tests running in parallel fit in RLIMIT_MEMLOCK (8 MiB here) when
/// registered buffers are charged to it.
pub(crate) fn run<F: Future<Output = ()>>(f: impl FnOnce() -> F) {
    glommio::LocalExecutorBuilder::default()
        .io_memory(512 << 10)
        .make()
        .expect("glommio executor")
        .run(f());
}

/// A temporary directory on tmpfs (`/dev/shm`) where the machine has one, else in the
/// system's temp dir. Tests that time syncs use it: on ext4 an `fdatasync` waits for the
/// journal's commit, which under a loaded CI (gigabytes of build output being written back)
/// can take seconds, failing tests that check the order of syncs, not the disk. (The hang
/// these tests also showed in CI was not the disk: see `spool::durable`'s
/// `until_in_flight`.)
pub(crate) fn sync_test_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temp dir")
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    LabelSet {
        labels: pairs
            .iter()
            .map(|(name, value)| Label {
                name: (*name).into(),
                value: (*value).into(),
                prefix: false,
            })
            .collect(),
    }
}

/// The wire sum of `content`: the all-zero sum for no content (as fragments carry it).
pub(crate) fn sum_of_bytes(content: &[u8]) -> protocol::Sha1Sum {
    use sha1::Digest;
    if content.is_empty() {
        return protocol::sum::zero_sum();
    }
    protocol::sum::sum_from_bytes(&sha1::Sha1::digest(content).into())
}
