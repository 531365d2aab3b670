//! The generator proper: streams the issue-tracker workload into EDN transaction files and CSV copies,
//! and keeps only the aggregates and probe rows that `truth.json` needs.
//!
//! Every random draw comes from [`Rng`] streams derived from the seed, in a fixed order, so one seed
//! always yields byte-identical files.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::rng::Rng;
use crate::scale::Scale;
use crate::time;

/// The five issue states, as EDN keywords (index = state code).
pub const STATES: [&str; 5] =
    [":state/open", ":state/in-progress", ":state/closed", ":state/resolved", ":state/reopened"];

/// The words of issue titles (`Issue {idx}: {word}`).
pub const WORDS: [&str; 5] = ["crash", "ui glitch", "perf regression", "typo", "feature request"];

/// How many probe users `truth.json` describes.
pub const PROBE_USERS: usize = 5;
/// How many candidate users are drawn for the probe users (the first [`PROBE_USERS`] of them with an
/// assigned issue become the probes).
const PROBE_USER_CANDIDATES: usize = 20;
/// How many probe issues drawn uniformly `truth.json` describes (pull contents); one more probe
/// issue is always one that gets a history update.
pub const PROBE_ISSUES: usize = 5;
/// How many emails the `input_bindings` scenario binds.
pub const INPUT_BINDINGS: usize = 100;

// Independent random streams of one seed.
const STREAM_ISSUES: u64 = 1;
const STREAM_HISTORY: u64 = 2;
const STREAM_HISTORY_ORDER: u64 = 3;
const STREAM_PROBES: u64 = 4;

/// What to generate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Entity counts.
    pub scale: Scale,
    /// The seed every random draw derives from.
    pub seed: u64,
    /// Entities per transaction file (users, labels and issues) and rows per history batch.
    pub batch: u64,
}

/// The schema transaction: `(ident, valueType, cardinality, unique identity, indexed)`.
pub const SCHEMA: [(&str, &str, &str, bool, bool); 10] = [
    (":user/email", "string", "one", true, true),
    (":user/name", "string", "one", false, false),
    (":issue/title", "string", "one", false, false),
    (":issue/state", "keyword", "one", false, true),
    (":issue/priority", "long", "one", false, true),
    (":issue/assignee", "ref", "one", false, true),
    (":issue/reporter", "ref", "one", false, true),
    (":issue/created-at", "instant", "one", false, true),
    (":issue/label", "ref", "many", false, true),
    (":label/name", "string", "one", true, true),
];

/// `user{u}@example.com`.
pub fn email(u: u64) -> String {
    format!("user{u}@example.com")
}

/// `User {u}`.
pub fn user_name(u: u64) -> String {
    format!("User {u}")
}

/// `label-{n}`.
pub fn label_name(n: u64) -> String {
    format!("label-{n}")
}

/// `Issue {idx}: {word}`.
pub fn title(idx: u64, word: u8) -> String {
    format!("Issue {idx}: {}", WORDS[word as usize])
}

/// The schema transaction as EDN text.
pub fn schema_edn() -> String {
    let mut s = String::from("[");
    for (i, (ident, ty, card, unique, index)) in SCHEMA.iter().enumerate() {
        if i > 0 {
            s.push_str("\n ");
        }
        let _ = write!(s, "{{:db/ident {ident} :db/valueType :db.type/{ty} :db/cardinality :db.cardinality/{card}");
        if *unique {
            s.push_str(" :db/unique :db.unique/identity");
        }
        if *index {
            s.push_str(" :db/index true");
        }
        s.push('}');
    }
    s.push_str("]\n");
    s
}

/// One generated issue (all draws, before any history update).
#[derive(Clone, Debug)]
struct Issue {
    idx: u64,
    word: u8,
    state: u8,
    priority: u8,
    assignee: u64,
    reporter: u64,
    minute: u64,
    labels: Vec<u64>,
}

impl Issue {
    fn draw(idx: u64, rng: &mut Rng, scale: &Scale) -> Issue {
        let word = rng.below(WORDS.len() as u64) as u8;
        let state = rng.below(STATES.len() as u64) as u8;
        let priority = 1 + rng.below(5) as u8;
        let assignee = rng.below(scale.users);
        let reporter = rng.below(scale.users);
        let minute = rng.below(time::MINUTES_IN_2025);
        let n_labels = rng.below(4) as usize;
        let mut labels = if scale.labels == 0 { Vec::new() } else { rng.distinct(n_labels, scale.labels) };
        labels.sort_unstable();
        Issue { idx, word, state, priority, assignee, reporter, minute, labels }
    }
}

