//! Journals on a core: the `Core` that owns them, the calls that reach them (`call`), and
//! their RPCs: Append (the append FSM), Read, Replicate (replica side), the replication
//! `Pipeline` (primary side), List/Apply, pulses, flow control and routing.
//!
//! Lives on: the journal's owner core. Everything here is `!Send` per-core state; what
//! crosses cores is an owned `CoreMsg` on a bounded channel (`core`, `call`).

pub mod append;
pub mod authorize;
pub mod call;
pub mod core;
pub mod flow;
pub mod list;
pub mod owners;
pub mod pipeline;
pub mod pulse;
pub mod read;
pub mod replica;
pub mod replicate;
pub mod routing;
pub mod store_health;
