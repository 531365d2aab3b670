//! SQLite through rusqlite (SQLite compiled from the crate's bundled amalgamation), on the EAV store the suite's
//! sqlite peer built (`benchmarks/py/suite/peers/sqlite_peer.py`): one connection per client thread with the
//! peer's settings (WAL, synchronous=NORMAL, a 256 MB page cache, a 120 s busy timeout) and the peer's SQL, word
//! for word. A write is `BEGIN IMMEDIATE`, the peer's read-retract-assert of the current state with its history
//! rows, and `COMMIT`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{params, Connection};

use crate::workload::{issues_by_title, Workload};
use crate::{Driver, Res, Session};

const Q1: &str = "SELECT u.e, n.v FROM datoms u JOIN datoms n ON n.e = u.e AND n.a = 2 WHERE u.a = 1 AND u.v = ?";
const Q2: &str = "SELECT a.e, t.v, s.v FROM datoms u JOIN datoms a ON a.a = 6 AND a.v = u.e \
                  JOIN datoms t ON t.e = a.e AND t.a = 3 JOIN datoms s ON s.e = a.e AND s.a = 4 \
                  WHERE u.a = 1 AND u.v = ?";
const READ: &str = "SELECT v FROM datoms WHERE e = ? AND a = 4";
const STATES_OF: &str = "SELECT e, v FROM datoms WHERE a = 4 AND e IN (SELECT value FROM json_each(?))";
const LABELS_OF: &str = "SELECT d.e, l.v FROM datoms d JOIN datoms l ON l.e = d.v AND l.a = 10 \
                         WHERE d.a = 9 AND d.e IN (SELECT value FROM json_each(?))";

pub struct Sqlite {
    path: String,
    /// issue index -> entity id in this store
    entid: Arc<Vec<i64>>,
    by_e: Arc<HashMap<i64, usize>>,
    /// label name -> entity id
    label: Arc<HashMap<String, i64>>,
    /// The next transaction number, taken under the write lock (after BEGIN IMMEDIATE), so that its order is
    /// the commit order; starts past every tx already in the store.
    txc: Arc<AtomicI64>,
    version: String,
}

fn connect(path: &str) -> Res<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(120))?;
    c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))?;
    c.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA cache_size=-262144;")?;
    Ok(c)
}

impl Sqlite {
    pub fn open(path: &str, w: &Workload) -> Res<Sqlite> {
        let c = connect(path)?;
        let version: String = c.query_row("SELECT sqlite_version()", [], |r| r.get(0))?;
        let mut titles = Vec::with_capacity(w.n_issues);
        {
            let mut st = c.prepare("SELECT e, v FROM datoms WHERE a = 3")?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                titles.push((r.get::<_, i64>(0)?, r.get::<_, String>(1)?));
            }
        }
        let (entid, by_e) = issues_by_title(titles, w.n_issues, path)?;
        let mut label = HashMap::new();
        {
            let mut st = c.prepare("SELECT e, v FROM datoms WHERE a = 10")?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                label.insert(r.get::<_, String>(1)?, r.get::<_, i64>(0)?);
            }
        }
        let max_tx: i64 = c.query_row("SELECT coalesce(max(tx), 0) FROM transactions", [], |r| r.get(0))?;
        Ok(Sqlite {
            path: path.to_string(),
            entid: Arc::new(entid),
            by_e: Arc::new(by_e),
            label: Arc::new(label),
            txc: Arc::new(AtomicI64::new(max_tx + 1)),
            version,
        })
    }
}

impl Driver for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn engine(&self) -> String {
        format!("SQLite {} (rusqlite, bundled)", self.version)
    }

    fn session(&self) -> Res<Box<dyn Session>> {
        Ok(Box::new(SqliteSession {
            c: connect(&self.path)?,
            entid: self.entid.clone(),
            by_e: self.by_e.clone(),
            label: self.label.clone(),
            txc: self.txc.clone(),
        }))
    }
}

pub struct SqliteSession {
    c: Connection,
    entid: Arc<Vec<i64>>,
    by_e: Arc<HashMap<i64, usize>>,
    label: Arc<HashMap<String, i64>>,
    txc: Arc<AtomicI64>,
}

