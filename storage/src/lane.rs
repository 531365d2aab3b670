//! The heavy lane: admission of long statements, so that short ones do not queue behind them for the cores.
//!
//! DuckDB runs every statement with all its worker threads, and the operating system shares the cores among every
//! thread that runs one. When several analytical statements (tens of milliseconds of CPU each) run at once beside
//! point reads (well under a millisecond), each read waits its turn for a core behind them: measured with the soak
//! (`benchmarks/py/soak.py`, 8 reader threads cycling q1, q2, q4, pull and as_of at scale s on 2 cores, no writer),
//! q1's p50 was 2.7 ms and its p99 24 ms, most of the readers' time being spent in q4 (p50 49 ms), so that about
//! six q4s ran at any moment. With at most one q4 running at a time (the others waiting for it, nothing else
//! changed), q1's p50 fell to 0.4 ms and its p99 to 2.5 ms, every question's p99 within 6.2x of its p50 (storage/
//! README.md "The heavy lane"). Database servers do the same under the name of workload management (queues of
//! statements by cost).
//!
//! A statement is known by a key (a hash of the query text and time options for `mentat_q`, of the SQL text for
//! the other functions). Its cost, the CPU time of the threads that drive it (executing it and fetching its chunks:
//! `CLOCK_THREAD_CPUTIME_ID`, which does not grow while a thread waits for a core, as wall time does under load),
//! is remembered per key as a moving average; a statement whose average is at least the threshold
//! (`MENTAT_HEAVY_MS`, [`Lane::from_env`]) is heavy, and a heavy statement runs only when fewer than
//! [`Lane::capacity`] heavy statements are running, waiting in arrival order otherwise. A statement never seen
//! before, or one below the threshold, is never held. A wait ends when the caller is interrupted (the statement
//! then fails as interrupted) and after [`MAX_WAIT`] at the latest (the statement then runs anyway), so a result
//! left half-read by a client, which keeps its slot, can delay the others by that much and never deadlock them.
//!
//! The extension runs the statements the lane admits on threads of its own at a lower operating-system priority
//! (`duckdb_ext/src/heavy.rs`, `MENTAT_HEAVY_NICE`): queueing alone left the short reads waiting behind the one
//! admitted statement and the writer in equal turns for the cores.
//!
//! **Off unless asked for** (`MENTAT_HEAVY_LANE=1`): a statement waits inside its caller's DuckDB statement, whose
//! transaction stays open meanwhile. In the 10-minute soak the queue was never empty, and DuckDB's in-memory table
//! data grew from 29 to 322 MB (resident memory +64%) where the same soak without the lane kept it between 11 and 29
//! MB (+5%): the waiting readers' open transactions kept the checkpoints from completing. A workload of a few
//! heavy statements now and then gains the short reads' tails without that cost; a workload that keeps the lane
//! full needs the lane to move its waits out of open transactions first.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest a heavy statement waits for a slot before it runs anyway.
pub const MAX_WAIT: Duration = Duration::from_secs(2);
/// Keys remembered before the history starts afresh.
const KEYS: usize = 4096;
/// How often a waiting statement checks its caller's interrupt.
const POLL: Duration = Duration::from_millis(5);

/// The lane (see the module docs). Shared by every statement of a database instance.
pub struct Lane {
    capacity: usize,
    heavy: Duration,
    max_wait: Duration,
    state: Mutex<State>,
    freed: Condvar,
    history: Mutex<HashMap<u64, Duration>>,
}

#[derive(Default)]
struct State {
    running: usize,
    /// The next ticket to hand out, and the ticket whose turn it is: heavy statements are served in arrival order.
    next_ticket: u64,
    serving: u64,
    /// Tickets that left the line before their turn (interrupted, or tired of waiting).
    left: Vec<u64>,
    /// The clients of the running heavy statements (0 for an unknown one).
    clients: Vec<usize>,
}