/// One history update: issue `idx` moves from state `old` to `new`.
#[derive(Clone, Copy, Debug)]
struct HistEntry {
    idx: u64,
    word: u8,
    priority: u8,
    old: u8,
    new: u8,
}

/// Numbered transaction files `DIR/000000.edn`, ... written in order.
struct TxFiles {
    dir: PathBuf,
    next: u64,
}

impl TxFiles {
    /// Writes `body` (the items of one transaction, each starting with a separator) as the next file.
    fn write(&mut self, items: &str) -> io::Result<()> {
        let path = self.dir.join(format!("{:06}.edn", self.next));
        let mut f = BufWriter::with_capacity(1 << 16, File::create(path)?);
        f.write_all(b"[")?;
        // `items` starts with "\n " before every item; drop the first separator.
        f.write_all(items.strip_prefix("\n ").unwrap_or(items).as_bytes())?;
        f.write_all(b"]\n")?;
        f.flush()?;
        self.next += 1;
        Ok(())
    }
}

fn csv_writer(path: &Path, header: &str) -> io::Result<BufWriter<File>> {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    writeln!(w, "{header}")?;
    Ok(w)
}

fn state_counts_json(counts: &[u64; 5]) -> Value {
    let mut m = serde_json::Map::new();
    for (s, c) in STATES.iter().zip(counts) {
        m.insert((*s).to_string(), json!(c));
    }
    Value::Object(m)
}

