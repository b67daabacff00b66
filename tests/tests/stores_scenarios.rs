//! Spec §10 scenarios about persisted fragments, through the `file://` store with fragment
//! files written as another tool would and mod times set with `touch -d`:
//!
//! * 24: offset jumps over missing byte zero (only once the first fragment is persisted)
//!   and over a gap in the middle (only once the next fragment is older than 6 hours);
//! * 25: `begin_mod_time` skips older persisted fragments, never local ones;
//! * 36 (without forwarding): ListFragments of a missing journal and of an O_WRONLY one;
//! * 38: suspension and resumption of a journal whose history is persisted.

use bytes::Bytes;
use courant_tests::protocol::journal_spec::Suspend as SpecSuspend;
use courant_tests::protocol::journal_spec::suspend::Level;
use courant_tests::protocol::{
    AppendRequest, AppendResponse, FragmentsRequest, FragmentsResponse, JournalSpec, ReadRequest,
    ReadResponse, Status, append_request::Suspend,
};
use courant_tests::*;
use sha1::Digest;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn file_spec(name: &str) -> JournalSpec {
    let mut s = spec(name, &[]);
    let f = s.fragment.as_mut().unwrap();
    f.length = 64 << 10;
    f.stores = vec!["file:///".into()];
    s
}

fn root_arg(root: &Path) -> String {
    format!("--broker.file-root={}", root.display())
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Writes the raw fragment `[begin, end)` of `journal` (filled with `fill`) into the file
/// store at `root`, named by its content as Gazette names it, with mod time `mod_time`
/// (unix seconds) if given.
fn write_fragment(
    root: &Path,
    journal: &str,
    begin: i64,
    end: i64,
    fill: u8,
    mod_time: Option<i64>,
) -> PathBuf {
    let content = vec![fill; (end - begin) as usize];
    let dir = root.join(journal);
    std::fs::create_dir_all(&dir).unwrap();
    let sum = hex::encode(sha1::Sha1::digest(&content));
    let path = dir.join(format!("{begin:016x}-{end:016x}-{sum}.raw"));
    std::fs::write(&path, &content).unwrap();
    if let Some(mt) = mod_time {
        set_mod_time(&path, mt);
    }
    path
}

fn set_mod_time(path: &Path, mod_time: i64) {
    let ok = std::process::Command::new("touch")
        .arg("-d")
        .arg(format!("@{mod_time}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success(), "touch -d @{mod_time} {}", path.display());
}

/// The messages of a non-blocking read until EOF; the read must end without an error.
async fn read_msgs(ch: &protocol::grpc::Channel, req: ReadRequest) -> Vec<ReadResponse> {
    let mut call = read_stream(ch, &req).await.expect("Read call");
    let (msgs, end) = collect::<ReadResponse>(&mut call).await;
    end.unwrap_or_else(|e| panic!("Read {req:?}: {e}"));
    msgs
}

/// The first message of a non-blocking, metadata-only read at `offset`.
async fn metadata_at(
    ch: &protocol::grpc::Channel,
    journal: &str,
    offset: i64,
    begin_mod_time: i64,
) -> ReadResponse {
    let msgs = read_msgs(
        ch,
        ReadRequest {
            journal: journal.into(),
            offset,
            begin_mod_time,
            metadata_only: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    check_read_response(&msgs[0], "metadata");
    msgs[0].clone()
}

fn span(r: &ReadResponse) -> (i64, i64) {
    let f = r.fragment.as_ref().expect("metadata names a fragment");
    (f.begin, f.end)
}

/// Polls metadata at `offset` until `done` holds (the store listing refreshes every
/// second, persistence completes in the background).
async fn await_metadata(
    ch: &protocol::grpc::Channel,
    journal: &str,
    offset: i64,
    done: impl Fn(&ReadResponse) -> bool,
) -> ReadResponse {
    let mut last = None;
    for _ in 0..150 {
        let r = metadata_at(ch, journal, offset, 0).await;
        if done(&r) {
            return r;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("metadata at {offset} of {journal} never changed as expected: last {last:?}");
}

async fn append_with(
    ch: &protocol::grpc::Channel,
    journal: &str,
    offset: i64,
    suspend: Suspend,
    content: &[u8],
) -> AppendResponse {
    let chunks: Vec<Bytes> = if content.is_empty() {
        Vec::new()
    } else {
        vec![Bytes::copy_from_slice(content)]
    };
    let r = append_full(
        ch,
        AppendRequest {
            journal: journal.into(),
            offset,
            suspend: suspend as i32,
            ..Default::default()
        },
        &chunks,
        true,
    )
    .await
    .result
    .unwrap_or_else(|e| panic!("Append {suspend:?} to {journal}: {e}"));
    check_append_response(&r, &format!("Append {suspend:?}"));
    r
}

async fn suspend_of(ch: &protocol::grpc::Channel, journal: &str) -> (i32, i64) {
    let listed = list_journals(ch, selector(&[("name", journal)], &[])).await;
    assert_eq!(listed.len(), 1);
    let s = listed[0].spec.as_ref().unwrap().suspend.unwrap_or_default();
    (s.level, s.offset)
}

async fn list_fragments(ch: &protocol::grpc::Channel, journal: &str) -> FragmentsResponse {
    let mut call = ch.call(LIST_FRAGMENTS).await.expect("ListFragments call");
    call.sender
        .send(&FragmentsRequest {
            journal: journal.into(),
            ..Default::default()
        })
        .await
        .expect("send");
    let _ = call.sender.close();
    finish_unary_response(&mut call)
        .await
        .expect("ListFragments")
}

/// Scenario 24, missing byte zero: a journal whose only fragment is local at [100,200) (it
/// resumed from a suspension at offset 100) answers a read at 0 with
/// OFFSET_NOT_YET_AVAILABLE; once that fragment is persisted (mod_time ≠ 0), the read
/// jumps to 100.
#[tokio::test]
async fn scenario_24_jump_over_missing_byte_zero_once_persisted() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let broker = Broker::start(&[&root_arg(root.path())]).await;
        let ch = broker.connect().await;
        let mut s = file_spec("jump/zero");
        s.suspend = Some(SpecSuspend {
            level: Level::Full as i32,
            offset: 100,
        });
        apply_specs(&ch, &[s]).await;
        let r = append_ok(&ch, "jump/zero", &[b'a'; 100]).await;
        assert_eq!(r.commit.as_ref().unwrap().begin, 100, "resumed at 100");

        let r = metadata_at(&ch, "jump/zero", 0, 0).await;
        assert_status(r.status, Status::OffsetNotYetAvailable, "local only");
        assert_eq!((r.offset, r.write_head), (0, 200));

        // The next append completes [100,200), which is then persisted.
        append_ok(&ch, "jump/zero", b"more").await;
        let r = await_metadata(&ch, "jump/zero", 0, |r| r.status == Status::Ok as i32).await;
        assert_eq!(r.offset, 100, "jumped to the first fragment");
        assert_eq!(span(&r), (100, 200));
        let f = r.fragment.as_ref().unwrap();
        assert!(f.mod_time != 0 && f.backing_store == "file:///", "{f:?}");
        // And the bytes are read from there (without metadata_only).
        let msgs = read_msgs(
            &ch,
            ReadRequest {
                journal: "jump/zero".into(),
                offset: 0,
                end_offset: 200,
                ..Default::default()
            },
        )
        .await;
        assert_eq!(msgs[0].offset, 100);
        let content: Vec<u8> = msgs.iter().flat_map(|m| m.content.to_vec()).collect();
        assert_eq!(content, vec![b'a'; 100]);
    })
    .await;
}

/// Scenario 24, gap in the middle: persisted [0,100) and [200,300); a read at 110 gets
/// OFFSET_NOT_YET_AVAILABLE while [200,300) is recent, and jumps to 200 once its mod time
/// is more than 6 hours old (seen at the next store listing).
#[tokio::test]
async fn scenario_24_jump_over_a_gap_older_than_six_hours() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let now = now_unix();
        write_fragment(root.path(), "jump/gap", 0, 100, b'x', Some(now - 8 * 3600));
        let later = write_fragment(root.path(), "jump/gap", 200, 300, b'y', Some(now - 60));
        let broker = Broker::start(&[&root_arg(root.path())]).await;
        let ch = broker.connect().await;
        apply_specs(&ch, &[file_spec("jump/gap")]).await;

        let r = metadata_at(&ch, "jump/gap", 50, 0).await;
        assert_status(r.status, Status::Ok, "inside [0,100)");
        assert_eq!((r.offset, span(&r)), (50, (0, 100)));
        let r = metadata_at(&ch, "jump/gap", 110, 0).await;
        assert_status(r.status, Status::OffsetNotYetAvailable, "gap, recent");
        assert_eq!((r.offset, r.write_head), (110, 300));
        // Just under 6 hours is still too recent.
        set_mod_time(&later, now - 6 * 3600 + 120);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let r = metadata_at(&ch, "jump/gap", 110, 0).await;
        assert_status(r.status, Status::OffsetNotYetAvailable, "gap, 5h58m");

        set_mod_time(&later, now - 7 * 3600);
        let r = await_metadata(&ch, "jump/gap", 110, |r| r.status == Status::Ok as i32).await;
        assert_eq!((r.offset, span(&r)), (200, (200, 300)));
        assert_eq!(r.fragment.as_ref().unwrap().mod_time, now - 7 * 3600);
    })
    .await;
}

/// Scenario 25: persisted [100,200) mt=T−10, [200,300) T, [300,400) T−1, [400,500) T+100
/// and a local [500,600); reads with begin_mod_time = T.
#[tokio::test]
async fn scenario_25_begin_mod_time_skips_older_persisted_fragments() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let t = now_unix() - 3600;
        let j = "begin/mod/time";
        for (b, e, mt) in [
            (100, 200, t - 10),
            (200, 300, t),
            (300, 400, t - 1),
            (400, 500, t + 100),
        ] {
            write_fragment(root.path(), j, b, e, b'0' + (b / 100) as u8, Some(mt));
        }
        let broker = Broker::start(&[&root_arg(root.path())]).await;
        let ch = broker.connect().await;
        apply_specs(&ch, &[file_spec(j)]).await;
        let r = append_with(&ch, j, 500, Suspend::Resume, &[b'5'; 100]).await;
        assert_status(r.status, Status::Ok, "append at 500");
        assert_eq!(r.commit.as_ref().unwrap().begin, 500);

        for (offset, expect_offset, expect_span) in [
            (50, 200, (200, 300)),
            (150, 200, (200, 300)),
            (200, 200, (200, 300)),
            (350, 400, (400, 500)),
            (400, 400, (400, 500)),
            (500, 500, (500, 600)),
        ] {
            let r = metadata_at(&ch, j, offset, t).await;
            assert_status(r.status, Status::Ok, &format!("offset {offset}"));
            assert_eq!(
                (r.offset, span(&r)),
                (expect_offset, expect_span),
                "read at {offset} with begin_mod_time T"
            );
        }
        // The local fragment has no mod time and is never skipped.
        let r = metadata_at(&ch, j, 500, i64::MAX).await;
        assert_eq!(r.fragment.as_ref().unwrap().mod_time, 0);
        // Without begin_mod_time, 150 is served from [100,200).
        let r = metadata_at(&ch, j, 150, 0).await;
        assert_eq!((r.offset, span(&r)), (150, (100, 200)));
        // Content skipped by begin_mod_time: a full read from 50 yields [200,300), [400,600).
        let msgs = read_msgs(
            &ch,
            ReadRequest {
                journal: j.into(),
                offset: 50,
                begin_mod_time: t,
                ..Default::default()
            },
        )
        .await;
        let content: Vec<u8> = msgs.iter().flat_map(|m| m.content.to_vec()).collect();
        let expect = [vec![b'2'; 100], vec![b'4'; 100], vec![b'5'; 100]].concat();
        assert_eq!(content, expect);
    })
    .await;
}

