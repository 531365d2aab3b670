//! Phase timings of a transaction, printed to stderr when the environment variable `MENTAT_TRACE` is set
//! (read once per process). A development aid for finding where a transaction spends its time.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("MENTAT_TRACE").is_some())
}

/// Collects named phase durations; does nothing unless tracing is enabled.
pub struct Trace {
    last: Option<Instant>,
    phases: Vec<(&'static str, f64)>,
}

impl Trace {
    /// Starts timing now.
    pub fn start() -> Trace {
        Trace { last: enabled().then(Instant::now), phases: Vec::new() }
    }

    /// Ends the phase `name` (the time since the previous mark).
    pub fn mark(&mut self, name: &'static str) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.phases.push((name, (now - last).as_secs_f64() * 1000.0));
            self.last = Some(now);
        }
    }

    /// Prints the phases as one line: `mentat trace <label>: total X ms | phase Y ms ...`.
    pub fn print(&self, label: &str) {
        if self.last.is_some() {
            let total: f64 = self.phases.iter().map(|p| p.1).sum();
            let parts: Vec<String> = self.phases.iter().map(|(n, ms)| format!("{n} {ms:.2}")).collect();
            say(format_args!("mentat trace {label}: total {total:.2} ms | {}", parts.join(" | ")));
        }
    }
}

/// Writes one line to stderr and ignores a failure: `eprintln!` panics when stderr is gone (a closed pipe, as
/// in `pytest -s | head`), and a panic inside a transaction's call would hang or fail the caller for a
/// diagnostic nobody can read.
pub(crate) fn say(line: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
