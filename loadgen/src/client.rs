//! Courant's client side of `protocol.Journal`, as much as the load generator needs:
//! connecting, Append, Apply (journal creation), List (selector), and probes that a
//! journal is writable and where its write head is.
//!
//! Endpoints, Apply and List go through `courant_client::Client` (its pool and retries).
//! The measured appends and reads, and the probes that share their connections, use
//! `protocol::grpc::Channel` directly over plain HTTP/2 on a TCP connection with
//! `TCP_NODELAY`, one connection per channel as the load generator spreads its load; each
//! connection's h2 driver runs as its own tokio task.
//!
//! Lives on: any tokio worker (`Channel` is `Clone + Send`).

use bytes::Bytes;
use protocol::grpc::{Channel, Code, RpcError};
use protocol::{
    AppendResponse, JournalSpec, Label, LabelSelector, LabelSet, ReadRequest, ReadResponse, Status,
    apply_request, journal_spec,
};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub const APPEND: &str = "/protocol.Journal/Append";
pub const READ: &str = "/protocol.Journal/Read";

/// Changes per Apply: etcd caps a transaction at 128 operations by default.
const APPLY_BATCH: usize = 100;

pub use courant_client::Endpoint;

/// Parses a broker address (`http://host:port[/]` or `host:port`).
pub fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    Endpoint::parse(s).map_err(|e| e.to_string())
}

/// A `courant_client::Client` of the broker addresses, for Apply and List.
pub fn control_client(addresses: &[String]) -> Result<courant_client::Client, String> {
    let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
    courant_client::Client::new(&addresses).map_err(|e| e.to_string())
}

/// Dials `endpoint`, performs the HTTP/2 handshake and spawns the connection driver.
pub async fn connect(endpoint: &Endpoint) -> Result<Channel, String> {
    let tcp = TcpStream::connect(&endpoint.authority)
        .await
        .map_err(|e| format!("connecting to {}: {e}", endpoint.authority))?;
    tcp.set_nodelay(true)
        .map_err(|e| format!("setting TCP_NODELAY: {e}"))?;
    let (channel, conn) = Channel::handshake(tcp, &endpoint.authority)
        .await
        .map_err(|e| format!("HTTP/2 handshake with {}: {e}", endpoint.authority))?;
    let authority = endpoint.authority.clone();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("courant-loadgen: connection to {authority} ended: {e}");
        }
    });
    Ok(channel)
}

/// Runs one Append whose whole request stream (journal message, content messages, final
/// empty message) is already encoded in `frames`, and returns the broker's response.
pub async fn append(channel: &Channel, frames: Bytes) -> Result<AppendResponse, RpcError> {
    let mut call = channel.call(APPEND).await?;
    let sent = call.sender.send_frame(frames, true).await;
    // The broker may answer (and reset the stream) before reading everything we send, e.g.
    // NOT_ALLOWED on the first chunk: its response explains the failure better than ours.
    let response = match call.next::<AppendResponse>().await {
        Ok(Some(resp)) => resp,
        Ok(None) => {
            sent?;
            return Err(RpcError::internal("append: call ended without a response"));
        }
        Err(err) => return Err(sent.err().unwrap_or(err)),
    };
    // Drain to the trailers so that an error status after the message is not missed.
    if call.next::<AppendResponse>().await?.is_some() {
        return Err(RpcError::internal("append: more than one response"));
    }
    Ok(response)
}

/// The name of a response status (or its number, if unknown to us).
pub fn status_name(status: i32) -> String {
    Status::try_from(status)
        .map(|s| s.as_str_name().to_string())
        .unwrap_or_else(|_| format!("STATUS_{status}"))
}

/// What created journals look like.
#[derive(Debug, Clone)]
pub struct JournalTemplate {
    pub replication: i32,
    pub codec: protocol::CompressionCodec,
    pub fragment_length: u64,
    pub stores: Vec<String>,
}

impl JournalTemplate {
    pub fn spec(&self, name: &str) -> JournalSpec {
        JournalSpec {
            name: name.to_string(),
            replication: self.replication,
            labels: Some(LabelSet {
                labels: vec![Label {
                    name: "app.gazette.dev/managed-by".into(),
                    value: "courant-loadgen".into(),
                    prefix: false,
                }],
            }),
            fragment: Some(journal_spec::Fragment {
                length: self.fragment_length as i64,
                compression_codec: self.codec as i32,
                stores: self.stores.clone(),
                refresh_interval: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                retention: None,
                flush_interval: None,
                path_postfix_template: String::new(),
            }),
            flags: 0,
            max_append_rate: 0,
            suspend: None,
        }
    }
}

