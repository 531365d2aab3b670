//! The fulltext index of the attributes with `:db/fulltext true`, kept by the writers in the DuckDB transaction
//! that writes the datoms, so it commits and rolls back with them.
//!
//! Per fulltext attribute `aid`, four tables in the store's schema:
//!
//! * `ftt_<aid>(term VARCHAR, tid INTEGER, df INTEGER)`: the term dictionary, one row per term ever indexed, with
//!   its id and its document frequency (the documents that hold it now: 0 once they are all retracted; a term is
//!   never removed, so its id is never reused), and an ART index on `term` for a search's point lookups;
//! * `ft_<aid>(tid INTEGER, e BIGINT, h UBIGINT, tf INTEGER, pos INTEGER[], len INTEGER)`: the postings, one row
//!   per term and document, with the term's frequency in the document, its 0-based positions (for phrases) and
//!   the document's length (a copy of `ftd_`'s, so that scoring a term reads its postings alone);
//! * `ftd_<aid>(e BIGINT, h UBIGINT, len INTEGER)`: one row per document, its length in terms (for BM25's length
//!   normalization; every current datom has one, an empty string with length 0);
//! * `fts_<aid>(n BIGINT, total BIGINT)`: one row, the number of documents and the sum of their lengths.
//!
//! A document is one current datom `(e, v)`; `h` tells the values of one entity apart: 0 for a cardinality-one
//! attribute, the low 64 bits of MD5(v) for a cardinality-many one ([`planner::fulltext::doc_key_sql`]). Terms
//! come from `mentat_postings(v, language)`, the extension's SQL face of [`planner::fulltext::Analyzer`], with
//! the store's language ([`planner::schema::Schema::fulltext_language`]): indexing is a few set-based statements
//! that DuckDB runs in parallel, never a loop over values. An assertion adds its document; a retraction
//! (cardinality-one replacement included) deletes its document's rows; both keep `df`, `n` and `total` exact, so a
//! search reads its statistics instead of counting them (storage/README.md "Fulltext", "A term dictionary").
//! Parquet export and import carry the four tables like any other table of the store.

use crate::error::Result;
use crate::stage::{self, KEYS};
use crate::transactor::Eav;
use duckdb::Connection;
use planner::fulltext::{doc_key_sql, docs_table_name, postings_table_name, stats_table_name, terms_table_name};
use planner::layout::{quote_ident, quote_str, StoreName};
use planner::schema::{Attribute, Entid, Schema};
use std::collections::BTreeSet;

/// The temporary table that holds the postings of the documents being indexed, as `mentat_postings` lists.
const TERMS: &str = "mentat_ft_terms";
/// The temporary table of their terms: each term's id, its `df` once these documents are indexed, whether it is new,
/// and the row id of its dictionary row when it is not.
const COUNTS: &str = "mentat_ft_counts";
/// The temporary table of the documents being removed.
const GONE: &str = "mentat_ft_gone";
/// The temporary table of their postings (row ids and term ids).
const GONE_POSTINGS: &str = "mentat_ft_gone_postings";
/// The dictionary rows of the terms whose postings an unindex removes, with their lowered `df`.
const GONE_TERMS: &str = "mentat_ft_gone_terms";

/// SQL creating the index tables of a fulltext attribute (nothing for any other attribute).
pub fn ddl(store: &StoreName, a: &Attribute) -> Vec<String> {
    if !a.fulltext {
        return Vec::new();
    }
    let terms = store.table(&terms_table_name(a.entid));
    let stats = store.table(&stats_table_name(a.entid));
    vec![
        format!("CREATE TABLE {terms} (term VARCHAR NOT NULL, tid INTEGER NOT NULL, df INTEGER NOT NULL)"),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {terms} (term)",
            quote_ident(&format!("{}_term", terms_table_name(a.entid)))
        ),
        format!(
            "CREATE TABLE {} (tid INTEGER NOT NULL, e BIGINT NOT NULL, h UBIGINT NOT NULL, tf INTEGER NOT NULL, \
             pos INTEGER[] NOT NULL, len INTEGER NOT NULL)",
            store.table(&postings_table_name(a.entid))
        ),
        format!(
            "CREATE TABLE {} (e BIGINT NOT NULL, h UBIGINT NOT NULL, len INTEGER NOT NULL)",
            store.table(&docs_table_name(a.entid))
        ),
        format!("CREATE TABLE {stats} (n BIGINT NOT NULL, total BIGINT NOT NULL)"),
        format!("INSERT INTO {stats} SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM {stats})"),
    ]
}

/// The index tables of a fulltext attribute, unquoted, with their columns (for Parquet import).
pub fn tables(a: &Attribute) -> Vec<(String, &'static str)> {
    if !a.fulltext {
        return Vec::new();
    }
    vec![
        (terms_table_name(a.entid), "term, tid, df"),
        (postings_table_name(a.entid), "tid, e, h, tf, pos, len"),
        (docs_table_name(a.entid), "e, h, len"),
        (stats_table_name(a.entid), "n, total"),
    ]
}

