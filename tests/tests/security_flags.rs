//! Every option of `gazette serve` (v0.103.0) is accepted by `courant serve` with Gazette's
//! name and environment variable, so an existing deployment's flags, env vars and
//! INI file start a Courant broker.
//!
//! The list is `tests/fixtures/gazette-v0.103.0-serve-flags.txt` (how to regenerate it from
//! the real binary is in its header; `.ci/steps/27-tls.sh` also compares against the live
//! `gazette serve --help`). The test checks `courant serve --help` lists each flag with its
//! env var, and that `courant serve` parses each one (a bad value for the last flag keeps
//! the broker from starting, so nothing is served).

use courant_tests::courant_bin;
use std::process::Command;

fn gazette_flags() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/gazette-v0.103.0-serve-flags.txt"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("--"))
        .map(|l| {
            let (flag, env) = l.split_once(' ').unwrap();
            (flag.to_string(), env.trim_start_matches('$').to_string())
        })
        .collect()
}

/// Courant's `serve --help` as (flag, env) pairs.
fn courant_flags() -> Vec<(String, Option<String>)> {
    let out = Command::new(courant_bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--") {
            let name = rest.split([' ', '=']).next().unwrap();
            flags.push((format!("--{name}"), None));
        } else if let Some(at) = t.find("[env: ")
            && let Some(last) = flags.last_mut()
        {
            let env = t[at + 6..].split('=').next().unwrap();
            last.1 = Some(env.to_string());
        }
    }
    flags
}

#[test]
fn every_gazette_serve_flag_is_accepted_with_its_env_var() {
    let gazette = gazette_flags();
    assert!(gazette.len() >= 30, "fixture: {gazette:?}");
    let courant = courant_flags();
    let mut missing = Vec::new();
    for (flag, env) in &gazette {
        match courant.iter().find(|(f, _)| f == flag) {
            None => missing.push(format!("{flag} (absent)")),
            Some((_, e)) if e.as_deref() != Some(env.as_str()) => {
                missing.push(format!("{flag}: env {e:?}, Gazette's is {env}"))
            }
            Some(_) => {}
        }
    }
    assert!(
        missing.is_empty(),
        "Gazette flags courant serve lacks: {missing:#?}"
    );
}

#[test]
fn courant_serve_parses_every_gazette_flag() {
    // Values of Gazette's flags, as an operator's command line would carry them; parsing
    // stops at `--broker.max-replication x` (invalid), so the broker never starts.
    let mut args: Vec<String> = vec!["serve".into()];
    for (flag, _) in gazette_flags() {
        let value = match flag.as_str() {
            "--broker.file-only" | "--broker.auto-suspend" | "--debug.private" => None,
            "--broker.port" | "--debug.port" => Some("8080"),
            "--broker.limit"
            | "--broker.max-grpc-recv-size"
            | "--broker.max-append-rate"
            | "--broker.min-append-rate" => Some("1024"),
            "--broker.max-replication" => continue,
            "--broker.watch-delay" => Some("30ms"),
            "--etcd.lease" => Some("20s"),
            "--log.level" => Some("warn"),
            "--log.format" => Some("text"),
            "--etcd.address" => Some("http://127.0.0.1:1"),
            _ => Some("/nonexistent/x.pem"),
        };
        args.push(flag);
        if let Some(v) = value {
            args.push(v.into());
        }
    }
    args.extend(["--broker.max-replication".into(), "x".into()]);
    let out = Command::new(courant_bin()).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--broker.max-replication"),
        "only the deliberately bad value is refused: {stderr}"
    );
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
}
