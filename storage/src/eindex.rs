//! The entity index: a store's current datoms held in memory, sorted by entity (EAVT) and, for attributes with a
//! value index (unique, `:db/index`, refs), by value (AVET, VAET), so that entity-shaped queries
//! (`planner::entity`) are answered with a few binary searches and no DuckDB statement.
//!
//! Datomic's design: immutable sorted segments plus a memory index of the novelty the transactor adds. Per
//! attribute, [`AttrIndex`] is a [`Base`] (columnar arrays sorted by `(e, v)`, read once from the attribute's
//! `cur_` table) plus the datoms asserted (`added`) and the base datoms retracted (`gone`) since; when the novelty
//! passes [`MERGE_AT`] entries it is merged into a new base (a linear merge of two sorted runs). Retracted
//! assertions, for as-of reads, are kept in sorted runs of history rows (see [`AttrIndex`]'s `hist`): the recent
//! ones only, as many as the attribute's current datoms (at least [`HISTORY_MIN_ROWS`]); an as-of read of an older
//! moment takes the general path (see [`AttrIndex::history_bound`]).
//!
//! Consistency: the transactor applies every committed transaction's datoms ([`EntityIndex::apply`]) before its
//! call returns, so a read after `mentat_transact` sees it; a reader works on one [`Snapshot`] (an `Arc`), swapped
//! whole per transaction, so it never sees half a transaction. Any other writer (`mentat_import`, a store read
//! again after another process wrote it) drops the whole index ([`EntityIndex::clear`]); it is read again as
//! queries need it. An attribute is read under the store's writer lock, so no transaction commits half-way
//! through a read.
//!
//! Which attributes: those an entity-shaped query reads (`duckdb_ext/src/entity.rs`), those a group reads many
//! datoms of (`pending.rs`), and those a small transaction writes ([`EntityIndex::want`], so that the next small
//! transactions on them can go to the log).
//!
//! Memory: an attribute costs 16 bytes per datom (entity, tx), its values (8 bytes, or a shared string), 4 bytes
//! per datom for the tx order (`since` reads) and 4 for the value order; [`EntityIndex::bytes`] reports the total
//! and an attribute that would pass the budget is not indexed (its queries take the general path).

use crate::error::Result;
use crate::value::Val;
use duckdb::arrow::array::{Array, AsArray};
use duckdb::arrow::datatypes::{DataType, Float64Type, Int64Type};
use duckdb::Connection;
use imbl::{OrdMap, OrdSet};
use planner::entity::{Access, Conjunction, EntityPlan, Key, Slot, Step};
use planner::layout::StoreName;
use planner::schema::{Attribute, Entid, ValueType};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, RwLock};

/// Novelty entries (asserted plus retracted since the base was read) past which an attribute's novelty is merged
/// into a new base. The novelty lives in persistent maps, so its size costs a transaction O(log n), not a copy; a
/// merge costs one pass over the attribute (about 0.1 s for the 1.3M issues of scale m), under the writer lock.
#[cfg(not(test))]
pub const MERGE_AT: usize = 32_768;
/// Small in the unit tests, so that they go through many merges.
#[cfg(test)]
pub const MERGE_AT: usize = 512;

/// One transaction's datoms as [`EntityIndex::apply_all`] takes them: tx, asserted `(e, a, v)`, retracted with the
/// tx that asserted each.
pub type Committed<'a> = (i64, &'a [(Entid, Entid, Val)], &'a [((Entid, Entid, Val), i64)]);

/// One change to an attribute's index, in transaction order.
#[derive(Debug)]
enum Op {
    /// `(e, v)` asserted in tx.
    Add(i64, IKey, i64),
    /// `(e, v)` asserted in the first tx, retracted in the second.
    Retract(i64, IKey, i64, i64),
}

/// Intermediate rows past which the entity path gives the query back to the general path (a join this large is
/// a scan's work, which DuckDB does better).
pub const MAX_ROWS: usize = 100_000;

/// A value as the index holds it, totally ordered.
#[derive(Clone, Debug)]
pub enum IKey {
    Int(i64),
    Float(f64),
    Text(Arc<str>),
}

impl PartialEq for IKey {
    fn eq(&self, o: &IKey) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for IKey {}
impl PartialOrd for IKey {
    fn partial_cmp(&self, o: &IKey) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for IKey {
    fn cmp(&self, o: &IKey) -> Ordering {
        match (self, o) {
            (IKey::Int(a), IKey::Int(b)) => a.cmp(b),
            (IKey::Float(a), IKey::Float(b)) => a.total_cmp(b),
            (IKey::Text(a), IKey::Text(b)) => a.cmp(b),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}
impl std::hash::Hash for IKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        match self {
            IKey::Int(i) => (0u8, i).hash(h),
            IKey::Float(f) => (1u8, f.to_bits()).hash(h),
            IKey::Text(s) => (2u8, s).hash(h),
        }
    }
}

impl IKey {
    fn rank(&self) -> u8 {
        match self {
            IKey::Int(_) => 0,
            IKey::Float(_) => 1,
            IKey::Text(_) => 2,
        }
    }

    pub fn from_key(k: &Key) -> IKey {
        match k {
            Key::Int(i) => IKey::Int(*i),
            Key::Float(f) => IKey::Float(*f),
            Key::Text(s) => IKey::Text(Arc::from(s.as_str())),
        }
    }

    pub fn to_key(&self) -> Key {
        match self {
            IKey::Int(i) => Key::Int(*i),
            IKey::Float(f) => Key::Float(*f),
            IKey::Text(s) => Key::Text(s.to_string()),
        }
    }

    /// The key of a transactor value, or None for value types the index does not hold.
    pub fn from_val(v: &Val) -> Option<IKey> {
        Some(match v {
            Val::Ref(i) | Val::Long(i) | Val::Instant(i) => IKey::Int(*i),
            Val::Bool(b) => IKey::Int(*b as i64),
            Val::Double(f) => IKey::Float(*f),
            Val::Str(s) | Val::Uuid(s) => IKey::Text(Arc::from(s.as_str())),
            Val::Bytes(_) | Val::BigInt(_) | Val::BigDec(_) | Val::Float(_) | Val::Tuple(_) => return None,
        })
    }

    /// The transactor value of a key held for an attribute of type `t` (the inverse of [`IKey::from_val`]).
    pub fn to_val(&self, t: ValueType) -> Val {
        match (self, t) {
            (IKey::Int(i), ValueType::Ref) => Val::Ref(*i),
            (IKey::Int(i), ValueType::Instant) => Val::Instant(*i),
            (IKey::Int(i), ValueType::Boolean) => Val::Bool(*i != 0),
            (IKey::Int(i), _) => Val::Long(*i),
            (IKey::Float(f), _) => Val::Double(*f),
            (IKey::Text(s), ValueType::Uuid) => Val::Uuid(s.to_string()),
            (IKey::Text(s), _) => Val::Str(s.to_string()),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            IKey::Text(s) => 16 + s.len(),
            _ => 8,
        }
    }
}

/// Whether the index holds attributes of this value type (bytes, bigints, bigdecs, floats and tuples are left to the
/// general path: the index keys values as 64-bit integers, doubles or text).
pub fn indexable(t: ValueType) -> bool {
    !matches!(t, ValueType::Bytes | ValueType::BigInt | ValueType::BigDec | ValueType::Float | ValueType::Tuple)
}

/// Whether an attribute gets a value order (AVET, VAET): Datomic's rule, unique, indexed or a ref.
pub fn has_value_order(a: &Attribute) -> bool {
    a.unique.is_some() || a.index || a.value_type == ValueType::Ref
}

/// A directory over a sorted run of integer keys: the first position of every block of `2^BLOCK_BITS` key
/// values, so that a lookup searches one block instead of the whole run.
///
/// A binary search over the 1.3M issues of scale m touches ~21 positions of a 10 MB array, most of them cache
/// misses; it was 72% of an EAVT probe's time and the whole of q2's cost above the statement floor (81 issues,
/// two probes each). Entids are allocated densely per partition, so the directory of an attribute's entities is
/// small (4 bytes per 16 entids of the span); keys too sparse for that (span over 4 blocks per key) get none and
/// are searched whole.
#[derive(Debug, Default)]
struct Directory {
    min: i64,
    /// `starts[b]`: the first position whose key is at least `min + (b << BLOCK_BITS)`; the last entry is the
    /// run's length.
    starts: Vec<u32>,
}

const BLOCK_BITS: u32 = 4;

impl Directory {
    /// The directory of the `n` sorted keys `key(0..n)`, or None when they are too sparse (or none).
    fn build(n: usize, key: impl Fn(usize) -> i64) -> Option<Directory> {
        if n == 0 || n > u32::MAX as usize {
            return None;
        }
        let (min, max) = (key(0), key(n - 1));
        let blocks = ((max as i128 - min as i128) >> BLOCK_BITS) + 1;
        if blocks > 4 * n as i128 + 1024 {
            return None;
        }
        let mut starts = Vec::with_capacity(blocks as usize + 1);
        let mut p = 0;
        for b in 0..=blocks as i64 {
            let lo = min + (b << BLOCK_BITS);
            while p < n && key(p) < lo {
                p += 1;
            }
            starts.push(p as u32);
        }
        Some(Directory { min, starts })
    }

    /// The first position in `0..len` whose key is not less than `k` (`key(p)` as in [`Directory::build`]).
    fn lower_bound(&self, k: i64, key: impl Fn(usize) -> i64) -> usize {
        if k <= self.min {
            return 0;
        }
        let b = ((k as i128 - self.min as i128) >> BLOCK_BITS) as usize;
        let last = self.starts.len() - 1;
        if b >= last {
            return self.starts[last] as usize;
        }
        let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        lower(lo, hi, |p| key(p) < k)
    }

    /// The directory entry that [`Directory::lower_bound`] reads first for `k` (None: it reads none).
    fn entry_of(&self, k: i64) -> Option<usize> {
        if k <= self.min {
            return None;
        }
        let b = ((k as i128 - self.min as i128) >> BLOCK_BITS) as usize;
        (b < self.starts.len()).then_some(b)
    }

    fn bytes(&self) -> usize {
        self.starts.len() * 4
    }
}

/// The first position of every distinct text value of a sorted run, found by the value's hash: an equality
/// lookup (a unique attribute's value, a lookup ref, an input binding) reads one slot and the row it names.
///
/// A binary search of the value order costs three dependent cache misses per step (the order, the row's key, the
/// string), ~14 steps over the 16,000 emails of scale m and ~21 over 1.3M titles: 14.5% of an input binding of
/// 100 emails (perf, scale m, `memcmp` and `partition_point`). Integer values keep their [`Directory`].
#[derive(Debug)]
struct ValueHash {
    table: hashbrown::HashTable<u32>,
    state: foldhash::fast::FixedState,
}

impl ValueHash {
    /// The table of the `n` sorted values `key(0..n)` (equal values adjacent), each distinct value at its first
    /// position.
    fn build<'a>(n: usize, key: impl Fn(usize) -> &'a IKey) -> ValueHash {
        use std::hash::BuildHasher;
        let state = foldhash::fast::FixedState::default();
        let hash = |p: usize| match key(p) {
            IKey::Text(t) => state.hash_one(&**t),
            other => state.hash_one(other),
        };
        let mut table = hashbrown::HashTable::with_capacity(n);
        for p in 0..n {
            if p == 0 || key(p) != key(p - 1) {
                table.insert_unique(hash(p), p as u32, |&q| hash(q as usize));
            }
        }
        ValueHash { table, state }
    }

    /// The first position whose value is the text `t` (`key` as in [`ValueHash::build`]), or None.
    fn first<'a>(&self, t: &str, key: impl Fn(usize) -> &'a IKey) -> Option<usize> {
        use std::hash::BuildHasher;
        let h = self.state.hash_one(t);
        self.table.find(h, |&p| matches!(key(p as usize), IKey::Text(k) if **k == *t)).map(|&p| p as usize)
    }

    fn bytes(&self) -> usize {
        self.table.allocation_size()
    }
}

