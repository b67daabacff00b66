//! The front door: accepting connections, sniffing gRPC from HTTP/1.1, dispatching calls by
//! method to their handlers (on the owner core of their journal), checking their
//! authorization, and the HTTP gateway and operations endpoints.
//!
//! Lives on: every core (each accepts on its own SO_REUSEPORT listener).

pub mod authorize;
pub mod dispatch;
pub mod http;
pub mod server;
