//! The rows the performance bars are checked against, each Courant against Gazette v0.103.0 in one run: Gazette's
//! Go client (`bench/go/appendsvc`) with 8 journals × 8 writers (closed loop, then open
//! loop at half of Gazette's rate), one Go writer appending one record at a time,
//! replication 3 with 1 and 8 appends in flight on one journal, loadgen's open loop at half
//! of Gazette's max (the sweep's point, surfaced), and Courant `--tpc.durable` against
//! Courant without it. [`crate::bars`] checks the bars against them.
//!
//! Lives on: the harness's main thread.

use crate::brokers::{self, BrokerOptions, Kind};
use crate::report::{Row, Scenario};
use crate::runs::{Client, LoadSpec, Measurement};
use crate::{Ctx, R3_ZONES, failed};

pub const GO_8X64: &str = "go-appendservice-8x64";
pub const GO_OPEN50: &str = "go-appendservice-open50";
pub const GO_SINGLE: &str = "go-single-writer";
pub const R3_1: &str = "r3-100b-1";
pub const R3_8: &str = "r3-100b-8";
pub const LOADGEN_OPEN50: &str = "loadgen-open50";
pub const DURABLE: &str = "durable-64";

/// The label of the sweep's point at half of Gazette's max-100b rate.
pub const GAZETTE_HALF: &str = "50% of Gazette's max";

/// Journals and writers per journal of the AppendService rows.
const JOURNALS: usize = 8;
const WRITERS: usize = 8;

/// The Go AppendService load of `go-appendservice-8x64` (and `durable-64`): closed loop,
/// one 100-byte record per StartAppend/Release, 64 records outstanding.
fn go_8x64_spec(ctx: &Ctx) -> LoadSpec {
    LoadSpec {
        client: Client::GoRecord {
            writers_per_journal: WRITERS,
        },
        ..ctx.spec(JOURNALS, 100, 1, WRITERS)
    }
}

fn go_params(spec: &LoadSpec, load: &str) -> String {
    format!(
        "bench/go/appendsvc `-mode record`: go.gazette.dev/core v0.103.0 \
         `client.NewAppendService` on one `RoutedJournalClient`, {} journals × {} writer \
         goroutines, one 100-byte record per StartAppend/Release; {load} Records count when \
         their AsyncAppend is done inside the window; appends/s counts distinct AsyncAppends \
         (one Append RPC each) done in it. Latency per record from the Go program's \
         log-linear histogram (< 1% bucket error). {} s warm-up, {} s window. Journals \
         created first by `loadgen --create --create-only` (Apply, then List until each has a \
         primary; replication 1, codec NONE, no stores): the Go client makes the first call \
         to each journal. Client CPU is not reported.",
        spec.journals,
        match spec.client {
            Client::GoRecord {
                writers_per_journal,
            } => writers_per_journal,
            _ => 1,
        },
        spec.warmup_s,
        spec.duration_s
    )
}

fn one_row(name: &'static str, title: &str, params: String, row: Row) -> Scenario {
    Scenario {
        name,
        title: title.into(),
        params,
        rows: vec![row],
        not_run: None,
        plot: false,
        show_latency: true,
    }
}