/// Generates the whole workload into `out` and returns the truth (also written as `truth.json`).
///
/// Removes `out/tx` and `out/hist` first so no file of an earlier, larger run survives.
pub fn generate(cfg: &Config, out: &Path) -> io::Result<Value> {
    let scale = &cfg.scale;
    let batch = cfg.batch.max(1);
    if scale.users == 0 || scale.issues == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a scale needs at least one user and one issue"));
    }
    fs::create_dir_all(out)?;
    let tx_dir = out.join("tx");
    let hist_dir = out.join("hist");
    for d in [&tx_dir, &hist_dir] {
        if d.exists() {
            fs::remove_dir_all(d)?;
        }
        fs::create_dir_all(d)?;
    }
    fs::write(out.join("schema.edn"), schema_edn())?;

    let mut tx = TxFiles { dir: tx_dir, next: 0 };
    let mut items = String::with_capacity(1 << 18);

    // Probes are drawn before anything else, from their own stream.
    let mut probe_rng = Rng::new(cfg.seed, STREAM_PROBES);
    let candidates = probe_rng.distinct(PROBE_USER_CANDIDATES, scale.users);
    let probe_issue_idxs = probe_rng.distinct(PROBE_ISSUES, scale.issues);
    let binding_users = probe_rng.distinct(INPUT_BINDINGS, scale.users);
    // The updated probe issue: the first issue at or after this index that gets a history update
    // (or, failing that, the first one that does).
    let updated_probe_from = probe_rng.below(scale.issues);
    let mut updated_probe: Option<Issue> = None;
    let mut first_updated: Option<Issue> = None;
    let candidate_slot: HashMap<u64, usize> = candidates.iter().enumerate().map(|(i, &u)| (u, i)).collect();
    let mut candidate_issues: Vec<Vec<Issue>> = vec![Vec::new(); candidates.len()];
    let mut probe_issues: Vec<Option<Issue>> = vec![None; probe_issue_idxs.len()];

    // Users.
    let users_first_tx = tx.next;
    let mut users_csv = csv_writer(&out.join("users.csv"), "u,email,name")?;
    for u in 0..scale.users {
        let _ = write!(items, "\n {{:user/email \"{}\" :user/name \"{}\"}}", email(u), user_name(u));
        writeln!(users_csv, "{u},{},{}", email(u), user_name(u))?;
        if (u + 1) % batch == 0 || u + 1 == scale.users {
            tx.write(&items)?;
            items.clear();
        }
    }
    users_csv.flush()?;

    // Labels.
    let labels_first_tx = tx.next;
    let mut labels_csv = csv_writer(&out.join("labels.csv"), "n,name")?;
    for n in 0..scale.labels {
        let _ = write!(items, "\n {{:label/name \"{}\"}}", label_name(n));
        writeln!(labels_csv, "{n},{}", label_name(n))?;
        if (n + 1) % batch == 0 || n + 1 == scale.labels {
            tx.write(&items)?;
            items.clear();
        }
    }
    labels_csv.flush()?;

    // Issues, streamed; history updates are chosen as we go (selection sampling: exactly
    // `history_updates()` issues, each with probability 5%).
    let issues_first_tx = tx.next;
    let mut issues_csv =
        csv_writer(&out.join("issues.csv"), "idx,title,state,priority,assignee_email,reporter_email,created_at")?;
    let mut issue_labels_csv = csv_writer(&out.join("issue_labels.csv"), "idx,label_name")?;
    let mut rng = Rng::new(cfg.seed, STREAM_ISSUES);
    let mut hist_rng = Rng::new(cfg.seed, STREAM_HISTORY);
    let n_hist = scale.history_updates().min(scale.issues);
    let mut hist_left = n_hist;
    let mut history: Vec<HistEntry> = Vec::with_capacity(n_hist as usize);
    let mut initial_counts = [0u64; 5];
    let mut initial_open_p4 = 0u64;
    let mut label_refs = 0u64;
    for idx in 0..scale.issues {
        let issue = Issue::draw(idx, &mut rng, scale);
        let t = title(idx, issue.word);
        let state = STATES[issue.state as usize];
        initial_counts[issue.state as usize] += 1;
        if issue.state == 0 && issue.priority >= 4 {
            initial_open_p4 += 1;
        }
        label_refs += issue.labels.len() as u64;

        let _ = write!(
            items,
            "\n {{:issue/title \"{t}\" :issue/state {state} :issue/priority {} \
             :issue/assignee [:user/email \"{}\"] :issue/reporter [:user/email \"{}\"] \
             :issue/created-at {}",
            issue.priority,
            email(issue.assignee),
            email(issue.reporter),
            time::edn_inst(issue.minute)
        );
        if !issue.labels.is_empty() {
            items.push_str(" :issue/label [");
            for (i, n) in issue.labels.iter().enumerate() {
                if i > 0 {
                    items.push(' ');
                }
                let _ = write!(items, "[:label/name \"{}\"]", label_name(*n));
            }
            items.push(']');
        }
        items.push('}');
        if (idx + 1) % batch == 0 || idx + 1 == scale.issues {
            tx.write(&items)?;
            items.clear();
        }

        writeln!(
            issues_csv,
            "{idx},{t},{state},{},{},{},{}",
            issue.priority,
            email(issue.assignee),
            email(issue.reporter),
            time::csv(issue.minute)
        )?;
        for n in &issue.labels {
            writeln!(issue_labels_csv, "{idx},{}", label_name(*n))?;
        }

        if hist_left > 0 && hist_rng.below(scale.issues - idx) < hist_left {
            hist_left -= 1;
            let new = ((u64::from(issue.state) + 1 + hist_rng.below(4)) % 5) as u8;
            if first_updated.is_none() {
                first_updated = Some(issue.clone());
            }
            if updated_probe.is_none() && idx >= updated_probe_from {
                updated_probe = Some(issue.clone());
            }
            history.push(HistEntry { idx, word: issue.word, priority: issue.priority, old: issue.state, new });
        }
        if let Some(&slot) = candidate_slot.get(&issue.assignee) {
            candidate_issues[slot].push(issue.clone());
        }
        if let Some(p) = probe_issue_idxs.iter().position(|&i| i == idx) {
            probe_issues[p] = Some(issue);
        }
    }
    issues_csv.flush()?;
    issue_labels_csv.flush()?;
    let n_tx = tx.next;

    // History: a random order, cut into batches of `batch` updates.
    Rng::new(cfg.seed, STREAM_HISTORY_ORDER).shuffle(&mut history);
    let n_batches = (history.len() as u64).div_ceil(batch);
    let mut history_csv = csv_writer(&out.join("history.csv"), "idx,batch,new_state")?;
    let mut final_counts = initial_counts;
    let mut final_open_p4 = initial_open_p4;
    let mut updated: HashMap<u64, (u64, u8)> = HashMap::with_capacity(history.len());
    for (b, chunk) in history.chunks(batch as usize).enumerate() {
        let b = b as u64;
        let mut w = csv_writer(&hist_dir.join(format!("{b:06}.csv")), "title,state")?;
        for h in chunk {
            let new = STATES[h.new as usize];
            writeln!(w, "{},{new}", title(h.idx, h.word))?;
            writeln!(history_csv, "{},{b},{new}", h.idx)?;
            final_counts[h.old as usize] -= 1;
            final_counts[h.new as usize] += 1;
            if h.priority >= 4 {
                final_open_p4 -= u64::from(h.old == 0);
                final_open_p4 += u64::from(h.new == 0);
            }
            updated.insert(h.idx, (b, h.new));
        }
        w.flush()?;
    }
    history_csv.flush()?;
    let final_state = |issue: &Issue| -> u8 { updated.get(&issue.idx).map_or(issue.state, |u| u.1) };

    // The since scenario: basis = after all but the final history batch.
    let mut since_idxs: Vec<u64> = match history.chunks(batch as usize).last() {
        Some(last) => last.iter().map(|h| h.idx).collect(),
        None => Vec::new(),
    };
    since_idxs.sort_unstable();

    let probe_users: Vec<Value> = candidates
        .iter()
        .zip(&candidate_issues)
        .filter(|(_, issues)| !issues.is_empty())
        .take(PROBE_USERS)
        .map(|(&u, issues)| {
            let rows: Vec<Value> = issues
                .iter()
                .map(|i| {
                    json!({
                        "idx": i.idx,
                        "title": title(i.idx, i.word),
                        "initial_state": STATES[i.state as usize],
                        "final_state": STATES[final_state(i) as usize],
                    })
                })
                .collect();
            json!({"u": u, "email": email(u), "name": user_name(u), "issues": rows})
        })
        .collect();
    if probe_users.len() < PROBE_USERS.min(candidates.len()) {
        eprintln!("mentat-gen: warning: only {} probe users with assigned issues", probe_users.len());
    }
    if let Some(u) = updated_probe.or(first_updated) {
        if !probe_issue_idxs.contains(&u.idx) {
            probe_issues.push(Some(u));
        }
    }
    let probe_issues: Vec<Value> = probe_issues
        .iter()
        .flatten()
        .map(|i| {
            let mut labels: Vec<String> = i.labels.iter().map(|&n| label_name(n)).collect();
            labels.sort();
            json!({
                "idx": i.idx,
                "title": title(i.idx, i.word),
                "state": STATES[final_state(i) as usize],
                "initial_state": STATES[i.state as usize],
                "history_batch": updated.get(&i.idx).map(|u| u.0),
                "priority": i.priority,
                "assignee_email": email(i.assignee),
                "reporter_email": email(i.reporter),
                "created_at": time::iso(i.minute),
                "created_at_ms": time::epoch_ms(i.minute),
                "labels": labels,
            })
        })
        .collect();
    let bindings: Vec<Value> =
        binding_users.iter().map(|&u| json!({"email": email(u), "name": user_name(u)})).collect();

    let initial_datoms = 2 * scale.users + scale.labels + 6 * scale.issues + label_refs;
    let n_hist = history.len() as u64;
    let truth = json!({
        "generator": "mentat-gen",
        "format_version": 1,
        "scale": scale.name,
        "seed": cfg.seed,
        "batch_size": batch,
        "entities": {"users": scale.users, "labels": scale.labels, "issues": scale.issues},
        "tx_files": {
            "count": n_tx,
            "users": [users_first_tx, labels_first_tx],
            "labels": [labels_first_tx, issues_first_tx],
            "issues": [issues_first_tx, n_tx],
            "last_initial": n_tx - 1,
        },
        "history": {
            "updates": n_hist,
            "batches": n_batches,
        },
        "datoms": {
            "label_refs": label_refs,
            "initial": initial_datoms,
            "history": 2 * n_hist,
            "final": initial_datoms + 2 * n_hist,
        },
        "state_counts": {
            "initial": state_counts_json(&initial_counts),
            "final": state_counts_json(&final_counts),
        },
        "open_priority_ge_4": {"initial": initial_open_p4, "final": final_open_p4},
        "since": {
            "history_batches_before_basis": n_batches.saturating_sub(1),
            "count": since_idxs.len(),
            "issue_idxs": since_idxs,
        },
        "probe_users": probe_users,
        "probe_issues": probe_issues,
        "input_bindings": bindings,
    });
    let mut w = BufWriter::new(File::create(out.join("truth.json"))?);
    serde_json::to_writer_pretty(&mut w, &truth).map_err(io::Error::other)?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(truth)
}
