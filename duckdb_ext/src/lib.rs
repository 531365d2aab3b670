//! mentat for DuckDB: the loadable extension.
//!
//! This crate only registers SQL functions, converts their arguments and results, and maps errors; the logic
//! lives in `planner` (queries to SQL) and `storage` (layout, schema cache, transactor). Every SQL function of
//! the extension is registered in [`register`], so the SQL surface reads in one place.
//!
//! Supported DuckDB: 1.5.2 and newer (the DuckDB CLI 1.5.x, Python `duckdb` 2.0.x). The extension is built
//! against C API v1.2.0 plus functions whose slots settled in 1.5.2; loading into an older DuckDB is refused
//! with an error at `LOAD`.

/// mentat's own allocations (EDN trees, transaction terms, entity-index runs) go to mimalloc 2 (not 3, which
/// crashed as DuckDB ended and started its worker threads), not the host's malloc: see `storage/README.md`
/// "Allocation". DuckDB's and the host's allocations are untouched, and no memory crosses between the two (DuckDB
/// copies every string and error mentat hands it; mentat frees its own bind and init data through its own
/// callbacks).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long mimalloc keeps pages that mentat freed before it gives them back to the operating system, in
/// milliseconds (mimalloc's `purge_delay`; its own default is 10, and whole arenas wait `arena_purge_mult`, 10,
/// times as long). A transaction's EDN tree and terms are freed at its end and the next one allocates as much
/// again: with 10 ms a bulk load through `mentat_transact` gave its pages back between calls and had the kernel
/// zero fresh ones for the next (`clear_page_erms`, 5 to 8% of the load's CPU). Measured in storage/README.md
/// "Allocation". A host that sets `MIMALLOC_PURGE_DELAY` (or the older `MIMALLOC_RESET_DELAY`) keeps its value.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// `mi_option_purge_delay` in mimalloc 2's `mi_option_t` (its 16th option; `include/mimalloc.h`).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    // mimalloc's own option functions, linked in with the allocator above (`libmimalloc-sys` declares them only
    // behind its `extended` feature, which needs another crate for two C types).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_manage_os_memory(
        start: *mut std::ffi::c_void,
        size: usize,
        is_committed: bool,
        is_large: bool,
        is_zero: bool,
        numa_node: std::ffi::c_int,
    ) -> bool;
}

/// Address space, in bytes, that mentat's allocator takes its memory from before it asks the operating system
/// for more: reserved once at load without a commit charge (`MAP_NORESERVE`), and resident only as pages are
/// touched (mimalloc gives back what it frees after [`PURGE_DELAY_MS`], with `MADV_DONTNEED`). mimalloc carves
/// a 64 MiB segment per thread that allocates, so 64 client threads take 4 GiB of it.
const ARENA_BYTES: usize = 32 << 30;

