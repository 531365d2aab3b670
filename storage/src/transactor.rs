//! The transactor: resolves a parsed transaction against the store (lookup refs, upserts, tempids,
//! cardinality-one replacement, `:db/retractEntity`, `:db/cas`, schema changes) and writes it, all inside one
//! DuckDB transaction on the caller's connection. Every lookup is a set-based join against the staged keys
//! (see [`crate::stage`]); the datoms are written with the appender and one `INSERT ... SELECT` or
//! `DELETE ... USING` per touched attribute table.
//!
//! Semantics follow Datomic's `transact` as Mentat implemented it: redundant assertions and retractions of
//! absent datoms are no-ops that leave no history; asserting a new value of a cardinality-one attribute retracts
//! the old one; tempids that upsert to one entity through `:db.unique/identity` merge, and a tempid that upserts
//! to two entities is an error; new tempids with the same identity value become one entity.

use crate::error::{Result, StorageError};
use crate::pending::Pending;
use crate::stage::{self, from_store, read_val, to_store, KEYS, STAGE};
use crate::store::{self, Partitions, Store, StoreState};
use crate::trace::Trace;
use crate::txparse::{parse_edn, parse_forms, EntityPlace, FormText, TempId, Term, ValuePlace};
use crate::value::Val;
use duckdb::Connection;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use planner::layout::{self, StoreName};
use planner::schema::{Attribute, Entid, Schema, TupleSpec, Unique, ValueType};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a committed transaction reports (the row `mentat_transact` returns).
#[derive(Clone, Debug, PartialEq)]
pub struct TxReport {
    /// The transaction's entid (in `:db.part/tx`).
    pub tx: Entid,
    /// `:db/txInstant`, microseconds since the Unix epoch, UTC.
    pub tx_instant: i64,
    /// Datoms asserted plus datoms retracted, including the transaction's own `:db/txInstant` datom.
    pub datoms: i64,
    /// The entid each string tempid resolved to, sorted by tempid.
    pub tempids: Vec<(String, Entid)>,
}

/// Runs one transaction of EDN tx data against `store` on `conn` and commits it.
///
/// The whole call is one atomic DuckDB transaction on `conn` (which must not have one open): on any error it is
/// rolled back and the store is unchanged. Transactions of one store run one at a time (the store's writer
/// lock). Errors: [`StorageError`] naming the offending form or datom.
pub fn transact(conn: &Connection, store: &Store, edn: &str) -> Result<TxReport> {
    let mut trace = Trace::start();
    if let Some(why) = store.read_only() {
        return Err(StorageError::Store(format!("{} is read-only ({why}): transactions cannot change it", store.name)));
    }
    let _writer = store.lock_writer_settled(conn)?;
    let forms = Arc::new(parse_edn(edn)?);
    trace.mark("edn");
    let a = crate::in_transaction(conn, || run_open(conn, store, &forms, &mut trace))?;
    trace.mark("commit");
    store.commit_state(a.state, &a.cache.0, &a.cache.1);
    store.index.apply(a.report.tx, &a.written.0, &a.written.1);
    trace.mark("index");
    trace.print(&format!("tx {} ({} datoms)", a.report.tx, a.report.datoms));
    Ok(a.report)
}

/// The datoms a transaction wrote: asserted, and retracted with the tx that asserted each.
pub(crate) type Written = (Vec<Eav>, Vec<(Eav, Entid)>);

/// What one transaction did inside its open DuckDB transaction, up to (not including) COMMIT: its report, the
/// store state after it, and the unique-value cache changes and datoms written, which the caches take once the
/// COMMIT has returned.
pub(crate) struct Applied {
    pub report: TxReport,
    pub state: StoreState,
    pub cache: CacheChanges,
    pub written: Written,
    /// The entities the transaction allocated (they had no datoms before it).
    pub new_entities: HashSet<Entid>,
}

fn run_open(
    conn: &Connection,
    store: &Store,
    forms: &Arc<Vec<edn_format::Value>>,
    trace: &mut Trace,
) -> Result<Applied> {
    // Inside the transaction, so that the partition marks checked here are the ones this transaction moves.
    let state = store.refresh(conn)?;
    trace.mark("refresh");
    let terms = parse_forms(forms, &state.schema)?;
    trace.mark("terms");
    run_terms(conn, store, &state, terms, None, trace)
}

/// Runs one transaction's terms (parsed with `state.schema`) against `state` (the store's state, or the state a
/// group's earlier members left) inside the caller's open DuckDB transaction. Without `pending` its datoms are
/// written to the tables before this returns; with it (a group commit), it reads the store through `pending`
/// and leaves its datoms in the returned [`Applied`] for the group to write.
pub(crate) fn run_terms(
    conn: &Connection,
    store: &Store,
    state: &StoreState,
    terms: Vec<Term>,
    pending: Option<&Pending>,
    trace: &mut Trace,
) -> Result<Applied> {
    let mut tx = Tx::new(conn, store, state, pending);
    let report = tx.run(terms, trace)?;
    let cache = std::mem::take(&mut tx.cache_changes);
    let written = std::mem::take(&mut tx.written);
    let new_entities = std::mem::take(&mut tx.new_entities);
    Ok(Applied {
        report,
        state: StoreState { schema: tx.schema.clone(), parts: tx.parts },
        cache,
        written,
        new_entities,
    })
}

/// A datom without its tx: entity, attribute, value.
pub(crate) type Eav = (Entid, Entid, Val);

/// Transactions of at most this many datoms use point statements with bound parameters instead of staging rows.
const SMALL_TX: usize = 16;

/// Reads of at most this many (entity, attribute) pairs use point statements instead of staging keys (a staged
/// read is three statements: empty the keys, append them, join).
const SMALL_READ: usize = 4;

/// (entity, attribute) -> the current values with the tx that asserted each.
pub(crate) type CurrentValues = HashMap<(Entid, Entid), Vec<(Val, Entid)>>;

/// Unique datoms a transaction changed: (attribute, value) retracted, (attribute, value, entity) asserted.
pub(crate) type CacheChanges = (Vec<(Entid, Val)>, Vec<(Entid, Val, Entid)>);

struct Tx<'a> {
    conn: &'a Connection,
    store: &'a StoreName,
    cache: &'a Store,
    cache_changes: CacheChanges,
    /// The datoms written, for the entity index once committed.
    written: Written,
    /// The tx that asserted each datom this transaction retracts (it moves to history with it).
    asserted_in: HashMap<Eav, Entid>,
    /// The partition marks when the transaction started.
    parts_before: Partitions,
    /// The schema as of the start; `schema` becomes the schema after the transaction (copied only when the
    /// transaction changes it).
    before: Arc<Schema>,
    schema: Arc<Schema>,
    parts: Partitions,
    tx: Entid,
    tempids: HashMap<TempId, Entid>,
    /// The holders of unique values found so far, per attribute (None: no entity holds the value).
    lookups: HashMap<Entid, HashMap<Val, Option<Entid>>>,
    new_entities: HashSet<Entid>,
    /// Inside a group commit: the datoms the group's earlier members wrote, which this transaction reads through
    /// and does not write itself (the group writes them all at once). None: reads and writes go to the tables.
    pending: Option<&'a Pending>,
}

