//! The Replicate RPC over the wire, replica side (spec §10 scenarios 26, 27 and 28),
//! against a single-node broker: its journals are routed `[self]` with primary 0, so a
//! Replicate stream whose header carries that Route is one this broker must follow, as a
//! replica follows its primary.

use bytes::Bytes;
use courant_tests::*;
use protocol::grpc::{Channel, ClientCall, encode_frame};
use protocol::{
    AppendRequest, CompressionCodec, Fragment, Header, LabelSet, ReplicateRequest,
    ReplicateResponse, Route, Status,
};

const REPLICATE: &str = "/protocol.Journal/Replicate";

/// A header as the journal's primary would send it: the broker's own resolution of
/// `journal` (from an empty append), which names this broker and its Route.
async fn primary_header(ch: &Channel, journal: &str) -> Header {
    let resp = append_full(
        ch,
        AppendRequest {
            journal: journal.into(),
            ..Default::default()
        },
        &[],
        true,
    )
    .await
    .result
    .expect("an empty append");
    assert_status(resp.status, Status::Ok, "empty append");
    resp.header.expect("a header")
}

fn fragment(journal: &str, begin: i64, end: i64, content: &[u8]) -> Fragment {
    Fragment {
        journal: journal.into(),
        begin,
        end,
        sum: Some(if content.is_empty() {
            Default::default()
        } else {
            sha1_sum(content)
        }),
        compression_codec: CompressionCodec::None as i32,
        ..Default::default()
    }
}

async fn open(ch: &Channel) -> ClientCall {
    ch.call(REPLICATE).await.expect("a Replicate call")
}

async fn send(call: &mut ClientCall, req: &ReplicateRequest) {
    call.sender
        .send_frame(encode_frame(req), false)
        .await
        .expect("sending a ReplicateRequest");
}

async fn recv(call: &mut ClientCall) -> ReplicateResponse {
    within(10, call.next::<ReplicateResponse>())
        .await
        .expect("a ReplicateResponse")
        .expect("a ReplicateResponse, not the end of the stream")
}

fn sync(header: &Header, proposal: Fragment, registers: LabelSet, ack: bool) -> ReplicateRequest {
    ReplicateRequest {
        header: Some(header.clone()),
        deprecated_journal: proposal.journal.clone(),
        proposal: Some(proposal),
        registers: Some(registers),
        acknowledge: ack,
        ..Default::default()
    }
}

fn content(data: &'static [u8], delta: i64) -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::from_static(data),
        content_delta: delta,
        ..Default::default()
    }
}

/// Scenario 26: sync, stream content, commit; the bytes are readable after the commit only.
#[tokio::test]
async fn replicate_stream_and_commit() {
    let broker = Broker::start(&[]).await;
    let ch = broker.connect().await;
    let j = "replicate/commit";
    create_journals(&ch, &[j]).await;
    let header = primary_header(&ch, j).await;

    let mut call = open(&ch).await;
    send(
        &mut call,
        &sync(&header, fragment(j, 0, 0, b""), LabelSet::default(), true),
    )
    .await;
    let first = recv(&mut call).await;
    assert_status(first.status, Status::Ok, "sync");
    let h = first
        .header
        .expect("the first response carries the replica's header");
    assert_eq!(h.route, header.route);

    send(&mut call, &content(b"foobar", 0)).await;
    send(&mut call, &content(b"bazbing", 6)).await;
    let regs = label_set(&[("reg", "value")]);
    let commit = ReplicateRequest {
        proposal: Some(fragment(j, 0, 13, b"foobarbazbing")),
        registers: Some(regs.clone()),
        acknowledge: true,
        ..Default::default()
    };
    send(&mut call, &commit).await;
    let ack = recv(&mut call).await;
    assert_status(ack.status, Status::Ok, "commit");
    assert!(
        ack.header.is_none(),
        "later acknowledgements carry no header"
    );
    let (data, _) = read_all(&ch, j, 0).await;
    assert_eq!(data, b"foobarbazbing");

    // Content without a commit, then the primary closes: rolled back.
    send(&mut call, &content(b"never", 0)).await;
    call.sender.close().expect("half-close");
    assert!(
        within(10, call.next::<ReplicateResponse>())
            .await
            .expect("a clean end of the stream")
            .is_none()
    );
    let resp = append_ok(&ch, j, b"!").await;
    let commit = resp.commit.expect("a commit");
    assert_eq!(
        (commit.begin, commit.end),
        (13, 14),
        "rolled-back bytes are gone"
    );
    assert_eq!(
        resp.registers,
        Some(regs),
        "the replicated registers were adopted"
    );
}