/// A filter of the entities an attribute's novelty names: one bit per entity id modulo [`TOUCHED_BITS`], set for
/// every entity that has an entry in `added` or `gone`, never cleared until a merge empties the novelty (so a set bit
/// may be a false positive, never a missed entity). A read of an entity whose bit is clear takes its base rows as
/// they are and skips the novelty's maps: with novelty, every base row cost two lookups in them (`gone`, `added`)
/// and a third for the entity's assertions, each a descent of a persistent B-tree (3% of a q1/q2/pull mix at four
/// clients, measured 2026-12-04). Entids are allocated densely per partition, so the entities of a novelty of up to a
/// few thousand share few bits; at [`MERGE_AT`] entries about two in five bits are set.
#[derive(Clone, Debug)]
struct Touched(Box<[u64; TOUCHED_BITS / 64]>);

/// Bits of a [`Touched`] filter (8 KiB, copied once per apply that changes the attribute, which is cheaper than
/// the lookups it saves a single read of a few rows).
const TOUCHED_BITS: usize = 1 << 16;

impl Default for Touched {
    fn default() -> Self {
        Touched(Box::new([0; TOUCHED_BITS / 64]))
    }
}

impl Touched {
    fn slot(e: i64) -> (usize, u64) {
        let bit = (e as u64 as usize) & (TOUCHED_BITS - 1);
        (bit / 64, 1u64 << (bit % 64))
    }

    fn set(&mut self, e: i64) {
        let (w, m) = Touched::slot(e);
        self.0[w] |= m;
    }

    /// Whether `e` may have an entry in the novelty (false: it has none).
    fn may_hold(&self, e: i64) -> bool {
        let (w, m) = Touched::slot(e);
        self.0[w] & m != 0
    }
}

