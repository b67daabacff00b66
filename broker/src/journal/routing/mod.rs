//! Routing: resolving a journal to its Route and this broker's part in it, and proxying
//! calls to the broker that serves them (over the core's peer connections, `crate::core::peer`).
//!
//! Lives on: every core (resolution reads the core's keyspace snapshot).

pub mod proxy;
pub mod resolver;
