//! Calls forwarded between cores end with the owner's real outcome, even when the owner
//! finishes while its response channel is still full of frames (a slow reader).

use bytes::Bytes;
use courant_tests::protocol::{AppendRequest, ReadRequest, ReadResponse, Status};
use courant_tests::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_cross_core_reads_end_with_the_owners_status() {
    within(120, async {
        let b = Broker::start(&["--tpc.cores", "2", "--store.default", ""]).await;
        let ch = b.connect().await;
        let names: Vec<String> = (0..6).map(|i| format!("fwd/journal-{i}")).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        create_journals(&ch, &refs).await;
        let chunk = Bytes::from(vec![b'x'; 64 << 10]);
        for name in &names {
            let first = AppendRequest {
                journal: name.clone(),
                ..Default::default()
            };
            let resp = append_full(&ch, first, &vec![chunk.clone(); 16], true)
                .await
                .result
                .expect("Append");
            assert_status(resp.status, Status::Ok, "append 1 MiB");
        }

        // Several connections, so that some land on each core; every journal is read on
        // every connection, slowly, so that forwarded responses queue up on the owner. The
        // kernel picks each connection's core: six may all land on the owners' core (about
        // one time in 64), so more are opened until a read has crossed.
        let mut crossed = 0;
        for conns in 1..=24 {
            if conns > 6 && crossed > 0 {
                break;
            }
            let conn = b.connect().await;
            for name in &names {
                let mut call = read_stream(
                    &conn,
                    &ReadRequest {
                        journal: name.clone(),
                        ..Default::default()
                    },
                )
                .await
                .expect("Read");
                let mut bytes = 0usize;
                let mut last = None;
                let mut first = true;
                loop {
                    match call.next::<ReadResponse>().await {
                        Ok(Some(msg)) => {
                            if first {
                                // Let the owner run ahead and finish while frames are queued.
                                tokio::time::sleep(Duration::from_millis(150)).await;
                                first = false;
                            }
                            bytes += msg.content.len();
                            last = Some(msg.status);
                        }
                        Ok(None) => break,
                        Err(e) => panic!("Read {name}: the call must end cleanly, got {e}"),
                    }
                }
                assert_eq!(bytes, 1 << 20, "{name}: every byte read");
                assert_eq!(
                    last,
                    Some(Status::OffsetNotYetAvailable as i32),
                    "{name}: a non-blocking read ends at the write head"
                );
                let h = call.response_headers();
                if header_value(h, "x-courant-core") != header_value(h, "x-courant-owner-core") {
                    crossed += 1;
                }
            }
        }
        assert!(
            crossed > 0,
            "no read crossed cores: the test proved nothing"
        );
    })
    .await
}
