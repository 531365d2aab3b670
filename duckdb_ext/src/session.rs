//! The caller's DuckDB session, carried into the work that mentat does on its own connections.
//!
//! Every mentat call runs on one of mentat's pooled connections (`pool.rs`, `query.rs`), so nothing of the
//! caller's session reaches that work by itself. At bind time, while DuckDB hands the function the caller's
//! client context, [`Caller::capture`] reads what the work must follow:
//!
//! * **`search_path`** (set by `USE` and `SET search_path`): an unqualified store name resolves against it, as an
//!   unqualified table does ([`Caller::resolve`]).
//! * **`TimeZone`**: the pooled connection adopts the caller's zone before it runs anything, so every cast between
//!   text, TIMESTAMP and TIMESTAMPTZ inside mentat's statements (`as_of`, `since`, instants in queries, values
//!   printed as text) gives what the same cast gives in the caller's session.
//! * **the interrupt flag**: `con.interrupt()` or Ctrl-C in the CLI marks the caller's context interrupted, which
//!   DuckDB only looks at between the chunks our function returns. [`Watch`] forwards it to the inner connection
//!   (`duckdb_interrupt`) within a few milliseconds, so a long query or import stops promptly, and a transaction
//!   interrupted before its COMMIT is rolled back ([`storage::interrupt`]).
//!
//! DuckDB's C API has no call that reads a client context's interrupt flag. The flag is the member that follows
//! `ClientContext::db` (`atomic<bool> interrupted` in DuckDB 1.5, `atomic<ClientInterruptState>` after it, one
//! byte whose value 1 means interrupted in both). [`calibrate`] finds it at load on a connection of our own and
//! proves it: the two contexts of two connections share the 16 bytes of `db` (the `shared_ptr`) at the same
//! offset; the byte after them must read 0, turn 1 after `duckdb_interrupt` on that connection, and 0 again after
//! the next statement (DuckDB clears the flag when a query starts). A DuckDB whose layout fails any of these
//! checks gets no interrupt forwarding (the calls then end when their inner work ends, as before); nothing is
//! ever written to a context whose layout was not proven.
//!
//! **The commit point.** DuckDB looks at the flag after our function returns, and also on the caller's own
//! thread while our function runs on one of DuckDB's workers (about 4 calls in 10 here), failing the statement at
//! once. So an interrupt that lands after mentat decided to commit would fail a statement whose write is in the
//! store: a committed write reported as failed (seen: 86 of 1,177 cut single-datom calls). Newer DuckDBs (the
//! Python package 2.0) keep the flag as a three-state enum, `NOT_INTERRUPTED` 0, `INTERRUPTED` 1,
//! `INTERRUPTS_SUPPRESSED` 2, whose `Interrupt()` only moves 0 to 1 and whose checks only stop at 1; DuckDB clears
//! it to 0 when the next statement starts. There the commit point of each transaction of a call
//! ([`Caller::commit_point`]) is one atomic step from 0 to 2: either the caller interrupted first and the
//! transaction rolls back, or no interrupt can fail the statement any more; a later transaction of the same call
//! lets interrupts in again when it begins ([`Caller::reopen`]), and the call's end leaves the flag at 2
//! ([`Caller::committed`]). Every call that reports an error has written nothing. [`calibrate`] proves the state on
//! a connection of its own (2 stays 2 through `duckdb_interrupt`, and the next statement clears it) before it is
//! ever used. DuckDB 1.5 (the CLI 1.5.6) has a plain `atomic<bool>` whose `Interrupt()` always stores 1: there the
//! commit point is a plain check, mentat clears the flag after the commit, and an interrupt in between can still
//! fail a committed statement (a documented race, TESTING.md "Faults").

use duckdb::ffi;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use planner::layout::StoreName;

/// How often the watcher looks at the interrupt flags of the callers it watches.
const POLL: Duration = Duration::from_millis(2);

/// Offset of the interrupt byte inside DuckDB's `ClientContext`, or 0 when it could not be proven at load.
static FLAG_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// Whether the DuckDB that loaded us has the `INTERRUPTS_SUPPRESSED` state (proven by [`calibrate`]).
static SUPPRESSIBLE: AtomicBool = AtomicBool::new(false);