/// Indexes the documents `docs` (an SQL query with columns `e BIGINT, v VARCHAR`) of fulltext attribute `a`:
/// each document is analyzed once into its postings (`mentat_postings`: its distinct terms with their
/// frequencies, positions and the document's length) in a temporary table; then the documents' lengths are
/// written and added to the statistics, the terms counted and looked up in the dictionary once (known terms get
/// their `df` raised, new terms the next ids in term order), and the postings written with their terms' ids,
/// ordered by id so that the row groups of a bulk load are term ranges that DuckDB's zone maps prune. Returns the
/// number of postings written.
///
/// Grouping each document's terms while they are at hand replaced a `GROUP BY term, e, h` over every term of the
/// load (`mentat_tokenize` unnested with its positions): see storage/README.md "Fulltext" for the measurements.
pub fn index(conn: &Connection, store: &StoreName, language: &str, a: &Attribute, docs: &str) -> Result<i64> {
    let post = store.table(&postings_table_name(a.entid));
    let dtab = store.table(&docs_table_name(a.entid));
    let ttab = store.table(&terms_table_name(a.entid));
    let stab = store.table(&stats_table_name(a.entid));
    let h = doc_key_sql(a.many, "s.v");
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {TERMS} AS SELECT s.e AS e, {h} AS h, mentat_postings(s.v, {lang}) AS p \
         FROM ({docs}) s",
        lang = quote_str(language)
    ))?;
    // an empty list (a text without words) is a document of length 0
    conn.execute(&format!("INSERT INTO {dtab} SELECT e, h, coalesce(p[1].len, 0) FROM {TERMS}"), [])?;
    let (n, total): (i64, i64) = conn.query_row(
        &format!("SELECT count(*), coalesce(sum(coalesce(p[1].len, 0)), 0)::BIGINT FROM {TERMS}"),
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    add_stats(conn, &stab, n, total)?;
    // one read of the dictionary: each term's id, known or the next free one (in term order)
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {COUNTS} AS SELECT c.term, (c.df + coalesce(t.df, 0))::INTEGER AS df, \
         coalesce(t.tid, m.base + row_number() OVER (PARTITION BY t.tid IS NULL ORDER BY c.term))::INTEGER AS tid, \
         t.tid IS NULL AS new, t.rowid AS r \
         FROM (SELECT u.term, count(*)::INTEGER AS df FROM (SELECT unnest(p) AS u FROM {TERMS}) GROUP BY u.term) c \
         LEFT JOIN {ttab} t ON t.term = c.term, (SELECT coalesce(max(tid), 0) AS base FROM {ttab}) m"
    ))?;
    // known terms' rows replaced (deleted and inserted with their new df), never updated in place: see
    // [`add_stats`]
    conn.execute(&format!("DELETE FROM {ttab} WHERE rowid IN (SELECT r FROM {COUNTS} WHERE NOT new)"), [])?;
    conn.execute(&format!("INSERT INTO {ttab} SELECT term, tid, df FROM {COUNTS} ORDER BY tid"), [])?;
    let n = conn.execute(
        &format!(
            "INSERT INTO {post} SELECT x.tid, p.e, p.h, p.u.tf, p.u.pos, p.u.len FROM \
             (SELECT e, h, unnest(p) AS u FROM {TERMS}) p JOIN {COUNTS} x ON x.term = p.u.term ORDER BY x.tid"
        ),
        [],
    )?;
    conn.execute_batch(&format!("DROP TABLE {TERMS}; DROP TABLE {COUNTS};"))?;
    Ok(n as i64)
}

