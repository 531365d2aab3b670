//! Group commit: transactions of one store that arrive while another is being written wait in a queue, and the
//! next leader writes the whole queue in one DuckDB transaction with one COMMIT (one WAL sync), then hands each
//! caller its own report. DuckDB's own WAL group commit only overlaps concurrent DuckDB transactions; ours are
//! serialized by the store's writer lock, so batching them is the transactor's job.
//!
//! Serial equivalence (Datomic's single-writer semantics): a group of N gives exactly the result of N
//! transactions run one after another in arrival order. Each member is its own transaction: its own tx entid,
//! a strictly later `:db/txInstant`, its own tempids; it sees the members before it (their datoms through the
//! open DuckDB transaction, their schema and partition marks through the chained store state, their unique
//! values through the transactor's cache, updated member by member). A member that fails (bad EDN, unknown
//! attribute, unique conflict, cas mismatch) fails alone: the group is rolled back, that member is reported with
//! its error, and the others are written again without it (a failing member costs its group one more pass;
//! DuckDB has no savepoints to undo one member alone). Everything is acknowledged after the COMMIT returns, so an
//! acknowledged transaction is durable.
//!
//! [`transact_many`] is the batch itself (`mentat_transact_many`); [`transact`] is one caller's transaction
//! through the queue (`mentat_transact`).

use crate::eindex::Committed;
use crate::error::{Result, StorageError};
use crate::pending::{needs_flush, Pending};
use crate::store::Store;
use crate::trace::Trace;
use crate::transactor::{self, TxReport};
use crate::txparse::{parse_edn, parse_forms, Term};
use duckdb::Connection;
use rayon::prelude::*;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Transactions a group holds at most; the rest wait for the next group.
pub const GROUP_MAX: usize = 4096;

/// EDN bytes of a group past which its texts are parsed on all cores (rayon).
pub const PARALLEL_PARSE_BYTES: usize = 16 * 1024;

/// Transactions waiting for a leader (one queue per store). Each caller waits on a slot of its own, which the
/// leader of its group fills and wakes alone; when a group is done and transactions are still waiting, the first
/// of their callers is woken to lead the next group.
///
/// The first version had one condition variable for every caller, woken whole (`notify_all`) when a group was
/// done: with 64 writers, each group woke the other 63 threads, of which all but the group's members went back to
/// sleep. Measured with the native driver's update_heavy at s, 64 clients (storage/README.md "Group commit wakes
/// its members alone").
#[derive(Default)]
pub struct Queue {
    state: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    /// Waiting transactions: EDN text, the caller's hook for its commit point ([`crate::interrupt::Hook`]), and
    /// the caller's slot.
    pending: Vec<(String, Option<crate::interrupt::Hook>, Arc<Slot>)>,
    leading: bool,
}

/// Where a waiting caller learns its transaction's report, or that it is to lead the next group.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    changed: Condvar,
}

#[derive(Default)]
enum SlotState {
    #[default]
    Waiting,
    /// Woken to lead: transactions wait and no group is being written.
    Lead,
    Done(Result<TxReport>),
}

impl Slot {
    fn set(&self, to: SlotState) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // a report is never replaced by a call to lead
        if !matches!(*s, SlotState::Done(_)) {
            *s = to;
            self.changed.notify_one();
        }
    }

    /// Waits until the slot is decided or its caller is to lead; takes the report when there is one.
    fn wait(&self) -> Option<Result<TxReport>> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*s, SlotState::Waiting) {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        match std::mem::take(&mut *s) {
            SlotState::Done(r) => Some(r),
            _ => None,
        }
    }
}

fn lock(m: &Mutex<Waiting>) -> MutexGuard<'_, Waiting> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs one transaction of EDN tx data against `store` through the store's queue: the caller either becomes the
/// leader and writes every waiting transaction as one group on `conn`, or waits while another caller's
/// connection writes its transaction in a group. Same result and errors as [`transactor::transact`]; the
/// report comes back once the group's COMMIT has returned.
pub fn transact(conn: &Connection, store: &Store, edn: &str) -> Result<TxReport> {
    transact_with(store, edn, || Ok(conn))
}

