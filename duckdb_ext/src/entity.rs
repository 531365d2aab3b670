//! Routing of entity-shaped queries to the entity index (`planner::entity` decides, `storage::eindex` answers),
//! and the answer written into DuckDB's vectors with the general path's column names and types.
//!
//! The path is taken for stores of the database the process opened first (an attached catalog can be written by
//! another process, which the index would not see) and when the instance allows it: `MENTAT_ENTITY_PATH=0` in the
//! environment when mentat is loaded turns it off, so the tests can run every query through both paths.
//! An attribute is read into the index when a query first needs it: at once when its table is small
//! ([`SYNC_ROWS`]), in a background thread otherwise (the query meanwhile takes the general path), so opening a
//! store never reads a whole index and a first call stays fast.

use crate::query::Bound;
use crate::Instance;
use duckdb::ffi;
use planner::entity::{EntityPlan, Key};
use planner::layout::StoreName;
use planner::schema::{Entid, Schema, ValueType};
use planner::{CompiledQuery, FindKind, QueryOptions};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use storage::eindex::Pulled;
use storage::eindex::{self, Outcome};
use storage::store::Store;

/// Attributes of at most this many datoms are read into the index during the query that first needs them.
pub const SYNC_ROWS: i64 = 10_000;

/// How long a background read of an attribute waits before it starts.
pub const BACKGROUND_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether the entity path is on for this process (`MENTAT_ENTITY_PATH=0` turns it off), read at load.
pub fn enabled_by_environment() -> bool {
    !matches!(std::env::var("MENTAT_ENTITY_PATH").as_deref(), Ok("0") | Ok("false") | Ok("off"))
}

/// Values the entity path keeps per text (a query, a pull pattern) between calls, for one store and one schema
/// value: a call whose text was seen before skips parsing and compiling it (on the general path, compiling SQL
/// for an entity read cost about as much as answering it). An entry is used only while the store's schema is
/// the one it was built for; the cache is emptied when it reaches [`SHAPES`] entries.
pub struct Shapes<T> {
    map: Mutex<HashMap<StoreName, HashMap<String, Kept<T>>>>,
}

/// A kept value with the schema it was built for.
type Kept<T> = (Arc<Schema>, Arc<T>);

/// Entries a [`Shapes`] cache holds at most.
pub const SHAPES: usize = 1024;

impl<T> Default for Shapes<T> {
    fn default() -> Self {
        Shapes { map: Mutex::new(HashMap::new()) }
    }
}

impl<T> Shapes<T> {
    /// The value kept for `text` on `store`, when it was built for `schema` (a lookup that copies nothing).
    pub fn get(&self, store: &StoreName, text: &str, schema: &Arc<Schema>) -> Option<Arc<T>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(store).and_then(|texts| texts.get(text)) {
            Some((s, v)) if Arc::ptr_eq(s, schema) => Some(v.clone()),
            _ => None,
        }
    }

    /// Keeps `value` for `text` on `store` under `schema`.
    pub fn put(&self, store: &StoreName, text: &str, schema: &Arc<Schema>, value: Arc<T>) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.values().map(HashMap::len).sum::<usize>() >= SHAPES {
            map.clear();
        }
        map.entry(store.clone()).or_default().insert(text.to_string(), (schema.clone(), value));
    }
}

/// The entity plan of a query of shape `shape`, when this instance takes the entity path for it.
pub fn plan(
    instance: &Instance,
    shape: &planner::EntityShape,
    inputs: Option<&str>,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Option<EntityPlan> {
    if !instance.entity_path || store.catalog.is_some() {
        return None;
    }
    planner::entity_plan(shape, inputs, schema, store, opts)
}

/// The shape of `query` (compiled to `compiled`) for the entity path: the kept one, or made now and kept for the
/// next call.
pub fn shape_of(
    instance: &Instance,
    store: &StoreName,
    query: &str,
    schema: &Arc<Schema>,
    compiled: &CompiledQuery,
) -> Option<Arc<planner::EntityShape>> {
    if !instance.entity_path || store.catalog.is_some() {
        return None;
    }
    if let Some(kept) = instance.query_shapes.get(store, query, schema) {
        return Some(kept);
    }
    let shape = Arc::new(planner::entity_shape(query, compiled)?);
    instance.query_shapes.put(store, query, schema, shape.clone());
    Some(shape)
}

/// What a query's `(pull ?e pattern)` columns need besides the plan: the caller (whose connection types a pull's
/// STRUCT), the schema and the options of the call.
pub struct PullContext<'a> {
    pub caller: &'a crate::session::Caller,
    pub schema: &'a Arc<Schema>,
    pub opts: &'a QueryOptions,
}

