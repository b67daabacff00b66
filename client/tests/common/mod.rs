//! Helpers of the client's integration tests: clients of a test broker, and reading a
//! journal to its write head.

#![allow(dead_code)]

use courant_client::{Client, ClientOptions, Error, RetryReader};
use courant_tests::Broker;
use std::path::Path;
use std::time::Duration;

/// A routing client of `broker`, reading `file://` fragments under `root` if given.
pub fn client(broker: &Broker, root: Option<&Path>) -> Client {
    Client::with_options(ClientOptions {
        endpoints: vec![broker.endpoint()],
        file_root: root.map(Path::to_path_buf),
        retry_timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .expect("client options")
}

/// A client without a route cache: brokers proxy its calls.
pub fn proxied_client(broker: &Broker) -> Client {
    Client::with_options(ClientOptions {
        endpoints: vec![broker.endpoint()],
        route_cache_size: 0,
        retry_timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .expect("client options")
}

/// Reads `journal` from `offset` to its write head (non-blocking), checking that chunks
/// follow each other without gaps.
pub async fn read_to_head(client: &Client, journal: &str, offset: i64) -> Result<Vec<u8>, Error> {
    Ok(read_counting(client, journal, offset).await?.0)
}

/// [`read_to_head`], also returning how many fragments were fetched from their stores.
pub async fn read_counting(
    client: &Client,
    journal: &str,
    offset: i64,
) -> Result<(Vec<u8>, u64), Error> {
    let mut reader = RetryReader::new(client, journal, offset, false)?;
    let mut out = Vec::new();
    let mut at = offset;
    while let Some((chunk_at, bytes)) = reader.next_chunk().await? {
        assert_eq!(chunk_at, at, "{journal}: chunks are contiguous");
        at += bytes.len() as i64;
        out.extend_from_slice(&bytes);
    }
    assert_eq!(
        reader.offset(),
        at,
        "{journal}: the reader ends where content ends"
    );
    Ok((out, reader.fragments_fetched()))
}
