//! `mentat_pull` and `mentat_pull_many`: Datomic's pull as table functions returning typed STRUCTs.
//!
//! * `mentat_pull(pattern VARCHAR, entity ANY [, store := VARCHAR, as_of := ANY, since := ANY, history := BOOLEAN])`
//! * `mentat_pull_many(pattern VARCHAR, entities LIST [, same named parameters])`
//!
//! Both return `e BIGINT` (the entity id, NULL for a lookup ref that matches nothing) and `pull STRUCT(...)`,
//! whose type follows from the pattern and the schema (see `planner::pull` for the shape rules: one field per
//! attribute named by its ident without the colon or its `:as` name; cardinality-many and reverse attributes
//! as LISTs; refs without sub-pattern as `STRUCT("db/id" BIGINT)`; `*` as `"db/id"` plus every non-bootstrap
//! attribute). `mentat_pull` returns exactly one row; `mentat_pull_many` one row per element of the list, in
//! order, duplicates repeated, as Datomic's pull-many.
//!
//! An entity is an integer entid, an ident keyword text (`':state/open'`, resolved against the schema; an
//! unknown ident is an error) or a lookup ref text (`'[:user/email "a@b.c"]'`, on a unique attribute). A
//! missing attribute is a NULL field; an entity with none of the pattern's attributes has a NULL `pull`
//! (Datomic's nil) unless the pattern asks for `:db/id` or `*`, which give `{"db/id": e}` with NULL fields, or
//! gives a `:default`, which gives the defaults.
//!
//! `as_of` and `since` take a tx entid or a TIMESTAMPTZ, as in `mentat_q`; `history := true` is an error (pull
//! reads a database value, as in Datomic). Entities given as entids, idents or lookup refs, without time travel,
//! are pulled from the store's entity index (`storage::eindex::pull`) when every level of the pattern is one it
//! holds (`planner::pull::entity_path_pattern`: attributes, refs, nested patterns, reverse refs, `*` without
//! components), with the answer typed as the general path types it; otherwise the pull of one entity is one SQL
//! statement, prepared once per pattern on each query connection (the entity is its parameter `$1`), and streamed
//! like `mentat_q`'s answers.

use crate::entity::PullEntity;
use crate::query::{
    bind_answer, bind_statement, finish_bind, is_integer, read_options, read_schema_at, register_streaming, value_text,
    Bound, Param, READ_OPTIONS,
};
use crate::Instance;
use duckdb::ffi;
use std::sync::Arc;

struct Extra {
    instance: Arc<Instance>,
    many: bool,
}

/// Owns a `duckdb_value` and destroys it on drop.
struct Owned(ffi::duckdb_value);

impl Drop for Owned {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the value was created or handed over to us and is destroyed once.
            unsafe { ffi::duckdb_destroy_value(&mut self.0) };
        }
    }
}

