//! `--soak PLAN.json`: issue 17's soak from native threads (8 readers, 1 writer, one connection each).
//!
//! The Python soak (`benchmarks/py/soak.py`) runs its readers as Python threads. perf's record of the scheduler's
//! switches during that soak (storage/README.md "The soak's tails come from the client") put about half of the
//! reader threads' time in `take_gil`, waiting for Python's interpreter lock, which DuckDB's Python client takes
//! again after every statement, every chunk fetched and every check for a signal while a statement runs; the q1
//! calls past the p99 spent 27 of their 39 ms blocked and 11 waiting for a core, against 1.4 ms on one. This
//! driver asks the same questions of the same store with the same writer from native threads, so that what the
//! soak measures is mentat's and DuckDB's, not the client's.
//!
//! `soak.py --driver native` builds the store, writes the plan (every answer's truth, computed by the Python
//! suite's generator, and the entity ids), closes the store and runs this; it reads the JSON this prints and judges
//! it as it judges its own run. The plan's fields: `db`, `ext`, `seconds`, `window_s`, `readers`, `queries` (q1, q2,
//! q4, labels: the suite's query texts), `users` ([email, name] of every user: q1's keys), `probes` ([{email,
//! final: [[title, state]], initial: [[title, state]]}]: q2's and as_of's keys, the probe users), `as_of_tx`,
//! `q4_min`, `q4_count`, `pull` ([{e, title, state, priority, labels}]: the protected issues), `writable` (entity
//! ids of the issues the writer may label), `labels` (label names), `threads` (DuckDB's threads setting for the
//! run, or null for DuckDB's own), `checkpoint_threshold` and `memory_limit` (DuckDB's settings, e.g. "4MB", or
//! null for its own).
//!
//! Readers cycle q1, q2, q4, pull `[*]` and as_of (reader i starts at question i), keys drawn uniformly (seeded by
//! the reader's number), every answer checked in the loop (a few microseconds here, where in Python the check held the
//! interpreter lock beside the others). The writer alternates, as the Python soak's steady writer: a single-datom
//! label addition, a 500-issue labelling, a single-datom addition, the retraction of those 500 labels. After the
//! run every label written and not retracted since must be held, and none of the last 20,000 retracted.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use duckdb::{params, Config, Connection};
use serde_json::{json, Value};

use crate::stats::pct;
use crate::workload::Rng;
use crate::Res;

const READS: [&str; 5] = ["q1", "q2", "q4", "pull", "as_of"];
const RETRACTED_KEPT: usize = 20_000;

fn text(v: &Value, what: &str) -> Res<String> {
    Ok(v.as_str().ok_or_else(|| format!("plan: {what} is not a string"))?.to_string())
}