/// Why a statement did not get its slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The caller was interrupted while the statement waited.
    Interrupted,
}

/// A running heavy statement's slot, given back when dropped.
pub struct Slot {
    lane: Arc<Lane>,
    client: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.lane.state.lock().unwrap_or_else(|p| p.into_inner());
        s.running -= 1;
        if let Some(i) = s.clients.iter().position(|c| *c == self.client) {
            s.clients.swap_remove(i);
        }
        drop(s);
        self.lane.freed.notify_all();
    }
}

impl Lane {
    /// A lane of `capacity` heavy statements at once (0: no lane, nothing is ever held) for statements whose
    /// average running time is at least `heavy`.
    pub fn new(capacity: usize, heavy: Duration) -> Lane {
        Lane {
            capacity,
            heavy,
            max_wait: MAX_WAIT,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
            history: Mutex::new(HashMap::new()),
        }
    }

    /// The lane the environment asks for: `MENTAT_HEAVY_LANE` heavy statements at once (default 0: no lane, see
    /// storage/README.md "The heavy lane" for why it is not on by default) of at least `MENTAT_HEAVY_MS` milliseconds of CPU (default 4: the soak's
    /// q4 costs its calling thread 3.4 to 7.3 ms, its q2 and as_of through SQL 2.3 to 5.0 ms when first planned and
    /// less once warm, a pull of one entity 0.7 to 1.0 ms).
    pub fn from_env() -> Lane {
        let capacity = std::env::var("MENTAT_HEAVY_LANE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        let ms: f64 = std::env::var("MENTAT_HEAVY_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(4.0);
        Lane::new(capacity, Duration::from_secs_f64(ms.max(0.0) / 1000.0))
    }

    /// The lane with waits ending after `max_wait` instead of [`MAX_WAIT`].
    pub fn with_max_wait(mut self, max_wait: Duration) -> Lane {
        self.max_wait = max_wait;
        self
    }

    /// How many heavy statements may run at once (0: the lane is off).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether the statement `key` is heavy: its remembered average running time is at least the threshold.
    pub fn is_heavy(&self, key: u64) -> bool {
        self.capacity > 0
            && self.history.lock().unwrap_or_else(|p| p.into_inner()).get(&key).is_some_and(|t| *t >= self.heavy)
    }

    /// Admits the statement `key` of `client` (an identity of the caller's connection, 0 when unknown): `Ok(None)`
    /// at once when it is not heavy (or the lane is off) or when a heavy statement of the same client runs (one
    /// statement that reads two heavy answers, say a join of two `mentat_q` calls, must not wait for itself),
    /// `Ok(Some(slot))`
    /// once a slot is free (in arrival order) or after the longest wait ([`MAX_WAIT`]; then `Ok(None)`: it runs
    /// without one), and
    /// `Err(Refused::Interrupted)` when `interrupted` turns true while it waits.
    pub fn admit(
        self: &Arc<Self>,
        key: u64,
        client: usize,
        interrupted: impl Fn() -> bool,
    ) -> Result<Option<Slot>, Refused> {
        if !self.is_heavy(key) {
            return Ok(None);
        }
        let start = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if client != 0 && s.clients.contains(&client) {
            return Ok(None);
        }
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        loop {
            s.pass_left();
            if s.serving == ticket && s.running < self.capacity {
                s.running += 1;
                s.serving += 1;
                s.clients.push(client);
                s.pass_left();
                drop(s);
                // the next in line may fit too (capacity above 1)
                self.freed.notify_all();
                return Ok(Some(Slot { lane: self.clone(), client }));
            }
            let stop = interrupted();
            if stop || start.elapsed() >= self.max_wait {
                s.left.push(ticket);
                s.pass_left();
                drop(s);
                self.freed.notify_all();
                return if stop { Err(Refused::Interrupted) } else { Ok(None) };
            }
            s = self.freed.wait_timeout(s, POLL).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Remembers that the statement `key` cost `took` of CPU (a moving average, a quarter of the weight to the
    /// newest).
    pub fn record(&self, key: u64, took: Duration) {
        if self.capacity == 0 {
            return;
        }
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() >= KEYS && !h.contains_key(&key) {
            h.clear();
        }
        h.entry(key).and_modify(|t| *t = (*t * 3 + took) / 4).or_insert(took);
    }
}

impl State {
    /// Moves the turn past the tickets at the head of the line that left it.
    fn pass_left(&mut self) {
        while let Some(i) = self.left.iter().position(|t| *t == self.serving) {
            self.left.swap_remove(i);
            self.serving += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    fn lane(capacity: usize) -> Arc<Lane> {
        let l = Arc::new(Lane::new(capacity, Duration::from_millis(10)));
        l.record(1, Duration::from_millis(50)); // heavy
        l.record(2, Duration::from_millis(1)); // light
        l
    }

    #[test]
    fn only_heavy_statements_take_slots() {
        let l = lane(1);
        assert!(l.is_heavy(1) && !l.is_heavy(2) && !l.is_heavy(3));
        let slot = l.admit(1, 7, || false).unwrap();
        assert!(slot.is_some());
        // a light or unknown statement is never held, even with the one slot taken
        assert!(l.admit(2, 7, || false).unwrap().is_none());
        assert!(l.admit(3, 7, || false).unwrap().is_none());
        // the average moves: a heavy statement that became fast is light again
        for _ in 0..12 {
            l.record(1, Duration::from_millis(1));
        }
        assert!(!l.is_heavy(1));
        // no lane: nothing is heavy
        let off = Arc::new(Lane::new(0, Duration::from_millis(10)));
        off.record(1, Duration::from_secs(1));
        assert!(!off.is_heavy(1) && off.admit(1, 7, || false).unwrap().is_none());
    }

    #[test]
    fn at_most_capacity_run_at_once() {
        let l = lane(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..6)
            .map(|client| {
                let (l, running, most) = (l.clone(), running.clone(), most.clone());
                std::thread::spawn(move || {
                    let slot = l.admit(1, client + 1, || false).unwrap();
                    assert!(slot.is_some());
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_interrupted_wait_leaves_the_line() {
        let l = lane(1);
        let held = l.admit(1, 7, || false).unwrap().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (l, stop) = (l.clone(), stop.clone());
            std::thread::spawn(move || l.admit(1, 8, || stop.load(Ordering::SeqCst)).map(|s| s.is_some()))
        };
        std::thread::sleep(Duration::from_millis(30));
        stop.store(true, Ordering::SeqCst);
        assert_eq!(waiter.join().unwrap(), Err(Refused::Interrupted));
        // the line moves on past the ticket that left: the next statement gets the slot once it is free
        drop(held);
        assert!(l.admit(1, 7, || false).unwrap().is_some());
    }

    #[test]
    fn a_slot_kept_forever_delays_the_others_only_up_to_the_longest_wait_and_its_client_not_at_all() {
        // a client that leaves a heavy answer half-read keeps its slot: another client's heavy statement waits for
        // it only up to the longest wait, and the line is not left stuck behind it
        let l = Arc::new(Lane::new(1, Duration::from_millis(10)).with_max_wait(Duration::from_millis(400)));
        l.record(1, Duration::from_millis(50));
        let _kept = l.admit(1, 7, || false).unwrap().unwrap();
        let start = Instant::now();
        assert!(l.admit(1, 8, || false).unwrap().is_none());
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(400));
        // the same client (one statement with two heavy mentat_q calls, the first unfinished) is admitted at once:
        // it does not wait out the longest wait for itself
        let start = Instant::now();
        assert!(l.admit(1, 7, || false).unwrap().is_none());
        assert!(start.elapsed() < Duration::from_millis(200));
        assert!(l.admit(1, 9, || false).unwrap().is_none());
    }
}