/// The answer of `plan` from the store's entity index, or None when the general path must answer (an attribute
/// being read in the background, over the memory budget, or an intermediate result too large). The plan's pull
/// columns are pulled from the same snapshot as its rows ([`pull_columns`]).
pub fn answer(
    instance: &Arc<Instance>,
    name: &StoreName,
    plan: &EntityPlan,
    shape: &planner::EntityShape,
    ctx: &PullContext,
) -> Result<Option<Answer>, String> {
    let store = open_store(instance, name)?;
    for first in [true, false] {
        let snap = store.index.snapshot();
        let missing = match eindex::execute(&snap, plan) {
            Outcome::Rows(rows) => {
                let mut answer = Answer::new(rows, plan, &shape.columns);
                if plan.pulls.is_empty() {
                    return Ok(Some(answer));
                }
                // SAFETY: called during the query's bind, which `ctx.caller` belongs to
                match unsafe { pull_columns(instance, name, &snap, &mut answer, plan, ctx)? } {
                    Ok(()) => return Ok(Some(answer)),
                    Err(eindex::PullMiss::General) => return Ok(None),
                    Err(eindex::PullMiss::Read(attrs)) => attrs,
                }
            }
            Outcome::General => return Ok(None),
            Outcome::Missing(attrs) => attrs,
        };
        if !first || !read_attributes(instance, &store, &missing)? {
            return Ok(None);
        }
    }
    Ok(None)
}

/// For `mentat_explain` of a query the entity path takes: what the store's entity index has not read yet of the
/// attributes `plan` reads, or that it would give the query back to the general path (a value that many entities
/// hold), as a sentence (None when it would answer). Such attributes are read by the first
/// `mentat_q` that needs them, at once when small ([`SYNC_ROWS`]), else in the background while the general path
/// answers; so an explain in a fresh process can name the entity path before `mentat_entity_index()` lists
/// anything. Reads nothing itself.
pub fn index_note(instance: &Arc<Instance>, name: &StoreName, plan: &EntityPlan) -> Result<Option<String>, String> {
    let store = open_store(instance, name)?;
    let schema = store.schema();
    let attrs = match eindex::execute(&store.index.snapshot(), plan) {
        Outcome::Rows(_) => return Ok(None),
        Outcome::General => {
            return Ok(Some(format!(
                "asked now, the entity index gives this query back to the general path, which then answers it: an \
                 intermediate result passes {} rows (a scan's work, which DuckDB does better) or a value has no \
                 order in the index",
                eindex::MAX_ROWS
            )))
        }
        Outcome::Missing(attrs) => attrs,
    };
    let idents: Vec<String> =
        attrs.iter().map(|a| schema.attribute(*a).map_or(a.to_string(), |x| x.ident.clone())).collect();
    Ok(Some(format!(
        "the entity index has not read {} yet: the first mentat_q that needs them reads them (in the background \
         when one holds more than {SYNC_ROWS} datoms, the general path answering until it is read)",
        idents.join(" ")
    )))
}