/// A hint to the processor that the cache line holding `p` will be read soon; it changes no result (a prefetch
/// never faults, whatever the address). x86-64 only; elsewhere it does nothing.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally visible and does not fault on any address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The first position in `lo..hi` where `below` turns false (`below` true then false over the range).
fn lower(mut lo: usize, mut hi: usize, below: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// An attribute's datoms as read from its table: sorted by `(e, v)`.
#[derive(Debug, Default)]
pub struct Base {
    e: Vec<i64>,
    tx: Vec<i64>,
    v: Vec<IKey>,
    /// Row numbers sorted by `(v, e)`, for attributes with a value order.
    by_v: Option<Vec<u32>>,
    /// Row numbers sorted by tx, for `since` reads: the datoms asserted after a tx are a suffix of it
    /// ([`AttrIndex::since_datoms`]).
    by_tx: Vec<u32>,
    /// Directories over `e` and, for integer values in the value order, over `v`.
    e_dir: Option<Directory>,
    v_dir: Option<Directory>,
    /// For text values in the value order: the first position of each distinct value, found by its hash.
    v_hash: Option<ValueHash>,
    /// Bytes held, counted once when built.
    held: usize,
}

impl Base {
    fn from_rows(mut rows: Vec<(i64, IKey, i64)>, value_order: bool) -> Base {
        rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut base = Base {
            e: rows.iter().map(|r| r.0).collect(),
            tx: rows.iter().map(|r| r.2).collect(),
            v: rows.into_iter().map(|r| r.1).collect(),
            ..Default::default()
        };
        if value_order {
            let mut order: Vec<u32> = (0..base.e.len() as u32).collect();
            order.sort_by(|&a, &b| {
                (&base.v[a as usize], base.e[a as usize]).cmp(&(&base.v[b as usize], base.e[b as usize]))
            });
            base.by_v = Some(order);
        }
        let mut by_tx: Vec<u32> = (0..base.e.len() as u32).collect();
        by_tx.sort_by_key(|&r| base.tx[r as usize]);
        base.by_tx = by_tx;
        base.finish();
        base
    }

    /// Builds the directories and counts the bytes held, once the rows and the value order are in place.
    fn finish(&mut self) {
        self.e_dir = Directory::build(self.e.len(), |p| self.e[p]);
        self.v_dir = match &self.by_v {
            Some(order) if self.v.iter().all(|v| matches!(v, IKey::Int(_))) => {
                Directory::build(order.len(), |p| int_of(&self.v[order[p] as usize]))
            }
            _ => None,
        };
        self.v_hash = match &self.by_v {
            Some(order) if self.v.iter().all(|v| matches!(v, IKey::Text(_))) => {
                Some(ValueHash::build(order.len(), |p| &self.v[order[p] as usize]))
            }
            _ => None,
        };
        let text: usize = self.v.iter().map(|v| if let IKey::Text(s) = v { s.len() } else { 0 }).sum();
        self.held = self.e.len() * (16 + 24)
            + text
            + self.by_v.as_ref().map_or(0, |o| o.len() * 4)
            + self.by_tx.len() * 4
            + self.e_dir.as_ref().map_or(0, Directory::bytes)
            + self.v_dir.as_ref().map_or(0, Directory::bytes)
            + self.v_hash.as_ref().map_or(0, ValueHash::bytes);
    }

    fn bytes(&self) -> usize {
        self.held
    }

    fn rows_of(&self, e: i64) -> std::ops::Range<usize> {
        let lo = match &self.e_dir {
            Some(d) => d.lower_bound(e, |p| self.e[p]),
            None => self.e.partition_point(|x| *x < e),
        };
        let mut hi = lo;
        while hi < self.e.len() && self.e[hi] == e {
            hi += 1;
        }
        lo..hi
    }

    /// Prefetch hints for what reading the rows of the entities `es` will touch, issued for all of them before
    /// any is read, in the three stages of [`Base::prefetch_stage`]. A lookup is three to four dependent cache
    /// misses (directory, entity, value, string), and a query that reads an attribute of many entities (q2's 81
    /// issues) took them one after another; issued together, the misses overlap.
    fn prefetch_rows(&self, es: &[i64]) {
        for stage in 0..PREFETCH_STAGES {
            for &e in es {
                self.prefetch_stage(e, stage);
            }
        }
    }

    /// One stage of the prefetch hints for entity `e`'s rows: 0, its directory entry; 1, the first row that
    /// entry's block gives (guessed from the entity's place in its block, exact for an attribute with one datom
    /// per densely allocated entity); 2, the reference counts of a text value there (which cloning the value
    /// writes). Each stage reads what the one before fetched, so the stages of many lookups are issued stage by
    /// stage. Without a directory (sparse entids) there is nothing to hint.
    fn prefetch_stage(&self, e: i64, stage: usize) {
        let Some(d) = &self.e_dir else { return };
        let Some(b) = d.entry_of(e) else { return };
        if stage == 0 {
            prefetch(d.starts.as_ptr().wrapping_add(b));
            return;
        }
        let (Some(&lo), Some(&hi)) = (d.starts.get(b), d.starts.get(b + 1)) else { return };
        let (lo, hi) = (lo as usize, hi as usize);
        let within = ((e as i128 - d.min as i128) & ((1 << BLOCK_BITS) - 1)) as usize;
        let p = lo + ((within * (hi - lo)) >> BLOCK_BITS);
        if p >= self.e.len() {
            return;
        }
        if stage == 1 {
            prefetch(&self.e[p]);
            prefetch(&self.v[p]);
        } else if let IKey::Text(t) = &self.v[p] {
            prefetch(t.as_ptr().wrapping_sub(16));
        }
    }

    /// The first position of the value order whose value is `v`, when there is one; when there is none, a
    /// position whose value is not `v` (the first one greater, or, for text values, the order's end).
    fn first_of_value(&self, order: &[u32], v: &IKey) -> usize {
        match (&self.v_dir, &self.v_hash, v) {
            (Some(d), _, IKey::Int(k)) => d.lower_bound(*k, |p| int_of(&self.v[order[p] as usize])),
            (_, Some(h), IKey::Text(t)) => h.first(t, |p| &self.v[order[p] as usize]).unwrap_or(order.len()),
            _ => order.partition_point(|&r| self.v[r as usize] < *v),
        }
    }
}

/// How many rows ahead [`AttrIndex::since_datoms`] hints the rows it will read.
const SINCE_AHEAD: usize = 16;

/// The integer of an integer key (the directories are built only over integer keys).
fn int_of(k: &IKey) -> i64 {
    match k {
        IKey::Int(i) => *i,
        _ => i64::MIN,
    }
}

/// Two runs of row numbers, each sorted by `key`, merged into one (a row of `old` before an equal one of `fresh`).
fn merge_orders<K: Ord>(old: impl Iterator<Item = u32>, fresh: Vec<u32>, key: impl Fn(u32) -> K) -> Vec<u32> {
    let mut out = Vec::with_capacity(old.size_hint().0 + fresh.len());
    let mut fresh = fresh.into_iter().peekable();
    for r in old {
        while let Some(f) = fresh.next_if(|f| key(*f) < key(r)) {
            out.push(f);
        }
        out.push(r);
    }
    out.extend(fresh);
    out
}

/// One attribute: its base and the novelty since.
#[derive(Clone, Debug)]
pub struct AttrIndex {
    base: Arc<Base>,
    added: OrdMap<(i64, IKey), i64>,
    added_by_v: OrdSet<(IKey, i64)>,
    /// `added` ordered by `(tx, e, v)`, for `since` reads.
    added_by_tx: OrdSet<(i64, i64, IKey)>,
    gone: OrdSet<(i64, IKey)>,
    /// The entities `added` and `gone` name (a filter: see [`Touched`]).
    touched: Touched,
    value_order: bool,
    /// The retracted assertions (the `hist_` table): `(e, v, tx, retracted_tx)` for as-of reads, in sorted runs,
    /// largest (oldest) first: the run read with the base, then one run per apply's retractions (a history row
    /// never changes once written, so it needs no place in the novelty's maps), two neighbours merged whenever
    /// the younger is at least half the older (so a row is copied O(log n) times and no apply or merge copies the
    /// whole history; see [`AttrIndex::with_history`]).
    hist: Vec<Arc<Hist>>,
    /// A merge of the base with the novelty running in the background (see [`AttrIndex::with_ops`]), and the
    /// batches of operations applied since it took its copy, replayed onto its base when it is installed.
    merging: Option<(Arc<Merge>, Vec<Batch>)>,
    /// The runs hold every history row retracted after this tx (i64::MIN: every row): older runs are dropped
    /// once the history passes [`AttrIndex::history_bound`], and an as-of read before it takes the general path
    /// (see [`AttrIndex::serves_as_of`]).
    horizon: i64,
}

/// The operations of one apply, kept while a merge runs.
type Batch = Arc<Vec<Op>>;

/// A background merge: the new base once it is done. In the unit tests the copy is kept instead and merged only
/// when the attribute has taken two more applies, so that installing always replays operations.
#[derive(Debug, Default)]
struct Merge {
    done: Mutex<Option<Base>>,
    /// The merge panicked: the next apply merges at once instead.
    failed: std::sync::atomic::AtomicBool,
    #[cfg(test)]
    frozen: Mutex<Option<AttrIndex>>,
}

/// Bases of this many rows or more are merged in the background; smaller ones (a merge of well under a
/// millisecond) at once. One in the unit tests, so that every merge of a non-empty base takes the background path.
#[cfg(not(test))]
const BACKGROUND_MERGE_ROWS: usize = 65_536;
#[cfg(test)]
const BACKGROUND_MERGE_ROWS: usize = 1;

#[cfg(test)]
thread_local! {
    /// Set by a unit test that runs the merges on rayon's pool, as the extension does, instead of the stand-in.
    static REAL_MERGE_THREADS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// History rows an attribute keeps at least before its oldest runs are dropped (see [`AttrIndex::history_bound`]).
#[cfg(not(test))]
const HISTORY_MIN_ROWS: usize = 65_536;
#[cfg(test)]
const HISTORY_MIN_ROWS: usize = 256;

/// `(e, v, tx, retracted_tx)`: a history row (and, with `retracted_tx` unused, a row read from `cur_`).
type HistRow = (i64, IKey, i64, i64);

/// History rows of one attribute, sorted by `(e, v, tx)`, with an order by `(v, e)` for value-ordered attributes.
#[derive(Debug, Default)]
pub struct Hist {
    rows: Vec<(i64, IKey, i64, i64)>,
    by_v: Option<Vec<u32>>,
    /// Bytes held, counted once when built: 48 per row (three integers and a value), string bytes, 4 per row of
    /// the value order.
    held: usize,
}

impl Hist {
    fn counted(rows: Vec<HistRow>, by_v: Option<Vec<u32>>) -> Hist {
        let text: usize = rows.iter().map(|r| if let IKey::Text(s) = &r.1 { s.len() } else { 0 }).sum();
        let held = rows.len() * 48 + text + by_v.as_ref().map_or(0, |o| o.len() * 4);
        Hist { rows, by_v, held }
    }

    fn new(mut rows: Vec<(i64, IKey, i64, i64)>, value_order: bool) -> Hist {
        rows.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
        let by_v = value_order.then(|| {
            let mut o: Vec<u32> = (0..rows.len() as u32).collect();
            o.sort_by(|&a, &b| {
                let (x, y) = (&rows[a as usize], &rows[b as usize]);
                (&x.1, x.0).cmp(&(&y.1, y.0))
            });
            o
        });
        Hist::counted(rows, by_v)
    }

    /// The key of row `r` in the value order: `(v, e, tx)` (the order [`Hist::new`]'s stable sort by `(v, e)` gives
    /// rows sorted by `(e, v, tx)`).
    fn value_key(rows: &[HistRow], r: u32) -> (&IKey, i64, i64) {
        let row = &rows[r as usize];
        (&row.1, row.0, row.2)
    }

    /// Two runs merged into one: a walk over both rows (sorted by `(e, v, tx)`; no row is in both, a datom
    /// assertion is retracted once) and over both value orders.
    fn merge(older: &Hist, younger: &Hist) -> Hist {
        let mut rows: Vec<HistRow> = Vec::with_capacity(older.rows.len() + younger.rows.len());
        let (mut from_older, mut from_younger) = (Vec::with_capacity(older.rows.len()), Vec::new());
        let mut young = younger.rows.iter().peekable();
        for row in &older.rows {
            while let Some(y) = young.next_if(|y| (y.0, &y.1, y.2) < (row.0, &row.1, row.2)) {
                from_younger.push(rows.len() as u32);
                rows.push(y.clone());
            }
            from_older.push(rows.len() as u32);
            rows.push(row.clone());
        }
        for y in young {
            from_younger.push(rows.len() as u32);
            rows.push(y.clone());
        }
        let by_v = match (&older.by_v, &younger.by_v) {
            (Some(o), Some(y)) => {
                let fresh: Vec<u32> = y.iter().map(|r| from_younger[*r as usize]).collect();
                Some(merge_orders(o.iter().map(|r| from_older[*r as usize]), fresh, |r| Hist::value_key(&rows, r)))
            }
            _ => None,
        };
        Hist::counted(rows, by_v)
    }
}

/// Whether an assertion made in `tx` and retracted in `rtx` (None: not retracted) is visible as of `t`.
fn visible(tx: i64, rtx: Option<i64>, as_of: Option<i64>) -> bool {
    match as_of {
        None => rtx.is_none(),
        Some(t) => tx <= t && rtx.is_none_or(|r| t < r),
    }
}

impl AttrIndex {
    /// The values of entity `e` now (`as_of` None) or as of tx `as_of`.
    pub fn values(&self, e: i64, as_of: Option<i64>, out: &mut Vec<IKey>) {
        // with no novelty for `e` (most attributes between merges, most entities always) a base row needs no
        // lookups in it; a read of now needs no tx either (a base row is current), which spares a cache miss per
        // row at scale
        let plain = !self.novelty_may_hold(e);
        for r in self.base.rows_of(e) {
            let v = &self.base.v[r];
            if as_of.is_some() && !visible(self.base.tx[r], None, as_of) {
                continue;
            }
            if !plain {
                let key = (e, v.clone());
                if self.gone.contains(&key) || self.added.contains_key(&key) {
                    continue;
                }
            }
            out.push(v.clone());
        }
        if !plain {
            for ((ae, v), tx) in self.added.range((e, IKey::Int(i64::MIN))..) {
                if *ae != e {
                    break;
                }
                if visible(*tx, None, as_of) {
                    out.push(v.clone());
                }
            }
        }
        if as_of.is_none() {
            return;
        }
        for run in &self.hist {
            let h = &run.rows;
            for (he, v, tx, rtx) in &h[h.partition_point(|r| r.0 < e)..] {
                if *he != e {
                    break;
                }
                if visible(*tx, Some(*rtx), as_of) {
                    out.push(v.clone());
                }
            }
        }
    }

    /// The current values of entity `e` with the tx that asserted each (what the transactor checks a transaction
    /// against).
    pub fn current(&self, e: i64, out: &mut Vec<(IKey, i64)>) {
        self.each_current(e, |v, tx| out.push((v.clone(), tx)));
    }

    /// Each current value of entity `e` with the tx that asserted it, given to `f`: the base's rows less those the
    /// novelty retracted or asserted again, then the novelty's assertions.
    fn each_current(&self, e: i64, mut f: impl FnMut(&IKey, i64)) {
        let plain = !self.novelty_may_hold(e);
        for r in self.base.rows_of(e) {
            let v = &self.base.v[r];
            if !plain {
                let key = (e, v.clone());
                if self.gone.contains(&key) || self.added.contains_key(&key) {
                    continue;
                }
            }
            f(v, self.base.tx[r]);
        }
        if plain {
            return;
        }
        for ((ae, v), tx) in self.added.range((e, IKey::Int(i64::MIN))..) {
            if *ae != e {
                break;
            }
            f(v, *tx);
        }
    }

    /// Whether the novelty may hold an entry of entity `e` (false: it holds none, see [`Touched`]).
    fn novelty_may_hold(&self, e: i64) -> bool {
        !(self.gone.is_empty() && self.added.is_empty()) && self.touched.may_hold(e)
    }

    /// Prefetch hints for reading the values of the entities `es` (see [`Base::prefetch_rows`]).
    pub fn prefetch(&self, es: &[i64]) {
        self.base.prefetch_rows(es);
    }

    /// The entities whose value is `v` now or as of tx `as_of` (None when the attribute has no value order).
    pub fn entities(&self, v: &IKey, as_of: Option<i64>, out: &mut Vec<i64>) -> Option<()> {
        self.entities_at(v, as_of, None, out)
    }

    /// Whether more than `limit` datoms of the sorted base hold value `v` (novelty not counted): one lookup of the
    /// value's first position in the value order and a look `limit` rows on, before any entity is read. False
    /// without a value order.
    pub fn base_holds_more_than(&self, v: &IKey, limit: usize) -> bool {
        let Some(order) = self.base.by_v.as_ref() else { return false };
        let lo = self.base.first_of_value(order, v);
        order.get(lo + limit).is_some_and(|&r| self.base.v[r as usize] == *v)
    }

    /// The entities whose current value `v` was asserted after tx `since` (None when the attribute has no value
    /// order).
    pub fn entities_since(&self, v: &IKey, since: i64, out: &mut Vec<i64>) -> Option<()> {
        self.entities_at(v, None, Some(since), out)
    }

    /// [`AttrIndex::entities`] as of `as_of`, keeping only assertions after `since` (never both: a since read is
    /// of now).
    fn entities_at(&self, v: &IKey, as_of: Option<i64>, since: Option<i64>, out: &mut Vec<i64>) -> Option<()> {
        let order = self.base.by_v.as_ref()?;
        let after = |tx: i64| since.is_none_or(|s| tx > s);
        let (vs, es) = (&self.base.v, &self.base.e);
        let lo = self.base.first_of_value(order, v);
        for &r in &order[lo..] {
            let r = r as usize;
            if vs[r] != *v {
                break;
            }
            let e = es[r];
            if (!self.novelty_may_hold(e)
                || (!self.gone.contains(&(e, v.clone())) && !self.added.contains_key(&(e, v.clone()))))
                && (as_of.is_none() || visible(self.base.tx[r], None, as_of))
                && after(self.base.tx[r])
            {
                out.push(e);
            }
        }
        for (av, e) in self.added_by_v.range((v.clone(), i64::MIN)..) {
            if av != v {
                break;
            }
            // a read of now needs no tx, unless it keeps to the assertions after `since`
            if (as_of.is_none() && since.is_none())
                || self.added.get(&(*e, v.clone())).is_some_and(|tx| visible(*tx, None, as_of) && after(*tx))
            {
                out.push(*e);
            }
        }
        if as_of.is_none() {
            return Some(());
        }
        for run in &self.hist {
            let (h, horder) = (&run.rows, run.by_v.as_ref()?);
            for &r in &horder[horder.partition_point(|&r| h[r as usize].1 < *v)..] {
                let (he, hv, tx, rtx) = &h[r as usize];
                if hv != v {
                    break;
                }
                if visible(*tx, Some(*rtx), as_of) {
                    out.push(*he);
                }
            }
        }
        // an entity can hold the value in two periods: once as of any one moment
        out.sort_unstable();
        out.dedup();
        Some(())
    }

    /// The current datoms `(e, v)` asserted after tx `since` (Datomic's `since` database: the datoms of now whose
    /// tx is later than `since`), each given to `f` in tx order: a suffix of the base's tx order less the rows
    /// retracted or asserted again since the base was read, then the novelty's assertions after `since`. None
    /// when there are more than `max` (the caller leaves such a scan to DuckDB): the base's count is known from the
    /// suffix before any row is read.
    pub fn since_datoms(&self, since: i64, max: usize, mut f: impl FnMut(i64, &IKey)) -> Option<()> {
        let b = &self.base;
        let lo = b.by_tx.partition_point(|&r| b.tx[r as usize] <= since);
        let suffix = &b.by_tx[lo..];
        if suffix.len() > max {
            return None;
        }
        for (k, &r) in suffix.iter().enumerate() {
            // the rows of a tx order are scattered over the arrays: hint the ones a few steps ahead
            if let Some(&ahead) = suffix.get(k + SINCE_AHEAD) {
                prefetch(&b.e[ahead as usize]);
                prefetch(&b.v[ahead as usize]);
            }
            let (e, v) = (b.e[r as usize], &b.v[r as usize]);
            if self.novelty_may_hold(e) {
                let key = (e, v.clone());
                if self.gone.contains(&key) || self.added.contains_key(&key) {
                    continue;
                }
            }
            f(e, v);
        }
        let mut n = suffix.len();
        for (_, e, v) in self.added_by_tx.range((since.saturating_add(1), i64::MIN, IKey::Int(i64::MIN))..) {
            n += 1;
            if n > max {
                return None;
            }
            f(*e, v);
        }
        Some(())
    }

    /// [`AttrIndex::values`] of entity `e` in the database `plan` reads: now, as of its tx, or since its tx.
    fn values_in(&self, plan: &EntityPlan, e: i64, out: &mut Vec<IKey>) {
        match plan.since {
            Some(since) => self.values_since(e, since, out),
            None => self.values(e, plan.as_of, out),
        }
    }

    /// The current values of entity `e` asserted after tx `since` (see [`AttrIndex::since_datoms`]).
    pub fn values_since(&self, e: i64, since: i64, out: &mut Vec<IKey>) {
        self.each_current(e, |v, tx| {
            if tx > since {
                out.push(v.clone());
            }
        });
    }

    /// Current datoms: the base's less those retracted or asserted again since, plus the novelty's.
    fn current_datoms(&self) -> usize {
        if self.gone.is_empty() && self.added.is_empty() {
            return self.base.e.len();
        }
        let b = &self.base;
        let kept = (0..b.e.len())
            .filter(|&r| {
                let key = (b.e[r], b.v[r].clone());
                !self.gone.contains(&key) && !self.added.contains_key(&key)
            })
            .count();
        kept + self.added.len()
    }

    /// History rows held in the sorted runs (not counting those retracted since the last merge).
    fn history_rows(&self) -> usize {
        self.hist.iter().map(|h| h.rows.len()).sum()
    }

    fn novelty(&self) -> usize {
        self.added.len() + self.gone.len()
    }

    fn bytes(&self) -> usize {
        self.base.bytes() + self.novelty() * 96 + TOUCHED_BITS / 8 + self.hist.iter().map(|h| h.held).sum::<usize>()
    }

    /// This attribute with one transaction's datoms applied: assertions `adds`, retractions `retracts` (each
    /// with the tx that asserted the retracted datom).
    #[cfg(test)]
    fn with(&self, adds: &[(i64, IKey)], retracts: &[(i64, IKey, i64)], tx: i64) -> AttrIndex {
        let ops: Vec<Op> = retracts
            .iter()
            .map(|(e, v, asserted)| Op::Retract(*e, v.clone(), *asserted, tx))
            .chain(adds.iter().map(|(e, v)| Op::Add(*e, v.clone(), tx)))
            .collect();
        self.with_ops(ops)
    }

    /// This attribute with `ops` applied in order (the datoms of one or more consecutive transactions). The
    /// novelty is copied once for the whole sequence, however many transactions it holds.
    ///
    /// Merges run beside the writer (Datomic's indexing job, an LSM tree's compaction): when the novelty passes
    /// its bound, a large attribute's base and novelty as they are now (persistent, so the copy is O(1)) are
    /// merged on another thread ([`AttrIndex::start_merge`]), and the writer goes on adding to the novelty, keeping each batch it adds
    /// meanwhile. The first apply after the merge is done installs it: the new base, the history runs as they
    /// are, and the kept batches replayed into an empty novelty (the same reads as the base and novelty it
    /// replaces: a base row retracted or asserted again since is in the novelty either way). Readers never see a
    /// merge in flight; they read the base and the novelty, which hold everything until the install. Measured on
    /// `mentat_transact_many` of 1,000 single-datom updates at scale s (storage/README.md, 2026-12-03): merges of
    /// `:issue/state` took 20 to 38 ms of every eighth to sixteenth call on the writer's path.
    fn with_ops(&self, ops: Vec<Op>) -> AttrIndex {
        let mut next = self.clone();
        if let Some((merge, since)) = &self.merging {
            #[cfg(test)]
            if since.len() >= 2 {
                if let Some(frozen) = merge.frozen.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    *merge.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(frozen.merged_base());
                }
            }
            let done = merge.done.lock().unwrap_or_else(|p| p.into_inner()).take();
            if merge.failed.load(AtomicOrdering::Acquire) {
                next = self.merged();
            } else if let Some(base) = done {
                let mut fresh = AttrIndex::new(base, Arc::new(Hist::default()), self.value_order);
                fresh.hist = self.hist.clone();
                fresh.horizon = self.horizon;
                for batch in since {
                    fresh.apply_novelty(batch, &mut Vec::new());
                }
                next = fresh;
            }
        }
        let mut retracted: Vec<HistRow> = Vec::new();
        next.apply_novelty(&ops, &mut retracted);
        if !retracted.is_empty() {
            next.with_history(Hist::new(retracted, next.value_order));
        }
        if let Some((_, since)) = &mut next.merging {
            since.push(Arc::new(ops));
            return next;
        }
        // past MERGE_AT entries or an eighth of a large attribute (so that a merge, a pass over the base and the
        // novelty, costs O(1) per novelty entry however large the attribute: at scale m, 1.3M datoms of
        // :issue/state merged every 32,768 entries cost 34 ms per 2,000-entry group on average), or past an eighth
        // of a small one (an attribute read in while it was small, such as one a bulk load's lookup refs name:
        // merging it as it grows keeps its reads on the sorted arrays, and the merges, each a pass over an
        // attribute at least 8x the last novelty, cost O(n log n) over the load). The history does not count: a
        // merge leaves it alone (it once did not, and an attribute of 13,000 datoms with 100,000 history rows was
        // merged on every group of updates, each merge 40 ms).
        let n = next.novelty();
        let size = next.base.e.len();
        if n > MERGE_AT.max(size / 8) || (n >= 64 && n * 8 > size) {
            if size < BACKGROUND_MERGE_ROWS {
                return next.merged();
            }
            let merge = Arc::new(Merge::default());
            next.start_merge(&merge);
            next.merging = Some((merge, Vec::new()));
        }
        next
    }

    /// Starts merging this attribute's base and novelty into a new base on rayon's pool, which leaves it in
    /// `merge`. Not a thread of its own per merge, as first built (fe51fef): glibc's malloc gives a new thread an
    /// arena of its own (up to eight per core), and each merge's new arrays went to one while the old ones were
    /// freed in another, where the free memory stayed; in 4-minute soaks at scale s (`benchmarks/py/soak.py`,
    /// 2026-12-03) the arenas' free memory grew from 108-122 to 185-187 MB with a thread per merge and stayed at
    /// 87 to 94 MB on the pool's threads.
    fn start_merge(&self, merge: &Arc<Merge>) {
        let frozen = self.clone();
        #[cfg(test)]
        if !REAL_MERGE_THREADS.with(|real| real.get()) {
            *merge.frozen.lock().unwrap_or_else(|p| p.into_inner()) = Some(frozen);
            return;
        }
        let slot = merge.clone();
        rayon::spawn(move || match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| frozen.merged_base())) {
            Ok(base) => *slot.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(base),
            Err(_) => slot.failed.store(true, AtomicOrdering::Release),
        });
    }

    /// Applies `ops` to the novelty maps, pushing each retraction's history row onto `retracted`.
    fn apply_novelty(&mut self, ops: &[Op], retracted: &mut Vec<HistRow>) {
        for op in ops {
            match op {
                Op::Retract(e, v, asserted, tx) => {
                    self.touched.set(*e);
                    if let Some(was) = self.added.remove(&(*e, v.clone())) {
                        self.added_by_v.remove(&(v.clone(), *e));
                        self.added_by_tx.remove(&(was, *e, v.clone()));
                    }
                    self.gone.insert((*e, v.clone()));
                    retracted.push((*e, v.clone(), *asserted, *tx));
                }
                Op::Add(e, v, tx) => {
                    self.touched.set(*e);
                    if let Some(was) = self.added.insert((*e, v.clone()), *tx) {
                        self.added_by_tx.remove(&(was, *e, v.clone()));
                    }
                    self.added_by_tx.insert((*tx, *e, v.clone()));
                    if self.value_order {
                        self.added_by_v.insert((v.clone(), *e));
                    }
                }
            }
        }
    }

    /// Adds `run` (retractions of one apply) to the history runs, merging neighbours of comparable size, then
    /// drops the oldest runs while the history is past [`AttrIndex::history_bound`].
    fn with_history(&mut self, run: Hist) {
        self.hist.push(Arc::new(run));
        while let [.., older, younger] = &self.hist[..] {
            if younger.rows.len() * 2 < older.rows.len() {
                break;
            }
            let run = Hist::merge(older, younger);
            self.hist.truncate(self.hist.len() - 2);
            self.hist.push(Arc::new(run));
        }
        let bound = self.history_bound();
        while self.history_rows() > bound {
            let oldest = self.hist.remove(0);
            self.horizon = oldest.rows.iter().map(|r| r.3).fold(self.horizon, i64::max);
        }
    }

    /// History rows this attribute keeps in memory: as many as its current datoms, and at least
    /// [`HISTORY_MIN_ROWS`]. A store whose writer keeps changing the same datoms (a label asserted and retracted
    /// again, a state updated) adds history without bound while its current state keeps its size; the index keeps
    /// the recent part, which as-of reads of the recent past use, and leaves older as-of reads to the tables, as
    /// Datomic's memory index holds the novelty and leaves the rest to storage. The runs are ordered by the time of
    /// their retractions (each apply adds one run; only neighbours merge), so dropping the oldest runs leaves every
    /// row retracted after the new horizon. Measured in the soak (`benchmarks/py/soak.py`, 2026-12-03): a writer
    /// labelling and unlabelling issues retracted 1.9M labels in 10 minutes, and the index grew from 58 to 143 MB.
    fn history_bound(&self) -> usize {
        history_bound_for(self.base.e.len())
    }

    /// Whether this attribute's index answers reads as of `as_of` (None: now): every history row that can be
    /// visible then is held.
    pub fn serves_as_of(&self, as_of: Option<i64>) -> bool {
        as_of.is_none_or(|t| t >= self.horizon)
    }

    /// The base and the novelty merged into a new base (the history runs are kept as they are): both are sorted
    /// already (the base by `(e, v)` with its value order by `(v, e)`, the novelty's maps by their keys), so this
    /// is a walk over sorted runs, with no lookup per base row and no sort of anything but the novelty. At scale s
    /// after a few hundred groups of 1,000 updates, a merge that looked up every base row in the novelty and sorted
    /// the whole history again took 90 to 110 ms; see storage/README.md.
    fn merged(&self) -> AttrIndex {
        let mut next = AttrIndex::new(self.merged_base(), Arc::new(Hist::default()), self.value_order);
        next.hist = self.hist.clone();
        next.horizon = self.horizon;
        next
    }

    /// The new base of [`AttrIndex::merged`].
    fn merged_base(&self) -> Base {
        let b = &self.base;
        let n = b.e.len() + self.added.len();
        let mut base = Base {
            e: Vec::with_capacity(n),
            tx: Vec::with_capacity(n),
            v: Vec::with_capacity(n),
            ..Default::default()
        };
        let push = |base: &mut Base, e: i64, v: IKey, tx: i64| {
            base.e.push(e);
            base.v.push(v);
            base.tx.push(tx);
            base.e.len() as u32 - 1
        };
        // where each base row went (u32::MAX: dropped) and where each novelty assertion went
        let mut moved = vec![u32::MAX; b.e.len()];
        let mut fresh: Vec<u32> = Vec::with_capacity(self.added.len());
        let mut added = self.added.iter().peekable();
        let mut gone = self.gone.iter().peekable();
        for (r, to) in moved.iter_mut().enumerate() {
            let (e, v) = (b.e[r], &b.v[r]);
            while let Some(((ae, av), tx)) = added.next_if(|((ae, av), _)| (*ae, av) < (e, v)) {
                fresh.push(push(&mut base, *ae, av.clone(), *tx));
            }
            while gone.next_if(|(ge, gv)| (*ge, gv) < (e, v)).is_some() {}
            // asserted again since (the novelty's assertion takes its place) or retracted since
            let replaced = added.peek().is_some_and(|((ae, av), _)| *ae == e && av == v);
            let retracted = gone.peek().is_some_and(|(ge, gv)| *ge == e && gv == v);
            if !replaced && !retracted {
                *to = push(&mut base, e, v.clone(), b.tx[r]);
            }
        }
        for ((e, v), tx) in added {
            fresh.push(push(&mut base, *e, v.clone(), *tx));
        }
        // the tx order: the base's rows that stay, in their order, merged with the novelty's by tx (all of which are
        // later than every base row but the order does not rely on it)
        let mut fresh_tx = fresh.clone();
        fresh_tx.sort_by_key(|&r| (base.tx[r as usize], r));
        base.by_tx =
            merge_orders(b.by_tx.iter().map(|r| moved[*r as usize]).filter(|r| *r != u32::MAX), fresh_tx, |r| {
                base.tx[r as usize]
            });
        if let (true, Some(old)) = (self.value_order, &b.by_v) {
            let at = |r: u32| (&base.v[r as usize], base.e[r as usize]);
            fresh.sort_unstable_by(|x, y| at(*x).cmp(&at(*y)));
            base.by_v =
                Some(merge_orders(old.iter().map(|r| moved[*r as usize]).filter(|r| *r != u32::MAX), fresh, at));
        }
        base.finish();
        base
    }

    fn new(base: Base, hist: Arc<Hist>, value_order: bool) -> AttrIndex {
        AttrIndex {
            base: Arc::new(base),
            added: OrdMap::new(),
            added_by_v: OrdSet::new(),
            added_by_tx: OrdSet::new(),
            gone: OrdSet::new(),
            touched: Touched::default(),
            value_order,
            hist: if hist.rows.is_empty() { Vec::new() } else { vec![hist] },
            merging: None,
            horizon: i64::MIN,
        }
    }
}