/// [`transact`] with the connection borrowed only when this caller leads a group: `connect` is called then, and
/// what it returns is dropped when the group is written. A caller whose transaction another leader writes never
/// holds a connection while it waits.
///
/// With a connection borrowed for every call, 64 writer threads took all 32 of the extension's connections, so a
/// group held at most 32 transactions and the other writers waited for a connection before they could even
/// queue (perf: 7% of the native driver's CPU in the pool's hand-over; storage/README.md "Waiting without a
/// connection"). When `connect` fails, this caller's transaction fails with its error and leaves the queue, and
/// the next waiting caller is asked to lead.
pub fn transact_with<C: std::ops::Deref<Target = Connection>>(
    store: &Store,
    edn: &str,
    mut connect: impl FnMut() -> Result<C>,
) -> Result<TxReport> {
    let queue = &store.queue;
    let slot = Arc::new(Slot::default());
    lock(&queue.state).pending.push((edn.to_string(), crate::interrupt::hook(), slot.clone()));
    loop {
        let mut q = lock(&queue.state);
        if !q.leading && !q.pending.is_empty() {
            q.leading = true;
            drop(q);
            let conn = match connect() {
                Ok(conn) => conn,
                Err(e) => {
                    let mut q = lock(&queue.state);
                    q.leading = false;
                    q.pending.retain(|(_, _, s)| !Arc::ptr_eq(s, &slot));
                    if let Some((_, _, next)) = q.pending.first() {
                        next.set(SlotState::Lead);
                    }
                    return Err(e);
                }
            };
            let conn: &Connection = &conn;
            let mut q = lock(&queue.state);
            let n = q.pending.len().min(GROUP_MAX);
            let group: Vec<(String, Option<crate::interrupt::Hook>, Arc<Slot>)> = q.pending.drain(..n).collect();
            drop(q);
            let texts: Vec<&str> = group.iter().map(|(t, _, _)| t.as_str()).collect();
            // the leader's own commit point is its in_deferred_transaction's; the others' are passed on their behalf
            let points: Vec<Option<crate::interrupt::Hook>> =
                group.iter().map(|(_, h, s)| if Arc::ptr_eq(s, &slot) { None } else { h.clone() }).collect();
            let reports = std::panic::catch_unwind(AssertUnwindSafe(|| transact_group(conn, store, &texts, &points)))
                .unwrap_or_else(|_| {
                    let msg = "the transactor panicked while writing a group; nothing of it was written";
                    texts.iter().map(|_| Err(StorageError::Store(msg.into()))).collect()
                });
            for ((_, _, s), r) in group.iter().zip(reports) {
                s.set(SlotState::Done(r));
            }
            let mut q = lock(&queue.state);
            q.leading = false;
            if let Some((_, _, next)) = q.pending.first() {
                next.set(SlotState::Lead);
            }
        } else {
            drop(q);
        }
        if let Some(r) = slot.wait() {
            // A group that a leader's interrupt rolled back took this caller's transaction with it: it was not
            // written, and this caller did not ask to stop, so it waits for the next group.
            if matches!(r, Err(StorageError::Interrupted)) && !crate::interrupt::requested() {
                lock(&queue.state).pending.push((edn.to_string(), crate::interrupt::hook(), slot.clone()));
                continue;
            }
            return r;
        }
    }
}

/// Runs `edns` against `store` on `conn` as consecutive transactions written in one DuckDB transaction with one
/// COMMIT, and returns one result per transaction, in order (see the module docs for the semantics). The EDN
/// texts are parsed in parallel; the writes are the store's single writer's. A store that cannot be written,
/// a failed COMMIT or an interrupt fails every member that was not already decided.
pub fn transact_many(conn: &Connection, store: &Store, edns: &[&str]) -> Vec<Result<TxReport>> {
    transact_group(conn, store, edns, &[])
}

