//! Stores: creation on first use, the in-memory schema cache and partition marks, read at open in
//! O(schema) from the bootstrap attribute tables and the `partitions` table, never from history.

use crate::error::{Result, StorageError};
use crate::value::Val;
use duckdb::Connection;
use planner::layout::{self, StoreName};
use planner::schema::{Attribute, Entid, Schema, TupleSpec, Unique, ValueType};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// The store layout version written into `meta`: 3 since the fulltext term dictionary (`ftt_`/`fts_` tables,
/// postings keyed by term id), which [`Registry::open`] builds for a store of version 2 on first open.
pub const LAYOUT_VERSION: &str = "3";

/// Next free entid of each partition (Mentat's partition map).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partitions {
    pub next_db: Entid,
    pub next_user: Entid,
    pub next_tx: Entid,
    /// `:db/txInstant` of the last transaction, in microseconds since the epoch; a new one may not be earlier.
    pub last_tx_instant: i64,
}

/// What a reader needs of a store: the schema cache and the partition marks, swapped whole on commit.
#[derive(Clone, Debug)]
pub struct StoreState {
    pub schema: Arc<Schema>,
    pub parts: Partitions,
}

/// One open store: its name, its cached state, and the lock that makes its transactions one at a time
/// (a single writer per store, as in Datomic; readers never take it).
pub struct Store {
    pub name: StoreName,
    state: RwLock<StoreState>,
    writer: Mutex<()>,
    /// Known current values of unique attributes: (attribute, value) -> entity. Filled and kept right by the
    /// transactor (it sees every datom it writes), emptied by [`Store::set_state`]. Lets lookup refs and upserts
    /// of repeated values skip the database.
    lookups: Mutex<LookupCache>,
    /// Why the store cannot be written (an attached Parquet export, a database opened read-only), read once at
    /// open.
    read_only: Option<String>,
    /// For a store in an attached catalog: the `database_oid` that catalog had when the store was opened. DuckDB
    /// gives every ATTACH a new oid, so a cached store is never used for another file attached under the same
    /// name (or for the same file attached again, which may have been written meanwhile).
    catalog_oid: Option<i64>,
    /// The store's current datoms in memory, for entity-shaped queries (`eindex.rs`).
    pub index: crate::eindex::EntityIndex,
    /// Transactions waiting for the group commit (`group.rs`).
    pub queue: crate::group::Queue,
    /// What the store's transaction log holds (`txlog.rs`).
    pub log: crate::txlog::TxLog,
    /// When the indexer last looked for tables that deleted rows have swollen (`compact.rs`); None: never.
    pub compact_looked: Mutex<Option<std::time::Instant>>,
}

/// Entries the unique-value cache holds at most; past that it starts again empty.
pub const LOOKUP_CACHE_MAX: usize = 4_000_000;

impl Store {
    /// The current schema and partition marks.
    pub fn state(&self) -> StoreState {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The current schema cache.
    pub fn schema(&self) -> Arc<Schema> {
        self.state().schema
    }

    /// Takes the store's writer lock.
    pub fn lock_writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's writer lock if no one holds it now.
    pub fn try_lock_writer(&self) -> Option<MutexGuard<'_, ()>> {
        match self.writer.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Takes the store's writer lock and applies its transaction log to the tables first (`txlog.rs`), on `conn`
    /// (which must have no transaction open): for writers that write or read the tables themselves.
    pub fn lock_writer_settled(&self, conn: &Connection) -> Result<MutexGuard<'_, ()>> {
        let writer = self.lock_writer();
        crate::txlog::settle_locked(conn, self)?;
        Ok(writer)
    }

    /// The state as the database holds it now, read inside the caller's open transaction. The cache is right
    /// unless another DuckDB instance wrote the store since it was read (the file was detached, written by
    /// another process and attached again): then the partition marks differ, and the whole state is read again
    /// and cached. Two small queries, made only for stores in an attached catalog: the instance's default
    /// database stays locked by this process while the extension is loaded, so no one else can write it. Not
    /// while the store's transaction log holds datoms: the tables then lag behind the cache by exactly the log
    /// (their newest `:db/txInstant` is older), and reading the state from them would hand out tx entids again.
    pub fn refresh(&self, conn: &Connection) -> Result<StoreState> {
        let cached = self.state();
        if self.name.catalog.is_none() || !self.log.is_empty() {
            return Ok(cached);
        }
        let mut parts = cached.parts;
        read_partitions(conn, &self.name, &mut parts)?;
        if parts == cached.parts {
            return Ok(cached);
        }
        let state = load_state(conn, &self.name)?;
        self.set_state(state.clone());
        Ok(state)
    }