/// DuckDB's `ClientInterruptState` values (one byte).
const NOT_INTERRUPTED: u8 = 0;
const INTERRUPTED: u8 = 1;
const INTERRUPTS_SUPPRESSED: u8 = 2;

/// What mentat needs of the caller's session, read at bind time.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    /// Catalogs of the caller's `search_path`, in order (empty: the database the process opened first).
    pub catalogs: Vec<String>,
    /// The caller's `TimeZone` setting (None when the DuckDB has no ICU extension loaded).
    pub time_zone: Option<String>,
    /// The caller's interrupt byte, when its layout was proven at load.
    flag: Option<Flag>,
    /// The address of the caller's `ClientContext` (0: unknown): which statements are one client's.
    context: usize,
}

/// The address of a caller's interrupt byte. Valid while the caller's statement runs, which is whenever a mentat
/// function of that statement is being called.
#[derive(Clone, Copy, Debug)]
struct Flag(*const AtomicU8);
// SAFETY: the byte is an atomic; it is read (and, after a commit, cleared) only while the caller's statement is
// inside one of our functions, so the context outlives every access.
unsafe impl Send for Flag {}
unsafe impl Sync for Flag {}

/// The `ClientContext*` behind a C API client context handle (`CClientContextWrapper { ClientContext &context }`).
unsafe fn context_address(ctx: ffi::duckdb_client_context) -> *const u8 {
    *(ctx as *const *const u8)
}

unsafe fn setting(ctx: ffi::duckdb_client_context, name: &CStr) -> Option<String> {
    let mut v = ffi::duckdb_client_context_get_config_option(ctx, name.as_ptr(), std::ptr::null_mut());
    if v.is_null() {
        return None;
    }
    let text = if ffi::duckdb_is_null_value(v) { None } else { Some(crate::query::value_text(v)) };
    ffi::duckdb_destroy_value(&mut v);
    text
}

/// Splits a `search_path` setting (`p.main,"my db".main`) into its entries' catalogs, in order, without repeats.
pub fn search_path_catalogs(path: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let (mut cur, mut quoted) = (String::new(), false);
    for c in path.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ',' if !quoted => entries.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    entries.push(cur);
    let mut catalogs: Vec<String> = Vec::new();
    for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        // DuckDB writes each entry as catalog.schema; a bare name is a catalog.
        let catalog = match StoreName::parse(e) {
            Ok(StoreName { catalog: Some(c), .. }) => c,
            Ok(StoreName { catalog: None, schema }) => schema,
            Err(_) => continue,
        };
        if !catalogs.contains(&catalog) {
            catalogs.push(catalog);
        }
    }
    catalogs
}

impl Caller {
    /// Reads the caller's session from the client context of a table function's bind.
    ///
    /// # Safety
    /// `info` must be the bind info DuckDB passed to the running bind callback.
    pub unsafe fn capture(info: ffi::duckdb_bind_info) -> Caller {
        let mut ctx: ffi::duckdb_client_context = std::ptr::null_mut();
        ffi::duckdb_table_function_get_client_context(info, &mut ctx);
        Caller::from_client_context(ctx)
    }

    /// Reads the caller's session from a client context handle, and destroys the handle.
    ///
    /// # Safety
    /// `ctx` must be null or a client context handle DuckDB handed out during the running callback.
    pub unsafe fn from_client_context(mut ctx: ffi::duckdb_client_context) -> Caller {
        if ctx.is_null() {
            return Caller::default();
        }
        let caller = Caller::read(ctx);
        ffi::duckdb_destroy_client_context(&mut ctx);
        caller
    }

    unsafe fn read(ctx: ffi::duckdb_client_context) -> Caller {
        let catalogs = setting(ctx, c"search_path").map(|p| search_path_catalogs(&p)).unwrap_or_default();
        let time_zone = setting(ctx, c"TimeZone").filter(|z| !z.is_empty());
        let offset = FLAG_OFFSET.load(Ordering::Relaxed);
        let flag = (offset != 0).then(|| Flag(context_address(ctx).add(offset) as *const AtomicU8));
        Caller { catalogs, time_zone, flag, context: context_address(ctx) as usize }
    }