/// [`transact_many`] for a group of waiting callers: `points[i]`, when there is one, is the commit point of the
/// caller of `edns[i]` (not the leader's own), passed right before the COMMIT for every member that is to be
/// written. A caller who interrupted first is left out: the group rolls back and is written again without it
/// (it is told [`StorageError::Interrupted`]); the others cannot be failed by an interrupt from then on, as a
/// caller who writes alone ([`crate::interrupt::committing`]).
fn transact_group(
    conn: &Connection,
    store: &Store,
    edns: &[&str],
    points: &[Option<crate::interrupt::Hook>],
) -> Vec<Result<TxReport>> {
    use crate::interrupt::Point;
    let point = |i: usize| points.get(i).and_then(|h| h.as_ref());
    if let Some(why) = store.read_only() {
        let msg = format!("{} is read-only ({why}): transactions cannot change it", store.name);
        return edns.iter().map(|_| Err(StorageError::Store(msg.clone()))).collect();
    }
    let mut first_trace = Some(Trace::start());
    // on all cores when there is enough to parse (a handful of small texts parse faster than a pool hand-off)
    let bytes: usize = edns.iter().map(|t| t.len()).sum();
    let parsed: Vec<Result<Vec<edn_format::Value>>> = if edns.len() > 1 && bytes >= PARALLEL_PARSE_BYTES {
        edns.par_iter().map(|t| parse_edn(t)).collect()
    } else {
        edns.iter().map(|t| parse_edn(t)).collect()
    };
    let mut forms = Vec::with_capacity(edns.len());
    let mut results: Vec<Option<Result<TxReport>>> = Vec::with_capacity(edns.len());
    for p in parsed {
        match p {
            Ok(f) => {
                forms.push(Arc::new(f));
                results.push(None);
            }
            Err(e) => {
                forms.push(Arc::new(Vec::new()));
                results.push(Some(Err(e)));
            }
        }
    }
    if let Some(t) = first_trace.as_mut() {
        t.mark("edn");
    }
    let _writer = store.lock_writer();
    if let Some(t) = first_trace.as_mut() {
        t.mark("lock");
    }
    loop {
        let members: Vec<usize> = (0..results.len()).filter(|i| results[*i].is_none()).collect();
        if members.is_empty() {
            break;
        }
        // a member that failed after it changed the tables (its schema DDL): the group rolls back without it
        let mut failed: Option<(usize, StorageError)> = None;
        store.log.begin();
        let mut trace = first_trace.take().unwrap_or_else(Trace::start);
        // DuckDB's transaction opens at the group's first write: a group the log takes whole sends no BEGIN or
        // COMMIT (crate::in_deferred_transaction)
        let outcome = crate::in_deferred_transaction(conn, || {
            let mut state = store.refresh(conn)?;
            // parsed with the schema at the start; a member after a schema change is parsed again
            let parsed_with = state.schema.clone();
            let mut terms: Vec<Option<Result<Vec<Term>>>> =
                members.iter().map(|&i| Some(parse_forms(&forms[i], &parsed_with))).collect();
            trace.mark("terms");
            let mut pending = Pending::new(state.parts);
            let prefetch = |pending: &Pending, terms: &[Option<Result<Vec<Term>>>], from: usize| {
                let parsed = terms[from..].iter().filter_map(|t| match t {
                    Some(Ok(t)) => Some(t.as_slice()),
                    _ => None,
                });
                pending.prefetch(conn, store, &parsed_with, parsed)
            };
            prefetch(&pending, &terms, 0)?;
            trace.mark("prefetch");
            let mut refused: Vec<(usize, StorageError)> = Vec::new();
            for (k, &i) in members.iter().enumerate() {
                let parsed = terms[k].take().expect("each member is parsed once");
                let parsed = if Arc::ptr_eq(&state.schema, &parsed_with) {
                    parsed
                } else {
                    parse_forms(&forms[i], &state.schema)
                };
                let member_terms = match parsed {
                    Ok(t) => t,
                    Err(e) => {
                        refused.push((i, e));
                        continue;
                    }
                };
                let flush_first = needs_flush(&member_terms);
                if flush_first {
                    // a schema change or a whole-entity retraction reads and writes the tables themselves
                    crate::before_write(conn)?;
                }
                if flush_first && (!pending.is_empty() || store.log.holds(None)) {
                    pending.flush(conn, store, &state.schema, &state.parts)?;
                    if Arc::ptr_eq(&state.schema, &parsed_with) {
                        prefetch(&pending, &terms, k + 1)?;
                    }
                }
                pending.catch_up(&state.schema);
                match transactor::run_terms(conn, store, &state, member_terms, Some(&pending), &mut Trace::start()) {
                    Ok(a) => {
                        // the next member sees this one's unique values (undone below if the group rolls back)
                        store.apply_lookups(&a.cache.0, &a.cache.1);
                        state = a.state.clone();
                        pending.add(i, a);
                    }
                    // an interrupt stops the whole group, not one member (the others would each meet it in turn)
                    Err(StorageError::Interrupted) => return Err(StorageError::Interrupted),
                    // a schema change may have run DDL before it failed, and an error of DuckDB's (an interrupted
                    // statement among them) aborts DuckDB's transaction: only a rollback undoes either, and the
                    // group runs again without the member (without any member once the caller has interrupted)
                    Err(_) if crate::interrupt::requested() => return Err(StorageError::Interrupted),
                    Err(e) if flush_first || matches!(e, StorageError::DuckDb(_)) => {
                        failed = Some((i, e));
                        return Err(StorageError::Store("a member of the group failed".into()));
                    }
                    // nothing of a failed member reached the tables or the novelty: it fails alone
                    Err(e) => refused.push((i, e)),
                }
            }
            trace.mark("members");
            let logged = pending.finish(conn, store, &state.schema, &state.parts)?;
            trace.mark(if logged.is_some() { "log" } else { "write" });
            // the waiting callers' commit points, right before the leader's own (in in_deferred_transaction)
            for &i in &members {
                if refused.iter().all(|(r, _)| *r != i) && point(i).is_some_and(|h| !h(Point::Commit)) {
                    failed = Some((i, StorageError::Interrupted));
                    return Err(StorageError::Store("a member of the group was interrupted".into()));
                }
            }
            Ok((pending.into_members(), refused, state, logged))
        });
        for &i in &members {
            if let Some(h) = point(i) {
                // rolled back: the member may be interrupted again while it waits for the next group
                if outcome.is_err() {
                    h(Point::Begin);
                }
                h(Point::Committed);
            }
        }
        trace.mark("commit");
        // a logged group is durable once its record (its datoms and the partition marks it moved) is synced to
        // the log file, after DuckDB's COMMIT (when the group applied earlier records): a failed sync fails the
        // whole group
        let outcome = outcome.and_then(|(applied, refused, state, logged)| {
            let synced = logged.is_some();
            store.log.commit(logged)?;
            if synced {
                trace.mark("sync");
            }
            Ok((applied, refused, state))
        });
        match outcome {
            Ok((applied, refused, state)) => {
                store.commit_state(state, &[], &[]);
                let committed: Vec<Committed<'_>> =
                    applied.iter().map(|(_, a)| (a.report.tx, &a.written.0[..], &a.written.1[..])).collect();
                store.index.apply_all(&committed);
                trace.mark("index");
                trace.print(&format!("group of {} ({} failed)", members.len(), refused.len()));
                let mut rest = Vec::with_capacity(applied.len());
                for (i, mut a) in applied {
                    let report = TxReport { tempids: std::mem::take(&mut a.report.tempids), ..a.report };
                    results[i] = Some(Ok(report));
                    rest.push(a);
                }
                drop_later(rest, bytes);
                for (i, e) in refused {
                    results[i] = Some(Err(e));
                }
            }
            Err(group_error) => {
                store.log.rollback();
                // the rolled-back members' unique values may be in the cache: start it again empty
                store.clear_lookups();
                match failed {
                    Some((i, e)) => results[i] = Some(Err(e)),
                    None => {
                        let msg = group_error.to_string();
                        let interrupted =
                            matches!(group_error, StorageError::Interrupted) || crate::interrupt::requested();
                        for &i in &members {
                            results[i] = Some(Err(if interrupted {
                                StorageError::Interrupted
                            } else {
                                StorageError::Store(format!("the group commit holding this transaction failed: {msg}"))
                            }));
                        }
                    }
                }
            }
        }
    }
    drop_later(forms, bytes);
    results.into_iter().map(|r| r.expect("every member is decided")).collect()
}

/// Drops `x`, what a group of `bytes` of EDN left, on a pool thread when the group is large: a bulk group's forms
/// and datoms are some 10,000 allocations (0.2 to 0.3 ms to free), which the caller need not wait for; a small
/// group's are freed faster than a pool thread wakes up (and beside busy readers, the wake-up costs a core).
fn drop_later<T: Send + 'static>(x: T, bytes: usize) {
    if bytes >= PARALLEL_PARSE_BYTES {
        rayon::spawn(move || drop(x));
    }
}