/// Removes the documents `docs` (an SQL query with columns `e BIGINT, v VARCHAR`) of fulltext attribute `a`
/// from its index: its terms' `df` lowered by the postings removed, the statistics by the documents removed.
pub fn unindex(conn: &Connection, store: &StoreName, a: &Attribute, docs: &str) -> Result<()> {
    let post = store.table(&postings_table_name(a.entid));
    let dtab = store.table(&docs_table_name(a.entid));
    let ttab = store.table(&terms_table_name(a.entid));
    let stab = store.table(&stats_table_name(a.entid));
    let h = doc_key_sql(a.many, "s.v");
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {GONE} AS SELECT DISTINCT s.e AS e, {h} AS h FROM ({docs}) s"
    ))?;
    // the removed postings, found by one read of the postings (they are in `tid` order, not by document)
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {GONE_POSTINGS} AS SELECT p.rowid AS r, p.tid FROM {post} p \
         SEMI JOIN {GONE} g ON p.e = g.e AND p.h = g.h"
    ))?;
    // the removed postings' terms' rows replaced with their lowered df (not updated in place: see [`add_stats`])
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {GONE_TERMS} AS SELECT t.rowid AS r, t.term, t.tid, (t.df - x.c)::INTEGER AS df \
         FROM {ttab} t JOIN (SELECT tid, count(*)::INTEGER AS c FROM {GONE_POSTINGS} GROUP BY tid) x \
         ON t.tid = x.tid"
    ))?;
    conn.execute(&format!("DELETE FROM {ttab} WHERE rowid IN (SELECT r FROM {GONE_TERMS})"), [])?;
    conn.execute(&format!("INSERT INTO {ttab} SELECT term, tid, df FROM {GONE_TERMS} ORDER BY tid"), [])?;
    let (n, total): (i64, i64) = conn.query_row(
        &format!(
            "SELECT count(*), coalesce(sum(d.len), 0)::BIGINT FROM {dtab} d JOIN {GONE} r ON d.e = r.e AND d.h = r.h"
        ),
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    add_stats(conn, &stab, -n, -total)?;
    conn.execute(&format!("DELETE FROM {post} WHERE rowid IN (SELECT r FROM {GONE_POSTINGS})"), [])?;
    conn.execute(&format!("DELETE FROM {dtab} USING {GONE} r WHERE {dtab}.e = r.e AND {dtab}.h = r.h"), [])?;
    conn.execute_batch(&format!("DROP TABLE {GONE}; DROP TABLE {GONE_POSTINGS}; DROP TABLE {GONE_TERMS};"))?;
    Ok(())
}

/// Adds `n` documents and `total` terms (negative to remove them) to the statistics row of table `stab`: the row
/// deleted and inserted again, never updated in place, as every row a transaction changes
/// ([`crate::transactor::rewrite_partitions`]: an update in place keeps DuckDB from checkpointing while any other
/// transaction is open).
fn add_stats(conn: &Connection, stab: &str, n: i64, total: i64) -> Result<()> {
    let (was_n, was_total) = conn
        .prepare_cached(&format!("DELETE FROM {stab} RETURNING n, total"))?
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
        .try_fold((0i64, 0i64), |(a, b), row| row.map(|(x, y)| (a + x, b + y)))?;
    conn.prepare_cached(&format!("INSERT INTO {stab} VALUES ($1, $2)"))?.execute([was_n + n, was_total + total])?;
    Ok(())
}

