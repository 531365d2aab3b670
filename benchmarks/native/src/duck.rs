//! mentat through libduckdb: one DuckDB database opened on the suite's mentat store, the extension loaded into
//! it, and one DuckDB connection per client thread. Every call is the statement the Python mentat peer sends
//! (`benchmarks/py/suite/peers/mentat.py`): writes through `mentat_transact` (so through the transactor's group
//! commit queue), reads through `mentat_q`. Statements are prepared once per connection and reused.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use duckdb::{params, Config, Connection};

use crate::workload::{issues_by_title, Workload, Q1, Q2, QLABELS, QREAD, QSTATES, QTITLES_ALL};
use crate::{Driver, Res, Session};

/// The statement of each write, by `--mentat-write`: `tx` (the scalar function, planned once per connection) or
/// `transact` (the table function, bound and planned again at every execution).
pub fn write_statement(how: &str) -> Option<&'static str> {
    match how {
        "tx" => Some("SELECT mentat_tx(?)"),
        "transact" => Some("SELECT tx FROM mentat_transact(?)"),
        _ => None,
    }
}
const Q: &str = "FROM mentat_q(?, inputs := ?)";

/// The first `cols` columns of every row, each as text (entity ids and other BIGINTs as decimal).
pub fn text_rows(rows: &mut duckdb::Rows<'_>, cols: usize) -> Res<Vec<Vec<String>>> {
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let mut row = Vec::with_capacity(cols);
        for i in 0..cols {
            row.push(match r.get_ref(i)? {
                duckdb::types::ValueRef::BigInt(x) => x.to_string(),
                duckdb::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                other => format!("{other:?}"),
            });
        }
        out.push(row);
    }
    Ok(out)
}

pub struct Mentat {
    root: Connection,
    /// issue index -> entity id in this store
    entid: Arc<Vec<i64>>,
    by_e: Arc<HashMap<i64, usize>>,
    version: String,
    /// The statement every write is sent as ([`write_statement`]).
    write: &'static str,
}

impl Mentat {
    /// Opens `db` (a store the suite's mentat peer built) with unsigned extensions allowed, applies `settings`
    /// (`name=value` pairs, each sent as `SET name = value`; they are global to the database), loads `ext`, and maps
    /// every issue index to its entity id from the issues' titles.
    pub fn open(db: &str, ext: &str, settings: &[String], write: &'static str, w: &Workload) -> Res<Mentat> {
        let cfg = Config::default().allow_unsigned_extensions()?;
        let root = Connection::open_with_flags(db, cfg)?;
        let mut version: String = root.query_row("SELECT version()", [], |r| r.get(0))?;
        for s in settings {
            let (name, value) = s.split_once('=').ok_or_else(|| format!("--duckdb-set {s}: not name=value"))?;
            root.execute_batch(&format!("SET {} = {}", name.trim(), value.trim()))?;
            version = format!("{version}, {}={}", name.trim(), value.trim());
        }
        root.execute_batch(&format!("LOAD '{}'", ext.replace('\'', "''")))?;
        let mut titles = Vec::with_capacity(w.n_issues);
        {
            let mut st = root.prepare("FROM mentat_q(?)")?;
            let mut rows = st.query(params![QTITLES_ALL])?;
            while let Some(r) = rows.next()? {
                titles.push((r.get::<_, i64>(0)?, r.get::<_, String>(1)?));
            }
        }
        let (entid, by_e) = issues_by_title(titles, w.n_issues, db)?;
        Ok(Mentat { root, entid: Arc::new(entid), by_e: Arc::new(by_e), version, write })
    }
}

