//! A group commit's novelty: the datoms that the members of one group (see [`crate::group`]) have transacted and
//! that are not in the store's tables yet, and the store as each member sees it through them.
//!
//! A member reads "the store now" as the tables (the state before the group, or at the group's last flush) with
//! the earlier members' retractions taken out and their assertions put in, the way Datomic's memory index sits
//! over its durable indexes. It writes nothing itself: the group writes every member's datoms at once
//! ([`Pending::flush`]), one staged `DELETE`/`INSERT` per touched attribute, instead of a handful of point
//! statements per member. The reads of the tables are batched too: [`Pending::prefetch`] reads, for the whole
//! group, the current values of every (entity, attribute) the members name and the holders of every unique value
//! they name, one join per attribute, and keeps them; a member that needs anything else reads it on demand and
//! keeps it for the members after it.
//!
//! What a member cannot see through this view (a scan of a whole attribute when its schema changes, the datoms
//! that point at an entity for `:db/retractEntity`) is read from the tables after a flush: the group flushes
//! before such a member ([`needs_flush`]), so its view is exactly the tables.

use crate::error::{Result, StorageError};
use crate::store::Partitions;
use crate::store::Store;
use crate::transactor::{self, Applied, CurrentValues, Eav};
use crate::txparse::{EntityPlace, Term, ValuePlace};
use crate::value::Val;
use planner::schema::{Attribute, Entid, Schema};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A group that reads at least this many datoms of one attribute reads the attribute into the entity index
/// first (see [`Pending::index_if_read_enough`]).
pub const INDEX_AT: usize = 16;

/// A group of at most this many datoms that the log would take but for attributes the entity index does not
/// hold asks for them to be read in ([`crate::eindex::EntityIndex::want`]); larger groups (bulk loads) do not.
pub const WANT_INDEX_DATOMS: usize = 1_000;

/// The group's members, their datoms not yet written indexed for the members that read after them, and the
/// table reads kept for the group (valid until the next flush). The datoms are the members' own [`Applied`]
/// values, held here until the group commits; the index refers to them by position, copying none.
pub(crate) struct Pending {
    /// The partition marks as the store's table, or the log's newest record that moved them, holds them.
    parts_written: Partitions,
    /// The members that succeeded, in transaction order, each with the caller's tag.
    members: Vec<(usize, Applied)>,
    /// How many members' datoms are in the tables (written by a flush).
    written: usize,
    /// How many members the index below covers. The index is built only once a second member reads, so a group
    /// of one transaction (a bulk load) never pays for it.
    indexed: usize,
    /// (entity, attribute) -> the asserted datoms still current, as (member, position in its assertions).
    live: HashMap<(Entid, Entid), Vec<(usize, usize)>>,
    /// Asserted datoms a later member retracted (not written to current state).
    dead: HashSet<(usize, usize)>,
    /// (unique attribute, value) -> the entity that holds it through a datom of the group.
    by_value: HashMap<(Entid, Val), Entid>,
    /// Every datom the group retracted: a table row with one of these is no longer current.
    retracted: HashSet<Eav>,
    /// Entities the group allocated: they have no rows in the tables.
    born: HashSet<Entid>,
    /// Whether the tables hold datoms of the group (a flush ran): the entity index, which holds the committed
    /// state, then no longer answers for them.
    flushed: bool,
    /// Current values read from the tables, by (entity, attribute); an empty list is a pair read and found empty.
    base: RefCell<CurrentValues>,
    /// Holders of unique values read from the tables; None: no entity holds the value there.
    base_holders: RefCell<HashMap<(Entid, Val), Option<Entid>>>,
}

/// Whether a member's view must be the tables themselves, so that the group flushes before running it: it
/// changes the schema (which may scan an attribute's table, or create one) or retracts whole entities (which reads
/// every attribute for datoms about or pointing at them).
pub(crate) fn needs_flush(terms: &[Term]) -> bool {
    terms.iter().any(|t| t.attribute().is_none_or(transactor::is_schema_attr))
}

impl Pending {
    /// An empty novelty over tables whose partition marks are `parts`.
    pub fn new(parts: Partitions) -> Pending {
        Pending {
            parts_written: parts,
            members: Vec::new(),
            written: 0,
            indexed: 0,
            live: HashMap::new(),
            dead: HashSet::new(),
            by_value: HashMap::new(),
            retracted: HashSet::new(),
            born: HashSet::new(),
            flushed: false,
            base: RefCell::default(),
            base_holders: RefCell::default(),
        }
    }