    /// Replaces the cached state after a commit, and forgets the unique-value cache and the entity index (for
    /// writers that do not report the datoms they changed, such as a bulk import).
    pub fn set_state(&self, s: StoreState) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = s;
        *self.lookups.lock().unwrap_or_else(|p| p.into_inner()) = LookupCache::default();
        self.index.clear();
    }

    /// Replaces the cached state after a transaction committed, keeping the unique-value cache right: the
    /// `retracted` (attribute, value) pairs leave it and the `asserted` (attribute, value, entity) enter it.
    pub fn commit_state(&self, s: StoreState, retracted: &[(Entid, Val)], asserted: &[(Entid, Val, Entid)]) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = s;
        self.apply_lookups(retracted, asserted);
    }

    /// Keeps the unique-value cache right after a transaction's writes: the `retracted` (attribute, value) pairs
    /// leave it and the `asserted` (attribute, value, entity) enter it. A group commit applies each member's
    /// changes before the next member runs, and [`Store::clear_lookups`] when the group rolls back.
    pub fn apply_lookups(&self, retracted: &[(Entid, Val)], asserted: &[(Entid, Val, Entid)]) {
        let mut cache = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
        for (a, v) in retracted {
            if let Some(m) = cache.by_attr.get_mut(a) {
                m.remove(v);
            }
        }
        if cache.len() + asserted.len() > LOOKUP_CACHE_MAX {
            *cache = LookupCache::default();
        }
        for (a, v, e) in asserted {
            cache.by_attr.entry(*a).or_default().insert(v.clone(), *e);
        }
    }

    /// Empties the unique-value cache (it fills again as transactions assert unique values; a value it does not
    /// hold is looked up in the store).
    pub fn clear_lookups(&self) {
        *self.lookups.lock().unwrap_or_else(|p| p.into_inner()) = LookupCache::default();
    }

    /// Whether the store is the one its name means on `conn` now: always for the default database; for an
    /// attached catalog, while the catalog is the database that was attached when the store was opened.
    pub fn is_current(&self, conn: &Connection) -> Result<bool> {
        Ok(match &self.name.catalog {
            None => true,
            Some(c) => catalog_oid(conn, c)? == self.catalog_oid,
        })
    }

    /// Why the store cannot be written, or None when it can.
    pub fn read_only(&self) -> Option<&str> {
        self.read_only.as_deref()
    }

    /// The entity that currently holds `v` for the unique attribute `a`, if the cache knows it.
    pub fn cached_lookup(&self, a: Entid, v: &Val) -> Option<Entid> {
        self.lookups.lock().unwrap_or_else(|p| p.into_inner()).by_attr.get(&a)?.get(v).copied()
    }
}

/// The unique-value cache: per unique attribute, value to entity (looked up by reference, no key built per probe;
/// a bulk load probes it some 1,500 times per call).
#[derive(Default)]
struct LookupCache {
    by_attr: foldhash::HashMap<Entid, foldhash::HashMap<Val, Entid>>,
}

impl LookupCache {
    /// Entries in all (one map per unique attribute: a handful to add up).
    fn len(&self) -> usize {
        self.by_attr.values().map(|m| m.len()).sum()
    }
}

/// The stores of one DuckDB database instance, opened on first use.
#[derive(Default)]
pub struct Registry {
    stores: Mutex<HashMap<StoreName, Arc<Store>>>,
    /// The transaction log's switches for every store opened here (read when the registry is made).
    pub log: crate::txlog::Settings,
}

