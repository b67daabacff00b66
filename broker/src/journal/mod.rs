//! Journals on a core: the replicas this core owns ([`journals::Journals`]) and their
//! RPCs: Append (the append FSM), Read and ListFragments, Replicate (replica side), the
//! replication `Pipeline` (primary side), List/Apply, pulses, flow control and routing.
//!
//! Lives on: the journal's owner core. Everything here is `!Send` per-core state built on
//! the core's runtime (`crate::core`); what crosses cores is an owned `CoreMsg`.

pub mod append;
pub mod flow;
pub mod journals;
pub mod list;
pub mod pipeline;
pub mod pulse;
pub mod read;
pub mod replica;
pub mod replicate;
pub mod routing;
pub mod store_health;
