//! Courant's broker as a library: the `courant` binary (`main.rs`) is its CLI, and the
//! integration tests and fuzz targets use its modules directly.
//!
//! Lives on: see each module; `ARCHITECTURE.md` maps them and their invariants.

pub mod auth;
pub mod cluster;
pub mod config;
pub mod control;
pub mod core;
pub mod errors;
pub mod front;
pub mod guards;
pub mod idle;
pub mod io;
pub mod journal;
pub mod limits;
pub mod metrics;
pub mod mutation;
pub mod shutdown;
#[cfg(test)]
mod sim;
pub mod start;
pub mod time;
pub mod tls;