/// Scenario 27: status and error cases of the first and later proposals.
#[tokio::test]
async fn replicate_request_errors() {
    let broker = Broker::start(&[]).await;
    let ch = broker.connect().await;
    let j = "replicate/errors";
    create_journals(&ch, &[j]).await;
    let header = primary_header(&ch, j).await;

    // An unknown journal.
    let mut call = open(&ch).await;
    let missing = "replicate/missing";
    send(
        &mut call,
        &sync(
            &header,
            fragment(missing, 0, 0, b""),
            LabelSet::default(),
            true,
        ),
    )
    .await;
    let resp = recv(&mut call).await;
    assert_status(resp.status, Status::JournalNotFound, "unknown journal");
    assert!(resp.header.is_some());
    assert!(
        within(10, call.next::<ReplicateResponse>())
            .await
            .unwrap()
            .is_none()
    );

    // A header whose Route is not ours.
    let mut other = header.clone();
    other.route = Some(Route {
        primary: -1,
        ..Default::default()
    });
    let mut call = open(&ch).await;
    send(
        &mut call,
        &sync(&other, fragment(j, 0, 0, b""), LabelSet::default(), true),
    )
    .await;
    let resp = recv(&mut call).await;
    assert_status(resp.status, Status::WrongRoute, "another route");
    assert_eq!(
        resp.header.unwrap().route,
        header.route,
        "the replica's own header"
    );
    assert!(
        within(10, call.next::<ReplicateResponse>())
            .await
            .unwrap()
            .is_none()
    );

    // A proposal beyond the spool rolls it forward, then mismatches; so does one with
    // other registers; the stream stays open until a proposal without acknowledgement fails.
    let mut call = open(&ch).await;
    send(
        &mut call,
        &sync(
            &header,
            fragment(j, 1234, 5678, b"x"),
            LabelSet::default(),
            true,
        ),
    )
    .await;
    let resp = recv(&mut call).await;
    assert_status(resp.status, Status::ProposalMismatch, "beyond the spool");
    assert!(resp.header.is_some());
    assert_eq!(resp.fragment, Some(fragment(j, 5678, 5678, b"")));
    assert_eq!(resp.registers, Some(LabelSet::default()));

    let wrong = label_set(&[("wrong", "register")]);
    let mut req = ReplicateRequest {
        proposal: Some(fragment(j, 5678, 5678, b"")),
        registers: Some(wrong),
        acknowledge: true,
        ..Default::default()
    };
    send(&mut call, &req).await;
    let resp = recv(&mut call).await;
    assert_status(resp.status, Status::ProposalMismatch, "other registers");
    assert_eq!(resp.fragment, Some(fragment(j, 5678, 5678, b"")));
    assert_eq!(resp.registers, Some(LabelSet::default()));

    req.acknowledge = false;
    send(&mut call, &req).await;
    let err = within(10, call.next::<ReplicateResponse>())
        .await
        .expect_err("a stream error");
    assert!(
        err.message.contains("no ack requested but status != OK"),
        "{err:?}"
    );
}

/// Scenario 28: content whose delta disagrees with the replica's pending bytes.
#[tokio::test]
async fn replicate_content_delta_mismatch() {
    let broker = Broker::start(&[]).await;
    let ch = broker.connect().await;
    let j = "replicate/delta";
    create_journals(&ch, &[j]).await;
    let header = primary_header(&ch, j).await;

    let mut call = open(&ch).await;
    send(
        &mut call,
        &sync(&header, fragment(j, 0, 0, b""), LabelSet::default(), true),
    )
    .await;
    assert_status(recv(&mut call).await.status, Status::Ok, "sync");
    send(&mut call, &content(b"abc", 0)).await;
    send(&mut call, &content(b"d", 2)).await;
    let err = within(10, call.next::<ReplicateResponse>())
        .await
        .expect_err("a stream error");
    assert!(
        err.message.contains("invalid ContentDelta (2; expected 3)"),
        "{err:?}"
    );
    // Nothing of it became visible, and the broker serves on.
    let resp = append_ok(&ch, j, b"ok").await;
    assert_eq!(resp.commit.unwrap().begin, 0);
}
