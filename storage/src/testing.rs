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