/// Upserts the journals (unconditionally: `expect_mod_revision = -1`). An
/// `ETCD_TRANSACTION_FAILED` is accepted: the journals exist already.
pub async fn create_journals(
    client: &courant_client::Client,
    names: &[String],
    template: &JournalTemplate,
) -> Result<(), String> {
    for batch in names.chunks(APPLY_BATCH) {
        let changes = batch
            .iter()
            .map(|name| apply_request::Change {
                expect_mod_revision: -1,
                upsert: Some(template.spec(name)),
                delete: String::new(),
            })
            .collect();
        match client.apply(changes).await {
            Ok(_) => {}
            Err(e) if e.status() == Some("ETCD_TRANSACTION_FAILED") => {}
            Err(e) => return Err(format!("Apply of {} journals: {e}", batch.len())),
        }
    }
    Ok(())
}

/// Parses the selector syntax the load generator accepts: comma-separated `name=value`,
/// `name` (any value), `name:prefix=value`, and `name!=value` (exclude).
pub fn parse_selector(s: &str) -> Result<LabelSelector, String> {
    let mut include = Vec::new();
    let mut exclude = Vec::new();
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (target, term) = match term.split_once("!=") {
            Some((n, v)) => (&mut exclude, (n, v)),
            None => (&mut include, term.split_once('=').unwrap_or((term, ""))),
        };
        let (name, value) = (term.0.trim(), term.1.trim());
        let (name, prefix) = match name.strip_suffix(":prefix") {
            Some(n) => (n, true),
            None => (name, false),
        };
        if name.is_empty() {
            return Err(format!("selector term {term:?} has no label name"));
        }
        target.push(Label {
            name: name.to_string(),
            value: value.to_string(),
            prefix,
        });
    }
    let sorted = |mut v: Vec<Label>| {
        v.sort_by(|a, b| (&a.name, &a.value).cmp(&(&b.name, &b.value)));
        v.dedup();
        LabelSet { labels: v }
    };
    Ok(LabelSelector {
        include: Some(sorted(include)),
        exclude: Some(sorted(exclude)),
    })
}

/// Every journal List shows for `selector`.
async fn list(
    client: &courant_client::Client,
    selector: &str,
) -> Result<Vec<protocol::list_response::Journal>, String> {
    client
        .list(parse_selector(selector)?)
        .await
        .map_err(|e| e.to_string())
}

