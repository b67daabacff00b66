//! Courant's journal storage: spools written through the page cache, fragments, the fragment
//! index (cover set) and spool recovery after a crash.
//!
//! Everything here lives on a journal's owner core. The stateful types hold
//! `Rc`s and are deliberately `!Send`; a journal's spool and index are never
//! touched from another core. This crate knows nothing of etcd, gRPC or the
//! network: the broker drives it.
//!
//! * [`spool::Spool`]: the fragment being written, persisted under a data
//!   directory so that a `kill -9` loses no committed byte.
//! * [`fragment::FragmentFile`] / [`fragment::LocalFragment`]: the read side of
//!   a local fragment's content.
//! * [`index::Index`]: the cover set of local and persisted fragments that
//!   serves Read queries and wakes blocked reads.
//! * [`naming`]: Gazette's content names and store layout of persisted
//!   fragments; [`codec`]: their compression codecs.
//!
//! See `README.md` beside this crate for the on-disk layout and the recovery
//! rules.

pub use protocol::codec;
mod cover_set;
mod error;
pub mod fragment;
pub mod in_flight;
pub mod index;
pub mod naming;
pub mod record;
pub mod spool;
pub mod summer;
#[cfg(test)]
mod testing;

pub use error::StorageError;
pub use fragment::{FragmentFile, LocalFragment};
pub use index::{Changed, Index, Query};
pub use spool::Spool;
pub use summer::Summer;
