//! `fencecheck --bootstrap HOST:PORT[,...] [--topic-prefix P] [--topic T] [--json] [--only NAME]
//! [--sasl-username U --sasl-password-file F [--sasl-mechanism M]]`:
//! are zombie producers fenced by the Kafka-compatible broker at that address? One line per
//! check (or one JSON object with `--json`). Exit 0 if no check failed, 1 if one did, 2 on bad
//! arguments, an unreachable broker, or a broker lost mid-run.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use fencecheck::{Options, Verdict, CHECKS};

/// Check that a Kafka-compatible broker fences zombie producers, with the evidence.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Kafka addresses of one or more brokers, comma separated.
    #[arg(long)]
    bootstrap: String,
    /// Prefix of the topic and the transactional ids this run makes.
    #[arg(long, default_value = "fencecheck")]
    topic_prefix: String,
    /// Use this existing topic instead of making one (with one partition,
    /// zombie-untouched-partition is not supported).
    #[arg(long)]
    topic: Option<String>,
    /// One JSON object per check, per line: name, verdict (pass, fail, unsupported, info),
    /// evidence.
    #[arg(long)]
    json: bool,
    /// Run only this check.
    #[arg(long, value_name = "NAME")]
    only: Option<String>,
    /// How long one check may take before it fails with "timeout", in milliseconds.
    #[arg(long, default_value_t = fencecheck::CHECK_TIMEOUT_MS_DEFAULT)]
    timeout_ms: u64,
    #[command(flatten)]
    sasl: producer::SaslArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    net::init_logging("error");
    let args = Args::parse();
    let only = match args.only.as_deref() {
        None => None,
        Some(name) => match fencecheck::check_named(name) {
            Some(c) => Some(c),
            None => {
                eprintln!("fencecheck: no check named '{name}'; the checks are: {}", CHECKS.join(", "));
                return ExitCode::from(2);
            }
        },
    };
    if args.timeout_ms == 0 {
        eprintln!("fencecheck: --timeout-ms must be above 0");
        return ExitCode::from(2);
    }
    let sasl = match args.sasl.login(true) {
        Ok(sasl) => sasl,
        Err(e) => {
            eprintln!("fencecheck: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = Options {
        sasl,
        bootstrap: args.bootstrap,
        topic_prefix: args.topic_prefix,
        topic: args.topic,
        only,
        timeout_ms: args.timeout_ms,
    };
    let json = args.json;
    let printed = fencecheck::run(&opts, |report| {
        let line = if json { report.json() } else { report.line() };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    })
    .await;
    match printed {
        Err(e) => {
            eprintln!("fencecheck: {e}");
            ExitCode::from(2)
        }
        Ok(reports) => {
            let count = |v: Verdict| reports.iter().filter(|r| r.verdict == v).count();
            let failed = count(Verdict::Fail);
            if !json {
                let info = match count(Verdict::Info) {
                    0 => String::new(),
                    n => format!(", {n} info"),
                };
                println!(
                    "fencecheck: {} checks: {} pass, {failed} FAIL, {} unsupported{info}",
                    reports.len(),
                    count(Verdict::Pass),
                    count(Verdict::Unsupported)
                );
            }
            ExitCode::from(u8::from(failed > 0))
        }
    }
}