/// Names of the journals matching `selector`, in name order.
pub async fn list_journals(
    client: &courant_client::Client,
    selector: &str,
) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = list(client, selector)
        .await?
        .into_iter()
        .filter_map(|j| j.spec.map(|s| s.name))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Those of `journals` that List does not show with a primary (absent, or not yet
/// assigned), in `journals`' order.
pub async fn without_primary(
    client: &courant_client::Client,
    journals: &[String],
) -> Result<Vec<String>, String> {
    let led: std::collections::HashSet<String> = list(client, "")
        .await?
        .into_iter()
        .filter(|j| j.route.as_ref().is_some_and(|r| r.primary >= 0))
        .filter_map(|j| j.spec.map(|s| s.name))
        .collect();
    Ok(journals
        .iter()
        .filter(|j| !led.contains(*j))
        .cloned()
        .collect())
}

/// The endpoint of `route`'s primary when the Route has more than one member (a cluster).
fn cluster_primary(route: &protocol::Route) -> Option<String> {
    usize::try_from(route.primary)
        .ok()
        .filter(|_| route.members.len() > 1)
        .and_then(|i| route.endpoints.get(i).cloned())
        .filter(|e| !e.is_empty())
}

/// Each of `journals` that List shows with a primary, with that primary's endpoint in a
/// cluster ([`cluster_primary`]). List is no call for the journal itself, so it places
/// nothing on a broker.
pub async fn primary_endpoints(
    client: &courant_client::Client,
    journals: &[String],
) -> Result<std::collections::HashMap<String, Option<String>>, String> {
    let wanted: std::collections::HashSet<&String> = journals.iter().collect();
    Ok(list(client, "")
        .await?
        .into_iter()
        .filter_map(|j| {
            let name = j.spec?.name;
            let route = j.route.filter(|r| r.primary >= 0)?;
            wanted
                .contains(&name)
                .then(|| (name, cluster_primary(&route)))
        })
        .collect())
}

/// Retries a zero-byte Append until the journal accepts appends (it has a primary and a
/// full route) or `deadline` passes. Gazette's brokers run the same empty append as their
/// per-journal "pulse", so it changes nothing in the journal.
/// Waits until an empty append to `journal` succeeds; returns the endpoint of the primary
/// that served it when its Route has more than one member (a cluster), else `None`.
pub async fn wait_writable(
    channel: &Channel,
    journal: &str,
    deadline: Instant,
) -> Result<Option<String>, String> {
    let mut frames = crate::record::journal_frame(journal).to_vec();
    frames.extend_from_slice(&[0, 0, 0, 0, 0]);
    let frames = Bytes::from(frames);
    let mut last;
    loop {
        let attempt = tokio::time::timeout_at(deadline.into(), append(channel, frames.clone()));
        let Ok(result) = attempt.await else {
            return Err(format!(
                "journal {journal}: no answer to an empty append before the ready timeout"
            ));
        };
        match result {
            Ok(resp) if resp.status == Status::Ok as i32 => {
                let route = resp.header.and_then(|h| h.route).unwrap_or_default();
                return Ok(cluster_primary(&route));
            }
            Ok(resp) => {
                let retry = [
                    Status::JournalNotFound,
                    Status::NoJournalPrimaryBroker,
                    Status::NotJournalPrimaryBroker,
                    Status::InsufficientJournalBrokers,
                    Status::NotJournalBroker,
                ]
                .iter()
                .any(|s| *s as i32 == resp.status);
                last = format!("status {}", status_name(resp.status));
                if !retry {
                    return Err(format!("journal {journal} is not writable: {last}"));
                }
            }
            Err(e) if e.code == Code::Unavailable => last = e.to_string(),
            Err(e) => return Err(format!("journal {journal}: empty append failed: {e}")),
        }
        if Instant::now() + Duration::from_millis(100) > deadline {
            return Err(format!(
                "journal {journal} did not become writable in time (last: {last})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The journal's current write head, from a non-blocking Read at offset -1 (answered with
/// `OFFSET_NOT_YET_AVAILABLE` and the head as offset).
pub async fn write_head(channel: &Channel, journal: &str) -> Result<i64, String> {
    let req = ReadRequest {
        journal: journal.to_string(),
        offset: -1,
        block: false,
        metadata_only: true,
        ..Default::default()
    };
    let mut call = channel
        .server_streaming(READ, &req)
        .await
        .map_err(|e| format!("Read of {journal}: {e}"))?;
    let resp = call
        .next::<ReadResponse>()
        .await
        .map_err(|e| format!("Read of {journal}: {e}"))?
        .ok_or_else(|| format!("Read of {journal}: no response"))?;
    // Drain the rest; the answer is in the first message.
    while let Ok(Some(_)) = call.next::<ReadResponse>().await {}
    let ok =
        resp.status == Status::Ok as i32 || resp.status == Status::OffsetNotYetAvailable as i32;
    if !ok {
        return Err(format!(
            "Read of {journal}: status {}",
            status_name(resp.status)
        ));
    }
    // With status OK the metadata describes a fragment; the head is its write_head.
    Ok(if resp.status == Status::Ok as i32 {
        resp.write_head
    } else {
        resp.offset
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:8080").unwrap().authority,
            "127.0.0.1:8080"
        );
        assert_eq!(
            parse_endpoint("broker:9000").unwrap().authority,
            "broker:9000"
        );
        let err = parse_endpoint("https://broker:443").unwrap_err();
        assert!(err.contains("only http://"), "{err}");
    }

    #[test]
    fn selectors_parse_sorted() {
        let s = parse_selector("b=2, a=1,c:prefix=x/,d,e!=no").unwrap();
        let inc = s.include.unwrap().labels;
        let names: Vec<(&str, &str, bool)> = inc
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str(), l.prefix))
            .collect();
        assert_eq!(
            names,
            vec![
                ("a", "1", false),
                ("b", "2", false),
                ("c", "x/", true),
                ("d", "", false)
            ]
        );
        let exc = s.exclude.unwrap().labels;
        assert_eq!((exc[0].name.as_str(), exc[0].value.as_str()), ("e", "no"));
        assert!(parse_selector("=x").is_err());
    }

    #[test]
    fn created_specs_carry_the_required_fragment_fields() {
        let t = JournalTemplate {
            replication: 3,
            codec: protocol::CompressionCodec::None,
            fragment_length: 512 << 20,
            stores: vec![],
        };
        let spec = t.spec("loadgen/0000");
        assert_eq!(spec.replication, 3);
        let f = spec.fragment.unwrap();
        assert_eq!(f.length, 512 << 20);
        assert_eq!(f.compression_codec, protocol::CompressionCodec::None as i32);
        assert_eq!(f.refresh_interval.unwrap().seconds, 60);
        assert_eq!(status_name(9), "ETCD_TRANSACTION_FAILED");
        assert_eq!(status_name(99), "STATUS_99");
    }
}
