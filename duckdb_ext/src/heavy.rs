//! The heavy lane's own threads: heavy statements execute at a lower operating-system priority.
//!
//! The lane (`storage::lane`) admits at most `MENTAT_HEAVY_LANE` heavy statements at once; those run here, on as
//! many threads of mentat's whose nice value is raised once when they start (`MENTAT_HEAVY_NICE`, 19 unless set;
//! raising a thread's nice value needs no privilege, lowering it again would, which is why the statements move to
//! threads that keep it rather than the caller's thread changing its own). The caller's thread hands over each
//! step (executing the statement, fetching each chunk) and waits, asleep, for its result: a short statement on any
//! other thread then finds a core before the heavy one's next slice, where with equal priorities it waited its
//! turn behind it.
//!
//! **Why** (storage/README.md "Heavy statements at a lower priority"): the soak from native threads (8 readers, 1
//! writer, 2 cores, `benchmarks/py/soak.py --driver native`) had q1 at p50 0.3 ms and p99 13.6 ms (45x) with
//! the lane off, 7.7 ms with the lane on (26x: the one admitted q4 and the writer still take the cores in equal
//! turns); with the lane on and q4's calling thread at nice 19 (set by the client, for the experiment), 2.1 ms
//! (every question within 11x), and within 9x with DuckDB's `threads` at 1 (no worker thread of DuckDB's, at nice 0,
//! helping q4).
//!
//! A job never waits for another job: each is one DuckDB call on mentat's own connection. A job that would be
//! handed over from one of these threads runs where it is (a statement's SQL never calls mentat's functions, but
//! nothing here relies on it).

use std::cell::Cell;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_HEAVY_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The threads heavy statements run on (see the module docs).
pub struct Heavy {
    jobs: Mutex<Sender<Job>>,
}

impl Heavy {
    /// Starts `threads` threads at nice value `nice` (-20 to 19; a thread without the privilege to go below its
    /// current value keeps that one). None when no thread could be started.
    pub fn start(threads: usize, nice: i32) -> Option<Heavy> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("mentat-heavy-{i}")).spawn(move || serve(&rx, nice));
            started += spawned.is_ok() as usize;
        }
        (started > 0).then(|| Heavy { jobs: Mutex::new(tx) })
    }

    /// The nice value of the environment's `MENTAT_HEAVY_NICE` (default 19).
    pub fn nice_from_env() -> i32 {
        std::env::var("MENTAT_HEAVY_NICE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(19).clamp(-20, 19)
    }

    /// Runs `f` once, on one of the threads, and returns its value, the calling thread asleep meanwhile; on the
    /// calling thread when that is one of them, or when the threads are gone. None when `f` panicked (the panic is
    /// caught where it ran).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        if ON_HEAVY_THREAD.with(|c| c.get()) {
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
        }
        let (tx, rx) = sync_channel::<T>(1);
        let job: Job = Box::new(move || {
            if let Ok(v) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                let _ = tx.send(v);
            }
        });
        let sent = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).send(job);
        if let Err(back) = sent {
            // no thread left to take it: the job comes back with the error and runs here
            (back.0)();
        }
        rx.recv().ok()
    }
}

fn serve(rx: &Mutex<Receiver<Job>>, nice: i32) {
    ON_HEAVY_THREAD.with(|c| c.set(true));
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority and gettid only read their arguments; on Linux PRIO_PROCESS with a thread id sets that
    // thread's nice value alone.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
    loop {
        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_a_thread_at_the_nice_value_asked_for() {
        // SAFETY: getpriority only reads its arguments.
        let own = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let heavy = Heavy::start(1, 7).expect("a thread");
        let (name, nice) = heavy
            .run(|| {
                let name = std::thread::current().name().map(String::from);
                // SAFETY: as above.
                let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
                (name, nice)
            })
            .expect("an answer");
        assert_eq!(name.as_deref(), Some("mentat-heavy-0"));
        // 7, unless the test runs above it without the privilege to come down
        assert!(nice == 7 || (own > 7 && nice == own), "nice {nice}, the test's own {own}");
        // the calling thread's own priority is untouched
        // SAFETY: as above.
        assert_eq!(own, unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) });
    }

    #[test]
    fn a_job_handed_over_from_a_heavy_thread_runs_where_it_is_and_a_panic_gives_none() {
        let heavy = Arc::new(Heavy::start(1, 0).expect("a thread"));
        let inner = heavy.clone();
        // with one thread, handing the inner job over would wait for the outer one forever
        let v = heavy.run(move || inner.run(|| 41 + 1)).flatten();
        assert_eq!(v, Some(42));
        assert_eq!(heavy.run(|| -> i32 { panic!("a job that panics") }), None);
        // the thread survived the panic
        assert_eq!(heavy.run(|| 7), Some(7));
    }
}
