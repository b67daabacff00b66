//! `JournalSpec.flags`: Gazette's journal I/O modes (`protocol.JournalSpec_Flag`).
//!
//! Exactly one mode may be set; `0` (unset) means read-write, as in Gazette.

/// No flag set: read-write (Gazette's `NOT_SPECIFIED`).
pub const NOT_SPECIFIED: u32 = 0x00;
/// The journal may be read, not appended to (`O_RDONLY`).
pub const O_RDONLY: u32 = 0x01;
/// The journal may be appended to, not read (`O_WRONLY`).
pub const O_WRONLY: u32 = 0x02;
/// The journal may be read and appended to (`O_RDWR`).
pub const O_RDWR: u32 = 0x04;

/// Whether `flags` is one of the valid modes.
pub fn is_valid(flags: u32) -> bool {
    matches!(flags, NOT_SPECIFIED | O_RDONLY | O_WRONLY | O_RDWR)
}

/// Whether a journal with `flags` may be read.
pub fn may_read(flags: u32) -> bool {
    matches!(flags, NOT_SPECIFIED | O_RDONLY | O_RDWR)
}

/// Whether a journal with `flags` may be appended to.
pub fn may_write(flags: u32) -> bool {
    matches!(flags, NOT_SPECIFIED | O_WRONLY | O_RDWR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert!(may_read(0) && may_write(0));
        assert!(may_read(O_RDONLY) && !may_write(O_RDONLY));
        assert!(!may_read(O_WRONLY) && may_write(O_WRONLY));
        assert!(may_read(O_RDWR) && may_write(O_RDWR));
        assert!(!is_valid(O_RDONLY | O_WRONLY) && !is_valid(8));
        assert!(!may_read(3) && !may_write(3));
    }
}
