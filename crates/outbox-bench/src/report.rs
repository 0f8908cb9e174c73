//! The catch-up's report: medians over the rounds, the ceilings, the CPU
//! per event and what two cores allow.

use std::time::Duration;

use crate::args::Args;
use crate::backlog::rate;
use crate::catch_up::Round;
use crate::cpu::{machine_cores, CpuUse};

/// The median (the upper of the two middle values when the count is even),
/// the lowest and the highest of `figure` over `rounds`.
pub(crate) fn median(rounds: &[Round], figure: &dyn Fn(&Round) -> f64) -> (f64, f64, f64) {
    let mut values: Vec<f64> = rounds.iter().map(figure).collect();
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// Prints the catch-up tables of `rounds` (`wrote`: how long writing the
/// backlog of `n` events took).
pub(crate) fn print_catch_up(args: &Args, n: usize, wrote: Duration, rounds: &[Round]) {
    let payload_mb = (n * args.payload_bytes) as f64 / 1e6;
    let median = |f: &dyn Fn(&Round) -> f64| median(rounds, f);
    let row = |name: &str, (mid, low, high): (f64, f64, f64)| {
        println!(
            "| {name} | {mid:.0} | {:.1} | {low:.0}–{high:.0} |",
            mid * args.payload_bytes as f64 / 1e6
        );
    };
    println!("\n## Catch-up ({n} events, ~{} B payload, {} partitions, 2 cores shared by the database, broker and forwarder; median of {} rounds)\n", args.payload_bytes, args.partitions, rounds.len());
    println!("| measurement | events/s | MB/s (payload) | range over rounds |");
    println!("|---|---:|---:|---:|");
    println!(
        "| writing the backlog (4 connections) | {:.0} | {:.1} | |",
        rate(n, wrote),
        payload_mb / wrote.as_secs_f64(),
    );
    row(
        "ceiling (a): binlog read + decode, no Kafka",
        median(&|r| r.decode),
    );
    row(
        "ceiling (b): raw idempotent produce",
        median(&|r| r.produce),
    );
    row(
        "**forwarder catch-up** (stream start → all acked)",
        median(&|r| r.catch_up.rate),
    );
    row(
        "forwarder, first ack → all acked (without the producer-id wait)",
        median(&|r| r.catch_up.steady),
    );
    print_paired(rounds, &row);
    print_codecs(args, rounds, &row);
    let ratio = |r: &Round| r.catch_up.rate / r.decode.min(r.produce);
    let compared_rss = match rounds.iter().all(|r| r.compared.is_some()) {
        true => format!(
            " (the --compare-with build: {:.0} MiB)",
            median(&|r| r.compared.as_ref().map_or(0.0, |c| c.rss_mib)).2
        ),
        false => String::new(),
    };
    println!(
        "\nforwarder / lower ceiling of the same round: median {:.2} (rounds: {}); \
         forwarder peak RSS during catch-up: {:.0} MiB{compared_rss}",
        median(&ratio).0,
        rounds
            .iter()
            .map(|r| format!("{:.2}", ratio(r)))
            .collect::<Vec<_>>()
            .join(", "),
        median(&|r| r.catch_up.rss_mib).2,
    );
    print_startup(rounds);
    print_catch_up_cpu(rounds);
}

/// A median with the lowest and highest value over the rounds.
type Spread = (f64, f64, f64);

/// The catch-ups measured beside this build's in each round (another
/// build's, this build's with three extra headers): their rows in the
/// table, then each one's ratio to this build's, round by round.
fn print_paired(rounds: &[Round], row: &dyn Fn(&str, Spread)) {
    type Other = fn(&Round) -> Option<f64>;
    let paired: [(&str, &str, Other, bool); 2] = [
        (
            "forwarder catch-up, the --compare-with build",
            "this build / the --compare-with build",
            |r| r.compared.as_ref().map(|c| c.rate),
            true,
        ),
        (
            "forwarder catch-up, three extra headers from columns",
            "with three extra headers / without",
            |r| r.headers.as_ref().map(|c| c.rate),
            false,
        ),
    ];
    let measured = |other: Other| rounds.iter().all(|r| other(r).is_some());
    for (name, _, other, _) in paired {
        if measured(other) {
            row(name, median(rounds, &|r| other(r).unwrap_or(0.0)));
        }
    }
    for (_, label, other, this_over_other) in paired {
        if !measured(other) {
            continue;
        }
        let ratio = |r: &Round| {
            let other = other(r).unwrap_or(f64::NAN);
            if this_over_other {
                r.catch_up.rate / other
            } else {
                other / r.catch_up.rate
            }
        };
        println!(
            "\n{label}, catch-up in the same round: median {:.3} (rounds: {})",
            median(rounds, &ratio).0,
            rounds
                .iter()
                .map(|r| format!("{:.3}", ratio(r)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// Under `--codecs`: each codec's catch-up, and its ratio to the default
/// (lz4) in the same round.
fn print_codecs(args: &Args, rounds: &[Round], row: &dyn Fn(&str, Spread)) {
    for (i, codec) in args.codecs.iter().enumerate() {
        row(
            &format!("forwarder catch-up, compression.type = {codec}"),
            median(rounds, &|r| r.codecs[i].rate),
        );
    }
    for (i, codec) in args.codecs.iter().enumerate() {
        let ratio = |r: &Round| r.codecs[i].rate / r.catch_up.rate;
        println!(
            "\ncompression.type = {codec} / the default (lz4), catch-up in the same round: median {:.3} (rounds: {}); CPU {:.1} against {:.1} µs/event",
            median(rounds, &ratio).0,
            rounds
                .iter()
                .map(|r| format!("{:.3}", ratio(r)))
                .collect::<Vec<_>>()
                .join(", "),
            median(rounds, &|r| r.codecs[i].cpu.us_per_event).0,
            median(rounds, &|r| r.catch_up.cpu.us_per_event).0,
        );
    }
}

/// Process start → binlog stream started, a fresh start (no checkpoint),
/// this build's and the `--compare-with` build's.
fn print_startup(rounds: &[Round]) {
    let spread = |f: &dyn Fn(&Round) -> f64| {
        let (mid, low, high) = median(rounds, f);
        format!("{mid:.0} | {low:.0}–{high:.0}")
    };
    println!(
        "\n| start-up, process start → binlog stream started (fresh start) | ms, median | range |"
    );
    println!("|---|---:|---:|");
    println!("| this build | {} |", spread(&|r| r.catch_up.startup_ms));
    if rounds.iter().all(|r| r.compared.is_some()) {
        println!(
            "| the --compare-with build | {} |",
            spread(&|r| r.compared.as_ref().expect("measured").startup_ms)
        );
    }
}

/// Where the catch-up's CPU went, against what the cores allow for both
/// ceilings' work at once.
fn print_catch_up_cpu(rounds: &[Round]) {
    let median = |f: &dyn Fn(&Round) -> f64| median(rounds, f);
    let cores = machine_cores();
    println!("\n| CPU (medians) | µs/event, measured process | its cores | machine's busy cores (of {cores}) |");
    println!("|---|---:|---:|---:|");
    let cpu_row = |name: &str, cpu: &dyn Fn(&Round) -> CpuUse| {
        println!(
            "| {name} | {:.1} | {:.2} | {:.2} |",
            median(&|r| cpu(r).us_per_event).0,
            median(&|r| cpu(r).process_cores).0,
            median(&|r| cpu(r).machine_cores).0,
        );
    };
    cpu_row("ceiling (a): read + decode", &|r| r.decode_cpu);
    cpu_row("ceiling (b): produce", &|r| r.produce_cpu);
    cpu_row("forwarder catch-up", &|r| r.catch_up.cpu);
    if rounds.iter().all(|r| r.compared.is_some()) {
        cpu_row("forwarder catch-up, the --compare-with build", &|r| {
            r.compared.as_ref().expect("measured").cpu
        });
    }
    if rounds.iter().all(|r| r.headers.is_some()) {
        cpu_row("forwarder catch-up, three extra headers", &|r| {
            r.headers.as_ref().expect("measured").cpu
        });
    }
    // The forwarder does the work of both ceilings at once on the same cores:
    // the machine's CPU per event of (a) (reader, decoder and the server's
    // dump thread) plus that of (b) (producer and broker) bounds it.
    let bound = |r: &Round| {
        cores / (r.decode_cpu.machine_cores / r.decode + r.produce_cpu.machine_cores / r.produce)
    };
    println!(
        "\nwhat {cores} cores allow for both ceilings' work at once (machine CPU per event \
         of (a) + (b)): median {:.0} events/s, {:.2} × the lower ceiling; the forwarder \
         reached {:.2} of that bound (medians over rounds)",
        median(&bound).0,
        median(&|r| bound(r) / r.decode.min(r.produce)).0,
        median(&|r| r.catch_up.rate / bound(r)).0,
    );
}