    /// True when every member's datoms are in the tables.
    pub fn is_empty(&self) -> bool {
        self.written == self.members.len()
    }

    /// Takes a member that succeeded (`tag`: the caller's name for it): its datoms join the novelty (the next
    /// member sees them once [`Pending::catch_up`] has run).
    pub fn add(&mut self, tag: usize, a: Applied) {
        self.born.extend(a.new_entities.iter().copied());
        self.born.insert(a.report.tx);
        self.members.push((tag, a));
    }

    /// The members, in transaction order, with their tags (once the group is written).
    pub fn into_members(self) -> Vec<(usize, Applied)> {
        self.members
    }

    /// Indexes the members taken since the last call, in order, so that reads see them. `schema` says which
    /// attributes are unique (only their values are looked up by value).
    pub fn catch_up(&mut self, schema: &Schema) {
        while self.indexed < self.members.len() {
            let k = self.indexed;
            let (adds, retracts) = &self.members[k].1.written;
            for (d, _) in retracts {
                if let Some(positions) = self.live.get_mut(&(d.0, d.1)) {
                    let members = &self.members;
                    if let Some(at) = positions.iter().position(|&(m, i)| members[m].1.written.0[i] == *d) {
                        self.dead.insert(positions.swap_remove(at));
                    }
                }
                if self.by_value.get(&(d.1, d.2.clone())) == Some(&d.0) {
                    self.by_value.remove(&(d.1, d.2.clone()));
                }
                self.retracted.insert(d.clone());
            }
            for (i, d) in adds.iter().enumerate() {
                self.live.entry((d.0, d.1)).or_default().push((k, i));
                if schema.attribute(d.1).is_some_and(|a| a.unique.is_some()) {
                    self.by_value.insert((d.1, d.2.clone()), d.0);
                }
            }
            self.indexed += 1;
        }
    }

    /// Current values of (entity, attribute) pairs with the tx that asserted each, as the members so far left
    /// them (call [`Pending::catch_up`] first). Pairs not read before are read from the tables in one batch.
    pub fn current_values(
        &self,
        conn: &duckdb::Connection,
        store: &Store,
        schema: &Schema,
        pairs: &[(Entid, Entid)],
    ) -> Result<CurrentValues> {
        self.read_base(conn, store, schema, pairs.iter().copied())?;
        let base = self.base.borrow();
        let mut out = CurrentValues::default();
        for p in pairs {
            let mut values: Vec<(Val, Entid)> = match base.get(p) {
                Some(rows) if self.retracted.is_empty() => rows.clone(),
                Some(rows) => {
                    rows.iter().filter(|(v, _)| !self.retracted.contains(&(p.0, p.1, v.clone()))).cloned().collect()
                }
                None => Vec::new(),
            };
            for &(m, i) in self.live.get(p).into_iter().flatten() {
                let a = &self.members[m].1;
                values.push((a.written.0[i].2.clone(), a.report.tx));
            }
            if !values.is_empty() {
                out.insert(*p, values);
            }
        }
        Ok(out)
    }

    /// The entity that holds each of `values` for the unique attribute `attr` now (None: no entity does), as the
    /// members so far left them (call [`Pending::catch_up`] first).
    pub fn holders(
        &self,
        conn: &duckdb::Connection,
        store: &Store,
        attr: &Attribute,
        values: &[&Val],
    ) -> Result<Vec<Option<Entid>>> {
        let a = attr.entid;
        self.read_holders(conn, store, attr, values.iter().copied())?;
        let base = self.base_holders.borrow();
        Ok(values
            .iter()
            .map(|v| {
                let key = (a, (*v).clone());
                if let Some(e) = self.by_value.get(&key) {
                    return Some(*e);
                }
                base.get(&key)
                    .copied()
                    .flatten()
                    .filter(|h| self.retracted.is_empty() || !self.retracted.contains(&(*h, a, (*v).clone())))
            })
            .collect())
    }