    /// An identity of the caller's client (its `ClientContext`'s address; 0 when unknown), the same for every
    /// statement it runs, nested ones included.
    pub fn client(&self) -> usize {
        self.context
    }

    /// Whether the caller's statement has been interrupted.
    pub fn interrupted(&self) -> bool {
        // SAFETY: see [`Flag`].
        self.flag.is_some_and(|f| unsafe { (*f.0).load(Ordering::SeqCst) } == INTERRUPTED)
    }

    /// Called after our work committed: an interrupt that came too late to stop the commit is withdrawn, so the
    /// caller is told of the write it got, not of an error (a call that reports an error has written nothing).
    /// Where DuckDB has the suppressed state, later interrupts of this statement are refused too (module docs).
    pub fn committed(&self) {
        if let Some(f) = self.flag {
            // SAFETY: see [`Flag`]; both are states DuckDB itself stores in the byte (the suppressed one only
            // where calibrate proved it), and DuckDB clears the byte to 0 when the caller's next statement starts.
            let byte = unsafe { &*f.0 };
            if SUPPRESSIBLE.load(Ordering::Relaxed) {
                byte.store(INTERRUPTS_SUPPRESSED, Ordering::SeqCst);
            } else {
                let _ = byte.compare_exchange(INTERRUPTED, NOT_INTERRUPTED, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
    }

    /// The commit point of one of the call's transactions ([`storage::interrupt::Point::Commit`]): true when it may
    /// commit. Where DuckDB has the suppressed state this is one atomic step, 0 to 2 (or 2 already, after an
    /// earlier commit of the call): DuckDB, whose thread may check the flag while our function runs on one of its
    /// workers, can then no longer fail the statement. Elsewhere it is a plain check, and an interrupt right after
    /// it can still fail a statement whose transaction commits (module docs).
    pub fn commit_point(&self) -> bool {
        let Some(f) = self.flag else { return true };
        // SAFETY: see [`Flag`] and [`Caller::committed`].
        let byte = unsafe { &*f.0 };
        if SUPPRESSIBLE.load(Ordering::Relaxed) {
            match byte.compare_exchange(NOT_INTERRUPTED, INTERRUPTS_SUPPRESSED, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => true,
                Err(now) => now == INTERRUPTS_SUPPRESSED,
            }
        } else {
            byte.load(Ordering::SeqCst) != INTERRUPTED
        }
    }

    /// A transaction of the call begins ([`storage::interrupt::Point::Begin`]): interrupts held back since an
    /// earlier commit of the same call are let in again (2 to 0), so a call of many transactions
    /// (`mentat_transact_many`) stays interruptible between them.
    pub fn reopen(&self) {
        if let (Some(f), true) = (self.flag, SUPPRESSIBLE.load(Ordering::Relaxed)) {
            // SAFETY: see [`Flag`] and [`Caller::committed`].
            let byte = unsafe { &*f.0 };
            let _ = byte.compare_exchange(INTERRUPTS_SUPPRESSED, NOT_INTERRUPTED, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// A check for [`storage::interrupt::scope_with`]: true once the caller has been interrupted.
    pub fn check(&self) -> impl Fn() -> bool + 'static {
        let me = self.clone();
        move || me.interrupted()
    }

    /// The store `name` as the caller means it: a name with a catalog stays as it is; an unqualified name takes
    /// the first catalog of the caller's search path that holds such a store (`exists`), or the first catalog
    /// when none does (where `mentat_transact` creates it). A catalog equal to `default_catalog` (the database
    /// the process opened first, which mentat's own connections use) is left implicit, so that the store keeps
    /// one cache entry however it is named.
    pub fn resolve(
        &self,
        name: &StoreName,
        default_catalog: &str,
        mut exists: impl FnMut(&StoreName) -> bool,
    ) -> StoreName {
        let implicit = |c: &str| if c == default_catalog { None } else { Some(c.to_string()) };
        if let Some(c) = &name.catalog {
            return StoreName { catalog: implicit(c), schema: name.schema.clone() };
        }
        let candidates: Vec<StoreName> =
            self.catalogs.iter().map(|c| StoreName { catalog: implicit(c), schema: name.schema.clone() }).collect();
        match candidates.len() {
            0 => name.clone(),
            1 => candidates[0].clone(),
            _ => candidates.iter().find(|s| exists(s)).unwrap_or(&candidates[0]).clone(),
        }
    }
}

/// Something that can be interrupted: a raw query connection or a duckdb-rs connection's handle.
#[derive(Clone)]
pub enum Target {
    Raw(RawTarget),
    Handle(Arc<duckdb::InterruptHandle>),
}

/// A raw connection handle, interrupted from the watcher thread (DuckDB's `Interrupt` is thread-safe).
#[derive(Clone, Copy)]
pub struct RawTarget(pub ffi::duckdb_connection);
// SAFETY: duckdb_interrupt only sets an atomic flag of the connection's context; the connection outlives the watch.
unsafe impl Send for RawTarget {}

impl Target {
    fn interrupt(&self) {
        match self {
            // SAFETY: see [`RawTarget`].
            Target::Raw(r) => unsafe { ffi::duckdb_interrupt(r.0) },
            Target::Handle(h) => h.interrupt(),
        }
    }
}

struct Watched {
    id: u64,
    flag: Flag,
    target: Target,
    /// Not forwarded meanwhile: the connection is running a COMMIT ([`Watch::holder`]).
    held: bool,
}

#[derive(Default)]
struct Watcher {
    watched: Mutex<(u64, Vec<Watched>)>,
    wake: Condvar,
}

fn watcher() -> &'static Watcher {
    static WATCHER: OnceLock<&'static Watcher> = OnceLock::new();
    WATCHER.get_or_init(|| {
        let w: &'static Watcher = Box::leak(Box::default());
        let spawned = std::thread::Builder::new().name("mentat-interrupts".into()).spawn(move || loop {
            let mut guard = w.watched.lock().unwrap_or_else(|p| p.into_inner());
            while guard.1.is_empty() {
                guard = w.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
            for x in guard.1.iter().filter(|x| !x.held) {
                // SAFETY: see [`Flag`]: a watch is dropped before its caller's function returns.
                if unsafe { (*x.flag.0).load(Ordering::SeqCst) } == INTERRUPTED {
                    // Again on every poll: DuckDB clears a connection's flag when its next statement starts.
                    x.target.interrupt();
                }
            }
            drop(guard);
            std::thread::sleep(POLL);
        });
        if spawned.is_err() {
            FLAG_OFFSET.store(0, Ordering::Relaxed);
        }
        w
    })
}

/// Forwards the caller's interrupt to `target` while it lives.
pub struct Watch(Option<u64>);

impl Watch {
    /// Starts forwarding `caller`'s interrupt to `target` (nothing when the caller's flag is unknown).
    pub fn start(caller: &Caller, target: Target) -> Watch {
        let Some(flag) = caller.flag else { return Watch(None) };
        let w = watcher();
        let mut guard = w.watched.lock().unwrap_or_else(|p| p.into_inner());
        guard.0 += 1;
        let id = guard.0;
        guard.1.push(Watched { id, flag, target, held: false });
        w.wake.notify_one();
        Watch(Some(id))
    }

    /// What the write's hook calls around each COMMIT: the forwarding is held back while the COMMIT runs (past the
    /// commit point, see [`storage::interrupt::committing`]).
    pub fn holder(&self) -> impl Fn(bool) + Send + Sync + 'static {
        let id = self.0;
        move |on| {
            if let Some(id) = id {
                hold(id, on)
            }
        }
    }
}

/// Holds back (true) or resumes (false) the forwarding of watch `id`. Holding waits for a forward in progress (the
/// watcher forwards under the same lock), so no interrupt reaches the connection after it returns.
fn hold(id: u64, on: bool) {
    let w = watcher();
    let mut guard = w.watched.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(x) = guard.1.iter_mut().find(|x| x.id == id) {
        x.held = on;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            let w = watcher();
            w.watched.lock().unwrap_or_else(|p| p.into_inner()).1.retain(|x| x.id != id);
        }
    }
}

/// Finds and proves the offset of the interrupt byte in DuckDB's `ClientContext` (see the module docs), on two
/// connections of our own to `db`. Leaves interrupt forwarding off when any check fails.
///
/// # Safety
/// `db` must be the database handle DuckDB gave the entry point.
pub unsafe fn calibrate(db: ffi::duckdb_database) {
    let mut conns = [std::ptr::null_mut(); 2];
    for c in conns.iter_mut() {
        if ffi::duckdb_connect(db, c) != ffi::DuckDBSuccess {
            return close(&mut conns);
        }
    }
    let mut ctxs = [std::ptr::null_mut(); 2];
    for (c, ctx) in conns.iter().zip(ctxs.iter_mut()) {
        ffi::duckdb_connection_get_client_context(*c, ctx);
    }
    if !ctxs.iter().any(|c| c.is_null()) {
        let (a, b) = (context_address(ctxs[0]), context_address(ctxs[1]));
        let word = |p: *const u8, at: usize| (p.add(at) as *const usize).read_unaligned();
        // `db` sits right after enable_shared_from_this's weak_ptr: look a few words around there.
        let found = (0..=64)
            .step_by(8)
            .find(|&at| word(a, at) != 0 && word(a, at) == word(b, at) && word(a, at + 8) == word(b, at + 8) && a != b);
        if let Some(at) = found {
            let offset = at + 16;
            let byte = |p: *const u8| (*(p.add(offset) as *const AtomicU8)).load(Ordering::SeqCst);
            let idle = byte(a) == 0 && byte(b) == 0;
            ffi::duckdb_interrupt(conns[0]);
            let raised = byte(a) == 1 && byte(b) == 0;
            let mut result: ffi::duckdb_result = std::mem::zeroed();
            ffi::duckdb_query(conns[0], c"SELECT 1".as_ptr(), &mut result);
            ffi::duckdb_destroy_result(&mut result);
            let cleared = byte(a) == 0;
            if idle && raised && cleared {
                FLAG_OFFSET.store(offset, Ordering::Relaxed);
                // the suppressed state: 2 survives an interrupt, and the next statement clears it
                let flag = &*(a.add(offset) as *const AtomicU8);
                flag.store(INTERRUPTS_SUPPRESSED, Ordering::SeqCst);
                ffi::duckdb_interrupt(conns[0]);
                let held = byte(a) == INTERRUPTS_SUPPRESSED;
                ffi::duckdb_query(conns[0], c"SELECT 1".as_ptr(), &mut result);
                let ran = ffi::duckdb_result_error(&mut result).is_null();
                ffi::duckdb_destroy_result(&mut result);
                let reset = byte(a) == NOT_INTERRUPTED;
                flag.store(NOT_INTERRUPTED, Ordering::SeqCst);
                SUPPRESSIBLE.store(held && ran && reset, Ordering::Relaxed);
            }
        }
    }
    for ctx in ctxs.iter_mut().filter(|c| !c.is_null()) {
        ffi::duckdb_destroy_client_context(ctx);
    }
    close(&mut conns);
}

unsafe fn close(conns: &mut [ffi::duckdb_connection; 2]) {
    for c in conns.iter_mut().filter(|c| !c.is_null()) {
        ffi::duckdb_disconnect(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_paths() {
        assert_eq!(search_path_catalogs(""), Vec::<String>::new());
        assert_eq!(search_path_catalogs("p.main"), vec!["p"]);
        assert_eq!(search_path_catalogs("p.main,memory.main,p.other"), vec!["p", "memory"]);
        assert_eq!(search_path_catalogs("\"my, db\".main,x"), vec!["my, db", "x"]);
    }

    #[test]
    fn resolution() {
        let c = |cats: &[&str]| Caller { catalogs: cats.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        let n = |s: &str| StoreName::parse(s).unwrap();
        let none = |_: &StoreName| false;
        assert_eq!(c(&[]).resolve(&n("crm"), "main", none), n("crm"));
        assert_eq!(c(&["project"]).resolve(&n("crm"), "main", none), n("project.crm"));
        assert_eq!(c(&["main"]).resolve(&n("crm"), "main", none), n("crm"));
        assert_eq!(c(&[]).resolve(&n("main.crm"), "main", none), n("crm"));
        assert_eq!(c(&["a", "b"]).resolve(&n("crm"), "main", none), n("a.crm"));
        assert_eq!(c(&["a", "b"]).resolve(&n("crm"), "main", |s| s.catalog.as_deref() == Some("b")), n("b.crm"));
    }
}
