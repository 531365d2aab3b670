//! The timed scenarios, the same for both drivers: closed-loop clients, each an OS thread with its own session
//! (its own DuckDB or SQLite connection), for a fixed time. Every answer is checked; after the writes, the final
//! state of every issue written is read back and compared with the last acknowledged write.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::stats::{per_second, stats};
use crate::workload::{Rng, Workload, STATES};
use crate::{Driver, Res, Session};

/// The message of a wrong answer starts with this: such an error fails the suite's run, any other is a skip.
pub const WRONG: &str = "WRONG ANSWER";

pub fn wrong(msg: String) -> Box<dyn std::error::Error + Send + Sync> {
    format!("{WRONG}: {msg}").into()
}

/// Runs `client(i, session, stop, t0)` on one thread per session for `secs` seconds (or until a client fails),
/// then raises the stop flag and joins them. Returns the elapsed seconds and each client's output; the first
/// failure (a wrong answer first) is the result when any client failed.
fn run_clients<T: Send>(
    sessions: Vec<Box<dyn Session>>,
    secs: f64,
    client: impl Fn(usize, &mut dyn Session, &AtomicBool, Instant) -> Res<T> + Sync,
) -> Res<(f64, Vec<T>)> {
    let stop = AtomicBool::new(false);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let outs = std::thread::scope(|sc| {
        let handles: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                let (stop, failures, client) = (&stop, &failures, &client);
                sc.spawn(move || match client(i, s.as_mut(), stop, t0) {
                    Ok(x) => Some(x),
                    Err(e) => {
                        failures.lock().unwrap().push(e.to_string());
                        stop.store(true, Ordering::SeqCst);
                        None
                    }
                })
            })
            .collect();
        let end = t0 + Duration::from_secs_f64(secs);
        while Instant::now() < end && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10).min(end.saturating_duration_since(Instant::now())));
        }
        stop.store(true, Ordering::SeqCst);
        handles.into_iter().map(|h| h.join().expect("a client thread panicked")).collect::<Vec<_>>()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let mut f = failures.into_inner().unwrap();
    f.sort_by_key(|m| !m.starts_with(WRONG));
    if let Some(first) = f.into_iter().next() {
        return Err(first.into());
    }
    Ok((elapsed, outs.into_iter().map(|x| x.unwrap()).collect()))
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn sessions(d: &dyn Driver, n: usize) -> Res<Vec<Box<dyn Session>>> {
    (0..n).map(|_| d.session()).collect()
}

/// How [`ceiling`] sends its statement.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// `SELECT 1` through a statement prepared once per connection (how every workload statement is sent).
    Prepared,
    /// `SELECT 1` sent as text, parsed and planned on every call (how Python's `execute` sends it).
    Text,
    /// [`crate::Session::table_function1`]: a prepared one-parameter table function call, planned again at every
    /// execution as every mentat call is.
    TableFunction,
}

/// Whether the driver has [`Ceiling::TableFunction`]'s statement.
pub fn has_table_function(d: &dyn Driver) -> bool {
    d.session().and_then(|mut s| s.table_function1()).is_ok_and(|v| v.is_some())
}

/// A one-row statement from `n` threads for `secs`, sent as `how` says: the ceiling of any client that sends one
/// statement per operation.
pub fn ceiling(d: &dyn Driver, n: usize, secs: f64, how: Ceiling) -> Res<Value> {
    let mut ss = sessions(d, n)?;
    for s in ss.iter_mut() {
        s.select1()?; // connections are warm before the clock starts
    }
    let (el, lats) = run_clients(ss, secs, |_, s, stop, _| {
        let mut lat = Vec::with_capacity(1 << 16);
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            let v = match how {
                Ceiling::Prepared => s.select1()?,
                Ceiling::Text => s.select1_text()?,
                Ceiling::TableFunction => s.table_function1()?.unwrap_or(0),
            };
            lat.push(ms_since(t));
            if v != 1 {
                return Err(wrong(format!("the ceiling statement gave {v}")));
            }
        }
        Ok(lat)
    })?;
    Ok(stats(&lats.concat(), Some(el)))
}

/// An acknowledged write: the issue, the tx the store reported (its commit order), and the value written.
type Ack = (usize, i64, String);

