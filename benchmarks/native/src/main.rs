//! `mentat-native-bench`: the scale suite's native driver.
//!
//! The Python suite's clients pay Python's cost per statement and share one interpreter lock, so its write
//! figures are bounded by the client as much as by the engines (issue 12: `SELECT 1` runs at ~3,500/s from
//! Python whether 1 or 64 threads send it). This binary runs the write scenarios again from native threads, one
//! OS thread and one connection per client, against the stores the suite's Python peers built and closed:
//!
//! - **mentat** through `libduckdb.so` (the one npm's `@duckdb/node-bindings-linux-x64` ships, linked by the
//!   `duckdb` crate through `DUCKDB_LIB_DIR`; see `build.sh`), the extension loaded with `LOAD`, every write a
//!   `mentat_tx` call (so through the transactor's group commit queue; `--mentat-write`), every read a `mentat_q`
//!   call;
//! - **SQLite** through rusqlite, on the suite's EAV store, with the sqlite peer's settings and SQL.
//!
//! Scenarios (each driver in turn, the same code for both):
//!
//! - `ceiling`: `SELECT 1` at each client count, through a statement prepared once per connection (as the
//!   workload's statements are sent), then sent as text and planned on every call (`ceiling_text`, as Python's
//!   `execute` sends it): the most any one-statement-per-operation client of that driver can reach, measured in
//!   the same run as the figures it bounds; for DuckDB also `ceiling_tf`, a prepared one-parameter table function
//!   call (`SELECT count(*) FROM range(?)`), which DuckDB plans again at every execution as it does mentat's calls;
//! - `update_heavy`: closed-loop clients, 95% single-datom updates of an issue's state and 5% point reads,
//!   scrambled Zipfian keys (theta 0.99), at each client count; per-second throughput p1/p50/p99 and latency
//!   percentiles;
//! - `single_tx`: one client, single-datom transactions, each acknowledged when committed;
//! - `write_mixed`: one writer alternating state and label writes beside 8 readers asking q1 and q2.
//!
//! Every point read must return exactly one valid state, every q1/q2 answer must match `truth.json`, and after
//! each writing scenario the state of every issue written is read back and compared with its last acknowledged
//! write (the highest tx); a mismatch is reported as a `WRONG ANSWER`, which fails the suite's run.
//!
//! Usage (the suite's `native` scenario runs it; see benchmarks/README.md):
//!
//! ```text
//! mentat-native-bench --data benchmarks/data/xs --mentat WORK/xs/mentat_store.duckdb --ext mentat.duckdb_extension
//!     --sqlite WORK/xs/sqlite_eav.db [--scenarios ceiling,update_heavy,single_tx,write_mixed]
//!     [--clients 1,8,64] [--update-time 15] [--mixed-time 10] [--ceiling-time 4]
//!     [--duckdb-set preserve_insertion_order=false] [--mentat-write tx|transact]
//! ```
//!
//! `--mentat-write` chooses the statement of mentat's writes: `tx` (the default), `SELECT mentat_tx(?)`, the scalar
//! function prepared once per connection, or `transact`, `SELECT tx FROM mentat_transact(?)`, the table function
//! that DuckDB binds and plans again at every execution; the engine string names it.
//!
//! `--duckdb-set NAME=VALUE` (repeatable) sets a DuckDB option on mentat's database before the extension loads; the
//! suite passes `preserve_insertion_order=false` and `threads=1`, the settings mentat's README advises for a program
//! with many writer threads (the first lets `mentat_transact` run on the thread that sends it, the second keeps every
//! statement there: storage/README.md, "Who runs a transaction's call" and "No DuckDB worker threads for many native
//! writers"). The engine string in the output names every setting applied.
//!
//! `mentat-native-bench --soak PLAN.json` runs issue 17's soak from native threads (`soak.rs`; `benchmarks/py/soak.py
//! --driver native` writes the plan and runs it).
//!
//! `mentat-native-bench --selftest EXT` only checks that the extension loads into the linked libduckdb and that
//! `mentat_transact` and `mentat_q` work from this binary.
//!
//! It prints one JSON document on stdout (progress goes to stderr) and exits 0 unless its arguments or the data
//! directory are unusable; errors and wrong answers of a driver are in the document.

mod bench;
mod duck;
mod lite;
mod soak;
mod stats;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{json, Map, Value};

