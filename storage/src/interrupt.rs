//! Interrupts of the caller, as seen by the storage layer.
//!
//! The extension runs each call on a connection of its own, and forwards the caller's interrupt to it
//! (`duckdb_ext/src/session.rs`), which stops the statement that is running. Between statements nothing would
//! notice: so [`crate::in_transaction`] asks [`requested`] right before its COMMIT and rolls back when the caller
//! was interrupted, and a call that reports an error has written nothing. The check is set for the duration of
//! one call on its thread with [`scope`]; without one, nothing is ever interrupted (the Rust API, the tests).

use std::cell::RefCell;

thread_local! {
    static CHECK: RefCell<Option<Box<dyn Fn() -> bool>>> = const { RefCell::new(None) };
}

/// Runs `f` with `check` as this thread's interrupt check, restoring the previous one afterwards.
pub fn scope<T>(check: impl Fn() -> bool + 'static, f: impl FnOnce() -> T) -> T {
    let previous = CHECK.with(|c| c.borrow_mut().replace(Box::new(check)));
    struct Restore(Option<Option<Box<dyn Fn() -> bool>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(p) = self.0.take() {
                CHECK.with(|c| *c.borrow_mut() = p);
            }
        }
    }
    let _restore = Restore(Some(previous));
    f()
}

/// Whether the caller of the current call has been interrupted.
pub fn requested() -> bool {
    CHECK.with(|c| c.borrow().as_ref().is_some_and(|f| f()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn scoped_checks_nest_and_restore() {
        assert!(!requested());
        let flag = Rc::new(Cell::new(false));
        let f = flag.clone();
        scope(
            move || f.get(),
            || {
                assert!(!requested());
                flag.set(true);
                assert!(requested());
                scope(|| false, || assert!(!requested()));
                assert!(requested());
            },
        );
        assert!(!requested());
    }
}