impl Registry {
    /// Opens the store `name` (reading its schema and partitions once), creating it when `create` is true and
    /// its DuckDB schema does not exist yet. Errors with [`StorageError::Store`] when it does not exist and
    /// `create` is false.
    ///
    /// A store in an attached catalog is checked on every call against the database the catalog names now (one
    /// small query, [`catalog_oid`]): after a DETACH and an ATTACH of another file under the same name, the
    /// cached schema and partition marks are dropped and read again from the new file.
    pub fn open(&self, conn: &Connection, name: &StoreName, create: bool) -> Result<Arc<Store>> {
        let catalog_oid = match &name.catalog {
            Some(c) => Some(
                catalog_oid(conn, c)?.ok_or_else(|| StorageError::Store(format!("{name}: no database named {c}")))?,
            ),
            None => None,
        };
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = stores.get(name) {
            if s.catalog_oid == catalog_oid {
                return Ok(s.clone());
            }
            stores.remove(name);
        }
        if !store_exists(conn, name)? {
            if !create {
                return Err(StorageError::Store(format!(
                    "{name} does not exist: transact into it first (it is created on first use)"
                )));
            }
            create_store(conn, name)?;
        }
        let mut state = load_state(conn, name)?;
        let export = crate::parquet::read_only(conn, name)?;
        if export.is_none() && state.schema.has_fulltext() {
            // a fulltext index that an earlier layout wrote is rebuilt in this one, once, before the log's
            // transactions are applied to it; where the database is read-only it stays as it is (and a search of
            // it fails with DuckDB's error naming the missing dictionary)
            let _ = crate::in_transaction(conn, || crate::fulltext::upgrade(conn, name, &state.schema));
        }
        let (log, recovered) = crate::txlog::recover(conn, name, &state.schema, self.log, export.is_some())?;
        // A transaction must be refused before anything acknowledges it: one whose attributes the entity index
        // holds goes to the log file first, and on a database opened read-only the log could never be applied
        // (the transaction was acknowledged and every later read failed).
        let db_read_only: bool = conn.query_row(
            "SELECT readonly FROM duckdb_databases() WHERE database_name = coalesce($1, current_database())",
            [&name.catalog],
            |r| r.get(0),
        )?;
        let read_only = match export {
            Some(dir) => Some(format!("a Parquet export attached from {dir}")),
            None => db_read_only.then(|| "its database is opened read-only".to_string()),
        };
        if recovered {
            state = load_state(conn, name)?;
        }
        let store = Arc::new(Store {
            read_only,
            name: name.clone(),
            state: RwLock::new(state),
            writer: Mutex::new(()),
            lookups: Default::default(),
            catalog_oid,
            index: Default::default(),
            queue: Default::default(),
            log,
            compact_looked: Mutex::new(None),
        });
        stores.insert(name.clone(), store.clone());
        Ok(store)
    }