/// Pulls the entities of `answer`'s pull columns with their patterns, from `snap`, typed as the general path types
/// them: every `*` of the query's pulls from one set of attributes, those held by the entities of every `*` level
/// of every pull over the whole answer (`planner::compile_query_held`), so the pulls are made with every attribute
/// and then projected onto the narrowed patterns. `Err(PullMiss)` when the index cannot answer yet (or at all).
///
/// # Safety
/// Called during a bind of the caller's connection (a pull's STRUCT type is read from a prepared statement).
unsafe fn pull_columns(
    instance: &Arc<Instance>,
    name: &StoreName,
    snap: &eindex::Snapshot,
    answer: &mut Answer,
    plan: &EntityPlan,
    ctx: &PullContext,
) -> Result<Result<(), eindex::PullMiss>, String> {
    let shape_for = |pattern: &str, held: Option<&[i64]>| {
        let compile_held = |held: Option<&[i64]>| {
            let v = planner::parse::parse_edn(pattern, "pull pattern").map_err(|e| e.to_string())?;
            planner::pull::compile_pull_held(&v, ctx.schema, name, ctx.opts, held).map_err(|e| e.to_string())
        };
        let key = crate::pull::PullKey { pattern, many: false, held };
        crate::pull::pull_shape(instance, ctx.caller, name, ctx.schema, &key, ctx.opts, &compile_held)
    };
    let mut held = Vec::new();
    let mut columns = Vec::with_capacity(plan.pulls.len());
    for (c, pattern) in &plan.pulls {
        let Some(shape) = shape_for(pattern, None)? else { return Ok(Err(eindex::PullMiss::General)) };
        let Some(pat) = shape.specs.as_ref() else { return Ok(Err(eindex::PullMiss::General)) };
        let mut pulled = Vec::with_capacity(answer.rows.len());
        for row in &answer.rows {
            let Key::Int(e) = row[*c] else { return Ok(Err(eindex::PullMiss::General)) };
            match eindex::pull(snap, pat, ctx.schema, e, shape.wildcard.then_some(&mut held)) {
                Ok(p) => pulled.push(p),
                Err(miss) => return Ok(Err(miss)),
            }
        }
        columns.push((*c, pattern, shape.clone(), pulled));
    }
    held.sort_unstable();
    for (c, pattern, wide, mut pulled) in columns {
        let shape = match wide.wildcard {
            false => wide,
            true => {
                let Some(narrow) = shape_for(pattern, Some(&held))? else {
                    return Ok(Err(eindex::PullMiss::General));
                };
                let (Some(from), Some(to)) = (wide.specs.as_ref(), narrow.specs.as_ref()) else {
                    return Ok(Err(eindex::PullMiss::General));
                };
                for p in pulled.iter_mut() {
                    if let Some(fields) = p.take() {
                        *p = Some(project_fields(fields, &from.specs, &to.specs));
                    }
                }
                narrow
            }
        };
        answer.pulls.push(PullColumn { column: c, rows: pulled, shape });
    }
    Ok(Ok(()))
}

/// The store `name`, opened (its schema read) if it is not yet.
fn open_store(instance: &Instance, name: &StoreName) -> Result<Arc<Store>, String> {
    match instance.stores.get(name) {
        Some(s) => Ok(s),
        None => {
            let conn = instance.pool.get()?;
            instance.stores.open(&conn, name, false).map_err(|e| e.to_string())
        }
    }
}

/// An entity a pull names, as the entity path takes it.
pub enum PullEntity {
    /// An entid (None: a NULL, whose row is NULL).
    Id(Option<i64>),
    /// A lookup ref: a unique attribute and a value, resolved through the attribute's value order.
    Lookup(Entid, Key),
}