    /// Reads from the tables, for the whole group at once, what its members will look up: the holders of the
    /// unique values they name (lookup refs, upserts, unique checks) and the current values of the (entity,
    /// attribute) pairs they name by entid, ident or lookup ref. Terms are parsed with `schema`.
    pub fn prefetch<'t>(
        &self,
        conn: &duckdb::Connection,
        store: &Store,
        schema: &Schema,
        members: impl Iterator<Item = &'t [Term]> + Clone,
    ) -> Result<()> {
        let mut by_attr: BTreeMap<Entid, Vec<&Val>> = BTreeMap::new();
        for t in members.clone().flatten() {
            for p in t.entity_places() {
                if let EntityPlace::LookupRef(a, v) = p {
                    by_attr.entry(*a).or_default().push(v);
                }
            }
            // the unique checks and upserts look up every unique value asserted
            if let Term::Add { a, v: ValuePlace::Scalar(s), .. } = t {
                if schema.attribute(*a).is_some_and(|x| x.unique.is_some()) {
                    by_attr.entry(*a).or_default().push(s);
                }
            }
        }
        for (a, values) in by_attr {
            if let Some(attr) = schema.attribute(a) {
                self.index_if_read_enough(conn, store, attr, values.len())?;
                self.read_holders(conn, store, attr, values.into_iter())?;
            }
        }
        let holders = self.base_holders.borrow();
        let entity = |p: &EntityPlace| match p {
            EntityPlace::Entid(e) => Some(*e),
            EntityPlace::Ident(i) => schema.entid(i),
            EntityPlace::LookupRef(a, v) => {
                store.cached_lookup(*a, v).or_else(|| holders.get(&(*a, v.clone())).copied().flatten())
            }
            EntityPlace::TempId(_) | EntityPlace::Tx => None,
        };
        let mut pairs: Vec<(Entid, Entid)> = Vec::new();
        for t in members.flatten() {
            if let (Some(e), Some(a)) = (entity(t.entity()), t.attribute().filter(|a| schema.attribute(*a).is_some())) {
                pairs.push((e, a));
            }
        }
        drop(holders);
        let mut per_attr: BTreeMap<Entid, usize> = BTreeMap::new();
        for (_, a) in &pairs {
            *per_attr.entry(*a).or_default() += 1;
        }
        for (a, n) in per_attr {
            if let Some(attr) = schema.attribute(a) {
                self.index_if_read_enough(conn, store, attr, n)?;
            }
        }
        self.read_base(conn, store, schema, pairs.into_iter())
    }

    /// Reads attribute `attr` into the store's entity index now when a group is about to read `n` of its datoms
    /// and `n` reaches [`INDEX_AT`]: a staged read costs a scan of the attribute's table (20 ms for 1,000
    /// entities of a 1.3M-datom attribute at scale m), the index a memory probe per entity, and once read the
    /// index follows every commit. Only before the group has written anything (the index is the committed
    /// state), and within the index's memory budget (past it the attribute is refused and read from the table).
    fn index_if_read_enough(&self, conn: &duckdb::Connection, store: &Store, attr: &Attribute, n: usize) -> Result<()> {
        if n < INDEX_AT || self.flushed || !crate::eindex::indexable(attr.value_type) {
            return Ok(());
        }
        let snap = store.index.snapshot();
        if snap.attr(attr.entid).is_some() || snap.is_refused(attr.entid) {
            return Ok(());
        }
        if store.log.holds(Some(&BTreeSet::from([attr.entid]))) {
            crate::txlog::apply(conn, store, &store.schema())?;
        }
        store.index.build(conn, &store.name, attr)?;
        Ok(())
    }

    /// Reads the current values of the pairs not read yet (entities born in the group have none).
    fn read_base(
        &self,
        conn: &duckdb::Connection,
        store: &Store,
        schema: &Schema,
        pairs: impl Iterator<Item = (Entid, Entid)>,
    ) -> Result<()> {
        let mut base = self.base.borrow_mut();
        let mut missing: Vec<(Entid, Entid)> =
            pairs.filter(|p| !self.born.contains(&p.0) && !base.contains_key(p)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_unstable();
        missing.dedup();
        // the log's datoms are in the tables only once applied: apply it before reading an attribute it holds
        // from the tables (an attribute the entity index holds is read from the index, which has them)
        let attrs: BTreeSet<Entid> = missing.iter().map(|p| p.1).collect();
        if store.log.holds(Some(&attrs)) {
            let snap = store.index.snapshot();
            if self.flushed || attrs.iter().any(|a| snap.attr(*a).is_none()) {
                crate::txlog::apply(conn, store, schema)?;
            }
        }
        let mut read = transactor::read_current(conn, store, schema, &missing, !self.flushed)?;
        for p in missing {
            let rows = read.remove(&p).unwrap_or_default();
            base.insert(p, rows);
        }
        Ok(())
    }

    /// Reads the holders of the unique values not read yet.
    fn read_holders<'v>(
        &self,
        conn: &duckdb::Connection,
        store: &Store,
        attr: &Attribute,
        values: impl Iterator<Item = &'v Val>,
    ) -> Result<()> {
        let a = attr.entid;
        let mut known = self.base_holders.borrow_mut();
        let mut seen: HashSet<&Val> = HashSet::new();
        // a value the store's unique-value cache knows never gets here (the transactor asks the cache first)
        let missing: Vec<&Val> = values
            .filter(|v| seen.insert(*v))
            .filter(|v| store.cached_lookup(a, v).is_none() && !known.contains_key(&(a, (*v).clone())))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // a small group that looks unique values up in the tables asks for the attribute to be read into the
        // entity index, as for the attributes it writes: its lookups then cost a probe instead of a staged join
        // (2.4 to 3.7 ms of a single-datom transaction naming a label by `[:label/name "..."]`, MENTAT_TRACE,
        // 2026-12-03); the values it asserts reach the store's unique-value cache, the values it only reads did not.
        // Not for schema attributes: a schema transaction looks its idents up in `:db/ident`, and reading that in
        // would apply the log for nothing that later writes need.
        if missing.len() <= WANT_INDEX_DATOMS && !transactor::is_schema_attr(a) {
            store.index.want([a]);
        }
        if store.log.holds(Some(&BTreeSet::from([a]))) {
            crate::txlog::apply(conn, store, &store.schema())?;
        }
        let mut found = vec![None; missing.len()];
        for (i, e) in transactor::read_holders(conn, store, attr, &missing, !self.flushed)? {
            found[i] = Some(e);
        }
        for (v, e) in missing.into_iter().zip(found) {
            known.insert((a, v.clone()), e);
        }
        Ok(())
    }

    /// Writes every member's datoms to the tables (the retractions, then the assertions still current) and the
    /// partition marks `parts`, after the store's transaction log (older than the group), and starts again
    /// empty: the tables now hold everything. What a member that needs the tables themselves runs after.
    pub fn flush(
        &mut self,
        conn: &duckdb::Connection,
        store: &Store,
        schema: &Schema,
        parts: &Partitions,
    ) -> Result<()> {
        crate::txlog::apply(conn, store, schema)?;
        self.write_tables(conn, store, schema, parts)
    }

    /// Ends the group: its datoms go to the store's transaction log when it may take them (see `txlog.rs`: the
    /// group wrote nothing to the tables itself, the entity index holds every attribute it wrote or the group has
    /// more than [`WANT_INDEX_DATOMS`] datoms, and the log stays under its size), else to the tables, after the
    /// log when the log holds one of the group's attributes or would pass its size. Returns the datoms to log, which [`crate::txlog::TxLog::commit`] makes
    /// durable after the DuckDB transaction commits.
    pub fn finish(
        &mut self,
        conn: &duckdb::Connection,
        store: &Store,
        schema: &Schema,
        parts: &Partitions,
    ) -> Result<Option<crate::txlog::Logged>> {
        if self.members.len() - self.written > 1 {
            self.catch_up(schema);
        }
        let (dead, first) = (&self.dead, self.written);
        let unwritten = &self.members[first..];
        let live = |k: usize, i: usize| !dead.contains(&(first + k, i));
        // the group's attributes (a :db/txInstant assertion is every transaction's, and never read back by the
        // transactor) and its rows, in one pass; then whether the log may take them, per attribute
        let (mut attrs, mut tx_instant_retracted, mut n) = (BTreeSet::new(), false, 0usize);
        for (k, (_, a)) in unwritten.iter().enumerate() {
            for (d, _) in &a.written.1 {
                attrs.insert(d.1);
                tx_instant_retracted |= d.1 == planner::layout::DB_TX_INSTANT;
                n += 1;
            }
            for (_, d) in a.written.0.iter().enumerate().filter(|(i, _)| live(k, *i)) {
                if d.1 != planner::layout::DB_TX_INSTANT {
                    attrs.insert(d.1);
                }
                n += 1;
            }
        }
        let settings = store.log.settings;
        let snap = store.index.snapshot();
        let kind_loggable = !self.flushed
            && settings.max_rows > 0
            && !tx_instant_retracted
            && attrs.iter().all(|a| {
                schema.attribute(*a).is_some_and(|attr| {
                    !transactor::is_schema_attr(*a)
                        && !attr.fulltext
                        && attr.tuple.is_none()
                        && crate::eindex::indexable(attr.value_type)
                })
            });
        let unheld: Vec<Entid> = attrs.iter().copied().filter(|a| snap.attr(*a).is_none()).collect();
        // a large group is logged whatever the index holds: its rows would each cost a table write now, and the
        // log's apply writes many groups' rows per attribute table at once (storage/README.md "Large groups
        // through the log"); a small one on attributes the index does not hold is written, since the next group
        // reading them from the tables would apply the log first
        let loggable = kind_loggable && (unheld.is_empty() || settings.always || n > WANT_INDEX_DATOMS);
        // a small group kept from the log only by attributes the index does not hold asks for them: the next
        // groups on them are logged
        if kind_loggable && !loggable && n <= WANT_INDEX_DATOMS {
            store.index.want(unheld);
        }
        let within = store.log.rows() + n <= settings.max_rows;
        // a group of nothing but :db/txInstant datoms (transactions whose every datom was already true) is logged
        // too: written to the tables, a single one cost a DuckDB COMMIT of the txInstant datom (0.7 to 1.0 ms in all)
        // where the log's append and sync cost 0.5 to 0.6 ms (MENTAT_TRACE, single-datom updates from Python)
        if loggable && within && n > 0 && crate::txlog::prepare(conn, store)? {
            let mut rows: Vec<crate::logfile::LogRow> = Vec::with_capacity(n);
            for (k, (_, a)) in unwritten.iter().enumerate() {
                let tx = a.report.tx;
                rows.extend(a.written.1.iter().map(|(d, asserted)| (d.clone(), false, *asserted, tx)));
                rows.extend(
                    a.written.0.iter().enumerate().filter(|(i, _)| live(k, *i)).map(|(_, d)| (d.clone(), true, tx, 0)),
                );
            }
            // every transaction asserts its :db/txInstant, which the attributes above leave out
            attrs.insert(planner::layout::DB_TX_INSTANT);
            // the marks go with the record, and reach the `partitions` table when the log is applied: the group's
            // DuckDB transaction then writes nothing, and sends no COMMIT
            let before = &self.parts_written;
            let marks = ((parts.next_db, parts.next_user) != (before.next_db, before.next_user))
                .then_some((parts.next_db, parts.next_user));
            self.parts_written = *parts;
            self.written = self.members.len();
            return Ok(Some(crate::txlog::Logged { attrs, rows, marks }));
        }
        if !within || store.log.holds(Some(&attrs)) {
            crate::txlog::apply(conn, store, schema)?;
        }
        self.write_tables(conn, store, schema, parts)?;
        Ok(None)
    }

    /// Writes every member's datoms not written yet to the tables, and the partition marks `parts`, and starts
    /// again empty: the tables now hold everything, the reads kept are void.
    fn write_tables(
        &mut self,
        conn: &duckdb::Connection,
        store: &Store,
        schema: &Schema,
        parts: &Partitions,
    ) -> Result<()> {
        if self.members.len() - self.written > 1 {
            self.catch_up(schema);
        }
        let (dead, unwritten) = (&self.dead, &self.members[self.written..]);
        let first = self.written;
        let adds = unwritten.iter().enumerate().flat_map(|(k, (_, a))| {
            a.written
                .0
                .iter()
                .enumerate()
                .filter(move |(i, _)| !dead.contains(&(first + k, *i)))
                .map(|(_, d)| (d, a.report.tx))
        });
        let retracts =
            unwritten.iter().flat_map(|(_, a)| a.written.1.iter().map(|(d, asserted)| (d, *asserted, a.report.tx)));
        transactor::write_datoms(conn, &store.name, schema, adds, retracts)?;
        transactor::write_partitions(conn, &store.name, &self.parts_written, parts)?;
        self.parts_written = *parts;
        self.written = self.members.len();
        self.indexed = self.members.len();
        self.live.clear();
        self.dead.clear();
        self.by_value.clear();
        self.retracted.clear();
        self.born.clear();
        self.base.borrow_mut().clear();
        self.base_holders.borrow_mut().clear();
        self.flushed = true;
        Ok(())
    }

    /// An error for a member that needs the tables themselves but runs while the group holds unwritten datoms
    /// (the group flushes before such members; this guards the rule).
    pub fn require_empty(p: Option<&Pending>, what: &str) -> Result<()> {
        match p {
            Some(p) if !p.is_empty() => {
                Err(StorageError::Store(format!("internal: {what} inside a group with unwritten datoms")))
            }
            _ => Ok(()),
        }
    }
}
