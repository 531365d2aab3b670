//! The fulltext index of the attributes with `:db/fulltext true`, kept by the writers in the DuckDB transaction
//! that writes the datoms, so it commits and rolls back with them.
//!
//! Per fulltext attribute `aid`, two tables in the store's schema:
//!
//! * `ft_<aid>(term VARCHAR, e BIGINT, h UBIGINT, tf INTEGER, pos INTEGER[], len INTEGER)`: the postings, one row
//!   per term and document, with the term's frequency in the document, its 0-based positions (for phrases) and
//!   the document's length (a copy of `ftd_`'s, so that scoring a term reads its postings alone);
//! * `ftd_<aid>(e BIGINT, h UBIGINT, len INTEGER)`: one row per document, its length in terms (for BM25's length
//!   normalization; every current datom has one, an empty string with length 0).
//!
//! A document is one current datom `(e, v)`; `h` tells the values of one entity apart: 0 for a cardinality-one
//! attribute, the low 64 bits of MD5(v) for a cardinality-many one ([`planner::fulltext::doc_key_sql`]). Terms
//! come from `mentat_tokenize(v, language)`, the extension's SQL face of [`planner::fulltext::Analyzer`], with
//! the store's language ([`planner::schema::Schema::fulltext_language`]): indexing is one set-based `INSERT ...
//! SELECT` that DuckDB runs in parallel, never a loop over values. An assertion adds its document; a retraction
//! (cardinality-one replacement included) deletes its document's rows. Parquet export and import carry both
//! tables like any other table of the store.

use crate::error::Result;
use crate::stage::{self, KEYS};
use crate::transactor::Eav;
use duckdb::Connection;
use planner::fulltext::{doc_key_sql, docs_table_name, postings_table_name};
use planner::layout::{quote_str, StoreName};
use planner::schema::{Attribute, Entid, Schema};
use std::collections::BTreeSet;

/// The temporary table that holds the terms of the documents being indexed.
const TERMS: &str = "mentat_ft_terms";

/// SQL creating the two index tables of a fulltext attribute (nothing for any other attribute).
pub fn ddl(store: &StoreName, a: &Attribute) -> Vec<String> {
    if !a.fulltext {
        return Vec::new();
    }
    vec![
        format!(
            "CREATE TABLE {} (term VARCHAR NOT NULL, e BIGINT NOT NULL, h UBIGINT NOT NULL, tf INTEGER NOT NULL, \
             pos INTEGER[] NOT NULL, len INTEGER NOT NULL)",
            store.table(&postings_table_name(a.entid))
        ),
        format!(
            "CREATE TABLE {} (e BIGINT NOT NULL, h UBIGINT NOT NULL, len INTEGER NOT NULL)",
            store.table(&docs_table_name(a.entid))
        ),
    ]
}

/// The index tables of a fulltext attribute, unquoted, with their columns (for Parquet import).
pub fn tables(a: &Attribute) -> Vec<(String, &'static str)> {
    if !a.fulltext {
        return Vec::new();
    }
    vec![(postings_table_name(a.entid), "term, e, h, tf, pos, len"), (docs_table_name(a.entid), "e, h, len")]
}

/// Indexes the documents `docs` (an SQL query with columns `e BIGINT, v VARCHAR`) of fulltext attribute `a`:
/// each document is analyzed once into its postings (`mentat_postings`: its distinct terms with their
/// frequencies, positions and the document's length) in a temporary table, then one statement writes the
/// documents' lengths and one the postings, ordered by term so that the row groups of a bulk load are term
/// ranges that DuckDB's zone maps prune. Returns the number of postings written.
///
/// Grouping each document's terms while they are at hand replaced a `GROUP BY term, e, h` over every term of the
/// load (`mentat_tokenize` unnested with its positions): see storage/README.md "Fulltext" for the measurements.
pub fn index(conn: &Connection, store: &StoreName, language: &str, a: &Attribute, docs: &str) -> Result<i64> {
    let post = store.table(&postings_table_name(a.entid));
    let dtab = store.table(&docs_table_name(a.entid));
    let h = doc_key_sql(a.many, "s.v");
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {TERMS} AS SELECT s.e AS e, {h} AS h, mentat_postings(s.v, {lang}) AS p \
         FROM ({docs}) s",
        lang = quote_str(language)
    ))?;
    // an empty list (a text without words) is a document of length 0
    conn.execute(&format!("INSERT INTO {dtab} SELECT e, h, coalesce(p[1].len, 0) FROM {TERMS}"), [])?;
    let n = conn.execute(
        &format!(
            "INSERT INTO {post} SELECT u.term, e, h, u.tf, u.pos, u.len FROM \
             (SELECT e, h, unnest(p) AS u FROM {TERMS}) ORDER BY u.term"
        ),
        [],
    )?;
    conn.execute_batch(&format!("DROP TABLE {TERMS}"))?;
    Ok(n as i64)
}

/// Removes the documents `docs` (an SQL query with columns `e BIGINT, v VARCHAR`) of fulltext attribute `a`
/// from its index.
pub fn unindex(conn: &Connection, store: &StoreName, a: &Attribute, docs: &str) -> Result<()> {
    let h = doc_key_sql(a.many, "s.v");
    for table in [postings_table_name(a.entid), docs_table_name(a.entid)] {
        conn.execute(
            &format!(
                "DELETE FROM {t} USING (SELECT s.e AS e, {h} AS h FROM ({docs}) s) r WHERE {t}.e = r.e AND {t}.h = r.h",
                t = store.table(&table)
            ),
            [],
        )?;
    }
    Ok(())
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
    if let Some(dir) = store.read_only() {
        return Err(crate::error::StorageError::Store(format!(
            "{} is read-only: a Parquet export attached from {dir}",
            store.name
        )));
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
            let dtab = store.name.table(&docs_table_name(a.entid));
            for table in [postings_table_name(a.entid), docs_table_name(a.entid)] {
                conn.execute(&format!("DELETE FROM {}", store.name.table(&table)), [])?;
            }
            let docs = format!("SELECT e, v FROM {}", store.name.current(a.entid));
            index(conn, &store.name, &language, a, &docs)?;
            let (n, terms): (i64, i64) =
                conn.query_row(&format!("SELECT count(*), coalesce(sum(len), 0) FROM {dtab}"), [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
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