impl<'a> Tx<'a> {
    fn new(conn: &'a Connection, cache: &'a Store, state: &StoreState, pending: Option<&'a Pending>) -> Tx<'a> {
        let mut parts = state.parts;
        let tx = parts.next_tx;
        parts.next_tx += 1;
        Tx {
            conn,
            store: &cache.name,
            cache,
            cache_changes: Default::default(),
            written: Default::default(),
            asserted_in: HashMap::new(),
            parts_before: state.parts,
            before: state.schema.clone(),
            schema: state.schema.clone(),
            parts,
            tx,
            tempids: HashMap::new(),
            lookups: HashMap::new(),
            new_entities: HashSet::new(),
            pending,
        }
    }

    fn attr(&self, a: Entid) -> &Attribute {
        self.before.attribute(a).expect("terms only name attributes of the schema they were parsed with")
    }

    fn run(&mut self, terms: Vec<Term>, trace: &mut Trace) -> Result<TxReport> {
        let terms_name_tx = terms.iter().flat_map(Term::entity_places).any(|p| *p == EntityPlace::Tx);
        self.check_allocated(&terms)?;
        self.resolve_lookup_refs(&terms)?;
        trace.mark("lookup-refs");
        self.upsert(&terms)?;
        trace.mark("upsert");
        self.allocate(&terms)?;
        let mut adds: Vec<Eav> = Vec::new();
        let mut retracts: Vec<Eav> = Vec::new();
        let mut retract_entities: Vec<Entid> = Vec::new();
        let mut retract_attrs: Vec<(Entid, Entid)> = Vec::new();
        let mut cas: Vec<(Entid, Entid, Option<Val>, Val, String)> = Vec::new();
        let mut explicit_instant: Option<(i64, String)> = None;
        for t in &terms {
            match t {
                Term::Add { e, a, v, form } => {
                    let (e, v) = (self.entity(e, form)?, self.value(v, form)?);
                    if *a == layout::DB_TX_INSTANT {
                        if e != self.tx {
                            return Err(tx_instant_elsewhere(form, e, self.new_entities.contains(&e)));
                        }
                        if let Val::Instant(us) = v {
                            explicit_instant = Some((us, form.to_string()));
                        }
                        continue;
                    }
                    adds.push((e, *a, v));
                }
                Term::Retract { a, form, .. } | Term::RetractAttribute { a, form, .. } | Term::Cas { a, form, .. }
                    if *a == layout::DB_TX_INSTANT =>
                {
                    return Err(tx_instant_unchangeable(form));
                }
                Term::Retract { e, a, v, form } => retracts.push((self.entity(e, form)?, *a, self.value(v, form)?)),
                Term::RetractAttribute { e, a, form } => retract_attrs.push((self.entity(e, form)?, *a)),
                Term::RetractEntity { e, form } => {
                    let e = self.entity(e, form)?;
                    if e >= layout::PART_TX_START {
                        return Err(tx_entity_retracted(form, e));
                    }
                    retract_entities.push(e);
                }
                Term::Cas { e, a, old, new, form } => {
                    let old = match old {
                        Some(o) => Some(self.value(o, form)?),
                        None => None,
                    };
                    cas.push((self.entity(e, form)?, *a, old, self.value(new, form)?, form.to_string()));
                }
            }
        }
        trace.mark("resolve");
        adds.extend(self.check_cas(&cas)?);
        retracts.extend(self.expand_retract_entities(&retract_entities)?);
        retracts.extend(self.expand_retract_attributes(&retract_attrs)?);
        // The forms above refuse every way of naming it; this catches an expansion that reaches one anyway (a
        // component of a retracted entity that is a transaction entity).
        if let Some(d) = retracts.iter().find(|d| d.1 == layout::DB_TX_INSTANT) {
            let form = self.form_of(&terms, d, false).unwrap_or_else(|| "the transaction".to_string());
            return Err(tx_entity_retracted(&form, d.0));
        }
        let mut adds = dedupe(adds);
        let mut retracts = dedupe(retracts);
        check_internal_conflicts(&self.before, &adds, &retracts, &|d, added| self.form_of(&terms, d, added))?;
        trace.mark("expand");
        self.against_current_state(&mut adds, &mut retracts)?;
        self.maintain_composites(&mut adds, &mut retracts)?;
        trace.mark("current-state");
        self.check_unique(&terms, &adds, &retracts)?;
        trace.mark("unique");
        self.apply_schema_changes(&terms, &adds, &retracts)?;
        let tx_instant = self.tx_instant(explicit_instant)?;
        adds.push((self.tx, layout::DB_TX_INSTANT, Val::Instant(tx_instant)));
        trace.mark("schema");
        self.write(&adds, &retracts, trace)?;
        let unique = |a: &Entid| self.schema.attribute(*a).is_some_and(|x| x.unique.is_some());
        self.cache_changes = (
            retracts.iter().filter(|d| unique(&d.1)).map(|d| (d.1, d.2.clone())).collect(),
            adds.iter().filter(|d| unique(&d.1)).map(|d| (d.1, d.2.clone(), d.0)).collect(),
        );
        self.parts.last_tx_instant = tx_instant;
        let retracted = retracts.into_iter().map(|d| {
            let asserted = self.asserted_in.get(&d).copied().unwrap_or(0);
            (d, asserted)
        });
        self.written = (adds, retracted.collect());
        let mut tempids: Vec<(String, Entid)> = self
            .tempids
            .iter()
            .filter_map(|(t, e)| match t {
                TempId::User(s) => Some((s.clone(), *e)),
                TempId::Internal(_) => None,
            })
            .collect();
        // Datomic reports the transaction's own tempid when the transaction names it
        if terms_name_tx {
            tempids.push(("datomic.tx".to_string(), self.tx));
        }
        tempids.sort();
        Ok(TxReport { tx: self.tx, tx_instant, datoms: (self.written.0.len() + self.written.1.len()) as i64, tempids })
    }

    /// Entities of attribute `aid` whose current value is one of `values`, through one join (or, inside a group
    /// commit, through the group's [`Pending`] view of the store).
    fn find_by_values(&mut self, aid: Entid, values: &[Val]) -> Result<()> {
        let known = self.lookups.entry(aid).or_default();
        known.reserve(values.len());
        let mut values: Vec<&Val> = values.iter().filter(|v| !known.contains_key(*v)).collect();
        values.retain(|v| match self.cache.cached_lookup(aid, v) {
            Some(e) => {
                known.insert((*v).clone(), Some(e));
                false
            }
            None => true,
        });
        if values.is_empty() {
            return Ok(());
        }
        let found = match self.pending {
            Some(p) => p.holders(self.conn, self.cache, self.attr(aid), &values)?,
            None => {
                let mut found = vec![None; values.len()];
                for (i, e) in read_holders(self.conn, self.cache, self.attr(aid), &values, true)? {
                    found[i] = Some(e);
                }
                found
            }
        };
        let known = self.lookups.entry(aid).or_default();
        for (v, e) in values.iter().zip(found) {
            known.insert((*v).clone(), e);
        }
        Ok(())
    }

    /// The holder of unique value `v` of `a` as found so far: None when not looked up yet, Some(None) when no
    /// entity holds it.
    fn looked_up(&self, a: Entid, v: &Val) -> Option<Option<Entid>> {
        self.lookups.get(&a)?.get(v).copied()
    }

    fn resolve_lookup_refs(&mut self, terms: &[Term]) -> Result<()> {
        let mut wanted: BTreeMap<Entid, HashSet<&Val>> = BTreeMap::new();
        for p in terms.iter().flat_map(Term::entity_places) {
            if let EntityPlace::LookupRef(a, v) = p {
                wanted.entry(*a).or_default().insert(v);
            }
        }
        for (a, values) in wanted {
            let values: Vec<Val> = values.into_iter().cloned().collect();
            self.find_by_values(a, &values)?;
        }
        Ok(())
    }

    /// Resolves tempids that assert a `:db.unique/identity` value some entity already has, over as many passes
    /// as chained tempids need.
    fn upsert(&mut self, terms: &[Term]) -> Result<()> {
        loop {
            let mut candidates: Vec<(TempId, Entid, Val)> = Vec::new();
            for t in terms {
                if let Term::Add { e: EntityPlace::TempId(tid), a, v, .. } = t {
                    if self.attr(*a).unique != Some(Unique::Identity) {
                        continue;
                    }
                    let v = self.try_value(v);
                    if let Some(v) = v {
                        candidates.push((tid.clone(), *a, v));
                    }
                }
            }
            candidates.extend(self.composite_upserts(terms));
            let mut by_attr: BTreeMap<Entid, Vec<Val>> = BTreeMap::new();
            for (_, a, v) in &candidates {
                by_attr.entry(*a).or_default().push(v.clone());
            }
            for (a, values) in by_attr {
                self.find_by_values(a, &values)?;
            }
            let mut progress = false;
            for (tid, a, v) in candidates {
                if let Some(Some(found)) = self.looked_up(a, &v) {
                    match self.tempids.get(&tid) {
                        Some(prev) if *prev != found => {
                            return Err(StorageError::UpsertConflict {
                                tempid: tid.to_string(),
                                first: *prev,
                                second: found,
                            })
                        }
                        Some(_) => {}
                        None => {
                            self.tempids.insert(tid, found);
                            progress = true;
                        }
                    }
                }
            }
            if !progress {
                return Ok(());
            }
        }
    }

    /// Refuses an entid, in an entity position or as a ref value, that no partition has allocated: one below
    /// `:db.part/db`'s start or between two partitions, or at or past a partition's next entid (Mozilla Mentat's
    /// `UnallocatedEntid` / `UnrecognizedEntid`; Datomic does not make entities up from numbers either). A new
    /// entity is named by a tempid; DataScript's habit of negative numbers as tempids gets a hint.
    fn check_allocated(&self, terms: &[Term]) -> Result<()> {
        let p = &self.parts;
        let allocated = |e: Entid| {
            (layout::PART_DB_START..p.next_db).contains(&e)
                || (layout::PART_USER_START..p.next_user).contains(&e)
                || (layout::PART_TX_START..p.next_tx).contains(&e)
        };
        for t in terms {
            for place in t.entity_places() {
                if let EntityPlace::Entid(e) = place {
                    if !allocated(*e) {
                        let hint = if *e < 0 {
                            "; a new entity is named by a tempid, a string such as \"-1\" (a negative number is \
                             DataScript's tempid, not Datomic's or Mentat's)"
                        } else {
                            "; a new entity is named by a tempid, a string such as \"new\""
                        };
                        return Err(StorageError::BadForm {
                            form: t.form().to_string(),
                            reason: format!("entid {e} names no entity: the store has not allocated it{hint}"),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives every unresolved tempid a new entid; tempids asserting the same identity value share one.
    /// Tempids that assert `:db/ident` are allocated in `:db.part/db`, the others in `:db.part/user`.
    /// A tempid that appears only in value positions names no entity: Datomic's
    /// `:db.error/tempid-not-an-entity`, an error naming the form; one that makes a new entity may not be retracted
    /// or compared (a retraction, retractEntity, retractAttribute or cas of it is an error naming the form).
    fn allocate(&mut self, terms: &[Term]) -> Result<()> {
        let mut order: Vec<TempId> = Vec::new();
        let mut seen: HashSet<TempId> = HashSet::with_capacity(terms.len());
        let mut in_db_part: HashSet<TempId> = HashSet::new();
        let mut identity: HashMap<(Entid, Val), TempId> = HashMap::new();
        let mut alias: HashMap<TempId, TempId> = HashMap::new();
        let mut note = |p: &EntityPlace, order: &mut Vec<TempId>| {
            if let EntityPlace::TempId(t) = p {
                if seen.insert(t.clone()) {
                    order.push(t.clone());
                }
            }
        };
        for t in terms {
            match t {
                Term::Add { e, a, v, .. } => {
                    note(e, &mut order);
                    if let ValuePlace::Entity(p) = v {
                        note(p, &mut order);
                    }
                    if let (EntityPlace::TempId(tid), true) = (e, *a == layout::DB_IDENT) {
                        in_db_part.insert(tid.clone());
                    }
                    if let (EntityPlace::TempId(tid), ValuePlace::Scalar(s)) = (e, v) {
                        if !self.tempids.contains_key(tid) && self.attr(*a).unique == Some(Unique::Identity) {
                            match identity.get(&(*a, s.clone())) {
                                Some(first) if first != tid => {
                                    alias.insert(tid.clone(), first.clone());
                                }
                                _ => {
                                    identity.insert((*a, s.clone()), tid.clone());
                                }
                            }
                        }
                    }
                }
                Term::Retract { e, v, .. } => {
                    note(e, &mut order);
                    if let ValuePlace::Entity(p) = v {
                        note(p, &mut order);
                    }
                }
                Term::RetractAttribute { e, .. } | Term::RetractEntity { e, .. } | Term::Cas { e, .. } => {
                    note(e, &mut order)
                }
            }
        }
        let as_entity: HashSet<&TempId> = terms
            .iter()
            .filter_map(|t| match t.entity() {
                EntityPlace::TempId(x) => Some(x),
                _ => None,
            })
            .collect();
        if let Some(t) = order.iter().find(|t| !as_entity.contains(t)) {
            let form = terms
                .iter()
                .find(|x| match x {
                    Term::Add { v: ValuePlace::Entity(EntityPlace::TempId(y)), .. }
                    | Term::Retract { v: ValuePlace::Entity(EntityPlace::TempId(y)), .. } => y == t,
                    _ => false,
                })
                .map_or_else(|| "the transaction".to_string(), |x| x.form().to_string());
            return Err(StorageError::BadForm {
                form,
                reason: format!(
                    ":db.error/tempid-not-an-entity: tempid {t} is used only as a value; no datom is about it"
                ),
            });
        }
        self.tempids.reserve(order.len());
        self.new_entities.reserve(order.len());
        for t in order {
            if self.tempids.contains_key(&t) {
                continue;
            }
            let mut root = t.clone();
            while let Some(next) = alias.get(&root) {
                root = next.clone();
            }
            if let Some(e) = self.tempids.get(&root).copied() {
                self.tempids.insert(t, e);
                continue;
            }
            let e = if in_db_part.contains(&root) || in_db_part.contains(&t) {
                self.parts.next_db += 1;
                self.parts.next_db - 1
            } else {
                self.parts.next_user += 1;
                self.parts.next_user - 1
            };
            self.new_entities.insert(e);
            self.tempids.insert(root.clone(), e);
            self.tempids.insert(t, e);
        }
        // A tempid that named no existing entity (no upsert) made a new one, which holds nothing to retract or
        // compare: a retraction or `:db/cas` of it would be a no-op that reports a new entid (DataScript refuses
        // every tempid outside :db/add; one that upserts names an existing entity here, and stays allowed).
        for t in terms {
            let (Term::Retract { e: EntityPlace::TempId(tid), .. }
            | Term::RetractAttribute { e: EntityPlace::TempId(tid), .. }
            | Term::RetractEntity { e: EntityPlace::TempId(tid), .. }
            | Term::Cas { e: EntityPlace::TempId(tid), .. }) = t
            else {
                continue;
            };
            if self.tempids.get(tid).is_some_and(|e| self.new_entities.contains(e)) {
                return Err(StorageError::BadForm {
                    form: t.form().to_string(),
                    reason: format!(
                        "tempid {tid} names a new entity, which has nothing to retract or compare: a tempid \
                         stands in :db/add and map forms, or in a retraction when it upserts to an existing entity"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The text of the first form that states datom `d` (asserted when `added`), for error messages. Only called
    /// on the error path, so the successful path keeps no per-datom record of forms.
    fn form_of(&self, terms: &[Term], d: &Eav, added: bool) -> Option<String> {
        let is = |e: &EntityPlace| self.try_entity(e) == Some(d.0);
        let val = |v: &ValuePlace| self.try_value(v);
        terms.iter().find_map(|t| {
            let hit = match t {
                Term::Add { e, a, v, .. } if added => *a == d.1 && is(e) && val(v).as_ref() == Some(&d.2),
                Term::Cas { e, a, new, .. } if added => *a == d.1 && is(e) && val(new).as_ref() == Some(&d.2),
                Term::Retract { e, a, v, .. } if !added => *a == d.1 && is(e) && val(v).as_ref() == Some(&d.2),
                Term::RetractAttribute { e, a, .. } if !added => *a == d.1 && is(e),
                Term::RetractEntity { e, .. } if !added => {
                    is(e) || self.try_entity(e).is_some_and(|x| d.2 == Val::Ref(x))
                }
                _ => false,
            };
            hit.then(|| t.form().to_string())
        })
    }

    /// The first form that asserts or retracts a schema datom (`:db/ident` .. `:db/doc`) about entity `e`.
    fn schema_form_of(&self, terms: &[Term], e: Entid) -> String {
        terms
            .iter()
            .find(|t| match t {
                Term::Add { e: p, a, .. } | Term::Retract { e: p, a, .. } | Term::RetractAttribute { e: p, a, .. } => {
                    is_schema_attr(*a) && self.try_entity(p) == Some(e)
                }
                Term::Cas { e: p, a, .. } => is_schema_attr(*a) && self.try_entity(p) == Some(e),
                Term::RetractEntity { e: p, .. } => self.try_entity(p) == Some(e),
            })
            // else a :db/retractEntity whose expansion reached the attribute (of an entity it refers to, such as
            // `:db.type/long`)
            .or_else(|| terms.iter().find(|t| matches!(t, Term::RetractEntity { .. })))
            .map_or_else(|| "the transaction".to_string(), |t| t.form().to_string())
    }

    fn try_entity(&self, p: &EntityPlace) -> Option<Entid> {
        match p {
            EntityPlace::Entid(e) => Some(*e),
            EntityPlace::Ident(i) => self.before.entid(i),
            EntityPlace::TempId(t) => self.tempids.get(t).copied(),
            EntityPlace::LookupRef(a, v) => self.looked_up(*a, v).flatten(),
            EntityPlace::Tx => Some(self.tx),
        }
    }

    fn entity(&self, p: &EntityPlace, form: &FormText) -> Result<Entid> {
        self.try_entity(p).ok_or_else(|| match p {
            EntityPlace::Ident(i) => StorageError::UnknownIdent { ident: i.clone(), form: form.to_string() },
            EntityPlace::LookupRef(a, v) => StorageError::LookupRef {
                lookup_ref: format!("[{} {v}]", self.before.ident(*a).unwrap_or("?")),
                reason: format!("no entity has that value (in {form})"),
            },
            _ => StorageError::BadForm { form: form.to_string(), reason: "unresolved entity".into() },
        })
    }

    /// A value place's value when it can be resolved now (its entities known), else None.
    fn try_value(&self, v: &ValuePlace) -> Option<Val> {
        match v {
            ValuePlace::Scalar(s) => Some(s.clone()),
            ValuePlace::Entity(p) => self.try_entity(p).map(Val::Ref),
            ValuePlace::Tuple(items) => Some(Val::Tuple(
                items
                    .iter()
                    .map(|i| match i {
                        None => Some(None),
                        Some(p) => self.try_value(p).map(Some),
                    })
                    .collect::<Option<_>>()?,
            )),
        }
    }

    fn value(&self, v: &ValuePlace, form: &FormText) -> Result<Val> {
        match v {
            ValuePlace::Scalar(s) => Ok(s.clone()),
            ValuePlace::Entity(p) => Ok(Val::Ref(self.entity(p, form)?)),
            ValuePlace::Tuple(items) => Ok(Val::Tuple(
                items.iter().map(|i| i.as_ref().map(|p| self.value(p, form)).transpose()).collect::<Result<_>>()?,
            )),
        }
    }

    /// Current values of (entity, attribute) pairs with the tx that asserted each (inside a group commit, as the
    /// group's earlier members left them).
    fn current_values(&self, pairs: &[(Entid, Entid)]) -> Result<CurrentValues> {
        match self.pending {
            Some(p) => p.current_values(self.conn, self.cache, &self.before, pairs),
            None => read_current(self.conn, self.cache, &self.before, pairs, true),
        }
    }

    fn check_cas(&self, cas: &[(Entid, Entid, Option<Val>, Val, String)]) -> Result<Vec<Eav>> {
        let pairs: Vec<(Entid, Entid)> = cas.iter().map(|c| (c.0, c.1)).collect();
        let current = self.current_values(&pairs)?;
        let mut adds = Vec::new();
        for (e, a, old, new, form) in cas {
            if self.attr(*a).many {
                return Err(StorageError::BadForm {
                    form: form.clone(),
                    reason: format!("{} is cardinality many; :db/cas needs cardinality one", self.attr(*a).ident),
                });
            }
            let cur = current.get(&(*e, *a)).and_then(|v| v.first()).map(|p| &p.0);
            if cur != old.as_ref() {
                return Err(StorageError::CasFailed {
                    form: form.clone(),
                    current: cur.map_or("nil".to_string(), |v| v.to_string()),
                });
            }
            adds.push((*e, *a, new.clone()));
        }
        Ok(adds)
    }

    /// All datoms of the entities, the datoms that refer to them, and recursively those of their components.
    fn expand_retract_entities(&self, roots: &[Entid]) -> Result<Vec<Eav>> {
        if !roots.is_empty() {
            Pending::require_empty(self.pending, ":db/retractEntity")?;
        }
        let mut out = Vec::new();
        let mut done: HashSet<Entid> = HashSet::new();
        let mut frontier: Vec<Entid> = roots.iter().copied().filter(|e| done.insert(*e)).collect();
        while !frontier.is_empty() {
            stage::fill(self.conn, KEYS, frontier.iter().map(|e| (0, *e, None, false, 0, 0)))?;
            let mut next = Vec::new();
            for attr in self.before.attributes() {
                let t = attr;
                let refs = if t.value_type == ValueType::Ref && t.tuple.is_none() {
                    " OR c.v IN (SELECT e FROM mentat_keys)"
                } else {
                    ""
                };
                let sql = format!(
                    "SELECT c.e, {} FROM {} c WHERE c.e IN (SELECT e FROM {KEYS}){refs}",
                    from_store(t, "c.v"),
                    self.store.current(attr.entid)
                );
                let mut st = self.conn.prepare_cached(&sql)?;
                let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, read_val(r, 1, t)?)))?;
                for row in rows {
                    let (e, v) = row?;
                    if attr.component && frontier.contains(&e) {
                        if let Val::Ref(child) = v {
                            if done.insert(child) {
                                next.push(child);
                            }
                        }
                    }
                    out.push((e, attr.entid, v));
                }
            }
            frontier = next;
        }
        Ok(out)
    }

    fn expand_retract_attributes(&self, pairs: &[(Entid, Entid)]) -> Result<Vec<Eav>> {
        let current = self.current_values(pairs)?;
        Ok(pairs
            .iter()
            .flat_map(|(e, a)| current.get(&(*e, *a)).into_iter().flatten().map(move |v| (*e, *a, v.0.clone())))
            .collect())
    }

    /// Drops redundant assertions and retractions of absent datoms, and retracts the old value of every
    /// cardinality-one attribute given a new one. Entities allocated by this transaction have no datoms yet and
    /// are not looked up. Records the asserting tx of every datom that will be retracted.
    fn against_current_state(&mut self, adds: &mut Vec<Eav>, retracts: &mut Vec<Eav>) -> Result<()> {
        let mut pairs: Vec<(Entid, Entid)> = adds
            .iter()
            .chain(retracts.iter())
            .filter(|d| !self.new_entities.contains(&d.0))
            .map(|d| (d.0, d.1))
            .collect();
        pairs.sort();
        pairs.dedup();
        let current = self.current_values(&pairs)?;
        let tx_of = |e: Entid, a: Entid, v: &Val| {
            current.get(&(e, a)).and_then(|vs| vs.iter().find(|p| &p.0 == v)).map(|p| p.1)
        };
        let has = |e: Entid, a: Entid, v: &Val| tx_of(e, a, v).is_some();
        let explicit: HashSet<Eav> = retracts.iter().cloned().collect();
        retracts.retain(|(e, a, v)| has(*e, *a, v));
        let mut replaced = Vec::new();
        adds.retain(|(e, a, v)| {
            if has(*e, *a, v) {
                return false;
            }
            if !self.attr(*a).many {
                for (old, _) in current.get(&(*e, *a)).into_iter().flatten() {
                    let d = (*e, *a, old.clone());
                    if !explicit.contains(&d) {
                        replaced.push(d);
                    }
                }
            }
            true
        });
        retracts.extend(replaced);
        for d in retracts.iter() {
            if let Some(tx) = tx_of(d.0, d.1, &d.2) {
                self.asserted_in.insert(d.clone(), tx);
            }
        }
        Ok(())
    }

    /// The composite tuples (`:db/tupleAttrs`) of the schema, with their component attributes.
    fn composites(&self) -> Vec<(Entid, Vec<Entid>, bool)> {
        self.before
            .attributes()
            .into_iter()
            .filter_map(|a| match &a.tuple {
                Some(TupleSpec::Composite(cs)) => {
                    Some((a.entid, cs.iter().map(|c| c.0).collect(), a.unique == Some(Unique::Identity)))
                }
                _ => None,
            })
            .collect()
    }

    /// Upsert candidates of `:db.unique/identity` composite tuples: a tempid entity that asserts every component
    /// of such a composite upserts into the entity whose composite has those values, as a tempid asserting a
    /// unique identity value does.
    fn composite_upserts(&self, terms: &[Term]) -> Vec<(TempId, Entid, Val)> {
        let composites: Vec<_> = self.composites().into_iter().filter(|c| c.2).collect();
        if composites.is_empty() {
            return Vec::new();
        }
        let mut given: HashMap<(&TempId, Entid), Val> = HashMap::new();
        for t in terms {
            if let Term::Add { e: EntityPlace::TempId(tid), a, v, .. } = t {
                if let Some(v) = self.try_value(v) {
                    given.insert((tid, *a), v);
                }
            }
        }
        let tids: BTreeSet<&TempId> = given.keys().map(|k| k.0).collect();
        let mut out = Vec::new();
        for tid in tids {
            for (c, comps, _) in &composites {
                let vals: Option<Vec<Option<Val>>> =
                    comps.iter().map(|a| given.get(&(tid, *a)).cloned().map(Some)).collect();
                if let Some(vals) = vals {
                    out.push((tid.clone(), *c, Val::Tuple(vals)));
                }
            }
        }
        out
    }

    /// Keeps composite tuples (`:db/tupleAttrs`) true to their components, as Datomic's transactor does: for every
    /// entity whose component datoms this transaction changes, the composite becomes the tuple of the components'
    /// values after the transaction (nil for an absent one), replacing the old composite, and is retracted when
    /// every component is gone. Entities not touched keep their composites (an attribute installed later is not
    /// backfilled: re-assert a component to compute it, as in Datomic).
    fn maintain_composites(&mut self, adds: &mut Vec<Eav>, retracts: &mut Vec<Eav>) -> Result<()> {
        let composites = self.composites();
        if composites.is_empty() {
            return Ok(());
        }
        let mut touched: BTreeSet<(Entid, usize)> = BTreeSet::new();
        for (e, a, _) in adds.iter().chain(retracts.iter()) {
            for (i, (_, comps, _)) in composites.iter().enumerate() {
                if comps.contains(a) {
                    touched.insert((*e, i));
                }
            }
        }
        if touched.is_empty() {
            return Ok(());
        }
        let mut pairs: Vec<(Entid, Entid)> = Vec::new();
        for (e, i) in &touched {
            if self.new_entities.contains(e) {
                continue;
            }
            let (c, comps, _) = &composites[*i];
            pairs.push((*e, *c));
            pairs.extend(comps.iter().map(|a| (*e, *a)));
        }
        pairs.sort();
        pairs.dedup();
        let current = self.current_values(&pairs)?;
        let added: HashMap<(Entid, Entid), Val> = adds.iter().map(|d| ((d.0, d.1), d.2.clone())).collect();
        let retracted: HashSet<Eav> = retracts.iter().cloned().collect();
        let now = |e: Entid, a: Entid| current.get(&(e, a)).and_then(|vs| vs.first()).cloned();
        for (e, i) in touched {
            let (c, comps, _) = &composites[i];
            let elems: Vec<Option<Val>> = comps
                .iter()
                .map(|a| match added.get(&(e, *a)) {
                    Some(v) => Some(v.clone()),
                    None => now(e, *a).map(|p| p.0).filter(|v| !retracted.contains(&(e, *a, v.clone()))),
                })
                .collect();
            let new = if elems.iter().all(Option::is_none) { None } else { Some(Val::Tuple(elems)) };
            let old = now(e, *c).filter(|(v, _)| !retracted.contains(&(e, *c, v.clone())));
            if old.as_ref().map(|o| &o.0) == new.as_ref() {
                continue;
            }
            if let Some((v, tx)) = old {
                self.asserted_in.insert((e, *c, v.clone()), tx);
                retracts.push((e, *c, v));
            }
            if let Some(v) = new {
                adds.push((e, *c, v));
            }
        }
        Ok(())
    }

    fn check_unique(&mut self, terms: &[Term], adds: &[Eav], retracts: &[Eav]) -> Result<()> {
        let mut by_attr: BTreeMap<Entid, Vec<(Entid, Val)>> = BTreeMap::new();
        for (e, a, v) in adds {
            if self.attr(*a).unique.is_some() {
                by_attr.entry(*a).or_default().push((*e, v.clone()));
            }
        }
        let retracted: HashSet<&Eav> = retracts.iter().collect();
        for (a, evs) in by_attr {
            let ident = self.attr(a).ident.clone();
            let mut within: HashMap<&Val, Entid> = HashMap::new();
            for (e, v) in &evs {
                if let Some(first) = within.insert(v, *e) {
                    if first != *e {
                        return Err(StorageError::UniqueConflict {
                            attribute: ident,
                            value: v.to_string(),
                            holder: first,
                            entity: *e,
                            form: self.form_of(terms, &(*e, a, v.clone()), true).unwrap_or_default(),
                        });
                    }
                }
            }
            let values: Vec<Val> = evs.iter().map(|p| p.1.clone()).collect();
            self.find_by_values(a, &values)?;
            for (e, v) in &evs {
                if let Some(Some(holder)) = self.looked_up(a, v) {
                    if holder != *e && !retracted.contains(&(holder, a, v.clone())) {
                        return Err(StorageError::UniqueConflict {
                            attribute: ident,
                            value: v.to_string(),
                            holder,
                            entity: *e,
                            form: self.form_of(terms, &(*e, a, v.clone()), true).unwrap_or_default(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies datoms about idents and attributes to the schema, checking Mentat's alteration rules, and issues
    /// the DDL for new attributes and index changes inside the running transaction.
    fn apply_schema_changes(&mut self, terms: &[Term], adds: &[Eav], retracts: &[Eav]) -> Result<()> {
        let touched: BTreeSet<Entid> =
            adds.iter().chain(retracts.iter()).filter(|d| is_schema_attr(d.1)).map(|d| d.0).collect();
        if touched.is_empty() {
            return Ok(());
        }
        Pending::require_empty(self.pending, "a schema change")?;
        crate::before_write(self.conn)?;
        let mut props: HashMap<Entid, std::collections::HashMap<Entid, String>> = HashMap::new();
        for e in &touched {
            props.insert(*e, self.before.attribute(*e).map(attribute_props).unwrap_or_default());
        }
        let text = |v: &Val| match v {
            Val::Ref(x) | Val::Long(x) => x.to_string(),
            Val::Bool(b) => b.to_string(),
            Val::Str(s) => s.clone(),
            other => other.to_string(),
        };
        for (e, a, v) in retracts.iter().filter(|d| is_schema_attr(d.1)) {
            if *a == layout::DB_IDENT {
                if let Val::Str(i) = v {
                    Arc::make_mut(&mut self.schema).remove_ident(i);
                }
            } else if props.get(e).and_then(|p| p.get(a)) == Some(&text(v)) {
                props.get_mut(e).map(|p| p.remove(a));
            }
        }
        for (e, a, v) in adds.iter().filter(|d| is_schema_attr(d.1)) {
            if *a == layout::DB_IDENT {
                if let Val::Str(i) = v {
                    Arc::make_mut(&mut self.schema).add_ident(i, *e);
                }
            } else {
                props.entry(*e).or_default().insert(*a, text(v));
            }
        }
        // Composite tuples after the attributes they are made of, which the same transaction may install.
        let mut touched: Vec<Entid> = touched.into_iter().collect();
        touched.sort_by_key(|e| (props[e].contains_key(&layout::DB_TUPLE_ATTRS), *e));
        for e in touched {
            let p = &props[&e];
            let old = self.before.attribute(e).cloned();
            let new = store::attribute_from_props(&self.schema, e, p);
            // the name it had before this transaction (a retracted :db/ident is gone from `self.schema`)
            let name =
                self.before.ident(e).or_else(|| self.schema.ident(e)).map_or_else(|| e.to_string(), str::to_string);
            let form = self.schema_form_of(terms, e);
            let err = |reason: String| StorageError::Schema {
                attribute: name.clone(),
                reason: format!("{reason} (in {form})"),
            };
            match (old, new) {
                (None, None) | (None, Some(Attribute { tuple: None, .. }))
                    if [layout::DB_TUPLE_TYPE, layout::DB_TUPLE_TYPES, layout::DB_TUPLE_ATTRS]
                        .iter()
                        .any(|k| p.contains_key(k))
                        && p.get(&layout::DB_VALUE_TYPE)
                            != Some(&layout::value_type_entid(ValueType::Tuple).to_string()) =>
                {
                    return Err(err(
                        ":db/tupleAttrs, :db/tupleType and :db/tupleTypes describe a :db.type/tuple attribute".into(),
                    ));
                }
                (None, None) => {
                    let partial = [layout::DB_VALUE_TYPE, layout::DB_CARDINALITY, layout::DB_UNIQUE]
                        .iter()
                        .any(|k| p.contains_key(k));
                    let tuple =
                        p.get(&layout::DB_VALUE_TYPE) == Some(&layout::value_type_entid(ValueType::Tuple).to_string());
                    if tuple && p.contains_key(&layout::DB_CARDINALITY) {
                        return Err(err(
                            ":db.type/tuple needs one of :db/tupleAttrs, :db/tupleType or :db/tupleTypes".into()
                        ));
                    }
                    if partial {
                        return Err(err(
                            "an attribute needs :db/ident, :db/valueType and :db/cardinality together".into()
                        ));
                    }
                }
                (Some(_), None) => {
                    return Err(err("an installed attribute keeps its :db/ident, :db/valueType and :db/cardinality \
                                    (rename it by asserting another :db/ident)"
                        .into()))
                }
                (None, Some(new)) => {
                    if new.fulltext && new.value_type != ValueType::String {
                        return Err(err(":db/fulltext needs :db.type/string".into()));
                    }
                    if new.component && new.value_type != ValueType::Ref {
                        return Err(
                            err(":db.error/components-must-be-refs: :db/isComponent needs :db.type/ref".into()),
                        );
                    }
                    check_tuple(&self.schema, &new).map_err(err)?;
                    for sql in store::attribute_ddl(self.store, &new) {
                        self.conn.execute_batch(&sql)?;
                    }
                    Arc::make_mut(&mut self.schema).add_attribute(new);
                }
                (Some(old), Some(new)) => {
                    self.alter_attribute(&old, &new).map_err(|e| match e {
                        StorageError::Schema { reason, .. } => err(reason),
                        other => other,
                    })?;
                    Arc::make_mut(&mut self.schema).add_attribute(new);
                }
            }
        }
        Ok(())
    }

    fn alter_attribute(&self, old: &Attribute, new: &Attribute) -> Result<()> {
        let err = |reason: &str| StorageError::Schema { attribute: new.ident.clone(), reason: reason.to_string() };
        let table = self.store.current(old.entid);
        if old.value_type != new.value_type {
            return Err(err(":db/valueType never changes once installed"));
        }
        if old.tuple != new.tuple {
            return Err(err(":db/tupleAttrs, :db/tupleType and :db/tupleTypes never change once installed"));
        }
        if new.fulltext != old.fulltext {
            return Err(err(":db/fulltext cannot be changed once installed"));
        }
        if new.fulltext && new.many != old.many {
            // the index keys a cardinality-one attribute's documents by entity alone (storage/src/fulltext.rs)
            return Err(err("a :db/fulltext attribute's cardinality cannot be changed once installed"));
        }
        if new.component && new.value_type != ValueType::Ref {
            return Err(err(":db.error/components-must-be-refs: :db/isComponent needs :db.type/ref"));
        }
        if old.many && !new.many {
            let sql = format!("SELECT e FROM {table} GROUP BY e HAVING count(*) > 1 LIMIT 1");
            if let Some(e) = optional(self.conn.query_row(&sql, [], |r| r.get::<_, i64>(0)))? {
                return Err(err(&format!("cannot become :db.cardinality/one: entity {e} holds more than one value")));
            }
        }
        if new.unique.is_some() && old.unique.is_none() {
            let sql = format!("SELECT {} FROM {table} GROUP BY v HAVING count(*) > 1 LIMIT 1", from_store(old, "v"));
            if let Some(v) = optional(self.conn.query_row(&sql, [], |r| read_val(r, 0, old)))? {
                return Err(err(&format!("cannot become :db/unique: value {v} is held by more than one entity")));
            }
        }
        let indexed = store::has_art_index;
        if indexed(new) && !indexed(old) {
            self.conn.execute_batch(&store::index_ddl(self.store, old.entid))?;
        } else if !indexed(new) && indexed(old) {
            self.conn.execute_batch(&store::drop_index_ddl(self.store, old.entid))?;
        }
        Ok(())
    }

    fn tx_instant(&self, explicit: Option<(i64, String)>) -> Result<i64> {
        let last = self.parts.last_tx_instant;
        match explicit {
            Some((us, form)) if us < last => Err(StorageError::BadForm {
                form,
                reason: format!(
                    ":db/txInstant may not go backwards: the last transaction is at {}",
                    Val::Instant(last)
                ),
            }),
            Some((us, _)) => Ok(us),
            // strictly after the last one, so that every tx has its own instant (Datomic's log order)
            None => Ok(chrono::Utc::now().timestamp_micros().max(last + 1)),
        }
    }

    /// Writes the transaction's datoms and partition marks now, or, inside a group commit, leaves them to the
    /// group's flush.
    fn write(&self, adds: &[Eav], retracts: &[Eav], trace: &mut Trace) -> Result<()> {
        if self.pending.is_some() {
            return Ok(());
        }
        let tx = self.tx;
        let asserted = |d: &Eav| self.asserted_in.get(d).copied().unwrap_or(0);
        write_datoms(
            self.conn,
            self.store,
            &self.schema,
            adds.iter().map(|d| (d, tx)),
            retracts.iter().map(|d| (d, asserted(d), tx)),
        )?;
        write_partitions(self.conn, self.store, &self.parts_before, &self.parts)?;
        trace.mark("write");
        Ok(())
    }
}

/// What Datomic allows of `:db/txInstant`, for the errors below.
const TX_INSTANT_RULE: &str = "only the transaction being committed takes a :db/txInstant ([:db/add \"datomic.tx\" \
     :db/txInstant #inst \"...\"], or (transaction-tx)), and a transaction's instant never changes afterwards \
     (time travel by instant depends on it)";

/// The error for `form`, which asserts `:db/txInstant` on entity `e` (`new`: one its tempid made), not the
/// transaction being committed.
fn tx_instant_elsewhere(form: &FormText, e: Entid, new: bool) -> StorageError {
    let which = if new { "a new entity" } else { "an existing entity" };
    StorageError::BadForm {
        form: form.to_string(),
        reason: format!(
            ":db/txInstant of entity {e} ({which}), which is not the transaction being committed: {TX_INSTANT_RULE}"
        ),
    }
}

/// The error for `form`, a `:db/retract`, `:db.fn/retractAttribute` or `:db/cas` of `:db/txInstant`.
fn tx_instant_unchangeable(form: &FormText) -> StorageError {
    StorageError::BadForm {
        form: form.to_string(),
        reason: format!(":db/txInstant is never retracted or compared-and-swapped: {TX_INSTANT_RULE}"),
    }
}

/// The error for `form`, a `:db/retractEntity` that would retract transaction entity `e` and its `:db/txInstant`.
fn tx_entity_retracted(form: &dyn std::fmt::Display, e: Entid) -> StorageError {
    StorageError::BadForm {
        form: form.to_string(),
        reason: format!(
            "entity {e} is a transaction, which :db/retractEntity does not retract (it would remove its \
             :db/txInstant): {TX_INSTANT_RULE}"
        ),
    }
}

/// Current values of (entity, attribute) pairs with the tx that asserted each, as the tables hold them: with
/// `use_index`, from the store's entity index for the attributes it holds (it takes every commit under the
/// writer lock the caller holds, so it is the committed state: only right while the caller's open DuckDB
/// transaction has written no datoms), else from the tables: a few point reads, or one join per attribute
/// against the staged keys.
pub(crate) fn read_current(
    conn: &Connection,
    store: &Store,
    schema: &Schema,
    pairs: &[(Entid, Entid)],
    use_index: bool,
) -> Result<CurrentValues> {
    let mut out = CurrentValues::new();
    if pairs.is_empty() {
        return Ok(out);
    }
    let value_type = |a: Entid| schema.attribute(a).expect("pairs name attributes of the schema");
    let snap = store.index.snapshot();
    let mut rest: Vec<(Entid, Entid)> = Vec::new();
    let mut keys = Vec::new();
    for &(e, a) in pairs {
        let Some(ix) = snap.attr(a).filter(|_| use_index) else {
            rest.push((e, a));
            continue;
        };
        keys.clear();
        ix.current(e, &mut keys);
        if !keys.is_empty() {
            let t = value_type(a);
            out.insert((e, a), keys.iter().map(|(k, tx)| (k.to_val(t.value_type), *tx)).collect());
        }
    }
    let pairs = rest;
    let name = &store.name;
    if pairs.len() <= SMALL_READ {
        // A few point reads cost less than staging the keys.
        for (e, a) in &pairs {
            let t = value_type(*a);
            let sql = format!("SELECT {}, tx FROM {} WHERE e = $1", from_store(t, "v"), name.current(*a));
            let mut st = conn.prepare_cached(&sql)?;
            let rows = st.query_map([e], |r| Ok((read_val(r, 0, t)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                out.entry((*e, *a)).or_default().push(row?);
            }
        }
        return Ok(out);
    }
    stage::fill(conn, KEYS, pairs.iter().map(|(e, a)| (*a, *e, None, false, 0, 0)))?;
    let attrs: BTreeSet<Entid> = pairs.iter().map(|p| p.1).collect();
    for a in attrs {
        let t = value_type(a);
        let sql = format!(
            "SELECT c.e, {}, c.tx FROM {} c WHERE c.e IN (SELECT e FROM {KEYS} WHERE a = {a})",
            from_store(t, "c.v"),
            name.current(a)
        );
        let mut st = conn.prepare_cached(&sql)?;
        let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, read_val(r, 1, t)?, r.get::<_, i64>(2)?)))?;
        for row in rows {
            let (e, v, tx) = row?;
            out.entry((e, a)).or_default().push((v, tx));
        }
    }
    Ok(out)
}

/// The entities whose current value of the unique attribute `attr` is `values[i]`, as `(i, entity)` pairs, as
/// the tables hold them: with `use_index` (see [`read_current`]) from the store's entity index when it holds
/// the attribute with its value order, else from the tables through one join.
pub(crate) fn read_holders(
    conn: &Connection,
    store: &Store,
    attr: &Attribute,
    values: &[&Val],
    use_index: bool,
) -> Result<Vec<(usize, Entid)>> {
    let aid = attr.entid;
    let snap = store.index.snapshot();
    if let Some(ix) = snap.attr(aid).filter(|_| use_index) {
        let mut out = Vec::new();
        let mut es = Vec::new();
        let mut answered = true;
        for (i, v) in values.iter().enumerate() {
            let Some(k) = crate::eindex::IKey::from_val(v) else {
                answered = false;
                break;
            };
            es.clear();
            if ix.entities(&k, None, &mut es).is_none() {
                answered = false;
                break;
            }
            out.extend(es.iter().map(|e| (i, *e)));
        }
        if answered {
            return Ok(out);
        }
    }
    stage::fill(conn, KEYS, values.iter().enumerate().map(|(i, v)| (aid, i as i64, Some(*v), false, 0, 0)))?;
    let sql =
        format!("SELECT k.e, c.e FROM {KEYS} k JOIN {} c ON c.v = {}", store.name.current(aid), to_store(attr, "k"));
    let mut st = conn.prepare_cached(&sql)?;
    let found = st.query_map([], |r| Ok((r.get::<_, i64>(0)? as usize, r.get(1)?)))?;
    Ok(found.collect::<std::result::Result<_, _>>()?)
}

/// Writes datoms to the store's tables: `adds` as `(datom, tx)` into current state, `retracts` as `(datom, tx
/// that asserted it, tx that retracts it)` out of current state and into history. A handful go as prepared
/// point statements; more are staged with the appender and written with one `DELETE ... USING` and one
/// `INSERT ... SELECT` into history per attribute with retractions, then one `INSERT ... SELECT` into current
/// state per attribute with assertions. Every statement's text depends only on the attribute, so each is
/// prepared once per connection. The retractions are deleted before anything is inserted, so a datom retracted
/// and asserted again (by two transactions of one group) ends up current.
pub(crate) fn write_datoms<'d>(
    conn: &Connection,
    store: &StoreName,
    schema: &Schema,
    adds: impl Iterator<Item = (&'d Eav, Entid)> + Clone,
    retracts: impl Iterator<Item = (&'d Eav, Entid, Entid)> + Clone,
) -> Result<()> {
    crate::before_write(conn)?;
    let run = |sql: String, params: &[&dyn duckdb::ToSql]| -> Result<()> {
        conn.prepare_cached(&sql)?.execute(params)?;
        Ok(())
    };
    let value_type = |a: Entid| schema.attribute(a).expect("datoms name attributes of the schema");
    let (fadds, fretracts) = (adds.clone(), retracts.clone());
    if adds.clone().take(SMALL_TX + 1).count() + retracts.clone().take(SMALL_TX + 1).count() <= SMALL_TX {
        for (d, asserted, tx) in retracts {
            let (cur, hist) = (store.current(d.1), store.history(d.1));
            let v = stage::param_to_store(value_type(d.1), "$2");
            let value = stage::param(&d.2);
            run(format!("DELETE FROM {cur} WHERE e = $1 AND v = {v}"), &[&d.0, &value])?;
            run(format!("INSERT INTO {hist} VALUES ($1, {v}, $3, $4)"), &[&d.0, &value, &asserted, &tx])?;
        }
        for ((e, a, val), tx) in adds {
            let v = stage::param_to_store(value_type(*a), "$2");
            run(format!("INSERT INTO {} VALUES ($1, {v}, $3)", store.current(*a)), &[e, &stage::param(val), &tx])?;
        }
        return crate::fulltext::maintain(conn, store, schema, fadds.map(|(d, _)| d), fretracts.map(|(d, _, _)| d));
    }
    // Assertions of most value types go straight into their current tables through the appender, one batch per
    // attribute, after the staged retractions (a bulk load of 500 issues: the staging table's fill, 4.5 ms, and
    // eight INSERT ... SELECTs, 0.8 to 1.5 ms each, against 0.5 to 0.9 ms per appended table; storage/README.md)
    let direct_attr = |a: Entid| stage::appends_directly(value_type(a));
    let mut sizes: BTreeMap<Entid, usize> = BTreeMap::new();
    for (d, _) in adds.clone() {
        *sizes.entry(d.1).or_default() += 1;
    }
    let mut direct: BTreeMap<Entid, Vec<(Entid, &Val, Entid)>> =
        sizes.into_iter().filter(|(a, _)| direct_attr(*a)).map(|(a, n)| (a, Vec::with_capacity(n))).collect();
    for ((e, a, v), tx) in adds.clone() {
        if let Some(rows) = direct.get_mut(a) {
            rows.push((*e, v, tx));
        }
    }
    let staged_adds = adds.filter(|(d, _)| !direct_attr(d.1));
    let added: BTreeSet<Entid> = staged_adds.clone().map(|(d, _)| d.1).collect();
    let removed: BTreeSet<Entid> = retracts.clone().map(|(d, _, _)| d.1).collect();
    let rows = staged_adds
        .map(|((e, a, v), tx)| (*a, *e, Some(v), true, tx, 0))
        .chain(retracts.map(|((e, a, v), asserted, tx)| (*a, *e, Some(v), false, asserted, tx)));
    if !added.is_empty() || !removed.is_empty() {
        stage::fill(conn, STAGE, rows)?;
    }
    for a in &removed {
        let v = to_store(value_type(*a), "s");
        let (cur, hist) = (store.current(*a), store.history(*a));
        run(
            format!("DELETE FROM {cur} c USING {STAGE} s WHERE s.a = {a} AND NOT s.added AND c.e = s.e AND c.v = {v}"),
            &[],
        )?;
        run(
            format!("INSERT INTO {hist} SELECT s.e, {v}, s.tx, s.rtx FROM {STAGE} s WHERE s.a = {a} AND NOT s.added"),
            &[],
        )?;
    }
    for a in &added {
        let v = to_store(value_type(*a), "s");
        run(
            format!(
                "INSERT INTO {} SELECT s.e, {v}, s.tx FROM {STAGE} s WHERE s.a = {a} AND s.added",
                store.current(*a)
            ),
            &[],
        )?;
    }
    for (a, rows) in &direct {
        stage::append_current(conn, store, value_type(*a), rows)?;
    }
    crate::fulltext::maintain(conn, store, schema, fadds.map(|(d, _)| d), fretracts.map(|(d, _, _)| d))
}

/// Stores the partition marks when `:db.part/db` or `:db.part/user` moved since `before` (the tx mark is derived
/// from the newest transaction when a store is opened, so a transaction that allocates no entity writes nothing).
pub(crate) fn write_partitions(
    conn: &Connection,
    store: &StoreName,
    before: &Partitions,
    after: &Partitions,
) -> Result<()> {
    if (after.next_db, after.next_user) == (before.next_db, before.next_user) {
        return Ok(());
    }
    crate::before_write(conn)?;
    rewrite_partitions(conn, store, |ident, next| match ident {
        ":db.part/db" => after.next_db,
        ":db.part/user" => after.next_user,
        ":db.part/tx" => after.next_tx,
        _ => next,
    })
}

/// Raises the stored marks of `:db.part/db` and `:db.part/user` to `marks` (next_db, next_user) where they are
/// lower: the apply of logged groups, whose records carry the marks they moved (a group written to the tables
/// since may have stored higher ones already).
pub(crate) fn raise_partitions(conn: &Connection, store: &StoreName, (db, user): (Entid, Entid)) -> Result<()> {
    rewrite_partitions(conn, store, |ident, next| match ident {
        ":db.part/db" => next.max(db),
        ":db.part/user" => next.max(user),
        _ => next,
    })
}

/// Rewrites the `partitions` table with each row's mark replaced by `next(ident, stored mark)`: its rows deleted
/// and inserted again, never updated in place. DuckDB does not checkpoint after a commit that updated rows in place
/// while any other transaction is open ("Transaction has performed updates and there are other transactions
/// active"), where deletes still allow a concurrent checkpoint; with readers always running, one `UPDATE` per
/// transaction kept every automatic checkpoint from happening and the write-ahead log and DuckDB's memory growing
/// (measured with the soak, storage/README.md "No updates in place"). Same for [`crate::txlog`]'s marks.
pub(crate) fn rewrite_partitions(
    conn: &Connection,
    store: &StoreName,
    next: impl Fn(&str, Entid) -> Entid,
) -> Result<()> {
    let table = store.table("partitions");
    let rows = conn
        .prepare_cached(&format!("DELETE FROM {table} RETURNING ident, start, next"))?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))?
        .collect::<duckdb::Result<Vec<_>>>()?;
    if rows.is_empty() {
        return Ok(());
    }
    // one statement for the rows (three: `:db.part/db`, `:db.part/user`, `:db.part/tx`)
    let values = (0..rows.len()).map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3));
    let sql = format!("INSERT INTO {table} VALUES {}", values.collect::<Vec<_>>().join(", "));
    let marks: Vec<Entid> = rows.iter().map(|(ident, _, mark)| next(ident, *mark)).collect();
    let params: Vec<&dyn duckdb::ToSql> = rows
        .iter()
        .zip(&marks)
        .flat_map(|((ident, start, _), mark)| [ident as &dyn duckdb::ToSql, start, mark])
        .collect();
    conn.prepare_cached(&sql)?.execute(params.as_slice())?;
    Ok(())
}

/// A single-row query's row, or None when it returned no row.
fn optional<T>(r: duckdb::Result<T>) -> Result<Option<T>> {
    match r {
        Ok(x) => Ok(Some(x)),
        Err(duckdb::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Attributes whose datoms describe idents and attributes (`:db/ident` .. `:db/doc`).
pub(crate) fn is_schema_attr(a: Entid) -> bool {
    (layout::DB_IDENT..=layout::DB_DOC).contains(&a) || (layout::DB_TUPLE_TYPE..=layout::DB_TUPLE_ATTRS).contains(&a)
}

/// Datomic's rules for a new tuple attribute (`Err` names the rule broken): 2 to 8 positions; element types that are
/// scalars (no tuples, no bytes); a composite of installed cardinality-one attributes that are not tuples, and of
/// cardinality one itself.
fn check_tuple(schema: &Schema, a: &Attribute) -> std::result::Result<(), String> {
    let scalar = |t: &ValueType| !matches!(t, ValueType::Tuple | ValueType::Bytes);
    match &a.tuple {
        None => Ok(()),
        Some(TupleSpec::Homogeneous(t)) if scalar(t) => Ok(()),
        Some(TupleSpec::Homogeneous(t)) => Err(format!(":db/tupleType {} is not a scalar type", t.ident())),
        Some(TupleSpec::Heterogeneous(ts)) => {
            if !planner::schema::TUPLE_LEN.contains(&ts.len()) {
                return Err(format!(":db/tupleTypes has {} types; a tuple has 2 to 8", ts.len()));
            }
            match ts.iter().find(|t| !scalar(t)) {
                Some(t) => Err(format!(":db/tupleTypes holds {}, which is not a scalar type", t.ident())),
                None => Ok(()),
            }
        }
        Some(TupleSpec::Composite(cs)) => {
            if !planner::schema::TUPLE_LEN.contains(&cs.len()) {
                return Err(format!(":db/tupleAttrs has {} attributes; a tuple has 2 to 8", cs.len()));
            }
            if a.many {
                return Err("a composite tuple (:db/tupleAttrs) is :db.cardinality/one".into());
            }
            for (c, _) in cs {
                let name = schema.ident(*c).map_or_else(|| c.to_string(), str::to_string);
                match schema.attribute(*c) {
                    None => return Err(format!(":db/tupleAttrs names {name}, which is not an attribute")),
                    Some(x) if x.tuple.is_some() => return Err(format!(":db/tupleAttrs names the tuple {name}")),
                    Some(x) if x.many => {
                        return Err(format!(":db/tupleAttrs names {name}, which is :db.cardinality/many"))
                    }
                    Some(_) => {}
                }
            }
            Ok(())
        }
    }
}

/// The schema datoms of an installed attribute, as the text `attribute_from_props` reads.
fn attribute_props(a: &Attribute) -> std::collections::HashMap<Entid, String> {
    let mut p = std::collections::HashMap::new();
    p.insert(layout::DB_VALUE_TYPE, layout::value_type_entid(a.value_type).to_string());
    p.insert(
        layout::DB_CARDINALITY,
        if a.many { layout::DB_CARDINALITY_MANY } else { layout::DB_CARDINALITY_ONE }.to_string(),
    );
    if let Some(u) = a.unique {
        p.insert(layout::DB_UNIQUE, store::unique_entid(u).to_string());
    }
    if a.index {
        p.insert(layout::DB_INDEX, "true".into());
    }
    if a.fulltext {
        p.insert(layout::DB_FULLTEXT, "true".into());
    }
    if a.component {
        p.insert(layout::DB_IS_COMPONENT, "true".into());
    }
    if let Some(d) = &a.doc {
        p.insert(layout::DB_DOC, d.clone());
    }
    let list = |es: Vec<Entid>| format!("[{}]", es.iter().map(Entid::to_string).collect::<Vec<_>>().join(", "));
    match &a.tuple {
        Some(TupleSpec::Homogeneous(t)) => {
            p.insert(layout::DB_TUPLE_TYPE, layout::value_type_entid(*t).to_string());
        }
        Some(TupleSpec::Heterogeneous(ts)) => {
            p.insert(layout::DB_TUPLE_TYPES, list(ts.iter().map(|t| layout::value_type_entid(*t)).collect()));
        }
        Some(TupleSpec::Composite(cs)) => {
            p.insert(layout::DB_TUPLE_ATTRS, list(cs.iter().map(|c| c.0).collect()));
        }
        None => {}
    }
    p
}

/// Set semantics inside one transaction: a datom stated twice counts once. Keeps first-seen order.
fn dedupe(v: Vec<Eav>) -> Vec<Eav> {
    // seen by reference: cloning every datom (its strings) into the set was a fifth of a bulk transaction's
    // transactor time (perf, 2026-12-04)
    let keep: Vec<bool> = {
        let mut seen: HashSet<&Eav> = HashSet::with_capacity(v.len());
        v.iter().map(|d| seen.insert(d)).collect()
    };
    if keep.iter().all(|k| *k) {
        return v;
    }
    v.into_iter().zip(keep).filter_map(|(d, k)| k.then_some(d)).collect()
}

/// A transaction may not both add and retract one datom, nor give one entity two values of a
/// cardinality-one attribute. `form_of(datom, added)` names the form that stated a datom, for the message.
pub fn check_internal_conflicts(
    schema: &Schema,
    adds: &[Eav],
    retracts: &[Eav],
    form_of: &dyn Fn(&Eav, bool) -> Option<String>,
) -> Result<()> {
    let retracted: HashSet<&Eav> = retracts.iter().collect();
    let mut one: HashMap<(Entid, Entid), &Val> = HashMap::with_capacity(adds.len());
    let name = |d: &Eav, added: bool| form_of(d, added).map_or_else(String::new, |f| format!(" in {f}"));
    for d in adds {
        let ident = schema.ident(d.1).unwrap_or("?");
        if retracted.contains(d) {
            return Err(StorageError::Conflict(format!(
                "[{} {ident} {}] is both added{} and retracted{}",
                d.0,
                d.2,
                name(d, true),
                name(d, false)
            )));
        }
        if schema.attribute(d.1).is_some_and(|a| !a.many) {
            if let Some(prev) = one.insert((d.0, d.1), &d.2) {
                let first = (d.0, d.1, prev.clone());
                return Err(StorageError::Conflict(format!(
                    "entity {} gets two values of cardinality-one {ident}: {prev}{} and {}{}",
                    d.0,
                    name(&first, true),
                    d.2,
                    name(d, true)
                )));
            }
        }
    }
    Ok(())
}

/// Datomic's `d/with`: runs `edn` exactly as [`transact`] would, writes included, inside a DuckDB transaction on
/// `conn` that is never committed; calls `f` inside that still-open transaction (so statements `f` runs on
/// `conn` see the store as if the transaction had been applied) with the report and the store state after the
/// transaction (its schema includes attributes the transaction installs); then rolls back, whatever `f` returns.
///
/// Nothing is written, and the store's cached state and unique-value cache are left as they were. The store's
/// writer lock is held throughout, so a speculative transaction never conflicts with a real one (it waits for
/// it, and makes it wait). `conn` must not have a transaction open. Errors: those of [`transact`], those of `f`.
pub fn transact_speculative<R>(
    conn: &Connection,
    store: &Store,
    edn: &str,
    f: impl FnOnce(&TxReport, &StoreState) -> Result<R>,
) -> Result<R> {
    if let Some(why) = store.read_only() {
        return Err(StorageError::Store(format!("{} is read-only ({why})", store.name)));
    }
    let mut trace = Trace::start();
    let _writer = store.lock_writer_settled(conn)?;
    let forms = Arc::new(parse_edn(edn)?);
    let open = crate::Open::begin(conn)?;
    let out = run_open(conn, store, &forms, &mut trace).and_then(|a| f(&a.report, &a.state));
    drop(open); // rolled back: nothing of the transaction stays
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_conflicts() {
        let s = layout::bootstrap_schema();
        let doc = layout::DB_DOC;
        let a = (100, doc, Val::Str("x".into()));
        let b = (100, doc, Val::Str("y".into()));
        assert!(check_internal_conflicts(&s, std::slice::from_ref(&a), std::slice::from_ref(&a), &|_, _| None)
            .unwrap_err()
            .to_string()
            .contains("both added and retracted"));
        let e = check_internal_conflicts(&s, &[a.clone(), b], &[], &|_, _| None).unwrap_err();
        assert!(e.to_string().contains("two values of cardinality-one :db/doc"), "{e}");
        assert!(check_internal_conflicts(&s, std::slice::from_ref(&a), &[], &|_, _| None).is_ok());
        assert_eq!(dedupe(vec![a.clone(), a.clone()]).len(), 1);
    }
}