impl SqliteSession {
    /// `BEGIN IMMEDIATE`, `body(tx)`, `COMMIT`; `ROLLBACK` when the body fails.
    fn write(&mut self, body: impl FnOnce(&Connection, i64) -> rusqlite::Result<()>) -> Res<i64> {
        self.c.execute_batch("BEGIN IMMEDIATE")?;
        let tx = self.txc.fetch_add(1, Ordering::SeqCst);
        match body(&self.c, tx).and_then(|_| self.c.execute_batch("COMMIT")) {
            Ok(()) => Ok(tx),
            Err(e) => {
                let _ = self.c.execute_batch("ROLLBACK");
                Err(e.into())
            }
        }
    }

    fn per_issue(&mut self, sql: &str, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>> {
        let mut out: HashMap<usize, Vec<String>> = HashMap::new();
        for chunk in idxs.chunks(2000) {
            let es = serde_json::to_string(&chunk.iter().map(|&i| self.entid[i]).collect::<Vec<_>>())?;
            let mut st = self.c.prepare_cached(sql)?;
            let mut rows = st.query(params![es])?;
            while let Some(r) = rows.next()? {
                let e: i64 = r.get(0)?;
                let i = *self.by_e.get(&e).ok_or_else(|| format!("entity {e} is not an issue"))?;
                out.entry(i).or_default().push(r.get(1)?);
            }
        }
        Ok(out)
    }
}

impl Session for SqliteSession {
    fn select1(&mut self) -> Res<i64> {
        let mut st = self.c.prepare_cached("SELECT 1")?;
        Ok(st.query_row([], |r| r.get(0))?)
    }

    fn select1_text(&mut self) -> Res<i64> {
        Ok(self.c.query_row("SELECT 1", [], |r| r.get(0))?)
    }

    /// The peer's `_set_state`: the current state is read; if it already is `state`, nothing is written; else it
    /// is deleted with a retraction row in `transactions`, and the new state inserted with its assertion row.
    fn write_state(&mut self, idx: usize, state: &str) -> Res<i64> {
        let e = self.entid[idx];
        self.write(|c, tx| {
            let old: Vec<String> = {
                let mut st = c.prepare_cached("SELECT v FROM datoms WHERE e = ? AND a = 4")?;
                let rows = st.query_map(params![e], |r| r.get(0))?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            for v in old {
                if v == state {
                    return Ok(());
                }
                c.prepare_cached("DELETE FROM datoms WHERE e = ? AND a = 4 AND v = ?")?.execute(params![e, v])?;
                c.prepare_cached("INSERT INTO transactions VALUES (?, 4, ?, ?, 0)")?.execute(params![e, v, tx])?;
            }
            c.prepare_cached("INSERT INTO datoms VALUES (?, 4, ?, ?)")?.execute(params![e, state, tx])?;
            c.prepare_cached("INSERT INTO transactions VALUES (?, 4, ?, ?, 1)")?.execute(params![e, state, tx])?;
            Ok(())
        })
    }

    /// The peer's `write_label`: the label ref is added unless the issue has it already.
    fn write_label(&mut self, idx: usize, label: &str) -> Res<i64> {
        let e = self.entid[idx];
        let v = *self.label.get(label).ok_or_else(|| format!("no label {label} in the store"))?;
        self.write(|c, tx| {
            let has = c
                .prepare_cached("SELECT 1 FROM datoms WHERE e = ? AND a = 9 AND v = ?")?
                .query_map(params![e, v], |_| Ok(()))?
                .next()
                .is_some();
            if !has {
                c.prepare_cached("INSERT INTO datoms VALUES (?, 9, ?, ?)")?.execute(params![e, v, tx])?;
                c.prepare_cached("INSERT INTO transactions VALUES (?, 9, ?, ?, 1)")?.execute(params![e, v, tx])?;
            }
            Ok(())
        })
    }

    fn point_read(&mut self, idx: usize) -> Res<Vec<String>> {
        let mut st = self.c.prepare_cached(READ)?;
        let rows = st.query_map(params![self.entid[idx]], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn q1(&mut self, email: &str) -> Res<Vec<String>> {
        let mut st = self.c.prepare_cached(Q1)?;
        let rows = st.query_map(params![email], |r| r.get(1))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn q2(&mut self, email: &str) -> Res<Vec<(String, String)>> {
        let mut st = self.c.prepare_cached(Q2)?;
        let rows = st.query_map(params![email], |r| Ok((r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn states_of(&mut self, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>> {
        self.per_issue(STATES_OF, idxs)
    }

    fn labels_of(&mut self, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>> {
        self.per_issue(LABELS_OF, idxs)
    }
}
