//! Interrupts of the caller, as seen by the storage layer.
//!
//! The extension runs each call on a connection of its own, and forwards the caller's interrupt to it
//! (`duckdb_ext/src/session.rs`), which stops the statement that is running. Between statements nothing would
//! notice: so [`crate::in_transaction`] asks [`requested`] right before its COMMIT and rolls back when the caller
//! was interrupted, and a call that reports an error has written nothing. The check is set for the duration of
//! one call on its thread with [`scope_with`]; without one, nothing is ever interrupted (the Rust API, the tests).

use std::cell::RefCell;
use std::sync::Arc;

/// The moments of a call's DuckDB transactions that the extension takes part in ([`scope_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// A transaction is about to begin: the caller may interrupt it (again).
    Begin,
    /// The commit point, right before a COMMIT: true when the transaction may commit (the caller has not
    /// interrupted it); from here the caller's interrupts are too late for it and are held back.
    Commit,
    /// The COMMIT has returned (or failed, or the commit point refused it).
    Committed,
}

/// What the extension does at each [`Point`] of a call's transactions; shared with a group-commit leader, which
/// passes a waiting caller's commit point on that caller's behalf ([`crate::group`]).
pub type Hook = Arc<dyn Fn(Point) -> bool + Send + Sync>;

/// The current call's interrupt, as [`scope_with`] set it.
struct Current {
    check: Box<dyn Fn() -> bool>,
    hook: Hook,
}

/// A hook that takes part in nothing (a scope that only checks).
#[cfg(test)]
fn no_hook(_: Point) -> bool {
    true
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Runs `f` with `check` as this thread's interrupt check, and `hook` called at each [`Point`] of the call's
/// transactions ([`begin`], [`committing`]), restoring the previous ones afterwards.
pub fn scope_with<T>(
    check: impl Fn() -> bool + 'static,
    hook: impl Fn(Point) -> bool + Send + Sync + 'static,
    f: impl FnOnce() -> T,
) -> T {
    let current = Current { check: Box::new(check), hook: Arc::new(hook) };
    let previous = CURRENT.with(|c| c.borrow_mut().replace(current));
    struct Restore(Option<Option<Current>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(p) = self.0.take() {
                CURRENT.with(|c| *c.borrow_mut() = p);
            }
        }
    }
    let _restore = Restore(Some(previous));
    f()
}

/// The current call's hook (None outside [`scope_with`]).
pub fn hook() -> Option<Hook> {
    CURRENT.with(|c| c.borrow().as_ref().map(|cur| cur.hook.clone()))
}

/// Whether the caller of the current call has been interrupted.
pub fn requested() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|cur| (cur.check)()))
}

/// Tells the extension that a transaction begins (see [`Point::Begin`]).
pub fn begin() {
    if let Some(h) = hook() {
        h(Point::Begin);
    }
}

/// Runs `commit` (a COMMIT statement) past the call's commit point, or returns None without running it when the
/// caller interrupted the call first.
///
/// Why a commit point: DuckDB may run a table function on one of its worker threads while the caller's thread
/// checks the interrupt flag and fails the statement at once. An interrupt that lands between a plain check and
/// the function's return would fail a statement whose transaction then commits: the call says "error", the write is
/// there. So the extension decides, at this point and atomically with the caller's interrupts, whether the
/// transaction commits, and holds later interrupts back (from the connection running the COMMIT too: DuckDB looks
/// at a connection's interrupt after a COMMIT has committed, and would fail that statement).
pub fn committing<T>(commit: impl FnOnce() -> T) -> Option<T> {
    let Some(h) = hook() else { return Some(commit()) };
    struct Done(Hook);
    impl Drop for Done {
        fn drop(&mut self) {
            (self.0)(Point::Committed);
        }
    }
    let may = h(Point::Commit);
    let _done = Done(h);
    may.then(commit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Mutex;

    #[test]
    fn scoped_checks_nest_and_restore() {
        assert!(!requested());
        let flag = Rc::new(Cell::new(false));
        let f = flag.clone();
        scope_with(
            move || f.get(),
            no_hook,
            || {
                assert!(!requested());
                flag.set(true);
                assert!(requested());
                scope_with(|| false, no_hook, || assert!(!requested()));
                assert!(requested());
            },
        );
        assert!(!requested());
    }

    #[test]
    fn commits_pass_the_commit_point_only_inside_a_scope_with_a_hook() {
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let push = |l: &Arc<Mutex<Vec<String>>>, s: &str| l.lock().unwrap().push(s.to_string());
        assert_eq!(committing(|| 1), Some(1));
        let (l, refuse) = (log.clone(), Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let r = refuse.clone();
        scope_with(
            || false,
            move |p| {
                l.lock().unwrap().push(format!("{p:?}"));
                !(p == Point::Commit && r.load(std::sync::atomic::Ordering::SeqCst))
            },
            || {
                begin();
                assert_eq!(committing(|| push(&log, "COMMIT")), Some(()));
                refuse.store(true, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(committing(|| push(&log, "never")), None);
                refuse.store(false, std::sync::atomic::Ordering::SeqCst);
                // a COMMIT that panics ends its hold too
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| committing(|| panic!("commit failed"))));
                assert!(r.is_err());
            },
        );
        assert!(hook().is_none());
        assert_eq!(committing(|| push(&log, "outside")), Some(()));
        let expected =
            ["Begin", "Commit", "COMMIT", "Committed", "Commit", "Committed", "Commit", "Committed", "outside"];
        assert_eq!(*log.lock().unwrap(), expected);
    }
}
