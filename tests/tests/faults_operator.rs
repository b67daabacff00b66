//! Operator surprises, tried as a new user would: the broker says where it serves and that
//! it stopped at the default log level; `courant print-config > courant.ini` reads back; a
//! bad value from a config file names the file and line; invalid flag values and unknown
//! INI keys are errors; a journal wanting more replicas than a single node has gets a
//! stated warning.

use courant_tests::faults::{Proc, run};
use courant_tests::*;
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `courant print-config` in `dir`: (success, stdout + stderr).
async fn print_config(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["print-config"];
    all.extend_from_slice(args);
    let (status, out) = run(&all, Some(dir), &[]).await;
    (status.success(), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_config_reads_back_and_serve_says_where_and_when_it_stops() {
    within(60, async {
        let dir = tempfile::tempdir().unwrap();
        let (ok, printed) = print_config(dir.path(), &[]).await;
        assert!(ok, "print-config failed:\n{printed}");
        std::fs::write(dir.path().join("courant.ini"), &printed).unwrap();
        // The printed file is read back: the same configuration comes out again.
        let (ok, again) = print_config(dir.path(), &[]).await;
        assert!(
            ok,
            "print-config with its own output as courant.ini failed:\n{again}"
        );
        assert_eq!(again, printed);

        // Several values of a repeatable flag read back as several values.
        let (ok, two) = print_config(
            dir.path(),
            &[
                "--broker.allow-origin",
                "http://a",
                "--broker.allow-origin",
                "http://b",
            ],
        )
        .await;
        assert!(ok, "{two}");
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("courant.ini"), &two).unwrap();
        let (ok, back) = print_config(other.path(), &["--broker.allow-origin", "http://c"]).await;
        assert!(ok, "{back}");
        // A flag replaces the file's values (file < env < flags), one origin each.
        assert!(back.contains("allow-origin = http://c\n"), "{back}");
        let (_, back) = print_config(other.path(), &[]).await;
        assert_eq!(back, two);

        // And `serve` runs on it (here on a free loopback port and a private data dir).
        let port = free_port();
        let edited = printed
            .replace("port = 8080", &format!("port = {port}"))
            .replace("bind = 0.0.0.0", "bind = 127.0.0.1")
            .replace("cores = \n", "cores = 1\n");
        std::fs::write(dir.path().join("courant.ini"), edited).unwrap();
        let mut serve = Proc::spawn(&["serve"], Some(dir.path()), &[]);
        assert!(
            serve
                .wait_output("courant serving", Duration::from_secs(20))
                .await,
            "no start-up line at the default log level:\n{}",
            serve.output()
        );
        let out = serve.output();
        assert!(
            out.contains(&format!("0.0.1:{port}")),
            "where it serves:\n{out}"
        );
        serve.terminate();
        let status = serve.wait_exit(Duration::from_secs(20)).await;
        assert!(matches!(status, Some(s) if s.success()), "{status:?}");
        let out = serve.output();
        assert!(out.contains("shut down"), "that it stopped:\n{out}");
        assert!(
            dir.path()
                .join("courant-data")
                .join("courant.lock")
                .is_file(),
            "data-dir from the file"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_file_value_names_the_file_and_line() {
    within(60, async {
        let dir = tempfile::tempdir().unwrap();
        let ini = dir.path().join("courant.ini");
        std::fs::write(&ini, "[broker]\nzone = z\nport = eighty\n").unwrap();
        let (ok, out) = print_config(dir.path(), &[]).await;
        assert!(!ok, "a bad value is an error:\n{out}");
        let full = std::fs::canonicalize(&ini).unwrap();
        assert!(
            out.contains(&full.display().to_string()),
            "file named:\n{out}"
        );
        assert!(out.contains("line 3"), "line named:\n{out}");
        // A flag overriding the bad value makes it harmless.
        let (ok, out) = print_config(dir.path(), &["--broker.port", "9000"]).await;
        assert!(ok, "{out}");

        // Unknown keys are errors in courant.ini...
        std::fs::write(&ini, "[broker]\nzone = z\n[etcd]\nleaze = 5s\n").unwrap();
        let (ok, out) = print_config(dir.path(), &[]).await;
        assert!(!ok, "an unknown key is an error:\n{out}");
        assert!(out.contains("leaze") && out.contains("line 4"), "{out}");
        assert!(out.contains(&full.display().to_string()), "{out}");

        // ...and a stated warning in gazette.ini, which may hold Gazette-only options.
        std::fs::remove_file(&ini).unwrap();
        std::fs::write(
            dir.path().join("gazette.ini"),
            "[broker]\nnot-a-courant-option = 1\nwatch-delay = 45ms\nzone = g\n",
        )
        .unwrap();
        let (ok, out) = print_config(dir.path(), &[]).await;
        assert!(ok, "{out}");
        assert!(
            out.contains("warning") && out.contains("not-a-courant-option"),
            "{out}"
        );
        assert!(out.contains("zone = g"), "{out}");
        // Gazette's --broker.watch-delay is Courant's too: read, not warned about.
        assert!(out.contains("watch-delay = 45ms"), "{out}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_flag_values_are_errors() {
    within(60, async {
        let dir = tempfile::tempdir().unwrap();
        for (args, needle) in [
            (&["--log.level", "loud"][..], "loud"),
            (&["--etcd.lease", "0s"][..], "1s"),
            (&["--etcd.lease", "500ms"][..], "1s"),
        ] {
            let (ok, out) = print_config(dir.path(), args).await;
            assert!(!ok, "{args:?} accepted:\n{out}");
            assert!(out.contains(needle), "{args:?}:\n{out}");
        }
        for args in [&["--log.level", "DEBUG"][..], &["--etcd.lease", "1s"][..]] {
            let (ok, out) = print_config(dir.path(), args).await;
            assert!(ok, "{args:?} refused:\n{out}");
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_beyond_a_single_node_is_warned_about() {
    within(60, async {
        let mut broker = Broker::start(&["--tpc.cores", "1"]).await;
        let ch = broker.connect().await;
        let mut s = spec("lonely/three", &[]);
        s.replication = 3;
        apply_specs(&ch, &[s, spec("lonely/one", &[])]).await;
        append_ok(&ch, "lonely/three", b"one copy\n").await;
        let warned = |log: &str| {
            log.lines()
                .filter(|l| l.contains("wants 3 replicas") && l.contains("lonely/three"))
                .count()
        };
        assert_eq!(
            warned(&broker.stderr()),
            1,
            "at Apply:\n{}",
            broker.stderr()
        );
        assert!(
            !broker.stderr().contains("lonely/one"),
            "{}",
            broker.stderr()
        );
        broker.restart().await;
        assert_eq!(
            warned(&broker.stderr()),
            1,
            "at start:\n{}",
            broker.stderr()
        );
    })
    .await
}