/// Empties the index of fulltext attribute `a` and indexes its current datoms again with `language`; returns
/// the documents and terms indexed. For [`set_language`] and for a store whose index an earlier layout wrote.
pub(crate) fn rebuild(conn: &Connection, store: &StoreName, language: &str, a: &Attribute) -> Result<(i64, i64)> {
    for (table, _) in tables(a) {
        conn.execute(&format!("DELETE FROM {}", store.table(&table)), [])?;
    }
    conn.execute(&format!("INSERT INTO {} VALUES (0, 0)", store.table(&stats_table_name(a.entid))), [])?;
    let docs = format!("SELECT e, v FROM {}", store.current(a.entid));
    index(conn, store, language, a, &docs)?;
    Ok(conn.query_row(&format!("SELECT n, total FROM {}", store.table(&stats_table_name(a.entid))), [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?)
}

/// Brings the fulltext index of a store written before the term dictionary (layout version 2: postings keyed by
/// the term's text, no `ftt_`/`fts_` tables) to this layout, rebuilding it from the current datoms, in the
/// caller's transaction. Nothing for a store already in this layout. Returns the attributes rebuilt.
pub(crate) fn upgrade(conn: &Connection, store: &StoreName, schema: &Schema) -> Result<i64> {
    let mut done = 0;
    for a in schema.attributes() {
        if !a.fulltext {
            continue;
        }
        let old: i64 = conn.query_row(
            "SELECT count(*) FROM duckdb_columns() WHERE schema_name = ? AND table_name = ? AND column_name = 'term' \
             AND database_name = coalesce(?, current_database())",
            duckdb::params![store.schema, postings_table_name(a.entid), store.catalog],
            |r| r.get(0),
        )?;
        if old == 0 {
            continue;
        }
        for table in [postings_table_name(a.entid), docs_table_name(a.entid)] {
            conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", store.table(&table)))?;
        }
        for sql in ddl(store, a) {
            conn.execute_batch(&sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))?;
        }
        rebuild(conn, store, schema.fulltext_language(), a)?;
        done += 1;
    }
    if done > 0 {
        let meta = store.table("meta");
        conn.execute(&format!("DELETE FROM {meta} WHERE key = 'layout_version'"), [])?;
        conn.execute(&format!("INSERT INTO {meta} VALUES ('layout_version', ?)"), [crate::store::LAYOUT_VERSION])?;
    }
    Ok(done)
}

/// Keeps the index of the fulltext attributes among the datoms a transaction (or a group of them) writes: the
/// retracted documents out, then the asserted ones in, in the order [`crate::transactor::write_datoms`] writes
/// the datoms. Nothing when no fulltext attribute is touched.
pub(crate) fn maintain<'d>(
    conn: &Connection,
    store: &StoreName,
    schema: &Schema,
    adds: impl Iterator<Item = &'d Eav>,
    retracts: impl Iterator<Item = &'d Eav>,
) -> Result<()> {
    // a schema without fulltext attributes (most) has nothing to look for among a large write's datoms
    if !schema.has_fulltext() {
        return Ok(());
    }
    let fulltext = |a: Entid| schema.attribute(a).is_some_and(|x| x.fulltext);
    let rows: Vec<(&Eav, bool)> = retracts
        .filter(|d| fulltext(d.1))
        .map(|d| (d, false))
        .chain(adds.filter(|d| fulltext(d.1)).map(|d| (d, true)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    stage::fill(conn, KEYS, rows.iter().map(|((e, a, v), added)| (*a, *e, Some(v), *added, 0, 0)))?;
    let removed: BTreeSet<Entid> = rows.iter().filter(|r| !r.1).map(|r| r.0 .1).collect();
    let added: BTreeSet<Entid> = rows.iter().filter(|r| r.1).map(|r| r.0 .1).collect();
    for aid in removed {
        let a = schema.attribute(aid).expect("fulltext attributes are in the schema");
        unindex(conn, store, a, &format!("SELECT e, v_str AS v FROM {KEYS} WHERE a = {aid} AND NOT added"))?;
    }
    for aid in added {
        let a = schema.attribute(aid).expect("fulltext attributes are in the schema");
        let docs = format!("SELECT e, v_str AS v FROM {KEYS} WHERE a = {aid} AND added");
        index(conn, store, schema.fulltext_language(), a, &docs)?;
    }
    Ok(())
}

/// What [`set_language`] did: the language now set (lowercase) and what it re-indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanguageReport {
    pub language: String,
    /// Fulltext attributes whose index was rebuilt.
    pub attributes: i64,
    /// Documents (current datoms of those attributes) indexed.
    pub documents: i64,
    /// Terms indexed (the sum of the documents' lengths).
    pub terms: i64,
}

/// Sets the stemming language of `store`'s fulltext analyzer (its `meta` row
/// [`planner::fulltext::LANGUAGE_KEY`]) and rebuilds the index of every fulltext attribute with it, in one DuckDB
/// transaction under the store's writer lock, so the index always matches the language that searches analyze
/// their terms with. `language` is one of [`planner::fulltext::LANGUAGES`] (`none` for no stemming),
/// case-insensitive. Rebuilding reads every current datom of those attributes: on a store without fulltext
/// attributes (the usual moment to choose, before the first import) it only writes the row.
///
/// # Errors
/// [`StorageError::Store`] naming an unknown language (and listing the known ones) or a read-only store;
/// [`StorageError::DuckDb`] if a statement fails (nothing is changed).
pub fn set_language(conn: &Connection, store: &crate::store::Store, language: &str) -> Result<LanguageReport> {
    let language = language.trim().to_lowercase();
    planner::fulltext::Analyzer::new(&language).map_err(crate::error::StorageError::Store)?;
    if let Some(why) = store.read_only() {
        return Err(crate::error::StorageError::Store(format!("{} is read-only: {why}", store.name)));
    }
    let _writer = store.lock_writer_settled(conn)?;
    let run = || -> Result<(LanguageReport, crate::store::StoreState)> {
        let state = store.refresh(conn)?;
        let meta = store.name.table("meta");
        conn.execute(&format!("DELETE FROM {meta} WHERE key = ?"), [planner::fulltext::LANGUAGE_KEY])?;
        conn.execute(&format!("INSERT INTO {meta} VALUES (?, ?)"), [planner::fulltext::LANGUAGE_KEY, &language])?;
        let mut report = LanguageReport { language: language.clone(), attributes: 0, documents: 0, terms: 0 };
        let mut fulltext: Vec<&Attribute> = state.schema.attributes().into_iter().filter(|a| a.fulltext).collect();
        fulltext.sort_by_key(|a| a.entid);
        for a in fulltext {
            let (n, terms) = rebuild(conn, &store.name, &language, a)?;
            report.attributes += 1;
            report.documents += n;
            report.terms += terms;
        }
        let mut schema = (*state.schema).clone();
        schema.set_fulltext_language(Some(language.clone()));
        Ok((report, crate::store::StoreState { schema: std::sync::Arc::new(schema), parts: state.parts }))
    };
    let (report, state) = crate::in_transaction(conn, run)?;
    store.set_state(state);
    Ok(report)
}