unsafe fn bind_inner(info: ffi::duckdb_bind_info) -> Result<Bound, String> {
    let extra = &*(ffi::duckdb_bind_get_extra_info(info) as *const Extra);
    let what = if extra.many { "mentat_pull_many" } else { "mentat_pull" };
    let pattern = Owned(ffi::duckdb_bind_get_parameter(info, 0));
    if ffi::duckdb_is_null_value(pattern.0) {
        return Err(format!("{what}: the pattern is NULL"));
    }
    let pattern = value_text(pattern.0);
    crate::nesting::check(&pattern, &format!("{what}: the pattern"))?;
    let entity = Owned(ffi::duckdb_bind_get_parameter(info, 1));
    let (caller, store, mut opts) = read_options(info, &extra.instance)?;
    let schema = read_schema_at(&extra.instance, &caller, &store, &mut opts)?;
    // compiled only when a statement is needed: a pattern the entity path has seen was compiled on its first call
    let compile_held = |held: Option<&[i64]>| {
        let v = planner::parse::parse_edn(&pattern, "pull pattern").map_err(|e| e.to_string())?;
        planner::pull::compile_pull_held(&v, &schema, &store, &opts, held).map_err(|e| e.to_string())
    };
    let compile = || compile_held(None);
    let entity_sql = |text: &str| {
        crate::nesting::check(text, &format!("{what}: the entity"))?;
        planner::pull::entity_sql(text, &schema, &store, &opts).map_err(|e| e.to_string())
    };
    let names = ["e", "pull"];
    let instance = &extra.instance;
    if ffi::duckdb_is_null_value(entity.0) {
        let entities = if extra.many { vec![] } else { vec!["NULL".to_string()] };
        let compiled = compile()?;
        // nothing to probe: a wildcard holds no attribute of a NULL entity
        let compiled = if compiled.has_wildcard() { compile_held(Some(&[]))? } else { compiled };
        return bind_statement(info, instance, &caller, &compiled.entities_sql(&entities), &names, &[], true);
    }
    let ty = ffi::duckdb_get_value_type(entity.0);
    let id = ffi::duckdb_get_type_id(ty);
    // The entity path: a pattern the index can answer (nested levels included), of entids, idents or lookup
    // refs.
    if let Some(ids) = entity_ids(entity.0, id, extra.many, &entity_sql, &schema).filter(|_| !opts.empty) {
        let key = PullKey { pattern: &pattern, many: extra.many, held: None };
        let shape = pull_shape(instance, &caller, &store, &schema, &key, &opts, &compile_held)?;
        if let Some((shape, specs)) = shape.as_ref().and_then(|s| Some((s, s.specs.as_ref()?))) {
            if let Some(mut answer) = crate::entity::pull_answer(instance, &store, specs, &ids, shape.wildcard)? {
                // `*` is typed from the attributes the entities hold: the shape of the pattern for those
                let Some(mut held) = answer.held.take() else {
                    return Ok(bind_answer(info, &names, &shape.types, Box::new(answer)));
                };
                held.sort_unstable();
                let key = PullKey { pattern: &pattern, many: extra.many, held: Some(&held) };
                let narrow = pull_shape(instance, &caller, &store, &schema, &key, &opts, &compile_held)?;
                if let Some((narrow, to)) = narrow.as_ref().and_then(|s| Some((s, s.specs.as_ref()?))) {
                    answer.project(specs, to);
                    return Ok(bind_answer(info, &names, &narrow.types, Box::new(answer)));
                }
            }
        }
    }
    let compiled = compile()?;
    // `*` is typed from the attributes the pulled entities hold: probe them, then compile again
    let narrowed = |compiled: planner::pull::CompiledPull, probe: Option<String>, params: &[ffi::duckdb_value]| {
        let Some(probe) = probe else { return Ok(compiled) };
        let held = crate::query::query_bigints(instance, &caller, &probe, params)?;
        compile_held(Some(&held))
    };
    if !extra.many {
        if is_integer(id) {
            let probe = compiled.held_one_sql();
            let compiled = narrowed(compiled, probe, &[entity.0])?;
            return bind_statement(info, instance, &caller, &compiled.one_sql(), &names, &[entity.0], false);
        }
        let expr = entity_sql(&value_text(entity.0))?;
        return match expr.parse::<i64>() {
            // an ident: bind its entid, so that the statement stays the cached one
            Ok(e) => {
                let v = Owned(ffi::duckdb_create_int64(e));
                let probe = compiled.held_one_sql();
                let compiled = narrowed(compiled, probe, &[v.0])?;
                bind_statement(info, instance, &caller, &compiled.one_sql(), &names, &[v.0], false)
            }
            Err(_) => {
                let probe = compiled.held_entities_sql(std::slice::from_ref(&expr));
                let compiled = narrowed(compiled, probe, &[])?;
                bind_statement(info, instance, &caller, &compiled.entities_sql(&[expr]), &names, &[], true)
            }
        };
    }
    if id != ffi::DUCKDB_TYPE_DUCKDB_TYPE_LIST {
        return Err(format!("{what}: the entities are a LIST of entids, idents or lookup refs"));
    }
    let mut child = ffi::duckdb_list_type_child_type(ty);
    let child_id = ffi::duckdb_get_type_id(child);
    ffi::duckdb_destroy_logical_type(&mut child);
    if is_integer(child_id) {
        let probe = compiled.held_many_sql();
        let compiled = narrowed(compiled, probe, &[entity.0])?;
        return bind_statement(info, instance, &caller, &compiled.many_sql(), &names, &[entity.0], true);
    }
    let n = ffi::duckdb_get_list_size(entity.0);
    let mut exprs = Vec::with_capacity(n as usize);
    for i in 0..n {
        let item = Owned(ffi::duckdb_get_list_child(entity.0, i));
        exprs.push(if item.0.is_null() || ffi::duckdb_is_null_value(item.0) {
            "NULL".to_string()
        } else {
            entity_sql(&value_text(item.0)).map_err(|e| format!("element {} of the entities list: {e}", i + 1))?
        });
    }
    let probe = compiled.held_entities_sql(&exprs);
    let compiled = narrowed(compiled, probe, &[])?;
    bind_statement(info, instance, &caller, &compiled.entities_sql(&exprs), &names, &[], true)
}

/// Compiles the pull pattern with `*` expanded to the given attributes (None: every attribute of the schema).
pub(crate) type CompileHeld<'a> = dyn Fn(Option<&[i64]>) -> Result<planner::pull::CompiledPull, String> + 'a;

/// What names a pull shape: the pattern text, one entity or many, and the attributes `*` expands to (None:
/// every attribute of the schema).
pub struct PullKey<'a> {
    pub pattern: &'a str,
    pub many: bool,
    pub held: Option<&'a [i64]>,
}