/// The pulls of `entities` with `pattern`, from the store's entity index, or None when the general path must pull
/// (see `planner::pull::entity_path_pattern`). The answer is written into the general path's column types
/// `(e BIGINT, pull STRUCT(...))`. With `wildcard` (a `*` at any level), also the attributes the entities of the
/// `*` levels hold (what types the `*`s, see `storage::eindex::pull`).
pub fn pull_answer(
    instance: &Arc<Instance>,
    name: &StoreName,
    pattern: &planner::pull::Pattern,
    entities: &[PullEntity],
    wildcard: bool,
) -> Result<Option<PullAnswer>, String> {
    if !instance.entity_path || name.catalog.is_some() {
        return Ok(None);
    }
    let store = open_store(instance, name)?;
    let schema = store.schema();
    for first in [true, false] {
        let snap = store.index.snapshot();
        let mut rows = Vec::with_capacity(entities.len());
        let mut missing = None;
        let mut held = Vec::new();
        let mut found = Vec::new();
        for e in entities {
            let e = match e {
                PullEntity::Id(e) => *e,
                // a unique value has at most one entity; none: a NULL row, as the general path's lookup gives
                PullEntity::Lookup(a, k) => match snap.attr(*a) {
                    None => {
                        missing = Some(vec![*a]);
                        break;
                    }
                    Some(ix) => {
                        found.clear();
                        if ix.entities(&eindex::IKey::from_key(k), None, &mut found).is_none() {
                            return Ok(None);
                        }
                        found.iter().min().copied()
                    }
                },
            };
            match e {
                None => rows.push((None, None)),
                Some(e) => match eindex::pull(&snap, pattern, &schema, e, wildcard.then_some(&mut held)) {
                    Ok(p) => rows.push((Some(e), p)),
                    Err(eindex::PullMiss::Read(m)) => {
                        missing = Some(m);
                        break;
                    }
                    Err(eindex::PullMiss::General) => return Ok(None),
                },
            }
        }
        match missing {
            None => {
                let held = wildcard.then_some(held);
                return Ok(Some(PullAnswer { rows, next: AtomicUsize::new(0), held }));
            }
            Some(m) if first => {
                if !read_attributes(instance, &store, &m)? {
                    return Ok(None);
                }
            }
            Some(_) => return Ok(None),
        }
    }
    Ok(None)
}

/// Rows of `(e, pull)` the entity path computed; written into the general path's STRUCT type.
pub struct PullAnswer {
    rows: Vec<(Option<i64>, Option<Vec<Pulled>>)>,
    next: AtomicUsize,
    /// With `wildcard`: the attributes the entities of the `*` levels hold, which type the pattern's `*`s.
    pub held: Option<Vec<i64>>,
}

impl PullAnswer {
    /// Keeps, in order, the fields of `to` (the same pattern with its `*`s narrowed) out of rows pulled with
    /// `from`, at every level.
    pub fn project(&mut self, from: &planner::pull::Pattern, to: &planner::pull::Pattern) {
        for (_, pull) in self.rows.iter_mut() {
            if let Some(fields) = pull.take() {
                *pull = Some(project_fields(fields, &from.specs, &to.specs));
            }
        }
    }
}

/// The fields of `to` out of `fields` pulled with `from` (a field is the one of the same target and name), nested
/// patterns projected the same way.
fn project_fields(fields: Vec<Pulled>, from: &[planner::pull::Spec], to: &[planner::pull::Spec]) -> Vec<Pulled> {
    use planner::pull::Sub;
    let mut fields: Vec<Option<Pulled>> = fields.into_iter().map(Some).collect();
    to.iter()
        .map(|t| {
            let Some(i) = from.iter().position(|f| f.target == t.target && f.name == t.name) else {
                return Pulled::Null;
            };
            let field = fields[i].take().unwrap_or(Pulled::Null);
            let (Sub::Pattern(pf), Sub::Pattern(pt)) = (&from[i].sub, &t.sub) else { return field };
            match field {
                Pulled::Struct(f) => Pulled::Struct(project_fields(f, &pf.specs, &pt.specs)),
                Pulled::Structs(items) => {
                    Pulled::Structs(items.into_iter().map(|f| project_fields(f, &pf.specs, &pt.specs)).collect())
                }
                other => other,
            }
        })
        .collect()
}

impl Write for PullAnswer {
    unsafe fn write(&self, output: ffi::duckdb_data_chunk) {
        let vector = ffi::duckdb_vector_size() as usize;
        let start = self.next.load(Ordering::SeqCst).min(self.rows.len());
        let n = (self.rows.len() - start).min(vector);
        let (ev, pv) = (ffi::duckdb_data_chunk_get_vector(output, 0), ffi::duckdb_data_chunk_get_vector(output, 1));
        let edata = ffi::duckdb_vector_get_data(ev) as *mut i64;
        for (i, (e, pull)) in self.rows[start..start + n].iter().enumerate() {
            match e {
                Some(e) => *edata.add(i) = *e,
                None => set_null(ev, i),
            }
            match pull {
                Some(fields) => {
                    for (c, f) in fields.iter().enumerate() {
                        write_field(ffi::duckdb_struct_vector_get_child(pv, c as u64), i, f);
                    }
                }
                None => set_null_deep(pv, i),
            }
        }
        self.next.store(start + n, Ordering::SeqCst);
        ffi::duckdb_data_chunk_set_size(output, n as u64);
    }
}