/// Scenario 36 without its forwarding case: ListFragments of a journal that does not exist
/// → JOURNAL_NOT_FOUND with a header; of an O_WRONLY journal → NOT_ALLOWED.
#[tokio::test]
async fn scenario_36_list_fragments_resolution() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let ch = broker.connect().await;
        let r = list_fragments(&ch, "does/not/exist").await;
        assert_status(r.status, Status::JournalNotFound, "missing journal");
        let h = r.header.as_ref().expect("a header");
        check_header(h, "JOURNAL_NOT_FOUND header");
        assert!(h.process_id.is_some(), "{h:?}");
        assert_eq!(h.route.as_ref().map(|r| r.primary), Some(-1), "{h:?}");
        assert!(r.fragments.is_empty());

        let mut s = spec("write/only", &[]);
        s.flags = 2; // O_WRONLY
        apply_specs(&ch, &[s]).await;
        append_ok(&ch, "write/only", b"data").await;
        let r = list_fragments(&ch, "write/only").await;
        assert_status(r.status, Status::NotAllowed, "O_WRONLY");
        check_header(r.header.as_ref().expect("a header"), "NOT_ALLOWED header");
        assert!(r.fragments.is_empty());

        // An ordinary journal lists its (local) fragment.
        apply_specs(&ch, &[spec("read/write", &[])]).await;
        append_ok(&ch, "read/write", b"data").await;
        let r = list_fragments(&ch, "read/write").await;
        assert_status(r.status, Status::Ok, "read/write");
        assert_eq!(r.fragments.len(), 1);
    })
    .await;
}