fn pairs(v: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| (p[0].as_str().unwrap_or_default().to_string(), p[1].as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

struct Probe {
    email: String,
    fin: Vec<(String, String)>,
    initial: Vec<(String, String)>,
}

struct PullTruth {
    e: i64,
    title: String,
    state: String,
    priority: i64,
    labels: usize,
}

struct Plan {
    db: String,
    ext: String,
    seconds: f64,
    window_s: f64,
    readers: usize,
    q1: String,
    q2: String,
    q4: String,
    qlabels: String,
    users: Vec<(String, String)>,
    probes: Vec<Probe>,
    as_of_tx: i64,
    q4_min: i64,
    q4_count: usize,
    pull: Vec<PullTruth>,
    writable: Vec<i64>,
    labels: Vec<String>,
    threads: Option<u64>,
    checkpoint_threshold: Option<String>,
    memory_limit: Option<String>,
}

impl Plan {
    fn read(path: &str) -> Res<Plan> {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?)?;
        let q = &v["queries"];
        let probes = v["probes"]
            .as_array()
            .ok_or("plan: no probes")?
            .iter()
            .map(|p| Probe {
                email: p["email"].as_str().unwrap_or_default().to_string(),
                fin: pairs(&p["final"]),
                initial: pairs(&p["initial"]),
            })
            .collect::<Vec<_>>();
        let pull = v["pull"]
            .as_array()
            .ok_or("plan: no pull")?
            .iter()
            .map(|p| PullTruth {
                e: p["e"].as_i64().unwrap_or(-1),
                title: p["title"].as_str().unwrap_or_default().to_string(),
                state: p["state"].as_str().unwrap_or_default().to_string(),
                priority: p["priority"].as_i64().unwrap_or(-1),
                labels: p["labels"].as_u64().unwrap_or(0) as usize,
            })
            .collect::<Vec<_>>();
        let plan = Plan {
            db: text(&v["db"], "db")?,
            ext: text(&v["ext"], "ext")?,
            seconds: v["seconds"].as_f64().ok_or("plan: no seconds")?,
            window_s: v["window_s"].as_f64().ok_or("plan: no window_s")?,
            readers: v["readers"].as_u64().unwrap_or(8) as usize,
            q1: text(&q["q1"], "queries.q1")?,
            q2: text(&q["q2"], "queries.q2")?,
            q4: text(&q["q4"], "queries.q4")?,
            qlabels: text(&q["labels"], "queries.labels")?,
            users: pairs(&v["users"]),
            probes,
            as_of_tx: v["as_of_tx"].as_i64().ok_or("plan: no as_of_tx")?,
            q4_min: v["q4_min"].as_i64().unwrap_or(4),
            q4_count: v["q4_count"].as_u64().ok_or("plan: no q4_count")? as usize,
            pull,
            writable: v["writable"].as_array().ok_or("plan: no writable")?.iter().filter_map(|x| x.as_i64()).collect(),
            threads: v["threads"].as_u64(),
            checkpoint_threshold: v["checkpoint_threshold"].as_str().map(str::to_string),
            memory_limit: v["memory_limit"].as_str().map(str::to_string),
            labels: v["labels"]
                .as_array()
                .ok_or("plan: no labels")?
                .iter()
                .filter_map(|x| x.as_str())
                .map(String::from)
                .collect(),
        };
        if plan.users.is_empty() || plan.probes.is_empty() || plan.pull.is_empty() || plan.writable.is_empty() {
            return Err("plan: no users, probes, pull targets or writable issues".into());
        }
        Ok(plan)
    }
}

/// The rows of `FROM mentat_q(query, inputs := ?[, as_of := ?])`, each column as text.
fn q(c: &Connection, query: &str, inputs: &str, as_of: Option<i64>, cols: usize) -> Res<Vec<Vec<String>>> {
    let mut st;
    let mut rows = match as_of {
        None => {
            st = c.prepare_cached("FROM mentat_q(?, inputs := ?)")?;
            st.query(params![query, inputs])?
        }
        Some(tx) => {
            st = c.prepare_cached("FROM mentat_q(?, inputs := ?, as_of := ?)")?;
            st.query(params![query, inputs, tx])?
        }
    };
    crate::duck::text_rows(&mut rows, cols)
}

fn wrong(msg: String) -> Box<dyn std::error::Error + Send + Sync> {
    crate::bench::wrong(msg)
}

/// Asks question `sc` with key number `k` (a draw) and checks the answer against the plan's truth.
fn ask(c: &Connection, p: &Plan, sc: &str, k: usize) -> Res<()> {
    match sc {
        "q1" => {
            let (email, name) = &p.users[k % p.users.len()];
            let got: Vec<String> =
                q(c, &p.q1, &serde_json::to_string(&[email])?, None, 2)?.into_iter().map(|mut r| r.remove(1)).collect();
            if got != [name.clone()] {
                return Err(wrong(format!("q1 {email}: got {got:?}, expected [{name:?}]")));
            }
        }
        "q2" | "as_of" => {
            let probe = &p.probes[k % p.probes.len()];
            let as_of = (sc == "as_of").then_some(p.as_of_tx);
            let mut got: Vec<(String, String)> = q(c, &p.q2, &serde_json::to_string(&[&probe.email])?, as_of, 3)?
                .into_iter()
                .map(|r| (r[1].clone(), r[2].clone()))
                .collect();
            got.sort();
            let want = if as_of.is_some() { &probe.initial } else { &probe.fin };
            if &got != want {
                return Err(wrong(format!("{sc} {}: {} rows, expected {}", probe.email, got.len(), want.len())));
            }
        }
        "q4" => {
            let rows = q(c, &p.q4, &format!("[{}]", p.q4_min), None, 3)?;
            let low = rows.iter().filter(|r| r[2].parse::<i64>().map_or(true, |x| x < p.q4_min)).count();
            if rows.len() != p.q4_count || low > 0 {
                return Err(wrong(format!(
                    "q4: {} rows ({low} below the minimum), expected {}",
                    rows.len(),
                    p.q4_count
                )));
            }
        }
        "pull" => {
            let t = &p.pull[k % p.pull.len()];
            let mut st = c.prepare_cached("SELECT to_json(pull)::VARCHAR FROM mentat_pull('[*]', ?)")?;
            let js: String = st.query_row(params![t.e], |r| r.get(0))?;
            let v: Value = serde_json::from_str(&js)?;
            let state = match &v["issue/state"] {
                Value::String(s) => s.clone(),
                other => other["db/ident"].as_str().unwrap_or_default().to_string(),
            };
            let labels = v["issue/label"].as_array().map_or(0, |a| a.len());
            if v["issue/title"].as_str() != Some(&t.title)
                || state != t.state
                || v["issue/priority"].as_i64() != Some(t.priority)
                || labels != t.labels
            {
                return Err(wrong(format!(
                    "pull {}: got {js}, expected {} {} {} with {} labels",
                    t.e, t.title, t.state, t.priority, t.labels
                )));
            }
        }
        _ => unreachable!(),
    }
    Ok(())
}

/// One transaction that adds (`op` `:db/add`) or retracts (`:db/retract`) each (entity, label name) pair.
fn labels_edn(op: &str, pairs: &[(i64, String)]) -> String {
    let forms: Vec<String> =
        pairs.iter().map(|(e, l)| format!("[{op} {e} :issue/label [:label/name \"{l}\"]]")).collect();
    format!("[{}]", forms.join(" "))
}

/// What the writer acknowledged, for the checks after the run.
#[derive(Default)]
struct Written {
    /// entity -> labels written and not retracted since
    held: HashMap<i64, HashSet<String>>,
    /// (entity, label) retracted and not written again since: the last RETRACTED_KEPT of them
    retracted: HashSet<(i64, String)>,
    order: VecDeque<(i64, String)>,
    n_retracted: usize,
    labelled: HashSet<i64>,
}

impl Written {
    fn add(&mut self, e: i64, label: &str) {
        self.held.entry(e).or_default().insert(label.to_string());
        self.retracted.remove(&(e, label.to_string()));
        self.labelled.insert(e);
    }

    fn retract(&mut self, e: i64, label: &str) {
        if let Some(h) = self.held.get_mut(&e) {
            h.remove(label);
            if h.is_empty() {
                self.held.remove(&e);
            }
        }
        let key = (e, label.to_string());
        if self.retracted.insert(key.clone()) {
            self.order.push_back(key);
        }
        while self.order.len() > RETRACTED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.retracted.remove(&old);
            }
        }
        self.n_retracted += 1;
    }
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// glibc's `mallinfo2`: what the process's `malloc` has handed out and what it keeps free in its arenas (libduckdb
/// allocates through it; mentat's own memory is mimalloc's and not in these figures).
#[repr(C)]
#[derive(Default)]
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

