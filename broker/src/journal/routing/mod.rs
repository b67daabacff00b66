//! Routing: resolving a journal to its Route and this broker's part in it, proxying calls
//! to the broker that serves them, and the connections to peers that both use.
//!
//! Lives on: every core (each keeps its own peer connections; resolution reads the core's
//! keyspace snapshot).

pub mod proxy;
pub mod resolver;
