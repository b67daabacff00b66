//! Process resource limits at start-up: the soft RLIMIT_NOFILE is raised to the hard
//! limit, as Go's runtime does for Gazette (since Go 1.19), so that a broker holding many
//! client connections, spools and peer connections does not run out of descriptors at the
//! distribution default of 1,024.
//!
//! Lives on: the main thread, once, before any executor starts.

/// Raises the soft open-files limit to the hard limit. Returns the (soft, hard) limits in
/// force afterwards; a failure leaves the limit as it was (and is logged).
pub fn raise_nofile() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(err = %std::io::Error::last_os_error(), "getrlimit(RLIMIT_NOFILE)");
        return (0, 0);
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit; raising the soft limit up to the hard limit
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!(
                from = lim.rlim_cur,
                to = lim.rlim_max,
                "raised RLIMIT_NOFILE"
            );
            lim = raised;
        } else {
            tracing::warn!(err = %std::io::Error::last_os_error(), soft = lim.rlim_cur,
                hard = lim.rlim_max, "raising RLIMIT_NOFILE to its hard limit");
        }
    }
    (lim.rlim_cur, lim.rlim_max)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_reaches_the_hard_limit() {
        let (soft, hard) = super::raise_nofile();
        assert!(hard > 0);
        assert_eq!(soft, hard);
    }
}