/// The indexed attributes of a store at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    attrs: HashMap<Entid, Arc<AttrIndex>>,
    /// Attributes that would pass the memory budget: their queries take the general path.
    refused: HashSet<Entid>,
}

impl Snapshot {
    pub fn attr(&self, a: Entid) -> Option<&AttrIndex> {
        self.attrs.get(&a).map(|a| a.as_ref())
    }

    /// Whether attribute `a` was refused (past the memory budget, or of a type the index does not hold).
    pub fn is_refused(&self, a: Entid) -> bool {
        self.refused.contains(&a)
    }
}

/// A store's entity index (see the module docs).
pub struct EntityIndex {
    snapshot: RwLock<Arc<Snapshot>>,
    /// Attributes being read in the background.
    building: Mutex<HashSet<Entid>>,
    /// Attributes the transactor asks to have read in (see [`EntityIndex::want`]).
    wanted: Mutex<HashSet<Entid>>,
    bytes: AtomicUsize,
}

impl Default for EntityIndex {
    fn default() -> EntityIndex {
        EntityIndex {
            snapshot: RwLock::new(Arc::default()),
            building: Mutex::default(),
            wanted: Mutex::default(),
            bytes: AtomicUsize::new(0),
        }
    }
}

/// What the index holds of one attribute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttrStats {
    pub attr: Entid,
    /// Current datoms.
    pub datoms: usize,
    /// History rows (retracted assertions) held for as-of reads.
    pub history: usize,
    /// Entries not yet merged into the sorted base.
    pub novelty: usize,
    /// Bytes held (arrays, strings, value order, novelty).
    pub bytes: usize,
    /// The attribute is left out (past the memory budget, or of a type the index does not hold).
    pub refused: bool,
    /// The attribute is being read in the background.
    pub reading: bool,
}

