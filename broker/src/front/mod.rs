//! The front door: accepting connections, sniffing gRPC from HTTP/1.1, dispatching calls to
//! the owner core of their journal, and the HTTP gateway and operations endpoints.
//!
//! Lives on: every core (each accepts on its own SO_REUSEPORT listener).

pub mod http;
pub mod server;