use bench::Ceiling;
use workload::{ScrambledZipf, Workload};

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One engine as the scenarios see it: a factory of per-thread sessions.
pub trait Driver {
    fn name(&self) -> &'static str;
    fn engine(&self) -> String;
    fn session(&self) -> Res<Box<dyn Session>>;
    /// Work done once before the timed calls (mentat: the entity index reads the attributes the calls need).
    fn settle(&self, _w: &Workload) -> Res<()> {
        Ok(())
    }
}

/// One client's connection. Writes return the tx the store gave them; tx order is commit order.
pub trait Session: Send {
    /// `SELECT 1` through a statement prepared once per connection (as every workload statement is).
    fn select1(&mut self) -> Res<i64>;
    /// `SELECT 1` sent as text: parsed, planned and run on every call, as Python's `execute` does.
    fn select1_text(&mut self) -> Res<i64>;
    /// A one-row call of a table function with one parameter, prepared once (`SELECT count(*) FROM range(?)` with
    /// 1): DuckDB binds and plans such a statement again at every execution, as it does every mentat call, so this
    /// is the floor under them. None where the driver has no such statement (SQLite).
    fn table_function1(&mut self) -> Res<Option<i64>> {
        Ok(None)
    }
    fn write_state(&mut self, idx: usize, state: &str) -> Res<i64>;
    fn write_label(&mut self, idx: usize, label: &str) -> Res<i64>;
    /// The state(s) of one issue (update_heavy's point read).
    fn point_read(&mut self, idx: usize) -> Res<Vec<String>>;
    /// q1: the names of the user with this email.
    fn q1(&mut self, email: &str) -> Res<Vec<String>>;
    /// q2: (title, state) of every issue assigned to the user with this email.
    fn q2(&mut self, email: &str) -> Res<Vec<(String, String)>>;
    /// The current states of many issues (the final checks), by issue index.
    fn states_of(&mut self, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>>;
    /// The label names of many issues, by issue index.
    fn labels_of(&mut self, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>>;
}

const ALL: [&str; 4] = ["ceiling", "update_heavy", "single_tx", "write_mixed"];

struct Args {
    data: PathBuf,
    mentat: Option<String>,
    ext: Option<String>,
    sqlite: Option<String>,
    scenarios: Vec<String>,
    clients: Vec<usize>,
    update_time: f64,
    mixed_time: f64,
    ceiling_time: f64,
    /// `SET name = value` for mentat's database before the extension loads (`--duckdb-set`, repeatable).
    duckdb_set: Vec<String>,
    /// The statement of mentat's writes (`--mentat-write tx|transact`, [`duck::write_statement`]).
    mentat_write: &'static str,
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "{msg}\nusage: mentat-native-bench --data DIR [--mentat FILE --ext FILE] [--sqlite FILE] \
         [--scenarios {}] [--clients 1,8,64] [--update-time S] [--mixed-time S] [--ceiling-time S] \
         [--duckdb-set NAME=VALUE ...] [--mentat-write tx|transact]",
        ALL.join(",")
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        data: PathBuf::new(),
        mentat: None,
        ext: None,
        sqlite: None,
        scenarios: ALL.iter().map(|s| s.to_string()).collect(),
        clients: vec![1, 8, 64],
        update_time: 15.0,
        mixed_time: 10.0,
        ceiling_time: 4.0,
        duckdb_set: Vec::new(),
        mentat_write: duck::write_statement("tx").unwrap_or_default(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(k) = it.next() {
        if k == "-h" || k == "--help" {
            usage("the scale suite's native driver (see the doc comment of src/main.rs)");
        }
        let v = it.next().unwrap_or_else(|| usage(&format!("{k} needs a value")));
        let secs = |v: &str| v.parse::<f64>().unwrap_or_else(|_| usage(&format!("{k}: not a number: {v}")));
        match k.as_str() {
            "--data" => a.data = PathBuf::from(v),
            "--mentat" => a.mentat = Some(v.clone()),
            "--ext" => a.ext = Some(v.clone()),
            "--sqlite" => a.sqlite = Some(v.clone()),
            "--scenarios" => {
                a.scenarios = if v == "all" {
                    ALL.iter().map(|s| s.to_string()).collect()
                } else {
                    v.split(',').map(str::to_string).collect()
                };
                if let Some(bad) = a.scenarios.iter().find(|s| !ALL.contains(&s.as_str())) {
                    usage(&format!("unknown scenario {bad}"));
                }
            }
            "--clients" => {
                a.clients = v
                    .split(',')
                    .map(|x| x.parse().unwrap_or_else(|_| usage(&format!("--clients: not a number: {x}"))))
                    .collect()
            }
            "--update-time" => a.update_time = secs(v),
            "--mixed-time" => a.mixed_time = secs(v),
            "--ceiling-time" => a.ceiling_time = secs(v),
            "--duckdb-set" => a.duckdb_set.push(v.clone()),
            "--mentat-write" => {
                a.mentat_write = duck::write_statement(v).unwrap_or_else(|| usage("--mentat-write: tx or transact"))
            }
            _ => usage(&format!("unknown option {k}")),
        }
    }
    if a.data.as_os_str().is_empty() {
        usage("--data is required");
    }
    if a.mentat.is_some() != a.ext.is_some() {
        usage("--mentat and --ext go together");
    }
    a
}

/// Runs one scenario: its figures, or its error (a wrong answer is also added to `wrong`).
fn scenario(
    out: &mut Map<String, Value>,
    wrong: &mut Vec<String>,
    key: &str,
    f: impl FnOnce() -> Res<Value>,
) -> Option<Value> {
    let t = Instant::now();
    match f() {
        Ok(v) => {
            eprintln!("   {key}: {} ({:.1} s)", brief(&v), t.elapsed().as_secs_f64());
            Some(v)
        }
        Err(e) => {
            let msg = e.to_string();
            eprintln!("   {key}: {msg}");
            if msg.starts_with(bench::WRONG) {
                wrong.push(msg.clone());
            }
            out.entry("errors").or_insert_with(|| json!({}))[key] = json!(msg);
            None
        }
    }
}

fn brief(v: &Value) -> String {
    let s = |v: &Value| {
        format!(
            "{:.0} ops/s p50 {:.3} ms p99 {:.3} ms",
            v["ops_s"].as_f64().unwrap_or(f64::NAN),
            v["p50_ms"].as_f64().unwrap_or(f64::NAN),
            v["p99_ms"].as_f64().unwrap_or(f64::NAN)
        )
    };
    if v.get("all").is_some() {
        format!("{}; updates {}", s(&v["all"]), s(&v["writes"]))
    } else if v.get("writer").is_some() {
        format!("writer {}; readers {}", s(&v["writer"]), s(&v["readers"]))
    } else {
        s(v)
    }
}

fn run_driver(d: &dyn Driver, a: &Args, w: &Workload, keys: &[usize], wrong: &mut Vec<String>) -> Value {
    let mut out = Map::new();
    out.insert("status".into(), json!("ok"));
    out.insert("engine".into(), json!(d.engine()));
    eprintln!("== {}: {}", d.name(), d.engine());
    if let Err(e) = d.settle(w) {
        out.insert("status".into(), json!("error"));
        out.insert("reason".into(), json!(format!("settle: {e}")));
        return Value::Object(out);
    }
    let has = |s: &str| a.scenarios.iter().any(|x| x == s);
    if has("ceiling") {
        // prepared once (the workload's own way of sending statements), then as text on every call, then a
        // parameterised table function call (re-planned at every execution, as mentat's calls are)
        for (key, how) in
            [("ceiling", Ceiling::Prepared), ("ceiling_text", Ceiling::Text), ("ceiling_tf", Ceiling::TableFunction)]
        {
            if how == Ceiling::TableFunction && !bench::has_table_function(d) {
                continue;
            }
            let mut m = Map::new();
            for &n in &a.clients {
                let name = format!("{key} clients={n}");
                if let Some(v) = scenario(&mut out, wrong, &name, || bench::ceiling(d, n, a.ceiling_time, how)) {
                    m.insert(n.to_string(), v);
                }
            }
            out.insert(key.into(), Value::Object(m));
        }
    }
    if has("update_heavy") {
        let mut m = Map::new();
        for &n in &a.clients {
            let key = format!("update_heavy clients={n}");
            if let Some(v) = scenario(&mut out, wrong, &key, || bench::update_heavy(d, n, a.update_time, keys)) {
                m.insert(n.to_string(), v);
            }
        }
        out.insert("update_heavy".into(), Value::Object(m));
    }
    if has("single_tx") {
        if let Some(v) = scenario(&mut out, wrong, "single_tx", || bench::single_tx(d, w, a.update_time)) {
            out.insert("single_tx".into(), v);
        }
    }
    if has("write_mixed") {
        if let Some(v) = scenario(&mut out, wrong, "write_mixed", || bench::write_mixed(d, w, a.mixed_time)) {
            out.insert("write_mixed".into(), v);
        }
    }
    Value::Object(out)
}

fn failed(e: impl std::fmt::Display) -> Value {
    json!({"status": "error", "reason": e.to_string()})
}

/// `--selftest EXT`: loads the extension into an in-memory database of the linked libduckdb, transacts a schema
/// and an entity through `mentat_transact`, reads it back through `mentat_q`, and opens SQLite; prints what it
/// found. build.sh runs it after a build.
fn selftest(ext: &str) -> Res<()> {
    let cfg = duckdb::Config::default().allow_unsigned_extensions()?;
    let c = duckdb::Connection::open_with_flags(":memory:", cfg)?;
    let version: String = c.query_row("SELECT version()", [], |r| r.get(0))?;
    c.execute_batch(&format!("LOAD '{}'", ext.replace('\'', "''")))?;
    c.query_row(
        "SELECT tx FROM mentat_transact('[{:db/ident :t/name :db/valueType :db.type/string \
         :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]')",
        [],
        |r| r.get::<_, i64>(0),
    )?;
    let (tx, datoms): (i64, i64) =
        c.query_row("SELECT tx, datoms FROM mentat_transact('[{:t/name \"native\"}]')", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let name: String =
        c.query_row("SELECT name FROM mentat_q('[:find ?name :where [_ :t/name ?name]]')", [], |r| r.get(0))?;
    if name != "native" || datoms != 2 {
        return Err(format!("mentat_q gave {name:?} after a transaction of {datoms} datoms").into());
    }
    let sqlite: String =
        rusqlite::Connection::open_in_memory()?.query_row("SELECT sqlite_version()", [], |r| r.get(0))?;
    println!("selftest ok: DuckDB {version} loaded {ext}; mentat_transact gave tx {tx}; SQLite {sqlite}");
    Ok(())
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.len() == 3 && argv[1] == "--selftest" {
        if let Err(e) = selftest(&argv[2]) {
            eprintln!("selftest failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    if argv.len() == 3 && argv[1] == "--soak" {
        match soak::run(&argv[2]) {
            Ok(v) => println!("{}", serde_json::to_string_pretty(&v).unwrap()),
            Err(e) => {
                eprintln!("soak failed: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let a = parse_args();
    let t0 = Instant::now();
    let w = Workload::read(&a.data).unwrap_or_else(|e| usage(&format!("{}: {e}", a.data.display())));
    // update_heavy's keys: 200,000 scrambled Zipfian draws over the writable issues (seed 11, as the suite's)
    let mut z = ScrambledZipf::new(w.writable.len(), 0.99, 11);
    let keys: Vec<usize> = (0..200_000).map(|_| w.writable[z.sample()]).collect();
    let mut wrong = Vec::new();
    let mut drivers = Map::new();
    match (&a.mentat, &a.ext) {
        (Some(db), Some(ext)) => {
            let v = match duck::Mentat::open(db, ext, &a.duckdb_set, a.mentat_write, &w) {
                Ok(d) => run_driver(&d, &a, &w, &keys, &mut wrong),
                Err(e) => failed(format!("opening {db} with {ext}: {e}")),
            };
            drivers.insert("mentat".into(), v);
        }
        _ => {
            drivers.insert("mentat".into(), json!({"status": "skipped", "reason": "no --mentat store given"}));
        }
    }
    match &a.sqlite {
        Some(db) => {
            let v = match lite::Sqlite::open(db, &w) {
                Ok(d) => run_driver(&d, &a, &w, &keys, &mut wrong),
                Err(e) => failed(format!("opening {db}: {e}")),
            };
            drivers.insert("sqlite".into(), v);
        }
        None => {
            drivers.insert("sqlite".into(), json!({"status": "skipped", "reason": "no --sqlite store given"}));
        }
    }
    // the disk's fsync floor, in the directory of the stores
    let dir = a
        .mentat
        .as_ref()
        .or(a.sqlite.as_ref())
        .and_then(|p| std::path::Path::new(p).parent().map(|d| d.to_path_buf()))
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let fsync = bench::fsync_floor(&dir, 200).unwrap_or_else(failed);
    let doc = json!({
        "driver": "mentat-native-bench",
        "scale": w.scale,
        "threads_per_client": 1,
        "args": {
            "scenarios": a.scenarios, "clients": a.clients, "update_time": a.update_time,
            "mixed_time": a.mixed_time, "ceiling_time": a.ceiling_time, "duckdb_set": a.duckdb_set,
            "mentat_write": a.mentat_write,
            "writable_issues": w.writable.len(), "zipf_keys": keys.len(),
        },
        "drivers": drivers,
        "fsync_floor": fsync,
        "wrong": wrong,
        "seconds": t0.elapsed().as_secs_f64(),
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap());
}