/// The budget of every entity index of the process together, in bytes: `MENTAT_ENTITY_INDEX_MB` (default 4096).
pub fn budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        std::env::var("MENTAT_ENTITY_INDEX_MB").ok().and_then(|s| s.trim().parse::<usize>().ok()).unwrap_or(4096) << 20
    })
}

static TOTAL: AtomicUsize = AtomicUsize::new(0);

impl EntityIndex {
    /// The attributes indexed now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Bytes the index holds (an estimate: arrays, strings, novelty).
    pub fn bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    fn set_bytes(&self, snap: &Snapshot) {
        let now: usize = snap.attrs.values().map(|a| a.bytes()).sum();
        let before = self.bytes.swap(now, AtomicOrdering::Relaxed);
        if now >= before {
            TOTAL.fetch_add(now - before, AtomicOrdering::Relaxed);
        } else {
            TOTAL.fetch_sub(before - now, AtomicOrdering::Relaxed);
        }
    }

    /// One row per attribute the index holds or refused, by entid: what `mentat_entity_index` reports.
    pub fn stats(&self) -> Vec<AttrStats> {
        let snap = self.snapshot();
        let mut out: Vec<AttrStats> = snap
            .attrs
            .iter()
            .map(|(a, ix)| AttrStats {
                attr: *a,
                datoms: ix.current_datoms(),
                history: ix.history_rows(),
                novelty: ix.novelty(),
                bytes: ix.bytes(),
                refused: false,
                reading: false,
            })
            .collect();
        out.extend(snap.refused.iter().map(|a| AttrStats { attr: *a, refused: true, ..Default::default() }));
        let reading = self.building.lock().unwrap_or_else(|p| p.into_inner()).clone();
        out.extend(reading.into_iter().filter(|a| !snap.attrs.contains_key(a)).map(|a| AttrStats {
            attr: a,
            reading: true,
            ..Default::default()
        }));
        out.sort_by_key(|s| s.attr);
        out
    }

    /// Drops every attribute (another writer changed the store).
    pub fn clear(&self) {
        let empty = Arc::new(Snapshot::default());
        self.set_bytes(&empty);
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = empty;
    }

    /// Applies one committed transaction `tx`: `adds` are its asserted datoms `(e, a, v)`, `retracts` its retracted
    /// ones with the tx that asserted each. Attributes not indexed yet are left alone (they are read whole when
    /// first needed). Call under the store's writer lock.
    pub fn apply(&self, tx: i64, adds: &[(Entid, Entid, Val)], retracts: &[((Entid, Entid, Val), i64)]) {
        self.apply_all(&[(tx, adds, retracts)]);
    }