unsafe fn set_null(v: ffi::duckdb_vector, row: usize) {
    ffi::duckdb_vector_ensure_validity_writable(v);
    ffi::duckdb_validity_set_row_invalid(ffi::duckdb_vector_get_validity(v), row as u64);
}

fn type_of(v: ffi::duckdb_vector) -> ffi::duckdb_type {
    // SAFETY: `v` is a vector of the chunk being written; its logical type is destroyed after reading its id.
    unsafe {
        let mut ty = ffi::duckdb_vector_get_column_type(v);
        let id = ffi::duckdb_get_type_id(ty);
        ffi::duckdb_destroy_logical_type(&mut ty);
        id
    }
}

/// Writes one scalar key at `row` of `v` (a ref's `STRUCT("db/id" BIGINT)` included).
unsafe fn write_key(v: ffi::duckdb_vector, row: usize, k: &Key) {
    let id = type_of(v);
    if id == ffi::DUCKDB_TYPE_DUCKDB_TYPE_STRUCT {
        return write_key(ffi::duckdb_struct_vector_get_child(v, 0), row, k);
    }
    let data = ffi::duckdb_vector_get_data(v);
    match (k, id) {
        (Key::Int(x), ffi::DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN) => *(data as *mut bool).add(row) = *x != 0,
        (Key::Int(x), _) => *(data as *mut i64).add(row) = *x,
        (Key::Float(x), _) => *(data as *mut f64).add(row) = *x,
        (Key::Text(s), _) => {
            ffi::duckdb_vector_assign_string_element_len(v, row as u64, s.as_ptr() as *const _, s.len() as u64)
        }
    }
}

unsafe fn write_field(v: ffi::duckdb_vector, row: usize, f: &Pulled) {
    match f {
        Pulled::Null => set_null_deep(v, row),
        Pulled::One(k) => write_key(v, row, k),
        Pulled::Many(keys) => write_list(v, row, keys, |child, at, k| write_key(child, at, k)),
        Pulled::Struct(fields) => write_struct(v, row, fields),
        Pulled::Structs(items) => write_list(v, row, items, |child, at, fields| write_struct(child, at, fields)),
    }
}

/// Makes row `row` of the LIST vector `v` the list of `items`, each written by `write` at its place of the child
/// vector (after the elements already there).
unsafe fn write_list<T>(v: ffi::duckdb_vector, row: usize, items: &[T], write: impl Fn(ffi::duckdb_vector, usize, &T)) {
    let offset = ffi::duckdb_list_vector_get_size(v);
    let n = items.len() as u64;
    ffi::duckdb_list_vector_reserve(v, offset + n);
    ffi::duckdb_list_vector_set_size(v, offset + n);
    let entries = ffi::duckdb_vector_get_data(v) as *mut ffi::duckdb_list_entry;
    *entries.add(row) = ffi::duckdb_list_entry { offset, length: n };
    let child = ffi::duckdb_list_vector_get_child(v);
    for (j, item) in items.iter().enumerate() {
        write(child, offset as usize + j, item);
    }
}

/// Writes a nested pull's fields at `row` of the STRUCT vector `v`.
unsafe fn write_struct(v: ffi::duckdb_vector, row: usize, fields: &[Pulled]) {
    for (c, f) in fields.iter().enumerate() {
        write_field(ffi::duckdb_struct_vector_get_child(v, c as u64), row, f);
    }
}