/// Hands mimalloc an arena of [`ARENA_BYTES`] on which the kernel makes no transparent huge pages
/// (`MADV_NOHUGEPAGE`), so that mentat's allocations are faulted in 4 KiB pages. mimalloc advises `MADV_HUGEPAGE`
/// on the arenas it reserves itself (its `unix_mmap`), which the kernel's usual `madvise` setting of
/// `/sys/kernel/mm/transparent_hugepage/enabled` honours (and `always` needs no advice for): the first touch of
/// each 2 MiB of a segment had the kernel zero a whole huge page, and 64 writer threads spent 13% of the process's
/// CPU in `clear_page_erms` (storage/README.md "Allocation", measured). The advice here wins in either setting.
/// Only this region is advised:
/// DuckDB's and the host's memory keep the kernel's setting (mimalloc's own `allow_thp` option would turn huge
/// pages off for the whole process). Runs before mentat allocates anything, so mimalloc takes its segments from
/// here first; `MENTAT_HUGE_PAGES=1` leaves mimalloc as it is (for measuring), and a failed `mmap` or `madvise`
/// (a low `ulimit -v`, a kernel without the advice) leaves it so too. Done once per process, however many
/// databases load mentat (each `LOAD` runs [`init`]).
fn arena_without_huge_pages() {
    static TRIED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if TRIED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    // SAFETY: `getenv` with a NUL-terminated name and no allocation (this runs before mimalloc's first segment);
    // `mmap` of fresh anonymous memory that nothing else knows of, `madvise` and `munmap` of exactly that range;
    // mimalloc takes the range over for good (it is never unmapped, like mimalloc's own arenas)
    unsafe {
        if !libc::getenv(c"MENTAT_HUGE_PAGES".as_ptr()).is_null() {
            return;
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            ARENA_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        if libc::madvise(p, ARENA_BYTES, libc::MADV_NOHUGEPAGE) != 0
            || !mi_manage_os_memory(p, ARENA_BYTES, true, false, true, -1)
        {
            libc::munmap(p, ARENA_BYTES);
        }
    }
}

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`] unless the environment chose one; returns the delay in force.
fn set_purge_delay() -> std::ffi::c_long {
    let chosen = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"].iter().any(|k| std::env::var_os(k).is_some());
    // SAFETY: plain calls into the statically linked mimalloc; an option set while other threads allocate is read
    // by them at their next purge (a single word)
    unsafe {
        if !chosen {
            mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        }
        mi_option_get(MI_OPTION_PURGE_DELAY)
    }
}

mod datoms;
mod entity;
mod functions;
mod heavy;
mod import;
mod nesting;
mod pool;
mod pull;
mod query;
mod session;
mod sql;
mod tokenize;
mod txfn;

use duckdb::ffi;
use duckdb::Connection;
use planner::layout::StoreName;
use std::error::Error;
use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;

/// The C API version whose function table the extension asks for.
const CAPI_VERSION: &CStr = c"v1.2.0";
/// The oldest DuckDB release whose function table matches the one this build was compiled against.
pub const MIN_DUCKDB: (u32, u32, u32) = (1, 5, 2);

/// Per-database-instance state, shared by every function registered into that instance.
pub struct Instance {
    pub pool: pool::Pool,
    pub raw: Arc<query::RawPool>,
    pub stores: storage::store::Registry,
    /// The database the process opened first: the one mentat's own connections use when no catalog is named.
    pub default_catalog: String,
    /// Whether entity-shaped queries may be answered from the entity index (`entity.rs`).
    pub entity_path: bool,
    /// Whether `mentat_transact` goes through the store's group commit (`storage::group`); `MENTAT_GROUP_COMMIT=0`
    /// in the environment when mentat is loaded sends each call through the one-at-a-time transactor instead,
    /// so the tests can run every transaction through both.
    pub group_commit: bool,
    /// Query texts the entity path has seen, parsed, with their output columns.
    pub query_shapes: entity::Shapes<planner::EntityShape>,
    /// Pull patterns the entity path has seen, with their fields and result types.
    pub pull_shapes: entity::Shapes<pull::PullShape>,
    /// Applies the stores' transaction logs in the background (`storage::txlog`).
    pub indexer: storage::txlog::Indexer,
    /// Admission of heavy statements (`storage::lane`): `MENTAT_HEAVY_LANE` / `MENTAT_HEAVY_MS` when mentat loads.
    pub lane: Arc<storage::lane::Lane>,
    /// The threads the lane's heavy statements run on, at a lower priority (`heavy.rs`): started with the lane.
    pub heavy: Option<Arc<heavy::Heavy>>,
}

impl Instance {
    /// Applies the transaction log of every open store that has one (`storage::txlog`), so that SQL over the
    /// stores' tables sees every acknowledged transaction: what every path that runs such SQL calls first (the
    /// entity path, which answers from the entity index, does not). Free when no log holds anything.
    pub fn settle(&self) -> Result<(), String> {
        for store in self.stores.with_log() {
            let conn = self.pool.get()?;
            storage::txlog::settle(&conn, &store)
                .map_err(|e| format!("mentat could not apply {}'s log: {e}", store.name))?;
        }
        Ok(())
    }

    /// The store `name` as `caller` means it ([`session::Caller::resolve`]): an unqualified name resolves against
    /// the caller's search path (`USE project` makes `mentat` mean `project.mentat`). Only a search path of
    /// several catalogs costs a look-up (which of them holds the store).
    pub fn resolve(&self, caller: &session::Caller, name: &StoreName) -> Result<StoreName, String> {
        let mut conn = None;
        let exists = |s: &StoreName| {
            if self.stores.get(s).is_some() {
                return true;
            }
            if conn.is_none() {
                conn = self.pool.get().ok();
            }
            conn.as_ref().is_some_and(|c| storage::store::store_exists(c, s).unwrap_or(false))
        };
        Ok(caller.resolve(name, &self.default_catalog, exists))
    }
}

/// Parses `v1.5.6` / `1.5.6-dev123` into (1, 5, 6).
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.trim_start_matches('v').split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

unsafe fn init(
    info: ffi::duckdb_extension_info,
    access: *const ffi::duckdb_extension_access,
) -> Result<bool, Box<dyn Error>> {
    arena_without_huge_pages();
    set_purge_delay();
    let get_api = (*access).get_api.ok_or("DuckDB gave no get_api function")?;
    let api = get_api(info, CAPI_VERSION.as_ptr()) as *const ffi::duckdb_ext_api_v1;
    if api.is_null() {
        return Ok(false); // DuckDB has already said why.
    }
    // duckdb_library_version sits in the v0.0.1 part of the table, present in every DuckDB.
    let version_fn = (*api).duckdb_library_version.ok_or("DuckDB gave no duckdb_library_version")?;
    let version = CStr::from_ptr(version_fn()).to_string_lossy().into_owned();
    match parse_version(&version) {
        Some(v) if v >= MIN_DUCKDB => {}
        _ => {
            return Err(format!(
                "mentat needs DuckDB {}.{}.{} or newer; this is DuckDB {version}",
                MIN_DUCKDB.0, MIN_DUCKDB.1, MIN_DUCKDB.2
            )
            .into())
        }
    }
    if !ffi::duckdb_rs_extension_api_init(info, access, "v1.2.0")? {
        return Ok(false);
    }
    let get_database = (*access).get_database.ok_or("DuckDB gave no get_database function")?;
    let db = get_database(info);
    if db.is_null() {
        return Ok(false);
    }
    let con = Connection::open_from_raw((*db).cast())?;
    let registrar = con.try_clone()?;
    let stores = storage::store::Registry::default();
    let indexer_conn = con.try_clone()?;
    pool::no_host_replacements(&indexer_conn);
    let indexer = storage::txlog::Indexer::start(indexer_conn, stores.log.idle)?;
    // best effort: a configuration the user locked (`lock_configuration`) keeps DuckDB's threshold, and mentat loads
    let _ = storage::txlog::align_checkpoint_threshold(&con, &stores.log);
    let default_catalog: String = con.query_row("SELECT current_database()", [], |r| r.get(0))?;
    session::calibrate(*db);
    let raw = Arc::new(query::RawPool::open(*db, pool::SIZE)?);
    let pool = pool::Pool::open(con, pool::SIZE)?;
    let entity_path = entity::enabled_by_environment();
    let group_commit = !matches!(std::env::var("MENTAT_GROUP_COMMIT").as_deref(), Ok("0") | Ok("false") | Ok("off"));
    let lane = Arc::new(storage::lane::Lane::from_env());
    let heavy = (lane.capacity() > 0)
        .then(|| heavy::Heavy::start(lane.capacity(), heavy::Heavy::nice_from_env()).map(Arc::new))
        .flatten();
    let instance = Arc::new(Instance {
        pool,
        raw,
        stores,
        default_catalog,
        entity_path,
        group_commit,
        query_shapes: Default::default(),
        lane,
        heavy,
        pull_shapes: Default::default(),
        indexer,
    });
    functions::register(&registrar, &instance)?;
    let mut reg: ffi::duckdb_connection = std::ptr::null_mut();
    if ffi::duckdb_connect(*db, &mut reg) != ffi::DuckDBSuccess {
        return Err("mentat could not connect to register its query functions".into());
    }
    let registered = query::register(reg, &instance)
        .and_then(|_| sql::register(reg, &instance))
        .and_then(|_| txfn::register(reg, &instance))
        .and_then(|_| pull::register(reg, &instance))
        .and_then(|_| datoms::register(reg, &instance))
        .and_then(|_| tokenize::register(reg));
    ffi::duckdb_disconnect(&mut reg);
    registered?;
    open_default_store(&instance);
    Ok(true)
}

/// Opens the default store (schema `mentat` of the database mentat is loaded into) when it exists, so that
/// `LOAD mentat` is the store's cold open and a first query finds its schema, partitions and recovered log in
/// memory, as a Datomic peer has its database after `connect`. Opening is what the first call of any mentat
/// function did before (2026-12-03, a copy of the suite's store at scale s: 33 to 70 ms of a first q1 of 45 to
/// 80 ms); it reads no entity index (those are read per attribute when a query first needs them). A failure is
/// left to that first call, which opens again and reports it; a store that does not exist is not created.
fn open_default_store(instance: &Instance) {
    let name = StoreName { catalog: None, schema: planner::layout::DEFAULT_STORE.to_string() };
    let Ok(conn) = instance.pool.get() else { return };
    if storage::store::store_exists(&conn, &name).unwrap_or(false) {
        let _ = instance.stores.open(&conn, &name, false);
    }
}

/// The entry point DuckDB calls on `LOAD mentat` (C API extensions are named `<name>_init_c_api`).
///
/// # Safety
/// Called by DuckDB with valid `info` and `access` pointers.
#[no_mangle]
pub unsafe extern "C" fn mentat_init_c_api(
    info: ffi::duckdb_extension_info,
    access: *const ffi::duckdb_extension_access,
) -> bool {
    let outcome = std::panic::catch_unwind(|| unsafe { init(info, access) });
    let message = match outcome {
        Ok(Ok(loaded)) => return loaded,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "mentat panicked while loading".to_string(),
    };
    if let Some(set_error) = (*access).set_error {
        let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
        set_error(info, msg.as_ptr() as *const c_char);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("v1.5.6"), Some((1, 5, 6)));
        assert_eq!(parse_version("v2.0.1-dev12"), Some((2, 0, 1)));
        assert!(parse_version("v1.5.1").unwrap() < MIN_DUCKDB);
        assert!(parse_version("v2.0.0").unwrap() >= MIN_DUCKDB);
        assert_eq!(parse_version("garbage"), None);
    }

    /// The option number is mimalloc 2's `mi_option_purge_delay`: before it is set it reads mimalloc's documented
    /// default of 10 ms (or the environment's value), after it reads ours.
    #[test]
    fn the_purge_delay_is_mimallocs_option() {
        let before = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        match std::env::var("MIMALLOC_PURGE_DELAY").ok().and_then(|v| v.parse::<std::ffi::c_long>().ok()) {
            Some(v) => assert_eq!(before, v),
            None => {
                assert_eq!(before, 10);
                assert_eq!(set_purge_delay(), PURGE_DELAY_MS);
            }
        }
    }
}