/// Reads back the state of every issue in `acks` and compares it with the value of its last acknowledged write
/// (the one with the highest tx); also checks that no two acknowledged writes were given the same tx.
fn check_states(d: &dyn Driver, what: &str, acks: &[Ack]) -> Res<Value> {
    let mut last: HashMap<usize, (i64, &str)> = HashMap::new();
    let mut txs = HashSet::with_capacity(acks.len());
    for (idx, tx, st) in acks {
        if !txs.insert(*tx) {
            return Err(wrong(format!("{what}: two acknowledged writes were given tx {tx}")));
        }
        let e = last.entry(*idx).or_insert((*tx, st));
        if *tx > e.0 {
            *e = (*tx, st);
        }
    }
    let mut keys: Vec<usize> = last.keys().copied().collect();
    keys.sort_unstable();
    let got = d.session()?.states_of(&keys)?;
    let mut bad = Vec::new();
    for k in &keys {
        let want = last[k].1;
        let have = got.get(k).cloned().unwrap_or_default();
        if have.len() != 1 || have[0] != want {
            bad.push(format!("issue {k}: {have:?}, last acknowledged write {want}"));
        }
    }
    if !bad.is_empty() {
        return Err(wrong(format!(
            "{what}: {} of {} issues do not hold their last acknowledged state; {}",
            bad.len(),
            keys.len(),
            bad[..bad.len().min(3)].join("; ")
        )));
    }
    Ok(json!({"writes": acks.len(), "issues": keys.len()}))
}

/// `n` closed-loop clients for `secs`: 95% single-datom updates of an issue's state, 5% point reads of one,
/// over `keys` (a scrambled Zipfian sequence of issue indexes that client i walks from position i * 3001), as
/// `bench.update_heavy` in the Python suite. A point read must return exactly one valid state.
pub fn update_heavy(d: &dyn Driver, n: usize, secs: f64, keys: &[usize]) -> Res<Value> {
    let ss = sessions(d, n)?;
    // per client: events (end seconds since the start, latency ms, is a write) and acknowledged writes
    let (el, outs) = run_clients(ss, secs, |i, s, stop, t0| {
        let mut rng = Rng::new(1000 + i as u64);
        let mut k = i * 3001;
        let mut ev: Vec<(f64, f64, bool)> = Vec::with_capacity(1 << 14);
        let mut acks: Vec<Ack> = Vec::with_capacity(1 << 14);
        while !stop.load(Ordering::Relaxed) {
            let idx = keys[k % keys.len()];
            k += 1;
            let t = Instant::now();
            if rng.f64() < 0.95 {
                let st = STATES[rng.below(5)];
                let tx = s.write_state(idx, st)?;
                ev.push((t0.elapsed().as_secs_f64(), ms_since(t), true));
                acks.push((idx, tx, st.to_string()));
            } else {
                let r = s.point_read(idx)?;
                ev.push((t0.elapsed().as_secs_f64(), ms_since(t), false));
                if r.len() != 1 || !STATES.contains(&r[0].as_str()) {
                    return Err(wrong(format!("update_heavy point read of issue {idx}: {r:?}")));
                }
            }
        }
        Ok((ev, acks))
    })?;
    let (ev, acks): (Vec<_>, Vec<_>) = outs.into_iter().unzip();
    let ev: Vec<(f64, f64, bool)> = ev.concat();
    let acks: Vec<Ack> = acks.concat();
    let checked = check_states(d, &format!("update_heavy clients={n}"), &acks)?;
    let all: Vec<f64> = ev.iter().map(|e| e.1).collect();
    let wl: Vec<f64> = ev.iter().filter(|e| e.2).map(|e| e.1).collect();
    let rl: Vec<f64> = ev.iter().filter(|e| !e.2).map(|e| e.1).collect();
    let ends: Vec<f64> = ev.iter().map(|e| e.0).collect();
    Ok(json!({
        "all": stats(&all, Some(el)),
        "writes": stats(&wl, Some(el)),
        "reads": stats(&rl, Some(el)),
        "per_second": per_second(&ends, el),
        "checked": checked,
    }))
}