/// NULL at `row` of `v` and, for a STRUCT, of every field below it (DuckDB reads a NULL STRUCT's fields); an
/// empty entry for a LIST.
unsafe fn set_null_deep(v: ffi::duckdb_vector, row: usize) {
    set_null(v, row);
    match type_of(v) {
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_STRUCT => {
            let mut ty = ffi::duckdb_vector_get_column_type(v);
            let children = ffi::duckdb_struct_type_child_count(ty);
            ffi::duckdb_destroy_logical_type(&mut ty);
            for c in 0..children {
                set_null_deep(ffi::duckdb_struct_vector_get_child(v, c), row);
            }
        }
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_LIST => {
            let offset = ffi::duckdb_list_vector_get_size(v);
            let entries = ffi::duckdb_vector_get_data(v) as *mut ffi::duckdb_list_entry;
            *entries.add(row) = ffi::duckdb_list_entry { offset, length: 0 };
        }
        _ => {}
    }
}

/// An answer computed at bind time, written into the output chunks by the streaming function.
pub trait Write {
    /// Writes the next rows (at most one vector) into `output`; none once all are written.
    ///
    /// # Safety
    /// `output` must be the chunk of the running table function call, with the declared columns.
    unsafe fn write(&self, output: ffi::duckdb_data_chunk);
}