    /// The store `name` if it is already open, without database access: only for stores of the default
    /// database, which cannot be detached (an attached catalog's store is checked by [`Registry::open`]).
    pub fn get(&self, name: &StoreName) -> Option<Arc<Store>> {
        if name.catalog.is_some() {
            return None;
        }
        self.stores.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// The open stores whose transaction log holds datoms not yet applied to their tables.
    pub fn with_log(&self) -> Vec<Arc<Store>> {
        self.stores.lock().unwrap_or_else(|p| p.into_inner()).values().filter(|s| !s.log.is_empty()).cloned().collect()
    }

    /// Forgets a cached store, so that the next [`Registry::open`] reads it again.
    pub fn forget(&self, name: &StoreName) {
        self.stores.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    }
}

/// The `database_oid` of the database attached as `catalog` now, or None when there is none.
pub fn catalog_oid(conn: &Connection, catalog: &str) -> Result<Option<i64>> {
    let mut st = conn.prepare_cached("SELECT database_oid FROM duckdb_databases() WHERE database_name = ?")?;
    let mut rows = st.query([catalog])?;
    Ok(match rows.next()? {
        Some(r) => Some(r.get(0)?),
        None => None,
    })
}

/// Whether the store `name` exists (its `partitions` table is there).
pub fn store_exists(conn: &Connection, name: &StoreName) -> Result<bool> {
    let catalog = name.catalog.clone().unwrap_or_default();
    let n: i64 = conn.query_row(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = 'partitions' \
         AND (? = '' AND database_name = current_database() OR database_name = ?)",
        duckdb::params![name.schema, catalog, catalog],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// SQL that creates the two tables of an attribute, and an ART index on the value of a unique attribute.
/// `:db/index` alone creates no ART index: DuckDB's zone maps and hash joins serve those attributes, and an ART
/// index would cost every write and live in memory (storage/README.md has the measurement).
pub fn attribute_ddl(store: &StoreName, a: &Attribute) -> Vec<String> {
    let t = a.sql_type();
    let mut v = vec![
        current_table_ddl(&store.current(a.entid), a),
        format!(
            "CREATE TABLE {} (e BIGINT NOT NULL, v {t} NOT NULL, tx BIGINT NOT NULL, retracted_tx BIGINT NOT NULL)",
            store.history(a.entid)
        ),
    ];
    if has_art_index(a) {
        v.push(index_ddl(store, a.entid));
    }
    v.extend(crate::fulltext::ddl(store, a));
    v
}

/// SQL that creates the current-state table of attribute `a` as `table` (a quoted reference): `e`, `v` of the
/// attribute's type, `tx`. Also the new table of a compaction (`compact.rs`).
pub fn current_table_ddl(table: &str, a: &Attribute) -> String {
    format!("CREATE TABLE {table} (e BIGINT NOT NULL, v {} NOT NULL, tx BIGINT NOT NULL)", a.sql_type())
}

/// Whether an attribute's current-state table carries an ART index on `v`: unique attributes only.
pub fn has_art_index(a: &Attribute) -> bool {
    // DuckDB's ART indexes take no STRUCT or LIST keys: a unique tuple is checked by a join, as every unique
    // value is when the index is cold.
    a.unique.is_some() && a.tuple.is_none()
}

/// The ART index on the value column of an attribute's current-state table.
pub fn index_ddl(store: &StoreName, aid: Entid) -> String {
    format!("CREATE INDEX IF NOT EXISTS {} ON {} (v)", layout::quote_ident(&format!("cur_{aid}_v")), store.current(aid))
}

/// Drops the value index of an attribute.
pub fn drop_index_ddl(store: &StoreName, aid: Entid) -> String {
    format!("DROP INDEX IF EXISTS {}.{}", store.sql(), layout::quote_ident(&format!("cur_{aid}_v")))
}

fn create_store(conn: &Connection, name: &StoreName) -> Result<()> {
    let boot = layout::bootstrap_schema();
    let mut sql = vec![
        format!("CREATE SCHEMA IF NOT EXISTS {}", name.sql()),
        format!("CREATE TABLE {} (key VARCHAR NOT NULL, value VARCHAR NOT NULL)", name.table("meta")),
        format!(
            "CREATE TABLE {} (ident VARCHAR NOT NULL, start BIGINT NOT NULL, next BIGINT NOT NULL)",
            name.table("partitions")
        ),
        format!("INSERT INTO {} VALUES ('layout_version', '{LAYOUT_VERSION}')", name.table("meta")),
        format!(
            "INSERT INTO {} VALUES (':db.part/db', {}, {}), (':db.part/user', {}, {}), (':db.part/tx', {}, {})",
            name.table("partitions"),
            layout::PART_DB_START,
            layout::PART_DB_USER_START,
            layout::PART_USER_START,
            layout::PART_USER_START,
            layout::PART_TX_START,
            layout::PART_TX_START + 1
        ),
    ];
    for a in boot.attributes() {
        sql.extend(attribute_ddl(name, a));
    }
    // The bootstrap transaction: every bootstrap ident and attribute property, at tx PART_TX_START, 1970-01-01.
    let tx = layout::PART_TX_START;
    let mut rows: HashMap<Entid, Vec<String>> = HashMap::new();
    for (a, e, v) in layout::bootstrap_datoms() {
        rows.entry(a).or_default().push(format!("({e}, {}, {tx})", v.sql()));
    }
    let mut attrs: Vec<_> = rows.into_iter().collect();
    attrs.sort_by_key(|p| p.0);
    for (a, values) in attrs {
        let list = values.join(", ");
        sql.push(format!("INSERT INTO {} VALUES {list}", name.current(a)));
    }
    crate::in_transaction(conn, || Ok(conn.execute_batch(&sql.join(";\n"))?))
}

/// The entid of a `:db.unique/...` ident.
pub fn unique_entid(u: Unique) -> Entid {
    match u {
        Unique::Value => layout::DB_UNIQUE_VALUE,
        Unique::Identity => layout::DB_UNIQUE_IDENTITY,
    }
}

/// Reads the schema cache and partition marks of an existing store: one small query per bootstrap attribute
/// table plus the partitions table.
pub fn load_state(conn: &Connection, name: &StoreName) -> Result<StoreState> {
    // The idents and the schema properties in one statement: a store is opened by the first call that names it,
    // and on a cold file each statement costs a millisecond or more (eight of them were most of a first call's
    // time at scale m).
    const PROPS: [Entid; 10] = [
        layout::DB_VALUE_TYPE,
        layout::DB_CARDINALITY,
        layout::DB_UNIQUE,
        layout::DB_INDEX,
        layout::DB_FULLTEXT,
        layout::DB_IS_COMPONENT,
        layout::DB_DOC,
        layout::DB_TUPLE_TYPE,
        layout::DB_TUPLE_TYPES,
        layout::DB_TUPLE_ATTRS,
    ];
    let sql = |props: &[Entid]| {
        std::iter::once(layout::DB_IDENT)
            .chain(props.iter().copied())
            .map(|aid| format!("SELECT {aid} AS a, e, v::VARCHAR AS v FROM {}", name.current(aid)))
            .collect::<Vec<_>>()
            .join(" UNION ALL ")
    };
    let read = |props: &[Entid]| -> Result<Vec<(i64, i64, String)>> {
        let mut st = conn.prepare(&sql(props))?;
        let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))?;
        Ok(rows.collect::<std::result::Result<Vec<_>, _>>()?)
    };
    let rows = match read(&PROPS) {
        Ok(rows) => rows,
        // Only a missing table means an older store: any other error (an interrupt, an I/O error) is the
        // caller's, and a retry inside its transaction would only report "transaction is aborted" instead.
        Err(StorageError::DuckDb(e)) if !e.to_string().contains("Catalog Error") => return Err(e.into()),
        Err(_) => {
            // A store written before the tuple attributes existed: give it their tables and bootstrap datoms
            // where the database is writable, else read it without them.
            let _ = add_missing_bootstrap(conn, name);
            match read(&PROPS) {
                Ok(rows) => rows,
                Err(_) => read(&PROPS[..7])?,
            }
        }
    };
    let mut schema = Schema::new();
    for (_, e, ident) in rows.iter().filter(|r| r.0 == layout::DB_IDENT) {
        schema.add_ident(ident, *e);
    }
    // A store written before a bootstrap ident existed (the value types `:db.type/bigint` .. `:db.type/tuple`)
    // learns it here, so that it can install attributes of that type; its entid is reserved in every store.
    for (ident, e) in layout::bootstrap_schema().idents() {
        if schema.entid(ident).is_none() && schema.ident(e).is_none() {
            schema.add_ident(ident, e);
        }
    }
    let mut props: HashMap<Entid, HashMap<Entid, String>> = HashMap::new();
    for (aid, e, v) in rows.into_iter().filter(|r| r.0 != layout::DB_IDENT) {
        props.entry(e).or_default().insert(aid, v);
    }
    // Composite tuples after the attributes they are made of.
    let mut props: Vec<(Entid, HashMap<Entid, String>)> = props.into_iter().collect();
    props.sort_by_key(|(e, p)| (p.contains_key(&layout::DB_TUPLE_ATTRS), *e));
    for (e, p) in props {
        if let Some(a) = attribute_from_props(&schema, e, &p) {
            schema.add_attribute(a);
        }
    }
    let mut parts = Partitions {
        next_db: layout::PART_DB_USER_START,
        next_user: layout::PART_USER_START,
        next_tx: 0,
        last_tx_instant: 0,
    };
    read_partitions(conn, name, &mut parts)?;
    let language = conn.query_row(
        &format!("SELECT max(value) FROM {} WHERE key = ?", name.table("meta")),
        [planner::fulltext::LANGUAGE_KEY],
        |r| r.get::<_, Option<String>>(0),
    )?;
    schema.set_fulltext_language(language);
    parts.last_tx_instant = conn.query_row(
        &format!("SELECT coalesce(max(epoch_us(v)), 0) FROM {} WHERE e = ?", name.current(layout::DB_TX_INSTANT)),
        [parts.next_tx - 1],
        |r| r.get(0),
    )?;
    Ok(StoreState { schema: Arc::new(schema), parts })
}

/// Creates the tables and writes the bootstrap datoms of bootstrap attributes and idents that a store written by
/// an earlier version lacks (the tuple schema attributes, the value types added since), in one transaction.
fn add_missing_bootstrap(conn: &Connection, name: &StoreName) -> Result<()> {
    let tx = layout::PART_TX_START;
    crate::in_transaction(conn, || {
        for a in layout::bootstrap_schema().attributes() {
            for ddl in attribute_ddl(name, a) {
                conn.execute_batch(&ddl.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))?;
            }
        }
        for (a, e, v) in layout::bootstrap_datoms() {
            let t = name.current(a);
            conn.execute_batch(&format!(
                "INSERT INTO {t} SELECT {e}, {v}, {tx} WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE e = {e})",
                v = v.sql()
            ))?;
        }
        Ok(())
    })
}