    /// Applies consecutive committed transactions, in order, as [`EntityIndex::apply`] would one by one, but
    /// copying each touched attribute's novelty once for all of them (a group commit of thousands of small
    /// transactions would otherwise copy it thousands of times).
    pub fn apply_all(&self, txs: &[Committed<'_>]) {
        let current = self.snapshot();
        let mut by_attr: HashMap<Entid, Vec<Op>> = HashMap::new();
        for (tx, adds, retracts) in txs {
            for ((e, a, v), asserted) in retracts.iter() {
                if let (true, Some(k)) = (current.attrs.contains_key(a), IKey::from_val(v)) {
                    by_attr.entry(*a).or_default().push(Op::Retract(*e, k, *asserted, *tx));
                }
            }
            for (e, a, v) in adds.iter() {
                if let (true, Some(k)) = (current.attrs.contains_key(a), IKey::from_val(v)) {
                    by_attr.entry(*a).or_default().push(Op::Add(*e, k, *tx));
                }
            }
        }
        if by_attr.is_empty() {
            return;
        }
        let mut next = (*current).clone();
        for (a, ops) in by_attr {
            let updated = next.attrs[&a].with_ops(ops);
            next.attrs.insert(a, Arc::new(updated));
        }
        self.set_bytes(&next);
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
    }

    /// Asks for attributes `attrs` to be read in: the transactor's request for the attributes of a small group it
    /// had to write to the tables only because the index did not hold them (`pending.rs`). Once they are held,
    /// such groups go to the transaction log instead (a file append and one sync, `txlog.rs`): a store's writes make
    /// the attributes they write memory-resident, as Datomic's transactor keeps what it writes in its memory index.
    /// The caller that owns a connection pool reads them in the background ([`EntityIndex::take_wanted`]); an
    /// attribute held, refused (past the budget) or being read already is not asked for again.
    pub fn want(&self, attrs: impl IntoIterator<Item = Entid>) {
        let snap = self.snapshot();
        let building = self.building.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut wanted = self.wanted.lock().unwrap_or_else(|p| p.into_inner());
        wanted.extend(
            attrs
                .into_iter()
                .filter(|a| !snap.attrs.contains_key(a) && !snap.refused.contains(a) && !building.contains(a)),
        );
    }

    /// The attributes asked for by [`EntityIndex::want`] since the last call, sorted.
    pub fn take_wanted(&self) -> Vec<Entid> {
        let mut wanted: Vec<Entid> = self.wanted.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        wanted.sort_unstable();
        wanted
    }

    /// Marks `a` as being read in the background; false when it already is.
    pub fn start_building(&self, a: Entid) -> bool {
        self.building.lock().unwrap_or_else(|p| p.into_inner()).insert(a)
    }

    /// Whether attribute `a` is being read (between [`EntityIndex::start_building`] and the end of its read).
    pub fn is_building(&self, a: Entid) -> bool {
        self.building.lock().unwrap_or_else(|p| p.into_inner()).contains(&a)
    }

    /// Leaves attribute `a` out of the index (its queries take the general path) until the index is cleared.
    fn refuse(&self, a: Entid) {
        let mut next = (*self.snapshot()).clone();
        next.refused.insert(a);
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
    }

    /// Undoes [`EntityIndex::start_building`] when no reader could be started.
    pub fn stop_building(&self, a: Entid) {
        self.building.lock().unwrap_or_else(|p| p.into_inner()).remove(&a);
    }

    /// Reads attribute `a` of `store` from its `cur_` table into the index. Call under the store's writer lock
    /// (no transaction may commit meanwhile). Returns false when the attribute would pass the memory budget.
    pub fn build(&self, conn: &Connection, store: &StoreName, a: &Attribute) -> Result<bool> {
        let done = self.build_inner(conn, store, a);
        self.building.lock().unwrap_or_else(|p| p.into_inner()).remove(&a.entid);
        done
    }

    fn build_inner(&self, conn: &Connection, store: &StoreName, a: &Attribute) -> Result<bool> {
        if !indexable(a.value_type) {
            self.refuse(a.entid);
            return Ok(false);
        }
        if self.snapshot().attrs.contains_key(&a.entid) {
            return Ok(true);
        }
        let Some(rows) = read_rows(conn, &store.current(a.entid), a.value_type, "0")? else {
            self.refuse(a.entid);
            return Ok(false);
        };
        let Some(hist) = read_rows(conn, &store.history(a.entid), a.value_type, "retracted_tx")? else {
            self.refuse(a.entid);
            return Ok(false);
        };
        let estimate = (rows.len() + hist.len()) * 48 + rows.iter().chain(&hist).map(|r| r.1.bytes()).sum::<usize>();
        if TOTAL.load(AtomicOrdering::Relaxed) + estimate > budget() {
            self.refuse(a.entid);
            return Ok(false);
        }
        let order = has_value_order(a);
        let base = Base::from_rows(rows.into_iter().map(|(e, v, tx, _)| (e, v, tx)).collect(), order);
        let (hist, horizon) = recent_history(hist, history_bound_for(base.e.len()));
        let mut index = AttrIndex::new(base, Arc::new(Hist::new(hist, order)), order);
        index.horizon = horizon;
        let mut next = (*self.snapshot()).clone();
        next.attrs.insert(a.entid, Arc::new(index));
        self.set_bytes(&next);
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        Ok(true)
    }
}

/// History rows an attribute of `current` datoms keeps ([`AttrIndex::history_bound`]).
fn history_bound_for(current: usize) -> usize {
    HISTORY_MIN_ROWS.max(current)
}

/// The history rows of the latest retraction txs, `keep` rows or fewer (whole txs only), and the horizon: the
/// latest retraction tx of the rows left out (i64::MIN when none is).
fn recent_history(mut rows: Vec<HistRow>, keep: usize) -> (Vec<HistRow>, i64) {
    if rows.len() <= keep {
        return (rows, i64::MIN);
    }
    let mut rtx: Vec<i64> = rows.iter().map(|r| r.3).collect();
    let (_, horizon, _) = rtx.select_nth_unstable(rows.len() - keep - 1);
    let horizon = *horizon;
    rows.retain(|r| r.3 > horizon);
    (rows, horizon)
}

/// Rows `(e, v, tx, extra)` of an attribute table (`extra`: an SQL expression, `retracted_tx` for history), values
/// as the index keys them; None when a value's type is not one the index holds.
fn read_rows(conn: &Connection, table: &str, t: ValueType, extra: &str) -> Result<Option<Vec<HistRow>>> {
    let v = match t {
        ValueType::Instant => "epoch_us(v)",
        ValueType::Boolean => "v::BIGINT",
        ValueType::Uuid => "v::VARCHAR",
        _ => "v",
    };
    let mut st = conn.prepare(&format!("SELECT e, {v} AS v, tx, {extra}::BIGINT AS x FROM {table}"))?;
    let mut rows = Vec::new();
    let mut interned: HashMap<String, Arc<str>> = HashMap::new();
    let intern = t == ValueType::Keyword;
    for batch in st.query_arrow([])? {
        let (e, vcol) = (batch.column(0).as_primitive::<Int64Type>(), batch.column(1));
        let (tx, x) = (batch.column(2).as_primitive::<Int64Type>(), batch.column(3).as_primitive::<Int64Type>());
        for i in 0..batch.num_rows() {
            let key = match vcol.data_type() {
                DataType::Int64 => IKey::Int(vcol.as_primitive::<Int64Type>().value(i)),
                DataType::Float64 => IKey::Float(vcol.as_primitive::<Float64Type>().value(i)),
                DataType::Utf8 => text(vcol.as_string::<i32>().value(i), intern, &mut interned),
                DataType::LargeUtf8 => text(vcol.as_string::<i64>().value(i), intern, &mut interned),
                DataType::Utf8View => text(vcol.as_string_view().value(i), intern, &mut interned),
                _ => return Ok(None),
            };
            rows.push((e.value(i), key, tx.value(i), x.value(i)));
        }
    }
    Ok(Some(rows))
}

fn text(s: &str, intern: bool, interned: &mut HashMap<String, Arc<str>>) -> IKey {
    if !intern {
        return IKey::Text(Arc::from(s));
    }
    if let Some(a) = interned.get(s) {
        return IKey::Text(a.clone());
    }
    let a: Arc<str> = Arc::from(s);
    interned.insert(s.to_string(), a.clone());
    IKey::Text(a)
}

/// What [`execute`] needs that the snapshot lacks: the attributes to read first.
#[derive(Debug)]
pub enum Outcome {
    /// The answer rows, one key per find variable.
    Rows(Vec<Vec<Key>>),
    /// These attributes are not indexed yet.
    Missing(Vec<Entid>),
    /// The general path answers (an intermediate result too large, an attribute without a value order).
    General,
}

/// One row of the entity executor: a value per variable of the plan (None: not bound yet).
type Row = Vec<Option<IKey>>;

/// Pushes onto `next` the row `row` extended by each of `found` that fits the slot `s` (a constant it equals, a
/// variable unbound or bound to it, a blank): a copy of the row for each but the last, the row itself for the last
/// (most steps find one value per row: a cardinality-one attribute, a unique value).
fn extend_rows(next: &mut Vec<Row>, row: Row, s: &Slot, found: impl Iterator<Item = IKey>) {
    let fits = |k: &IKey| fits(s, &row, k);
    let bound = |mut r: Row, k: IKey| {
        if let Slot::Var(i) = s {
            r[*i] = Some(k);
        }
        r
    };
    let mut last: Option<IKey> = None;
    for k in found.filter(|k| fits(k)) {
        if let Some(earlier) = last.replace(k) {
            next.push(bound(row.clone(), earlier));
        }
    }
    if let Some(k) = last {
        next.push(bound(row, k));
    }
}

/// Whether a datom's `k` fits slot `s` of `row`: a `_`, a constant equal to it, or a variable unbound or bound to
/// it.
fn fits(s: &Slot, row: &Row, k: &IKey) -> bool {
    match s {
        Slot::Blank => true,
        Slot::Const(c) => IKey::from_key(c) == *k,
        Slot::Var(i) => row[*i].as_ref().is_none_or(|x| x == k),
    }
}

/// Rows an EAVT step must have for [`AttrIndex::prefetch`] to be worth a pass over them.
const PREFETCH_ROWS: usize = 4;

/// The stages of [`Base::prefetch_stage`].
const PREFETCH_STAGES: usize = 3;

/// Prefetch hints for reading entity `e` in each of `attrs` (what a pull reads), stage by stage across them, so
/// that the attributes' cache misses overlap (see [`Base::prefetch_stage`]).
fn prefetch_entity(snap: &Snapshot, attrs: impl Iterator<Item = Entid> + Clone, e: i64) {
    for stage in 0..PREFETCH_STAGES {
        for a in attrs.clone() {
            if let Some(ix) = snap.attr(a) {
                ix.base.prefetch_stage(e, stage);
            }
        }
    }
}

/// Runs `steps` of `plan` over `rows` (each row one slot per variable of the plan): each step extends every row by
/// the datoms it finds (EAVT, AVET/VAET, or the datoms since a tx), and each of `ors` runs before the step it
/// names ([`run_or`]). None when the general path must answer: a value the index cannot look up, or more than
/// [`MAX_ROWS`] rows.
fn run_steps(
    snap: &Snapshot,
    plan: &EntityPlan,
    steps: &[planner::entity::Step],
    ors: &[(usize, planner::entity::Or)],
    mut rows: Vec<Row>,
) -> Option<Vec<Row>> {
    let mut values = Vec::new();
    let mut entities = Vec::new();
    let mut es = Vec::new();
    for (k, step) in steps.iter().enumerate() {
        for (_, or) in ors.iter().filter(|(at, _)| *at == k) {
            rows = run_or(snap, plan, or, rows)?;
        }
        let attr = snap.attr(step.attr)?;
        if step.access == Access::Since {
            // the attribute's datoms since the tx, read once and joined with every row so far
            let since = plan.since?;
            // a constant is converted once for the step, not once per datom
            let (e_slot, v_slot) = (ScanSlot::of(&step.e), ScanSlot::of(&step.v));
            let mut next = Vec::new();
            for row in std::mem::take(&mut rows) {
                let found = attr.since_datoms(since, MAX_ROWS, |e, v| {
                    let mut r = row.clone();
                    if e_slot.bind(&mut r, &IKey::Int(e)) && v_slot.bind(&mut r, v) {
                        next.push(r);
                    }
                });
                if found.is_none() || next.len() > MAX_ROWS {
                    return None;
                }
            }
            rows = next;
            continue;
        }
        // the entities of an EAVT step are all known before it reads any: their cache misses can overlap
        if let (Access::Eavt, Slot::Var(i), true) = (&step.access, &step.e, rows.len() >= PREFETCH_ROWS) {
            es.clear();
            es.extend(rows.iter().filter_map(|r| match &r[*i] {
                Some(IKey::Int(e)) => Some(*e),
                _ => None,
            }));
            attr.prefetch(&es);
        }
        let mut next = Vec::new();
        for row in std::mem::take(&mut rows) {
            let get = |s: &Slot| -> Option<IKey> {
                match s {
                    Slot::Var(i) => row[*i].clone(),
                    Slot::Const(k) => Some(IKey::from_key(k)),
                    Slot::Blank => None,
                }
            };
            match step.access {
                Access::Eavt => {
                    let Some(IKey::Int(e)) = get(&step.e) else { continue };
                    values.clear();
                    attr.values_in(plan, e, &mut values);
                    if let (true, Some(d)) = (values.is_empty(), &step.default) {
                        values.push(IKey::from_key(d)); // get-else
                    }
                    extend_rows(&mut next, row, &step.v, values.drain(..));
                    if next.len() > MAX_ROWS {
                        return None;
                    }
                }
                Access::Avet => {
                    let Some(v) = get(&step.v) else { continue };
                    // a value that many entities hold is a scan's work: give the query back before reading them
                    // (q4's :state/open, 260,060 entities at scale m, built that many rows and then gave it back)
                    if plan.since.is_none() && attr.base_holds_more_than(&v, MAX_ROWS.saturating_sub(next.len())) {
                        return None;
                    }
                    entities.clear();
                    let found = match plan.since {
                        Some(since) => attr.entities_since(&v, since, &mut entities),
                        None => attr.entities(&v, plan.as_of, &mut entities),
                    };
                    found?;
                    if next.len() + entities.len() > MAX_ROWS {
                        return None;
                    }
                    extend_rows(&mut next, row, &step.e, entities.iter().map(|e| IKey::Int(*e)));
                }
                Access::Since => return None,
            }
            if next.len() > MAX_ROWS {
                return None;
            }
        }
        rows = next;
    }
    for (_, or) in ors.iter().filter(|(at, _)| *at == steps.len()) {
        rows = run_or(snap, plan, or, rows)?;
    }
    Some(rows)
}

/// Whether conjunction `c` (a `not`'s body), run from `row`, finds a row that passes its filters; None when the
/// general path must answer. One EAVT probe without filters (`(not [?e :attr v])`, every `missing?`) reads the
/// entity's values and copies no row.
fn finds_any(snap: &Snapshot, plan: &EntityPlan, c: &Conjunction, row: &Row) -> Option<bool> {
    if let ([step @ Step { access: Access::Eavt, default: None, .. }], []) = (c.steps.as_slice(), c.filters.as_slice())
    {
        let e = match &step.e {
            Slot::Var(i) => row[*i].clone(),
            Slot::Const(k) => Some(IKey::from_key(k)),
            Slot::Blank => None,
        };
        let Some(IKey::Int(e)) = e else { return Some(false) };
        let mut values = Vec::new();
        snap.attr(step.attr)?.values_in(plan, e, &mut values);
        return Some(values.iter().any(|k| fits(&step.v, row, k)));
    }
    let found = run_steps(snap, plan, &c.steps, &[], vec![row.clone()])?;
    Some(found.iter().any(|r| c.filters.iter().all(|f| passes(f, r))))
}

/// Runs an `or` / `or-join` ([`planner::entity::Or`]) from each of `rows`: every branch's steps from the row, the
/// rows found that pass the branch's filters, with the branches' own variables cleared, made distinct (the union
/// of Datalog sets).
fn run_or(snap: &Snapshot, plan: &EntityPlan, or: &planner::entity::Or, rows: Vec<Row>) -> Option<Vec<Row>> {
    use std::hash::BuildHasher;
    // the distinct rows in the order found: a table of their positions in `next`, hashed by the row there
    let state = foldhash::fast::RandomState::default();
    let mut seen: hashbrown::HashTable<usize> = hashbrown::HashTable::new();
    let mut next: Vec<Row> = Vec::new();
    let last = or.branches.len().saturating_sub(1);
    for row in rows {
        let mut row = Some(row);
        for (k, b) in or.branches.iter().enumerate() {
            // the last branch runs from the row itself, the others from a copy
            let from = if k == last { row.take() } else { row.clone() };
            for mut r in run_steps(snap, plan, &b.steps, &[], from.into_iter().collect())? {
                if b.filters.iter().all(|f| passes(f, &r)) {
                    for l in &or.locals {
                        r[*l] = None;
                    }
                    let h = state.hash_one(&r);
                    if seen.find(h, |&i| next[i] == r).is_none() {
                        seen.insert_unique(h, next.len(), |&i| state.hash_one(&next[i]));
                        next.push(r);
                    }
                }
            }
        }
        if next.len() > MAX_ROWS {
            return None;
        }
    }
    Some(next)
}

/// Runs an entity plan against a snapshot: the steps in order (its `or`s among them), from the seed rows, then its
/// comparison filters and negations, the find projection (distinct for relations and collections, Datomic's set
/// semantics) and its aggregates.
pub fn execute(snap: &Snapshot, plan: &EntityPlan) -> Outcome {
    if plan.all_steps().any(|s| snap.refused.contains(&s.attr)) {
        return Outcome::General;
    }
    if plan.all_steps().any(|s| snap.attr(s.attr).is_some_and(|a| !a.serves_as_of(plan.as_of))) {
        return Outcome::General;
    }
    let missing: Vec<Entid> = plan.all_steps().map(|s| s.attr).filter(|a| snap.attr(*a).is_none()).collect();
    if !missing.is_empty() {
        let mut m = missing;
        m.sort();
        m.dedup();
        return Outcome::Missing(m);
    }
    let seeds: Vec<Row> =
        plan.seeds.iter().map(|r| r.iter().map(|k| k.as_ref().map(IKey::from_key)).collect()).collect();
    let Some(mut rows) = run_steps(snap, plan, &plan.steps, &plan.ors, seeds) else { return Outcome::General };
    if !plan.filters.is_empty() {
        rows.retain(|row| plan.filters.iter().all(|f| passes(f, row)));
    }
    // `not` / `not-join`: a row goes when the negation's steps, run from it, find any row that passes its filters
    if !plan.nots.is_empty() {
        let mut general = false;
        rows.retain(|row| {
            !plan.nots.iter().any(|n| {
                finds_any(snap, plan, n, row).unwrap_or_else(|| {
                    general = true;
                    false
                })
            })
        });
        if general {
            return Outcome::General;
        }
    }
    // foldhash, as the transactor's sets: the distinct hashes every answer row (std's SipHash is the slow one);
    // sized once, and a row whose variables are the find's, in order, is its own projection (a since scan gives
    // thousands of rows, whose copies and rehashing cost more than their reading)
    if plan.distinct {
        // rows that are distinct by construction (see the planner's `EntityPlan::distinct`)
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(keys) = plan.find.iter().map(|i| row[*i].as_ref().map(IKey::to_key)).collect() else {
                return Outcome::General;
            };
            out.push(keys);
        }
        return plan.aggregate(out).map_or(Outcome::General, Outcome::Rows);
    }
    let whole = plan.find.len() == plan.vars.len() && plan.find.iter().enumerate().all(|(k, i)| k == *i);
    let mut seen: foldhash::HashSet<Row> =
        foldhash::HashSet::with_capacity_and_hasher(rows.len(), foldhash::fast::RandomState::default());
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let p: Row = if whole { row } else { plan.find.iter().map(|i| row[*i].clone()).collect() };
        let Some(keys) = p.iter().map(|k| k.as_ref().map(IKey::to_key)).collect::<Option<Vec<Key>>>() else {
            return Outcome::General;
        };
        if seen.insert(p) {
            out.push(keys);
        }
    }
    plan.aggregate(out).map_or(Outcome::General, Outcome::Rows)
}

/// Whether `row` passes the comparison `f` ([`planner::entity::Filter`]): numbers by value (a long beside a double
/// as a double, as DuckDB casts it; NaN equal to NaN and above every number, DuckDB's rule), text by its bytes.
fn passes(f: &planner::entity::Filter, row: &Row) -> bool {
    use std::borrow::Cow;
    // a variable's key is compared where the row holds it; a constant is converted for the comparison
    let get = |s: &Slot| match s {
        Slot::Var(i) => row[*i].as_ref().map(Cow::Borrowed),
        Slot::Const(k) => Some(Cow::Owned(IKey::from_key(k))),
        Slot::Blank => None,
    };
    let (Some(a), Some(b)) = (get(&f.a), get(&f.b)) else { return false };
    let float = planner::entity::double_order;
    let o = match (a.as_ref(), b.as_ref()) {
        (IKey::Int(x), IKey::Int(y)) => x.cmp(y),
        (IKey::Float(x), IKey::Float(y)) => float(*x, *y),
        (IKey::Int(x), IKey::Float(y)) => float(*x as f64, *y),
        (IKey::Float(x), IKey::Int(y)) => float(*x, *y as f64),
        (IKey::Text(x), IKey::Text(y)) => return f.holds_text(x, y),
        _ => return false,
    };
    f.holds(o)
}