/// The rows of the performance bars that `wanted` asks for (`loadgen-open50` is made from the sweep, in
/// `main.rs`).
pub fn scenarios(ctx: &Ctx, wanted: &dyn Fn(&str) -> bool) -> Vec<Scenario> {
    let mut out = Vec::new();
    let default = BrokerOptions::default();
    if wanted(GO_8X64) || wanted(GO_OPEN50) {
        let spec = go_8x64_spec(ctx);
        let row = ctx.pair(GO_8X64, &spec, &default);
        let closed = one_row(
            GO_8X64,
            "Go AppendService, 8 journals × 8 writers, closed loop",
            go_params(
                &spec,
                "closed loop: each writer waits for its record's AsyncAppend to be done \
                 before writing the next (64 records outstanding); latency from StartAppend \
                 to Done.",
            ),
            row,
        );
        if wanted(GO_OPEN50) {
            out.push(go_open50(ctx, &closed.rows[0]));
        }
        if wanted(GO_8X64) {
            out.insert(0, closed);
        }
    }
    if wanted(GO_SINGLE) {
        let spec = LoadSpec {
            client: Client::GoSingle,
            ..ctx.spec(1, 100, 1, 1)
        };
        let row = ctx.pair(GO_SINGLE, &spec, &default);
        out.push(one_row(
            GO_SINGLE,
            "Go client, one writer, one record per Append",
            format!(
                "bench/go/appendsvc `-mode single`: go.gazette.dev/core v0.103.0 \
                 `client.Append` (a plain Append RPC, retried on Unavailable) through a \
                 `RoutedJournalClient`, one writer, 1 journal, one 100-byte record per \
                 append, the next append once the previous one is acknowledged; latency per \
                 append. {} s warm-up, {} s window.",
                spec.warmup_s, spec.duration_s
            ),
            row,
        ));
    }
    if wanted(R3_1) || wanted(R3_8) {
        out.extend(r3_in_flight(ctx, wanted(R3_1), wanted(R3_8)));
    }
    if wanted(DURABLE) {
        out.push(durable(ctx));
    }
    out
}

/// Open loop at half of Gazette's closed-loop records/s of `closed` (Courant's when Gazette
/// did not run), same client and journals.
fn go_open50(ctx: &Ctx, closed: &Row) -> Scenario {
    let ok = |m: &Option<Measurement>| {
        m.as_ref()
            .filter(|m| m.failed.is_none() && m.records_per_s > 0.0)
            .map(|m| m.records_per_s)
    };
    let (base, whose) = match (ok(&closed.gazette), ok(&closed.courant)) {
        (Some(g), _) => (g, "Gazette's"),
        (None, Some(c)) => (c, "Courant's (Gazette's was not measured)"),
        (None, None) => {
            let mut s = one_row(GO_OPEN50, "Go AppendService, open loop", String::new(), {
                Row {
                    label: GO_OPEN50.into(),
                    courant: None,
                    gazette: None,
                }
            });
            s.not_run = Some(format!("{GO_8X64} measured no rate to take half of"));
            return s;
        }
    };
    let rate = 0.5 * base;
    let spec = LoadSpec {
        rate: Some(rate),
        ..go_8x64_spec(ctx)
    };
    let row = ctx.pair(GO_OPEN50, &spec, &BrokerOptions::default());
    one_row(
        GO_OPEN50,
        "Go AppendService, 8 journals × 8 writers, open loop at half of Gazette's rate",
        go_params(
            &spec,
            &format!(
                "open loop at {} records/s over all writers, half of {whose} {GO_8X64} rate \
                 in this run: each writer issues its records at fixed intended times and \
                 never waits for one to be done; latency from each record's intended time \
                 (no coordinated omission).",
                crate::report::rate(rate)
            ),
        ),
        row,
    )
}