impl Driver for Mentat {
    fn name(&self) -> &'static str {
        "mentat"
    }

    fn engine(&self) -> String {
        format!("DuckDB {} (libduckdb.so) with the mentat extension, writes as `{}`", self.version, self.write)
    }

    fn session(&self) -> Res<Box<dyn Session>> {
        Ok(Box::new(MentatSession {
            c: self.root.try_clone()?,
            entid: self.entid.clone(),
            by_e: self.by_e.clone(),
            write: self.write,
        }))
    }

    /// Asks each question shape once (so the entity index reads the attributes they need), then waits until no
    /// attribute is still being read, at most 120 s: what the Python peer's `settle` does.
    fn settle(&self, w: &Workload) -> Res<()> {
        let mut s = self.session()?;
        s.q1(&w.probes[0].email)?;
        s.q2(&w.probes[0].email)?;
        s.point_read(w.writable[0])?;
        s.states_of(&w.writable[..1])?;
        s.labels_of(&w.writable[..1])?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let reading: i64 =
                self.root.query_row("SELECT count(*) FROM mentat_entity_index() WHERE state = 'reading'", [], |r| {
                    r.get(0)
                })?;
            if reading == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

pub struct MentatSession {
    c: Connection,
    entid: Arc<Vec<i64>>,
    by_e: Arc<HashMap<i64, usize>>,
    write: &'static str,
}

impl MentatSession {
    fn transact(&mut self, edn: &str) -> Res<i64> {
        let mut st = self.c.prepare_cached(self.write)?;
        Ok(st.query_row(params![edn], |r| r.get(0))?)
    }

    /// The rows of a `mentat_q` with an EDN inputs vector, each column as text (entity ids as decimal).
    fn q(&mut self, query: &str, inputs: &str, cols: usize) -> Res<Vec<Vec<String>>> {
        let mut st = self.c.prepare_cached(Q)?;
        let mut rows = st.query(params![query, inputs])?;
        text_rows(&mut rows, cols)
    }

    /// `[e1 e2 ...]` of the issues' entity ids, as one collection input.
    fn coll(&self, idxs: &[usize]) -> String {
        let mut s = String::from("[[");
        for (k, &i) in idxs.iter().enumerate() {
            if k > 0 {
                s.push(' ');
            }
            s.push_str(&self.entid[i].to_string());
        }
        s.push_str("]]");
        s
    }

    fn per_issue(&mut self, query: &str, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>> {
        let mut out: HashMap<usize, Vec<String>> = HashMap::new();
        for chunk in idxs.chunks(2000) {
            let inputs = self.coll(chunk);
            for r in self.q(query, &inputs, 2)? {
                let e: i64 = r[0].parse()?;
                let i = *self.by_e.get(&e).ok_or_else(|| format!("entity {e} is not an issue"))?;
                out.entry(i).or_default().push(r[1].clone());
            }
        }
        Ok(out)
    }
}

impl Session for MentatSession {
    fn select1(&mut self) -> Res<i64> {
        let mut st = self.c.prepare_cached("SELECT 1")?;
        Ok(st.query_row([], |r| r.get::<_, i32>(0))? as i64)
    }

    fn select1_text(&mut self) -> Res<i64> {
        Ok(self.c.query_row("SELECT 1", [], |r| r.get::<_, i32>(0))? as i64)
    }

    fn table_function1(&mut self) -> Res<Option<i64>> {
        let mut st = self.c.prepare_cached("SELECT count(*) FROM range(?)")?;
        Ok(Some(st.query_row(params![1i64], |r| r.get::<_, i64>(0))?))
    }

    fn write_state(&mut self, idx: usize, state: &str) -> Res<i64> {
        let edn = format!("[[:db/add {} :issue/state {}]]", self.entid[idx], state);
        self.transact(&edn)
    }

    fn write_label(&mut self, idx: usize, label: &str) -> Res<i64> {
        let edn = format!("[[:db/add {} :issue/label [:label/name \"{}\"]]]", self.entid[idx], label);
        self.transact(&edn)
    }

    fn point_read(&mut self, idx: usize) -> Res<Vec<String>> {
        let inputs = format!("[{}]", self.entid[idx]);
        Ok(self.q(QREAD, &inputs, 1)?.into_iter().map(|mut r| r.remove(0)).collect())
    }

    fn q1(&mut self, email: &str) -> Res<Vec<String>> {
        let inputs = serde_json::to_string(&[email])?;
        Ok(self.q(Q1, &inputs, 2)?.into_iter().map(|mut r| r.remove(1)).collect())
    }

    fn q2(&mut self, email: &str) -> Res<Vec<(String, String)>> {
        let inputs = serde_json::to_string(&[email])?;
        Ok(self.q(Q2, &inputs, 3)?.into_iter().map(|r| (r[1].clone(), r[2].clone())).collect())
    }

    fn states_of(&mut self, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>> {
        self.per_issue(QSTATES, idxs)
    }

    fn labels_of(&mut self, idxs: &[usize]) -> Res<HashMap<usize, Vec<String>>> {
        self.per_issue(QLABELS, idxs)
    }
}