/// A position of a step as a since scan binds it: its constant converted to the index's key once.
enum ScanSlot {
    Blank,
    Const(IKey),
    Var(usize),
}

impl ScanSlot {
    fn of(slot: &Slot) -> ScanSlot {
        match slot {
            Slot::Blank => ScanSlot::Blank,
            Slot::Const(c) => ScanSlot::Const(IKey::from_key(c)),
            Slot::Var(i) => ScanSlot::Var(*i),
        }
    }

    /// Binds this position of `row` to `k`: false when it holds another value already (a constant or a bound
    /// variable).
    fn bind(&self, row: &mut Row, k: &IKey) -> bool {
        match self {
            ScanSlot::Blank => true,
            ScanSlot::Const(c) => c == k,
            ScanSlot::Var(i) => match &row[*i] {
                Some(held) => held == k,
                None => {
                    row[*i] = Some(k.clone());
                    true
                }
            },
        }
    }
}

/// The attributes `specs` read forward.
fn forward_attrs(specs: &[planner::pull::Spec]) -> impl Iterator<Item = Entid> + Clone + '_ {
    specs.iter().filter_map(|s| match s.target {
        planner::pull::Target::Forward(a) => Some(a),
        _ => None,
    })
}

/// One field of a pulled entity (see [`pull`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Pulled {
    Null,
    One(Key),
    Many(Vec<Key>),
    /// A ref (or a component's owner) pulled with a nested pattern: its fields.
    Struct(Vec<Pulled>),
    /// Cardinality-many refs or a reverse attribute pulled with a nested pattern: each entity's fields, in entity
    /// order (entities with none of the nested pattern's attributes left out, as the general path leaves out its
    /// NULL STRUCTs).
    Structs(Vec<Vec<Pulled>>),
}

/// Adds to `out` the attributes of `specs` (forward ones) of which entity `e` holds a datom in the index: what
/// types a wildcard's STRUCT (`planner::pull::compile_pull_held`). Attributes the index does not hold are left out.
fn held(snap: &Snapshot, specs: &[planner::pull::Spec], e: i64, out: &mut Vec<Entid>) {
    // no prefetch hints: [`pull_level`] calls this right before it pulls the same entity
    let mut values = Vec::new();
    for s in specs {
        if let planner::pull::Target::Forward(a) = s.target {
            if out.contains(&a) {
                continue;
            }
            if let Some(ix) = snap.attr(a) {
                values.clear();
                ix.values(e, None, &mut values);
                if !values.is_empty() {
                    out.push(a);
                }
            }
        }
    }
}

/// Why [`pull`] did not answer.
#[derive(Debug, PartialEq)]
pub enum PullMiss {
    /// These attributes must be read into the index first.
    Read(Vec<Entid>),
    /// The general path must pull: a `*` level reached an entity of `:db.part/db` (an attribute, which may hold
    /// the bootstrap tuple attributes the index does not hold).
    General,
}

/// Datomic's pull of entity `e` with the pattern of `planner::pull::entity_path_pattern`, from the index: one [`Pulled`]
/// per spec, or None (a NULL STRUCT, Datomic's nil) when the entity has none of the pattern's attributes and the
/// pattern neither asks for `:db/id` nor gives a `:default`. Cardinality-many values and reverse entities are
/// ordered by value (by entity) and cut at the spec's limit; a `:default` fills a missing value; a nested pattern
/// pulls each entity reached in turn, one without any of its attributes giving a NULL field (cardinality-one) or
/// no element (many), as the general path's `list(...) FILTER (WHERE ... IS NOT NULL)`. With `held`, the
/// attributes that the entities of every `*` level hold are added to it (what types the `*`s: every entity such a
/// level reaches, before any limit, as the general path's probe reads them).
pub fn pull(
    snap: &Snapshot,
    pattern: &planner::pull::Pattern,
    schema: &planner::schema::Schema,
    e: i64,
    held: Option<&mut Vec<Entid>>,
) -> std::result::Result<Option<Vec<Pulled>>, PullMiss> {
    let mut missing = Vec::new();
    missing_attrs(snap, &pattern.specs, &mut missing);
    if !missing.is_empty() {
        return Err(PullMiss::Read(missing));
    }
    prefetch_entity(snap, forward_attrs(&pattern.specs), e);
    pull_level(snap, pattern, schema, e, held)
}

/// The attributes of `specs`, nested patterns included, that the index does not hold.
fn missing_attrs(snap: &Snapshot, specs: &[planner::pull::Spec], out: &mut Vec<Entid>) {
    use planner::pull::{Sub, Target};
    for s in specs {
        if let Target::Forward(a) | Target::Reverse(a) = s.target {
            if snap.attr(a).is_none() && !out.contains(&a) {
                out.push(a);
            }
        }
        if let Sub::Pattern(p) = &s.sub {
            missing_attrs(snap, &p.specs, out);
        }
    }
}

/// The entities `es` (in order) pulled with the nested pattern `p`: a [`Pulled::Structs`] of those with any
/// field (`many`) or the first one's [`Pulled::Struct`]; Null when none has.
fn pull_refs(
    snap: &Snapshot,
    p: &planner::pull::Pattern,
    schema: &planner::schema::Schema,
    es: impl Iterator<Item = i64>,
    many: bool,
    mut held: Option<&mut Vec<Entid>>,
) -> std::result::Result<Pulled, PullMiss> {
    let mut pulled = Vec::new();
    for r in es {
        if let Some(fields) = pull_level(snap, p, schema, r, held.as_deref_mut())? {
            pulled.push(fields);
        }
    }
    Ok(match (pulled.is_empty(), many) {
        (true, _) => Pulled::Null,
        (false, true) => Pulled::Structs(pulled),
        (false, false) => Pulled::Struct(pulled.swap_remove(0)),
    })
}

