//! `mentat-gen`: the deterministic data generator of the scale suite (the issue-tracker workload of
//! `shared/workload.md`). See `benchmarks/README-generator.md` for the files it writes.
//!
//! ```text
//! mentat-gen --scale xs|s|m|l [--seed 42] --out DIR [--batch 500]
//!            [--users N --issues N --labels N]   (override the scale's counts: a custom scale)
//! ```

mod gen;
mod rng;
mod scale;
mod time;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use scale::Scale;

const USAGE: &str = "usage: mentat-gen --scale xs|s|m|l [--seed 42] --out DIR [--batch 500] \
                     [--users N] [--issues N] [--labels N]";

fn parse_args(args: &[String]) -> Result<(gen::Config, PathBuf), String> {
    let mut scale: Option<Scale> = None;
    let mut seed = 42u64;
    let mut out: Option<PathBuf> = None;
    let mut batch = 500u64;
    let (mut users, mut issues, mut labels) = (None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_string());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--scale" => {
                scale = Some(Scale::named(value).ok_or_else(|| format!("unknown scale {value:?} (xs, s, m, l)"))?)
            }
            "--seed" => seed = number()?,
            "--out" => out = Some(PathBuf::from(value)),
            "--batch" => batch = number()?.max(1),
            "--users" => users = Some(number()?),
            "--issues" => issues = Some(number()?),
            "--labels" => labels = Some(number()?),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    let out = out.ok_or_else(|| format!("--out is required\n{USAGE}"))?;
    let custom = users.is_some() || issues.is_some() || labels.is_some();
    let mut scale = match (scale, custom) {
        (Some(s), _) => s,
        (None, true) => Scale { name: "custom".into(), users: 0, issues: 0, labels: 0 },
        (None, false) => return Err(format!("--scale is required\n{USAGE}")),
    };
    if custom {
        scale.name = "custom".into();
        scale.users = users.unwrap_or(scale.users);
        scale.issues = issues.unwrap_or(scale.issues);
        scale.labels = labels.unwrap_or(scale.labels);
    }
    Ok((gen::Config { scale, seed, batch }, out))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cfg, out) = match parse_args(&args) {
        Ok(x) => x,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    match gen::generate(&cfg, &out) {
        Ok(truth) => {
            eprintln!(
                "mentat-gen: scale {} seed {}: {} users, {} labels, {} issues, {} tx files, \
                 {} history batches, {} datoms initial / {} final, in {:.2}s -> {}",
                cfg.scale.name,
                cfg.seed,
                cfg.scale.users,
                cfg.scale.labels,
                cfg.scale.issues,
                truth["tx_files"]["count"],
                truth["history"]["batches"],
                truth["datoms"]["initial"],
                truth["datoms"]["final"],
                start.elapsed().as_secs_f64(),
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mentat-gen: {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}