/// Reads the partition marks (not `last_tx_instant`) of a store into `parts`.
/// Reads the partition marks. The `partitions` table is written only when `:db.part/db` or `:db.part/user`
/// moves; the next tx entid is one past the newest transaction, found through `cur_9` (`:db/txInstant`) from
/// the stored mark on, which DuckDB's zone maps confine to the last row group.
fn read_partitions(conn: &Connection, name: &StoreName, parts: &mut Partitions) -> Result<()> {
    let mut st = conn.prepare_cached(&format!("SELECT ident, next FROM {}", name.table("partitions")))?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (ident, next) = row?;
        match ident.as_str() {
            ":db.part/db" => parts.next_db = next,
            ":db.part/user" => parts.next_user = next,
            ":db.part/tx" => parts.next_tx = next,
            _ => {}
        }
    }
    let newest: Option<i64> = conn
        .prepare_cached(&format!("SELECT max(e) FROM {} WHERE e >= $1", name.current(layout::DB_TX_INSTANT)))?
        .query_row([parts.next_tx], |r| r.get(0))?;
    if let Some(t) = newest {
        parts.next_tx = t + 1;
    }
    Ok(())
}

/// Builds an attribute from its schema datoms (values as text: entids of refs, `true`/`false`, doc text).
/// An entity is an attribute once it has an ident, a value type and a cardinality.
pub fn attribute_from_props(schema: &Schema, e: Entid, p: &HashMap<Entid, String>) -> Option<Attribute> {
    let ident = schema.ident(e)?;
    let value_type = layout::value_type_of_entid(p.get(&layout::DB_VALUE_TYPE)?.parse().ok()?)?;
    let card: Entid = p.get(&layout::DB_CARDINALITY)?.parse().ok()?;
    let unique = match p.get(&layout::DB_UNIQUE).and_then(|u| u.parse::<Entid>().ok()) {
        Some(layout::DB_UNIQUE_VALUE) => Some(Unique::Value),
        Some(layout::DB_UNIQUE_IDENTITY) => Some(Unique::Identity),
        _ => None,
    };
    let flag = |a| p.get(&a).is_some_and(|v| v == "true");
    let tuple = if value_type == ValueType::Tuple { Some(tuple_spec(schema, p)?) } else { None };
    Some(Attribute {
        entid: e,
        ident: ident.to_string(),
        value_type,
        many: card == layout::DB_CARDINALITY_MANY,
        unique,
        index: flag(layout::DB_INDEX) || unique.is_some(),
        fulltext: flag(layout::DB_FULLTEXT),
        component: flag(layout::DB_IS_COMPONENT),
        doc: p.get(&layout::DB_DOC).cloned(),
        tuple,
    })
}