/// One client, single-datom transactions of an issue's state (issues drawn uniformly from the writable ones),
/// each its own transaction, for `secs`: transactions per second and their latency (`bench.single_tx`).
pub fn single_tx(d: &dyn Driver, w: &Workload, secs: f64) -> Res<Value> {
    let mut s = d.session()?;
    let mut rng = Rng::new(5);
    let mut lat = Vec::new();
    let mut acks: Vec<Ack> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        let idx = w.writable[rng.below(w.writable.len())];
        let st = STATES[rng.below(5)];
        let t = Instant::now();
        let tx = s.write_state(idx, st)?;
        lat.push(ms_since(t));
        acks.push((idx, tx, st.to_string()));
    }
    let el = t0.elapsed().as_secs_f64();
    drop(s);
    let mut out = stats(&lat, Some(el));
    out["checked"] = check_states(d, "single_tx", &acks)?;
    Ok(out)
}

/// One writer alternating `[:db/add E :issue/state S]` and `[:db/add E :issue/label L]` on uniformly drawn
/// writable issues, beside 8 readers alternating q1 and q2 about the probe users (whose issues no writer
/// touches), for `secs` (`bench.write_mixed`). Readers' answers are checked against truth.json; afterwards the
/// written states and labels are read back.
pub fn write_mixed(d: &dyn Driver, w: &Workload, secs: f64) -> Res<Value> {
    const READERS: usize = 8;
    let ss = sessions(d, READERS + 1)?;
    let (el, outs) = run_clients(ss, secs, |i, s, stop, _| {
        let mut lat = Vec::with_capacity(1 << 14);
        let mut acks: Vec<Ack> = Vec::new();
        let mut labels: Vec<(usize, String)> = Vec::new();
        if i == READERS {
            let mut rng = Rng::new(7);
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let idx = w.writable[rng.below(w.writable.len())];
                let t = Instant::now();
                if k.is_multiple_of(2) {
                    let st = STATES[rng.below(5)];
                    let tx = s.write_state(idx, st)?;
                    lat.push(ms_since(t));
                    acks.push((idx, tx, st.to_string()));
                } else {
                    let l = &w.labels[rng.below(w.labels.len())];
                    s.write_label(idx, l)?;
                    lat.push(ms_since(t));
                    labels.push((idx, l.clone()));
                }
                k += 1;
            }
            return Ok((true, lat, acks, labels));
        }
        let mut rng = Rng::new(9000 + i as u64);
        let mut k = i;
        while !stop.load(Ordering::Relaxed) {
            let p = &w.probes[rng.below(w.probes.len())];
            let t = Instant::now();
            if k.is_multiple_of(2) {
                let names = s.q1(&p.email)?;
                lat.push(ms_since(t));
                if names != [p.name.clone()] {
                    return Err(wrong(format!("write_mixed q1 {}: {names:?}, expected [{:?}]", p.email, p.name)));
                }
            } else {
                let mut rows = s.q2(&p.email)?;
                lat.push(ms_since(t));
                rows.sort();
                if rows != p.issues {
                    return Err(wrong(format!(
                        "write_mixed q2 {}: {} rows, expected {}",
                        p.email,
                        rows.len(),
                        p.issues.len()
                    )));
                }
            }
            k += 1;
        }
        Ok((false, lat, acks, labels))
    })?;
    let mut wl = Vec::new();
    let mut rl = Vec::new();
    let mut acks = Vec::new();
    let mut labels = Vec::new();
    for (is_writer, lat, a, l) in outs {
        if is_writer {
            wl = lat;
            acks = a;
            labels = l;
        } else {
            rl.extend(lat);
        }
    }
    let checked = check_states(d, "write_mixed", &acks)?;
    let idxs: Vec<usize> = labels.iter().map(|x| x.0).collect::<HashSet<_>>().into_iter().collect();
    let have = d.session()?.labels_of(&idxs)?;
    for (idx, l) in &labels {
        if !have.get(idx).is_some_and(|v| v.contains(l)) {
            return Err(wrong(format!("write_mixed: issue {idx} lacks label {l}, written and acknowledged")));
        }
    }
    Ok(json!({
        "writer": stats(&wl, Some(el)),
        "readers": stats(&rl, Some(el)),
        "checked": {"state_writes": checked, "label_writes": labels.len()},
    }))
}

/// The disk's own floor under a durable commit: 4 KiB appended to a file in `dir` and fsynced, `n` times
/// (`bench.fsync_floor`).
pub fn fsync_floor(dir: &std::path::Path, n: usize) -> Res<Value> {
    use std::io::Write;
    let path = dir.join("native_fsync_probe.bin");
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let buf = [b'x'; 4096];
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&buf)?;
        f.sync_all()?;
        lat.push(ms_since(t));
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(stats(&lat, None))
}