/// The entity path's shape of a pattern (its expanded pattern and the result types of the general path's
/// statement), kept per store and schema in [`Instance::pull_shapes`]; None when the entity path does not pull it
/// (recursion, components, a time-travel option, the path turned off or an attached store).
pub(crate) unsafe fn pull_shape(
    instance: &Instance,
    caller: &crate::session::Caller,
    store: &planner::layout::StoreName,
    schema: &Arc<planner::schema::Schema>,
    key: &PullKey,
    opts: &planner::QueryOptions,
    compile: &CompileHeld,
) -> Result<Option<Arc<PullShape>>, String> {
    if !instance.entity_path || store.catalog.is_some() || opts.as_of.is_some() || opts.since.is_some() || opts.history
    {
        return Ok(None);
    }
    let text = format!("{} {:?} {}", if key.many { "many" } else { "one" }, key.held, key.pattern);
    if let Some(shape) = instance.pull_shapes.get(store, &text, schema) {
        return Ok(shape.specs.is_some().then_some(shape));
    }
    let compiled = compile(key.held)?;
    let specs = planner::pull::entity_path_pattern(key.pattern, schema, store, opts, key.held);
    let types = match specs {
        Some(_) => {
            let sql = if key.many { compiled.many_sql() } else { compiled.one_sql() };
            crate::query::result_types(instance, caller, &sql)?
        }
        None => Vec::new(),
    };
    let wildcard = compiled.has_wildcard();
    let shape = Arc::new(PullShape { specs, types, wildcard });
    instance.pull_shapes.put(store, &text, schema, shape.clone());
    Ok(shape.specs.is_some().then_some(shape))
}

/// What the entity path keeps of a pull pattern: the pattern with its `*`s expanded (None: the general path
/// pulls it) and the result types.
pub struct PullShape {
    pub specs: Option<planner::pull::Pattern>,
    /// The general path's column types: `e BIGINT`, `pull STRUCT(...)`.
    pub types: Vec<crate::query::OwnedType>,
    /// The pattern has `*`, typed from the attributes the pulled entities hold.
    pub wildcard: bool,
}

/// The entities a pull names, when the entity path can find them: an integer entid, an ident (resolved by
/// `entity_sql`) or a lookup ref on a unique attribute (resolved by the index), alone or in a LIST (a NULL element
/// is `Id(None)`). None for anything the general path must resolve (a lookup ref of a tuple or of a value the index
/// does not read; any text that is neither, which the general path reports).
unsafe fn entity_ids(
    entity: ffi::duckdb_value,
    id: ffi::duckdb_type,
    many: bool,
    entity_sql: &dyn Fn(&str) -> Result<String, String>,
    schema: &planner::schema::Schema,
) -> Option<Vec<PullEntity>> {
    let text = |t: &str| -> Option<PullEntity> {
        // too deep to read: the general path reports it
        crate::nesting::check(t, "the entity").ok()?;
        if let Some((a, k)) = planner::pull::lookup_ref_key(t, schema) {
            return Some(PullEntity::Lookup(a, k));
        }
        entity_sql(t).ok()?.parse::<i64>().ok().map(|e| PullEntity::Id(Some(e)))
    };
    if !many {
        if is_integer(id) {
            return Some(vec![PullEntity::Id(Some(ffi::duckdb_get_int64(entity)))]);
        }
        return text(&value_text(entity)).map(|e| vec![e]);
    }
    if id != ffi::DUCKDB_TYPE_DUCKDB_TYPE_LIST {
        return None;
    }
    let mut child = ffi::duckdb_list_type_child_type(ffi::duckdb_get_value_type(entity));
    let child_id = ffi::duckdb_get_type_id(child);
    ffi::duckdb_destroy_logical_type(&mut child);
    let integers = is_integer(child_id);
    if !integers && child_id != ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR {
        return None;
    }
    let n = ffi::duckdb_get_list_size(entity);
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let item = Owned(ffi::duckdb_get_list_child(entity, i));
        out.push(if item.0.is_null() || ffi::duckdb_is_null_value(item.0) {
            PullEntity::Id(None)
        } else if integers {
            PullEntity::Id(Some(ffi::duckdb_get_int64(item.0)))
        } else {
            text(&value_text(item.0))?
        });
    }
    Some(out)
}

unsafe extern "C" fn bind(info: ffi::duckdb_bind_info) {
    finish_bind(info, std::panic::catch_unwind(|| unsafe { bind_inner(info) }), "compiling the pull");
}

/// Registers `mentat_pull` and `mentat_pull_many` (see the module docs).
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection, instance: &Arc<Instance>) -> Result<(), String> {
    for (name, many) in [(c"mentat_pull", false), (c"mentat_pull_many", true)] {
        let extra = Extra { instance: instance.clone(), many };
        register_streaming(con, name, &[Param::Varchar, Param::Any], &READ_OPTIONS, extra, bind)?;
    }
    Ok(())
}