/// Reads `attrs` into the store's index: now when they are small (true once all are in), else in the background
/// (false: the caller takes the general path meanwhile). A small attribute that a background read holds already
/// (one the transactor asked for after a write, [`storage::eindex::EntityIndex::want`]) is read now all the same,
/// under the same writer lock, so that a query right after a write is not sent to the general path by it.
fn read_attributes(instance: &Arc<Instance>, store: &Arc<Store>, attrs: &[Entid]) -> Result<bool, String> {
    let schema = store.schema();
    let conn = instance.pool.get()?;
    // sizes from the catalog (DuckDB's row estimate, no scan): counting rows read cold column data, ~5 ms per
    // attribute on a first call at scale m
    let mut stmt = conn
        .prepare_cached(
            "SELECT table_name, estimated_size FROM duckdb_tables() \
             WHERE database_name = current_database() AND schema_name = $1",
        )
        .map_err(|e| e.to_string())?;
    let sizes: HashMap<String, i64> = stmt
        .query_map([&store.name.schema], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    drop(stmt);
    let small =
        attrs.iter().all(|a| sizes.get(&planner::layout::current_table_name(*a)).is_some_and(|n| *n <= SYNC_ROWS));
    if small {
        let _writer = store.lock_writer_settled(&conn).map_err(|e| e.to_string())?;
        let mut all = true;
        for a in attrs {
            let attr = schema.attribute(*a).ok_or("unknown attribute")?;
            all &= store.index.build(&conn, &store.name, attr).map_err(|e| e.to_string())?;
        }
        return Ok(all);
    }
    drop(conn);
    // an attribute already being read in the background is not asked for again: the call takes the general path
    let attrs: Vec<Entid> = attrs.iter().copied().filter(|a| !store.index.is_building(*a)).collect();
    read_in_background(instance, store, &attrs);
    Ok(false)
}

/// Reads `attrs` into the store's index, each on a thread of its own after [`BACKGROUND_DELAY`], under the store's
/// writer lock (the log applied first); an attribute being read already is left to that read. Used for attributes
/// too large to read during a query, and for those the transactor asks for ([`storage::eindex::EntityIndex::want`]).
pub fn read_in_background(instance: &Arc<Instance>, store: &Arc<Store>, attrs: &[Entid]) {
    let schema = store.schema();
    for a in attrs {
        let Some(attr) = schema.attribute(*a).cloned() else { continue };
        if !store.index.start_building(*a) {
            continue;
        }
        let (instance, reader) = (instance.clone(), store.clone());
        let spawned = std::thread::Builder::new().name("mentat-index".into()).spawn(move || {
            // Leave the call that needed the attribute the machine while it answers through SQL: on two cores a
            // read started at once made a first call in a new process 2.5x slower (20 to 50 ms at scale m).
            std::thread::sleep(BACKGROUND_DELAY);
            // read in meanwhile (a query reads a small attribute at once): nothing to do, and the log is left alone
            if reader.index.snapshot().attr(attr.entid).is_some() {
                reader.index.stop_building(attr.entid);
                return;
            }
            // not while the process exits (see storage::txlog::background)
            let built = storage::txlog::background(|| {
                let conn = instance.pool.get().ok()?;
                let _writer = reader.lock_writer_settled(&conn).ok()?;
                reader.index.build(&conn, &reader.name, &attr).ok()
            });
            if built.flatten().is_none() {
                reader.index.stop_building(attr.entid);
            }
        });
        if spawned.is_err() {
            store.index.stop_building(*a);
        }
    }
}

/// An answer of the entity path, written into DuckDB's output chunks by [`Answer::write`].
pub struct Answer {
    rows: Vec<Vec<Key>>,
    types: Vec<ValueType>,
    names: Vec<String>,
    /// The `(pull ?e pattern)` columns, pulled ([`pull_columns`]); their `rows` hold the entity ids.
    pulls: Vec<PullColumn>,
    next: AtomicUsize,
}

/// One `(pull ?e pattern)` column of an [`Answer`]: each row's pull (None: a NULL STRUCT) and the pattern's shape
/// (its STRUCT type).
struct PullColumn {
    column: usize,
    rows: Vec<Option<Vec<Pulled>>>,
    shape: Arc<crate::pull::PullShape>,
}

/// Orders rows of keys as DuckDB's `ORDER BY` of every column ascending orders them (numbers by value, text by
/// its bytes).
fn key_order(a: &[Key], b: &[Key]) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Key::Int(x), Key::Int(y)) => x.cmp(y),
            (Key::Float(x), Key::Float(y)) => x.total_cmp(y),
            (Key::Text(x), Key::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
            _ => Ordering::Equal,
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// Orders two values of one `:order` key as the general path's `ORDER BY` does: keywords as
/// `planner::types::keyword_order` (no namespace first, then namespace, then name, each by its bytes), doubles
/// by value with NaN after every number (DuckDB's order), the rest as [`key_order`].
fn order_key(t: ValueType, x: &Key, y: &Key) -> std::cmp::Ordering {
    match (x, y) {
        (Key::Text(x), Key::Text(y)) if t == ValueType::Keyword => keyword_parts(x).cmp(&keyword_parts(y)),
        (Key::Float(x), Key::Float(y)) => planner::entity::double_order(*x, *y),
        _ => key_order(std::slice::from_ref(x), std::slice::from_ref(y)),
    }
}

/// A keyword's text (`:ns/name` or `:name`) as its order key: (has a namespace, namespace, name), the namespace
/// ending at the first `/` after the first character, as `planner::types::keyword_order` splits it.
fn keyword_parts(k: &str) -> (bool, &[u8], &[u8]) {
    let first = k.chars().next().map_or(0, char::len_utf8);
    match k.find('/') {
        Some(p) if p > 0 => (true, &k.as_bytes()[first.min(p)..p], &k.as_bytes()[p + 1..]),
        _ => (false, &[], &k.as_bytes()[first..]),
    }
}

impl Answer {
    fn new(mut rows: Vec<Vec<Key>>, plan: &EntityPlan, columns: &[planner::OutputColumn]) -> Answer {
        if !plan.order.is_empty() {
            let types: Vec<ValueType> = plan.order.iter().map(|(c, _)| plan.column_type(*c)).collect();
            rows.sort_by(|a, b| {
                for ((c, desc), t) in plan.order.iter().zip(&types) {
                    let o = order_key(*t, &a[*c], &b[*c]);
                    if o != std::cmp::Ordering::Equal {
                        return if *desc { o.reverse() } else { o };
                    }
                }
                std::cmp::Ordering::Equal
            });
            rows.drain(..plan.offset.min(rows.len()));
            if let Some(n) = plan.limit {
                rows.truncate(n);
            }
        }
        if matches!(plan.kind, FindKind::Scalar | FindKind::Tuple) {
            // with pulls, the general path chooses the first row in the order of every find column (so that its
            // probe of a `*` reads the entity it pulls: `planner::emit::with_pulls`)
            if !plan.pulls.is_empty() && plan.order.is_empty() {
                rows.sort_by(|a, b| key_order(a, b));
            }
            rows.truncate(1);
        }
        Answer {
            rows,
            types: (0..plan.find.len() - plan.with).map(|c| plan.column_type(c)).collect(),
            names: columns.iter().map(|c| c.name.clone()).collect(),
            pulls: Vec::new(),
            next: AtomicUsize::new(0),
        }
    }

    /// Declares the result columns (the general path's names and types) and hands DuckDB the answer as bind
    /// data.
    ///
    /// # Safety
    /// `info` must be the running bind's info.
    pub unsafe fn bind(self, info: ffi::duckdb_bind_info) -> Bound {
        for (c, (name, t)) in self.names.iter().zip(&self.types).enumerate() {
            let cname = CString::new(name.as_str()).unwrap_or_default();
            if let Some(p) = self.pulls.iter().find(|p| p.column == c) {
                // the pull's STRUCT, as the general path's statement types it
                ffi::duckdb_bind_add_result_column(info, cname.as_ptr(), p.shape.types[1].0);
                continue;
            }
            let mut ty = ffi::duckdb_create_logical_type(type_id(*t));
            ffi::duckdb_bind_add_result_column(info, cname.as_ptr(), ty);
            ffi::duckdb_destroy_logical_type(&mut ty);
        }
        Bound::answered(Box::new(self))
    }
}

impl Write for Answer {
    unsafe fn write(&self, output: ffi::duckdb_data_chunk) {
        let vector = ffi::duckdb_vector_size() as usize;
        let start = self.next.load(Ordering::SeqCst).min(self.rows.len());
        let n = (self.rows.len() - start).min(vector);
        for (c, t) in self.types.iter().enumerate() {
            let v = ffi::duckdb_data_chunk_get_vector(output, c as u64);
            if let Some(p) = self.pulls.iter().find(|p| p.column == c) {
                for (i, pull) in p.rows[start..start + n].iter().enumerate() {
                    match pull {
                        Some(fields) => write_struct(v, i, fields),
                        None => set_null_deep(v, i),
                    }
                }
                continue;
            }
            let data = ffi::duckdb_vector_get_data(v);
            for (i, row) in self.rows[start..start + n].iter().enumerate() {
                match (&row[c], t) {
                    (Key::Int(x), ValueType::Boolean) => *(data as *mut bool).add(i) = *x != 0,
                    (Key::Int(x), _) => *(data as *mut i64).add(i) = *x,
                    (Key::Float(x), _) => *(data as *mut f64).add(i) = *x,
                    (Key::Text(s), _) => ffi::duckdb_vector_assign_string_element_len(
                        v,
                        i as u64,
                        s.as_ptr() as *const _,
                        s.len() as u64,
                    ),
                }
            }
        }
        self.next.store(start + n, Ordering::SeqCst);
        ffi::duckdb_data_chunk_set_size(output, n as u64);
    }
}

/// DuckDB's type of a value type as the general path returns it.
fn type_id(t: ValueType) -> ffi::duckdb_type {
    match t {
        ValueType::Ref | ValueType::Long => ffi::DUCKDB_TYPE_DUCKDB_TYPE_BIGINT,
        ValueType::Double => ffi::DUCKDB_TYPE_DUCKDB_TYPE_DOUBLE,
        ValueType::Boolean => ffi::DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN,
        ValueType::Instant => ffi::DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_TZ,
        ValueType::Uuid => ffi::DUCKDB_TYPE_DUCKDB_TYPE_UUID,
        ValueType::Bytes => ffi::DUCKDB_TYPE_DUCKDB_TYPE_BLOB,
        ValueType::Keyword | ValueType::String | ValueType::Uri | ValueType::Symbol => {
            ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR
        }
        // The entity path leaves these to the general path (`planner::entity::entity_path_type`).
        ValueType::BigInt => ffi::DUCKDB_TYPE_DUCKDB_TYPE_HUGEINT,
        ValueType::BigDec => ffi::DUCKDB_TYPE_DUCKDB_TYPE_DECIMAL,
        ValueType::Float => ffi::DUCKDB_TYPE_DUCKDB_TYPE_FLOAT,
        ValueType::Tuple => ffi::DUCKDB_TYPE_DUCKDB_TYPE_STRUCT,
    }
}