/// The element types of a tuple attribute from its schema datoms (`:db/tupleType`, `:db/tupleTypes` or
/// `:db/tupleAttrs`, list values as DuckDB prints a `BIGINT[]`, `[13, 15]`); None when it has none of them. A
/// composite's component that the schema does not hold (yet) has the placeholder type `:db.type/tuple`, which the
/// transactor refuses when it installs the attribute.
pub fn tuple_spec(schema: &Schema, p: &HashMap<Entid, String>) -> Option<TupleSpec> {
    let list = |s: &String| -> Option<Vec<Entid>> {
        let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
        inner.split(|c: char| c == ',' || c.is_whitespace()).filter(|x| !x.is_empty()).map(|x| x.parse().ok()).collect()
    };
    if let Some(t) = p.get(&layout::DB_TUPLE_TYPE) {
        return Some(TupleSpec::Homogeneous(layout::value_type_of_entid(t.parse().ok()?)?));
    }
    if let Some(ts) = p.get(&layout::DB_TUPLE_TYPES) {
        let ts = list(ts)?.into_iter().map(layout::value_type_of_entid).collect::<Option<Vec<_>>>()?;
        return Some(TupleSpec::Heterogeneous(ts));
    }
    let attrs = list(p.get(&layout::DB_TUPLE_ATTRS)?)?;
    let comps = attrs
        .into_iter()
        .map(|a| (a, schema.attribute(a).filter(|x| x.tuple.is_none()).map_or(ValueType::Tuple, |x| x.value_type)))
        .collect();
    Some(TupleSpec::Composite(comps))
}