/// One level of [`pull`]: the fields of `pattern` for entity `e`, every attribute held by the index.
fn pull_level(
    snap: &Snapshot,
    pattern: &planner::pull::Pattern,
    schema: &planner::schema::Schema,
    e: i64,
    mut held: Option<&mut Vec<Entid>>,
) -> std::result::Result<Option<Vec<Pulled>>, PullMiss> {
    use planner::pull::{Sub, Target};
    let specs = &pattern.specs;
    if pattern.wildcard {
        if e < planner::layout::PART_USER_START {
            return Err(PullMiss::General);
        }
        if let Some(h) = held.as_deref_mut() {
            self::held(snap, specs, e, h);
        }
    }
    let mut out = Vec::with_capacity(specs.len());
    let (mut any, mut asks_id) = (false, false);
    let mut values = Vec::new();
    for s in specs {
        match s.target {
            Target::DbId => {
                asks_id = true;
                out.push(Pulled::One(Key::Int(e)));
            }
            Target::Forward(a) => {
                let (Some(ix), Some(attr)) = (snap.attr(a), schema.attribute(a)) else {
                    return Err(PullMiss::Read(vec![a]));
                };
                values.clear();
                ix.values(e, None, &mut values);
                any |= !values.is_empty();
                let nested = match &s.sub {
                    Sub::Pattern(p) => Some(p),
                    _ => None,
                };
                if attr.many {
                    let mut vs: Vec<&IKey> = values.iter().collect();
                    vs.sort();
                    if let Some(p) = nested {
                        // the general path leaves out the entities without any nested field, then cuts at the limit
                        let refs = vs.iter().filter_map(|k| if let IKey::Int(r) = k { Some(*r) } else { None });
                        let mut field = pull_refs(snap, p, schema, refs, true, held.as_deref_mut())?;
                        if let (Pulled::Structs(items), Some(limit)) = (&mut field, s.limit) {
                            items.truncate(limit.max(0) as usize);
                        }
                        out.push(field);
                        continue;
                    }
                    if let Some(limit) = s.limit {
                        vs.truncate(limit.max(0) as usize);
                    }
                    out.push(if vs.is_empty() {
                        Pulled::Null
                    } else {
                        Pulled::Many(vs.into_iter().map(IKey::to_key).collect())
                    });
                } else {
                    out.push(match (values.first(), nested) {
                        (Some(IKey::Int(r)), Some(p)) => {
                            pull_refs(snap, p, schema, std::iter::once(*r), false, held.as_deref_mut())?
                        }
                        (Some(v), _) => Pulled::One(v.to_key()),
                        (None, _) => match &s.default {
                            Some(d) => planner::entity::default_key(d, attr.value_type, schema)
                                .map_or(Pulled::Null, Pulled::One),
                            None => Pulled::Null,
                        },
                    });
                }
            }
            Target::Reverse(a) => {
                let Some(ix) = snap.attr(a) else { return Err(PullMiss::Read(vec![a])) };
                let mut es = Vec::new();
                ix.entities(&IKey::Int(e), None, &mut es).ok_or(PullMiss::General)?;
                es.sort_unstable();
                es.dedup();
                any |= !es.is_empty();
                let mut field = match &s.sub {
                    Sub::Pattern(p) => pull_refs(snap, p, schema, es.iter().copied(), true, held.as_deref_mut())?,
                    _ if es.is_empty() => Pulled::Null,
                    _ => Pulled::Many(es.iter().map(|r| Key::Int(*r)).collect()),
                };
                if let Some(limit) = s.limit {
                    match &mut field {
                        Pulled::Structs(items) => items.truncate(limit.max(0) as usize),
                        Pulled::Many(keys) => keys.truncate(limit.max(0) as usize),
                        _ => {}
                    }
                }
                out.push(field);
            }
        }
    }
    // Datomic returns the defaults of a pattern for an entity that has none of its attributes, as it returns
    // `:db/id`; only a pattern with neither gives nil
    let has_default = specs.iter().any(|s| s.default.is_some());
    Ok((any || asks_id || has_default).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(rows: &[(i64, i64)], value_order: bool) -> AttrIndex {
        AttrIndex::new(
            Base::from_rows(rows.iter().map(|&(e, v)| (e, IKey::Int(v), 1)).collect(), value_order),
            Arc::new(Hist::new(Vec::new(), value_order)),
            value_order,
        )
    }

    fn values(a: &AttrIndex, e: i64) -> Vec<i64> {
        let mut out = Vec::new();
        a.values(e, None, &mut out);
        let mut v: Vec<i64> = out.into_iter().map(|k| if let IKey::Int(i) = k { i } else { -1 }).collect();
        v.sort();
        v
    }

    fn entities(a: &AttrIndex, v: i64) -> Vec<i64> {
        let mut out = Vec::new();
        a.entities(&IKey::Int(v), None, &mut out).unwrap();
        out.sort();
        out
    }

    #[test]
    fn a_directory_finds_what_a_binary_search_finds() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..200 {
            // runs of repeated keys with gaps of 0 to 40, starting anywhere (negative included)
            let mut keys = Vec::new();
            let mut k = next(1000) as i64 - 500;
            for _ in 0..next(300) {
                k += next(41) as i64;
                for _ in 0..1 + next(3) {
                    keys.push(k);
                }
            }
            let Some(d) = Directory::build(keys.len(), |p| keys[p]) else {
                assert!(keys.is_empty(), "round {round}: dense keys get a directory");
                continue;
            };
            for probe in keys[0] - 20..k + 20 {
                assert_eq!(d.lower_bound(probe, |p| keys[p]), keys.partition_point(|x| *x < probe), "probe {probe}");
            }
        }
        // keys too sparse for a directory: none, and the callers search the whole run
        let sparse = [0i64, 1 << 40, 1 << 50];
        assert!(Directory::build(sparse.len(), |p| sparse[p]).is_none());
        assert!(Directory::build(2, |p| [i64::MIN, i64::MAX][p]).is_none());
    }

    #[test]
    fn a_value_hash_finds_the_first_position_a_binary_search_finds() {
        let mut seed = 11u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..100 {
            // sorted text values, some repeated (a non-unique attribute), some the empty string or a prefix of another
            let mut words: Vec<String> =
                (0..next(400)).map(|_| "ab".repeat(next(3) as usize) + &next(500).to_string()).collect();
            words.sort();
            let mut keys = Vec::new();
            for w in &words {
                for _ in 0..1 + next(3) {
                    keys.push(IKey::Text(Arc::from(w.as_str())));
                }
            }
            let h = ValueHash::build(keys.len(), |p| &keys[p]);
            for probe in words.iter().cloned().chain((0..50).map(|i| format!("ab{i}x"))).chain([String::new()]) {
                let at = keys.partition_point(|k| *k < IKey::Text(Arc::from(probe.as_str())));
                let held = keys.get(at).is_some_and(|k| matches!(k, IKey::Text(t) if **t == *probe));
                assert_eq!(h.first(&probe, |p| &keys[p]), held.then_some(at), "round {round}, probe {probe:?}");
            }
        }
    }

    #[test]
    fn novelty_overlays_the_base_and_merges_into_it() {
        let a = idx(&[(1, 10), (2, 20), (2, 21), (3, 10)], true);
        assert_eq!(values(&a, 2), vec![20, 21]);
        assert_eq!(entities(&a, 10), vec![1, 3]);
        // retract (2, 20), assert (2, 22) and (4, 10); re-assert a retracted datom
        let b = a.with(&[(2, IKey::Int(22)), (4, IKey::Int(10))], &[(2, IKey::Int(20), 1), (1, IKey::Int(10), 1)], 7);
        assert_eq!(values(&b, 2), vec![21, 22]);
        assert_eq!(entities(&b, 10), vec![3, 4]);
        // the same base; 4 novelty entries at 96 bytes; 2 history rows at 48 bytes and 4 of value order each
        assert_eq!(b.bytes() - a.bytes(), 4 * 96 + 2 * (48 + 4));
        let c = b.with(&[(1, IKey::Int(10))], &[], 8);
        assert_eq!(entities(&c, 10), vec![1, 3, 4]);
        assert_eq!(values(&a, 2), vec![20, 21], "the earlier snapshot is unchanged");
        let m = c.merged();
        assert_eq!(m.novelty(), 0);
        for e in 0..6 {
            assert_eq!(values(&m, e), values(&c, e));
        }
        assert_eq!(entities(&m, 10), vec![1, 3, 4]);
    }

    #[test]
    fn a_value_held_by_many_entities_is_counted_without_reading_them() {
        // value 1 held by entities 0..5, value 2 by 5..8, value 3 by 8 alone: "more than n" by hand
        let value_of = [1, 1, 1, 1, 1, 2, 2, 2, 3];
        let a = idx(&(0..9).map(|e| (e, value_of[e as usize])).collect::<Vec<_>>(), true);
        for (v, held) in [(1, 5), (2, 3), (3, 1), (4, 0), (0, 0)] {
            for limit in 0..7 {
                assert_eq!(a.base_holds_more_than(&IKey::Int(v), limit), held > limit, "value {v}, limit {limit}");
            }
        }
        assert!(!idx(&[(1, 1), (2, 1)], false).base_holds_more_than(&IKey::Int(1), 0), "no value order, no count");
    }

    #[test]
    fn entities_that_share_a_novelty_filter_bit_read_their_own_datoms() {
        // 7 and 7 + TOUCHED_BITS share a bit of the filter; 8 has a bit of its own
        let far = 7 + TOUCHED_BITS as i64;
        let a = idx(&[(7, 70), (8, 80), (far, 71)], true);
        assert!(!a.novelty_may_hold(7) && !a.novelty_may_hold(far), "no novelty, no lookups");
        let b = a.with(&[(far, IKey::Int(72))], &[(far, IKey::Int(71), 1)], 9);
        assert!(b.novelty_may_hold(7), "a false positive: 7 shares the bit of the entity written");
        assert!(!b.novelty_may_hold(8));
        assert_eq!((values(&b, 7), values(&b, 8), values(&b, far)), (vec![70], vec![80], vec![72]));
        assert_eq!((entities(&b, 70), entities(&b, 71), entities(&b, 72)), (vec![7], vec![], vec![far]));
        let mut cur = Vec::new();
        b.current(far, &mut cur);
        assert_eq!(cur, vec![(IKey::Int(72), 9)]);
        // hints over a base with a directory, for entities before, inside, at the end of and far past it
        let dense = idx(&(1..=100).map(|e| (e, e * 10)).collect::<Vec<_>>(), false);
        assert!(dense.base.e_dir.is_some());
        dense.prefetch(&[i64::MIN, -5, 0, 1, 17, 50, 99, 100, 101, 1000, i64::MAX]);
        assert_eq!((values(&dense, 1), values(&dense, 100), values(&dense, 101)), (vec![10], vec![1000], vec![]));
        // a merge empties the novelty and the filter with it
        let m = b.merged();
        assert!(!m.novelty_may_hold(far));
        assert_eq!((values(&m, 7), values(&m, far)), (vec![70], vec![72]));
    }

    #[test]
    fn a_read_in_keeps_the_latest_retractions_whole() {
        let rows = |rtx: &[i64]| -> Vec<HistRow> { rtx.iter().map(|&r| (r, IKey::Int(0), 0, r)).collect() };
        let kept = |rows: &[HistRow]| rows.iter().map(|r| r.3).collect::<Vec<_>>();
        let (r, h) = recent_history(rows(&[5, 1, 9, 3, 7, 2, 8, 4, 6, 10]), 4);
        assert_eq!((kept(&r), h), (vec![9, 7, 8, 10], 6));
        // the rows of one tx are kept or left out together: fewer than `keep` rows then
        let (r, h) = recent_history(rows(&[1, 1, 2, 2, 2, 3]), 2);
        assert_eq!((kept(&r), h), (vec![3], 2));
        let (r, h) = recent_history(rows(&[1, 2]), 2);
        assert_eq!((kept(&r), h), (vec![1, 2], i64::MIN));
    }

    /// Every assertion ever made: (e, v) -> [(tx, retracted tx)].
    type Log = std::collections::BTreeMap<(i64, i64), Vec<(i64, Option<i64>)>>;

    #[test]
    fn random_writes_match_a_plain_model_now_and_as_of_through_merges() {
        random_writes_match_a_plain_model(false, false);
        random_writes_match_a_plain_model(false, true);
    }

    /// The same writes with every merge on rayon's pool, as in the extension: installs happen whenever a
    /// thread is done, and every 64th transaction waits for the running merge so that installs surely happen.
    #[test]
    fn random_writes_match_a_plain_model_with_merges_on_their_threads() {
        REAL_MERGE_THREADS.with(|real| real.set(true));
        random_writes_match_a_plain_model(true, true);
    }

    fn random_writes_match_a_plain_model(real_threads: bool, text: bool) {
        // values as integers, or as texts (which the value order finds through its hash, not a directory)
        let key = |v: i64| if text { IKey::Text(Arc::from(format!("v{v}").as_str())) } else { IKey::Int(v) };
        let unkey = |k: &IKey| match k {
            IKey::Text(t) => t[1..].parse().unwrap_or(-1),
            k => int_of(k),
        };
        // a linear congruential generator: the test needs no dependency and stays the same on every run
        let mut seed = 42u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        // every assertion ever made: (e, v) -> [(tx, retracted tx)]
        let mut log: Log = Log::new();
        for i in 0..200 {
            log.insert((i % 50, i % 7), vec![(1, None)]);
        }
        let rows: Vec<(i64, IKey, i64)> = log.keys().map(|&(e, v)| (e, key(v), 1)).collect();
        let mut a = AttrIndex::new(Base::from_rows(rows, true), Arc::new(Hist::new(Vec::new(), true)), true);
        let live = |log: &Log, d: &(i64, i64)| log.get(d).and_then(|h| h.last()).is_some_and(|p| p.1.is_none());
        let (mut merges, mut runs, mut installs) = (0, 0, 0);
        let (mut served, mut before_horizon) = (0, 0);
        for tx in 2..9000 {
            let (mut adds, mut retracts) = (Vec::new(), Vec::new());
            let mut touched = Vec::new();
            for _ in 0..next(4) {
                let d = (next(60) as i64, next(9) as i64);
                if touched.contains(&d) {
                    continue; // one operation per datom and transaction, as the transactor leaves them
                }
                touched.push(d);
                if live(&log, &d) {
                    let h = log.get_mut(&d).unwrap();
                    let asserted = h.last().unwrap().0;
                    h.last_mut().unwrap().1 = Some(tx);
                    retracts.push((d.0, key(d.1), asserted));
                } else {
                    log.entry(d).or_default().push((tx, None));
                    adds.push((d.0, key(d.1)));
                }
            }
            if real_threads && tx % 64 == 0 {
                if let Some((merge, _)) = &a.merging {
                    let waited = std::time::Instant::now();
                    while merge.done.lock().unwrap().is_none() && !merge.failed.load(AtomicOrdering::Acquire) {
                        assert!(waited.elapsed().as_secs() < 30, "a merge thread never finished");
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    installs += 1;
                }
            }
            let before = a.novelty();
            a = a.with(&adds, &retracts, tx);
            merges += usize::from(a.novelty() < before); // only a merge makes the novelty shrink
            runs = runs.max(a.hist.len());
            if tx % 197 == 0 || tx > 8990 {
                // a random moment, one in the history the index keeps (the horizon moves as runs are dropped)
                let recent = a.horizon.max(0) + next((tx - a.horizon.max(0)) as u64 + 1) as i64;
                for t in [None, Some(next(tx as u64) as i64), Some(recent), Some(tx)] {
                    if !a.serves_as_of(t) {
                        assert!(t.is_some_and(|t| t < a.horizon), "only reads before the horizon are refused");
                        before_horizon += 1;
                        continue;
                    }
                    served += usize::from(t.is_some_and(|t| t < tx));
                    let seen = |d: &(i64, i64)| {
                        log[d].iter().any(|(at, rt)| match t {
                            None => rt.is_none(),
                            Some(t) => *at <= t && rt.is_none_or(|r| t < r),
                        })
                    };
                    for e in 0..60 {
                        let want: Vec<i64> = log.keys().filter(|d| d.0 == e && seen(d)).map(|d| d.1).collect();
                        let mut got = Vec::new();
                        a.values(e, t, &mut got);
                        let mut got: Vec<i64> = got.iter().map(unkey).collect();
                        got.sort();
                        assert_eq!(got, want, "values of {e} as of {t:?} after tx {tx}");
                    }
                    for v in 0..9 {
                        let want: Vec<i64> = log.keys().filter(|d| d.1 == v && seen(d)).map(|d| d.0).collect();
                        let mut got = Vec::new();
                        a.entities(&key(v), t, &mut got).unwrap();
                        got.sort();
                        assert_eq!(got, want, "entities of {v} as of {t:?} after tx {tx}");
                    }
                }
                // since a random tx and since the last few: the current datoms asserted after it, through the
                // base's tx order and the novelty, and the probes' since filters
                for since in [next(tx as u64) as i64, tx - 1 - next(20) as i64] {
                    let after = |d: &(i64, i64)| log[d].last().is_some_and(|(at, rt)| rt.is_none() && *at > since);
                    let mut want: Vec<(i64, i64)> = log.keys().filter(|d| after(d)).copied().collect();
                    let mut got = Vec::new();
                    a.since_datoms(since, usize::MAX, |e, v| got.push((e, unkey(v)))).unwrap();
                    got.sort();
                    want.sort();
                    assert_eq!(got, want, "datoms since {since} after tx {tx}");
                    let mut few = 0;
                    assert!(want.len() < 2 || a.since_datoms(since, want.len() - 1, |_, _| few += 1).is_none());
                    for e in 0..60 {
                        let want: Vec<i64> = want.iter().filter(|d| d.0 == e).map(|d| d.1).collect();
                        let mut got = Vec::new();
                        a.values_since(e, since, &mut got);
                        let mut got: Vec<i64> = got.iter().map(unkey).collect();
                        got.sort();
                        assert_eq!(got, want, "values of {e} since {since} after tx {tx}");
                    }
                    for v in 0..9 {
                        let want: Vec<i64> = want.iter().filter(|d| d.1 == v).map(|d| d.0).collect();
                        let mut got = Vec::new();
                        a.entities_since(&key(v), since, &mut got).unwrap();
                        got.sort();
                        assert_eq!(got, want, "entities of {v} since {since} after tx {tx}");
                    }
                }
            }
        }
        assert!(merges >= 10, "{merges} merges: the checks above must also have run on merged bases");
        assert!(runs >= 3, "{runs} history runs at most: the as-of checks must also have read several");
        // the history is bounded: the oldest runs were dropped, and as-of reads of the past both before and after
        // the horizon were asked
        assert!(a.history_rows() <= a.history_bound(), "{} history rows kept", a.history_rows());
        assert!(a.horizon > 0 && before_horizon >= 10 && served >= 50, "{before_horizon} refused, {served} served");
        assert!(!real_threads || installs >= 5, "{installs} merges waited for: the threads' bases must be installed");
    }
}