/// Scenario 38: suspension of a journal whose store holds [0,1024), then resumption.
#[tokio::test]
async fn scenario_38_suspend_and_resume_with_persisted_history() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let j = "suspend/journal";
        let persisted = write_fragment(root.path(), j, 0, 1024, b'p', None);
        let broker = Broker::start(&[&root_arg(root.path())]).await;
        let ch = broker.connect().await;
        apply_specs(&ch, &[file_spec(j)]).await;
        let (none, partial, full) = (
            Level::None as i32,
            Level::Partial as i32,
            Level::Full as i32,
        );

        let r = append_with(&ch, j, 1024, Suspend::Now, b"").await;
        assert_status(r.status, Status::Suspended, "SUSPEND_NOW");
        assert_eq!(suspend_of(&ch, j).await, (partial, 1024));

        let r = append_with(&ch, j, 1024, Suspend::Keep, b"").await;
        assert_status(r.status, Status::Ok, "SUSPEND_KEEP, no content");
        assert_eq!(suspend_of(&ch, j).await, (partial, 1024));
        let r = append_with(&ch, j, 1024, Suspend::Keep, b"content").await;
        assert_status(r.status, Status::NotAllowed, "SUSPEND_KEEP with content");
        assert_eq!(suspend_of(&ch, j).await, (partial, 1024));

        // Empty the index: the fragment leaves the store, the next listing drops it.
        std::fs::remove_file(&persisted).unwrap();
        for _ in 0..100 {
            if list_fragments(&ch, j).await.fragments.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(list_fragments(&ch, j).await.fragments.is_empty());
        let r = append_with(&ch, j, 0, Suspend::IfFlushed, b"").await;
        assert_status(
            r.status,
            Status::Suspended,
            "SUSPEND_IF_FLUSHED, empty index",
        );
        assert_eq!(suspend_of(&ch, j).await, (full, 1024));

        let r = append_with(&ch, j, 0, Suspend::NoResume, b"").await;
        assert_status(r.status, Status::Suspended, "SUSPEND_NO_RESUME on FULL");
        assert_eq!(suspend_of(&ch, j).await, (full, 1024));
        let r = append_with(&ch, j, 0, Suspend::NoResume, b"content").await;
        assert_status(
            r.status,
            Status::Suspended,
            "SUSPEND_NO_RESUME with content",
        );

        let r = append_with(&ch, j, 0, Suspend::Resume, b"resumed").await;
        assert_status(r.status, Status::Ok, "SUSPEND_RESUME");
        assert_eq!(suspend_of(&ch, j).await, (none, 1024));
        let c = r.commit.as_ref().unwrap();
        assert_eq!((c.begin, c.end), (1024, 1031), "appends land at the offset");
        let r = append_ok(&ch, j, b"!").await;
        assert_eq!(r.commit.as_ref().unwrap().begin, 1031);
        assert_eq!(read_all(&ch, j, 1024).await.0, b"resumed!");
    })
    .await;
}
