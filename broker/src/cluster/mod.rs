//! The cluster: the allocator that assigns journals to brokers (Gazette's allocator) over
//! the keyspace, and its balancing.
//!
//! Lives on: the allocator runs on core 0 as a task, acting through keyspace transactions.

pub mod allocator;
pub mod balance;