extern "C" {
    fn mallinfo2() -> MallInfo2;
}

/// (in use, free in the arenas) of glibc's `malloc`, in MB.
fn malloc_mb() -> (f64, f64) {
    // SAFETY: mallinfo2 takes nothing and returns a struct of counters by value.
    let m = unsafe { mallinfo2() };
    ((m.uordblks + m.hblkhd) as f64 / 1048576.0, m.fordblks as f64 / 1048576.0)
}

/// Runs the soak of the plan at `path`; returns its report (per window: reads, writes and each question's p50 and
/// p99 in milliseconds, resident memory, DuckDB's own memory and the entity index's, in MB), or the error that
/// stopped it before it began.
pub fn run(path: &str) -> Res<Value> {
    let p = Plan::read(path)?;
    let cfg = Config::default().allow_unsigned_extensions()?;
    let root = Connection::open_with_flags(&p.db, cfg)?;
    let version: String = root.query_row("SELECT version()", [], |r| r.get(0))?;
    root.execute_batch(&format!("LOAD '{}'", p.ext.replace('\'', "''")))?;
    if let Some(n) = p.threads {
        root.execute_batch(&format!("SET threads = {n}"))?;
    }
    for (name, value) in [("checkpoint_threshold", &p.checkpoint_threshold), ("memory_limit", &p.memory_limit)] {
        if let Some(v) = value {
            root.execute_batch(&format!("SET {name} = '{}'", v.replace('\'', "''")))?;
        }
    }
    // the settings as DuckDB holds them for the run, into the report
    let settings: String = root.query_row(
        "SELECT json_object('threads', current_setting('threads'), 'memory_limit', current_setting('memory_limit'), \
         'checkpoint_threshold', current_setting('checkpoint_threshold'))::VARCHAR",
        [],
        |r| r.get(0),
    )?;
    let settings: Value = serde_json::from_str(&settings)?;
    // every question once (the entity index reads the attributes they need), then until nothing is being read
    for (k, sc) in READS.iter().enumerate() {
        ask(&root, &p, sc, k)?;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let reading: i64 =
            root.query_row("SELECT count(*) FROM mentat_entity_index() WHERE state = 'reading'", [], |r| r.get(0))?;
        if reading == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let windows = (p.seconds / p.window_s).ceil() as usize;
    let stop = AtomicBool::new(false);
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let writes: Vec<AtomicUsize> = (0..windows).map(|_| AtomicUsize::new(0)).collect();
    let written = Mutex::new(Written::default());
    let mut memory = Vec::with_capacity(windows);
    let probe = root.try_clone()?;
    eprintln!("soak (native): {} readers, 1 writer, {} s, DuckDB {version}", p.readers, p.seconds);
    let start = Instant::now();
    let window = |t: Instant| ((t.duration_since(start).as_secs_f64() / p.window_s) as usize).min(windows - 1);
    let lat: Vec<Vec<Vec<f64>>> = std::thread::scope(|sc| {
        let readers: Vec<_> = (0..p.readers)
            .map(|i| {
                let c = root.try_clone();
                let (p, stop, errors, window) = (&p, &stop, &errors, &window);
                sc.spawn(move || {
                    // latencies (ms) per window and question
                    let mut lat = vec![vec![Vec::new(); READS.len()]; windows];
                    let run = || -> Res<()> {
                        let c = c?;
                        let mut rng = Rng::new(100 + i as u64);
                        let mut k = i;
                        while !stop.load(Ordering::Relaxed) {
                            let qi = k % READS.len();
                            k += 1;
                            let t = Instant::now();
                            ask(&c, p, READS[qi], rng.next_u64() as usize)?;
                            lat[window(t)][qi].push(t.elapsed().as_secs_f64() * 1000.0);
                        }
                        Ok(())
                    };
                    if let Err(e) = run() {
                        errors.lock().unwrap().push(format!("reader {i}: {e}"));
                        stop.store(true, Ordering::SeqCst);
                    }
                    lat
                })
            })
            .collect();
        let wc = root.try_clone();
        let (p, stop, errors, writes, written, window) = (&p, &stop, &errors, &writes, &written, &window);
        let writer = sc.spawn(move || {
            let run = || -> Res<()> {
                let c = wc?;
                let mut rng = Rng::new(7);
                let mut k = 0usize;
                let mut last: Vec<(i64, String)> = Vec::new();
                let tx = |edn: &str| -> Res<i64> {
                    let mut st = c.prepare_cached("SELECT tx FROM mentat_transact(?)")?;
                    Ok(st.query_row(params![edn], |r| r.get(0))?)
                };
                while !stop.load(Ordering::Relaxed) {
                    if k.is_multiple_of(2) {
                        let e = p.writable[rng.below(p.writable.len())];
                        let label = &p.labels[rng.below(p.labels.len())];
                        tx(&format!("[[:db/add {e} :issue/label [:label/name \"{label}\"]]]"))?;
                        written.lock().unwrap().add(e, label);
                    } else if k % 4 == 1 {
                        let mut es: Vec<i64> = (0..500).map(|_| p.writable[rng.below(p.writable.len())]).collect();
                        es.sort_unstable();
                        es.dedup();
                        last = es.into_iter().map(|e| (e, p.labels[rng.below(p.labels.len())].clone())).collect();
                        tx(&labels_edn(":db/add", &last))?;
                        let mut w = written.lock().unwrap();
                        last.iter().for_each(|(e, l)| w.add(*e, l));
                    } else {
                        tx(&labels_edn(":db/retract", &last))?;
                        let mut w = written.lock().unwrap();
                        last.iter().for_each(|(e, l)| w.retract(*e, l));
                    }
                    writes[window(Instant::now())].fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
                Ok(())
            };
            if let Err(e) = run() {
                errors.lock().unwrap().push(format!("writer: {e}"));
                stop.store(true, Ordering::SeqCst);
            }
        });
        // the memory at the end of each window
        for w in 0..windows {
            let end = start + Duration::from_secs_f64(p.window_s * (w + 1) as f64);
            while Instant::now() < end && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20).min(end.saturating_duration_since(Instant::now())));
            }
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let duck: f64 = probe
                .query_row("SELECT coalesce(sum(memory_usage_bytes), 0)::DOUBLE FROM duckdb_memory()", [], |r| r.get(0))
                .unwrap_or(f64::NAN);
            let index: f64 = probe
                .query_row("SELECT coalesce(sum(bytes), 0)::DOUBLE FROM mentat_entity_index()", [], |r| r.get(0))
                .unwrap_or(f64::NAN);
            let heap = malloc_mb();
            memory.push((rss_mb(), duck / 1048576.0, index / 1048576.0, heap));
            eprintln!(
                "  window {}: {} writes, rss {:.1} MB, DuckDB {:.1} MB, malloc in use {:.1} MB, free in its arenas {:.1} MB",
                w + 1,
                writes[w].load(Ordering::Relaxed),
                memory[w].0,
                memory[w].1,
                heap.0,
                heap.1
            );
        }
        stop.store(true, Ordering::SeqCst);
        let lat = readers.into_iter().map(|h| h.join().expect("a reader panicked")).collect::<Vec<_>>();
        writer.join().expect("the writer panicked");
        // merged per window and question
        (0..windows)
            .map(|w| (0..READS.len()).map(|qi| lat.iter().flat_map(|r| r[w][qi].iter().copied()).collect()).collect())
            .collect()
    });
    // every acknowledged write is in the store
    let w = written.into_inner().unwrap();
    let mut es: Vec<i64> = w.held.keys().copied().chain(w.retracted.iter().map(|(e, _)| *e)).collect();
    es.sort_unstable();
    es.dedup();
    let mut held: HashMap<i64, HashSet<String>> = HashMap::new();
    for chunk in es.chunks(1000) {
        let inputs = format!("[[{}]]", chunk.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" "));
        for r in q(&root, &p.qlabels, &inputs, None, 2)? {
            held.entry(r[0].parse()?).or_default().insert(r[1].clone());
        }
    }
    let lost = w
        .held
        .iter()
        .map(|(e, want)| want.iter().filter(|l| !held.get(e).is_some_and(|h| h.contains(*l))).count())
        .sum::<usize>();
    let left = w.retracted.iter().filter(|(e, l)| held.get(e).is_some_and(|h| h.contains(l))).count();
    let rows: Vec<Value> = lat
        .iter()
        .enumerate()
        .take(memory.len().max(1))
        .map(|(i, per)| {
            let mut qs = serde_json::Map::new();
            for (qi, xs) in per.iter().enumerate() {
                if !xs.is_empty() {
                    qs.insert(
                        READS[qi].into(),
                        json!({"reads": xs.len(), "p50_ms": pct(xs, 50.0), "p99_ms": pct(xs, 99.0)}),
                    );
                }
            }
            let all: Vec<f64> = per.iter().flatten().copied().collect();
            let (rss, duck, index, heap) =
                memory.get(i).copied().unwrap_or((f64::NAN, f64::NAN, f64::NAN, (f64::NAN, f64::NAN)));
            json!({"window": i, "reads": all.len(), "p50_ms": pct(&all, 50.0), "p99_ms": pct(&all, 99.0),
                   "writes": writes[i].load(Ordering::Relaxed), "rss_mb": rss, "duckdb_mb": duck,
                   "entity_index_mb": index, "malloc_in_use_mb": heap.0, "malloc_free_mb": heap.1,
                   "per_question": qs})
        })
        .collect();
    Ok(json!({
        "driver": "mentat-native-bench --soak",
        "engine": format!("DuckDB {version} (libduckdb.so) with the mentat extension"),
        "duckdb_settings": settings,
        "windows": rows,
        "errors": errors.into_inner().unwrap(),
        "labelled_issues": w.labelled.len(),
        "lost_labels": lost,
        "retracted_labels": w.n_retracted,
        "retracted_labels_checked": w.retracted.len(),
        "retracted_labels_left": left,
        "new_users": 0,
        "lost_users": 0,
    }))
}