/// Replication 3 on one journal, one 100-byte record per append, 1 and 8 appends in
/// flight: one cluster of each kind runs both loads in turn.
fn r3_in_flight(ctx: &Ctx, one: bool, eight: bool) -> Vec<Scenario> {
    let spec = |in_flight| LoadSpec {
        replication: 3,
        ..ctx.spec(1, 100, 1, in_flight)
    };
    let mut wanted: Vec<(&'static str, usize)> = Vec::new();
    if one {
        wanted.push((R3_1, 1));
    }
    if eight {
        wanted.push((R3_8, 8));
    }
    let specs: Vec<(String, LoadSpec)> = wanted
        .iter()
        .map(|(name, n)| (name.to_string(), spec(*n)))
        .collect();
    let mut rows: Vec<Row> = wanted
        .iter()
        .map(|(name, _)| Row {
            label: name.to_string(),
            courant: None,
            gazette: None,
        })
        .collect();
    for kind in ctx.kinds() {
        let ms = ctx.with_cluster_runs(kind, &R3_ZONES, "r3-100b-in-flight", &specs);
        for (row, m) in rows.iter_mut().zip(ms) {
            match kind {
                Kind::Courant => row.courant = Some(m),
                Kind::Gazette => row.gazette = Some(m),
            }
        }
    }
    wanted
        .iter()
        .zip(rows)
        .zip(&specs)
        .map(|(((name, n), row), (_, spec))| {
            one_row(
                name,
                &format!("Replication 3, one journal, 100 B appends, {n} in flight"),
                format!(
                    "{} Three brokers of each kind (zone-a: 2, zone-b: 1) on the run's etcd, \
                     set up as in `r3-100b`; one record per Append RPC, so appends/s = \
                     records/s; latency per append (from its send at max rate). {} and {} \
                     ran one after the other on the same cluster of each kind. Broker CPU is \
                     summed over the three brokers.",
                    crate::describe(spec),
                    R3_1,
                    R3_8
                ),
                row,
            )
        })
        .collect()
}

/// Courant with `--tpc.durable` against Courant without it, under the 8×64 AppendService
/// load; skipped (and said so) when the broker does not take the flag.
fn durable(ctx: &Ctx) -> Scenario {
    let spec = go_8x64_spec(ctx);
    let title = "Courant --tpc.durable vs Courant, Go AppendService 8 journals × 8 writers";
    if !brokers::courant_accepts(&ctx.bins, "--tpc.durable") {
        let mut s = one_row(
            DURABLE,
            title,
            String::new(),
            Row {
                label: DURABLE.into(),
                courant: None,
                gazette: None,
            },
        );
        s.not_run = Some(
            "this Courant broker does not accept `--tpc.durable` (not listed in `courant \
             serve --help`); skipped"
                .into(),
        );
        return s;
    }
    let specs = [("run".to_string(), spec.clone())];
    let mut rows = Vec::new();
    for (label, durable) in [("without --tpc.durable", false), ("--tpc.durable", true)] {
        let opts = BrokerOptions {
            durable,
            ..Default::default()
        };
        let tag = if durable {
            "durable-64-on"
        } else {
            "durable-64-off"
        };
        let m = ctx
            .with_broker(Kind::Courant, &opts, tag, &specs)
            .pop()
            .unwrap_or_else(|| failed("not run"));
        rows.push(Row {
            label: label.into(),
            courant: Some(m),
            gazette: None,
        });
    }
    Scenario {
        name: DURABLE,
        title: title.into(),
        params: go_params(
            &spec,
            "closed loop as in `go-appendservice-8x64`, against Courant without and then with \
             `--tpc.durable` (fdatasync before acknowledging); Gazette is not part of this \
             comparison (its column says not run).",
        ),
        rows,
        not_run: None,
        plot: false,
        show_latency: true,
    }
}

/// The sweep's point at half of Gazette's max-100b rate as a scenario of its own.
pub fn loadgen_open50(sweep: &Scenario) -> Scenario {
    let row = sweep
        .rows
        .iter()
        .find(|r| r.label.starts_with(GAZETTE_HALF))
        .cloned();
    let params = format!(
        "The `sweep` point at half of Gazette's `max-100b` rate of this run (the same \
         measurement, not a second run). An append leaves at the intended time of its last \
         record, so a record waits up to the sweep's linger (below) for its batch: this \
         row's p99 is about that linger or more for any broker. {}",
        sweep.params
    );
    let mut s = one_row(
        LOADGEN_OPEN50,
        "courant-loadgen open loop at half of Gazette's max, 100 B records",
        params,
        row.clone().unwrap_or(Row {
            label: LOADGEN_OPEN50.into(),
            courant: None,
            gazette: None,
        }),
    );
    if row.is_none() {
        s.not_run = Some("Gazette's max-100b rate was not measured".into());
    }
    s
}
