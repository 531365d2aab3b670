//! Fulltext search: the analyzer that both the index and the query compiler use, the search syntax, and the SQL
//! that scores a search with BM25 over an attribute's postings.
//!
//! # The analyzer
//!
//! A text becomes terms in four steps, each from a library: words are the Unicode word segments of UAX #29
//! (`unicode-segmentation`'s `unicode_words`: runs of letters and digits, with `don't`, `3.14` and `node.js`
//! each one word, and punctuation and spaces dropped); each word is lowercased (Unicode `to_lowercase`), folded
//! (compatibility decomposition NFKD, then every combining mark dropped: `Café` and `cafe` are one term, `ﬁ` is
//! `fi`), then stemmed by the store's Snowball stemmer (`rust-stemmers`; English, Porter2, unless the store says
//! otherwise: see [`Analyzer::new`]). The term at position `i` (0-based) is the `i`-th word; no word is dropped,
//! so positions are consecutive and phrases need no gaps. The extension exposes the same analyzer to SQL as
//! `mentat_tokenize(text, language)`, which the index maintenance calls, so a query's terms and the index's can
//! never disagree.
//!
//! # The search syntax
//!
//! Whitespace separates clauses. A clause is a word (`parser`), a phrase in double quotes (`"network
//! file system"`: its terms at consecutive positions) or a prefix (`comp*`: every indexed term that starts with
//! the lowercased, folded, *unstemmed* prefix). `+` before a clause makes it required, `-` excluded; a plain
//! clause is optional. A document matches when it matches every required clause, no excluded one, and, when
//! there is no required clause, at least one optional clause. A word that analyzes to several terms
//! (`x86-64`) is a phrase of them, as in tantivy's query parser; one that analyzes to none (`--`) is dropped. A
//! search with no clause to match (empty, or only exclusions) matches nothing.
//!
//! # BM25
//!
//! A document is one datom `(e, v)` of the attribute; N is the number of documents (the attribute's current
//! datoms), `avgdl` their mean length in terms, `dl` the document's. A term with document frequency `df`
//! (documents holding it) and frequency `tf` in the document scores
//! `idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl))` with `idf = ln(1 + (N − df + 0.5) / (df + 0.5))`
//! (Lucene's and tantivy's non-negative idf), `k1` = [`K1`] = 1.2 and `b` = [`B`] = 0.75. A phrase scores the
//! same with `tf` its number of occurrences and `idf` the sum of its terms' idfs (as Lucene and tantivy do); a
//! prefix scores the sum of the scores of the indexed terms it expands to. A document's score is the sum of the
//! scores of the required and optional clauses it matches. Scores are DOUBLE: tantivy keeps f32 and rounds
//! document lengths above 40 terms to a one-byte code; mentat keeps lengths exact.

use crate::layout::{string_value, StoreName};
use crate::schema::Entid;
use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::{char::is_combining_mark, UnicodeNormalization};
use unicode_segmentation::UnicodeSegmentation;

/// BM25's term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25's document-length normalization.
pub const B: f64 = 0.75;
/// The stemming language of a store that names none.
pub const DEFAULT_LANGUAGE: &str = "english";
/// The store's `meta` key that names its stemming language.
pub const LANGUAGE_KEY: &str = "fulltext_language";

/// The languages [`Analyzer::new`] takes: `none` (no stemming) and the Snowball stemmers of `rust-stemmers`.
pub const LANGUAGES: [(&str, Option<Algorithm>); 19] = [
    ("none", None),
    ("arabic", Some(Algorithm::Arabic)),
    ("danish", Some(Algorithm::Danish)),
    ("dutch", Some(Algorithm::Dutch)),
    ("english", Some(Algorithm::English)),
    ("finnish", Some(Algorithm::Finnish)),
    ("french", Some(Algorithm::French)),
    ("german", Some(Algorithm::German)),
    ("greek", Some(Algorithm::Greek)),
    ("hungarian", Some(Algorithm::Hungarian)),
    ("italian", Some(Algorithm::Italian)),
    ("norwegian", Some(Algorithm::Norwegian)),
    ("portuguese", Some(Algorithm::Portuguese)),
    ("romanian", Some(Algorithm::Romanian)),
    ("russian", Some(Algorithm::Russian)),
    ("spanish", Some(Algorithm::Spanish)),
    ("swedish", Some(Algorithm::Swedish)),
    ("tamil", Some(Algorithm::Tamil)),
    ("turkish", Some(Algorithm::Turkish)),
];

/// Text to terms (see the module docs).
pub struct Analyzer {
    stemmer: Option<Stemmer>,
    /// The term id of each word seen before ([`Analyzer::each_term_cached`], [`Analyzer::postings_cached`]): a
    /// text's words repeat, and stemming costs more than a lookup.
    cache: std::collections::HashMap<String, u32, foldhash::fast::RandomState>,
    /// The terms of those words by id; two words of one term (`dogs`, `dog`) share its id.
    terms: Vec<String>,
    /// The id of each term in `terms`.
    ids: std::collections::HashMap<String, u32, foldhash::fast::RandomState>,
}

/// Words [`Analyzer::each_term_cached`] remembers before it starts afresh.
const CACHE_WORDS: usize = 1 << 17;

impl Analyzer {
    /// The analyzer of a stemming language (one of [`LANGUAGES`], case-insensitive). Errors name the language
    /// and list the known ones.
    pub fn new(language: &str) -> Result<Analyzer, String> {
        let lang = language.trim().to_lowercase();
        match LANGUAGES.iter().find(|(name, _)| *name == lang) {
            Some((_, algo)) => Ok(Analyzer {
                stemmer: algo.map(Stemmer::create),
                cache: Default::default(),
                terms: Vec::new(),
                ids: Default::default(),
            }),
            None => {
                let known: Vec<&str> = LANGUAGES.iter().map(|l| l.0).collect();
                Err(format!("unknown fulltext language {language:?}: one of {}", known.join(", ")))
            }
        }
    }

    /// The terms of `text`, in order: the term at index `i` is at position `i`.
    pub fn terms(&self, text: &str) -> Vec<String> {
        text.unicode_words().map(|w| self.term(w)).collect()
    }

    /// [`Analyzer::terms`], each given to `each` in order, remembering the term of each word for the next texts: a
    /// word seen before costs one lookup and no allocation (the index maintenance analyzes millions of words, and
    /// allocating a String per term was 40% of `mentat_tokenize`'s time in a profile).
    pub fn each_term_cached(&mut self, text: &str, mut each: impl FnMut(&str)) {
        self.forget_if_full();
        for w in text.unicode_words() {
            let id = self.term_id(w);
            each(&self.terms[id as usize]);
        }
    }

    /// The postings of one document `text` into `out` (emptied first): each distinct term once, with its 0-based
    /// positions ascending, in the order of the terms' ids; `out.len` is the document's length in terms. Words are
    /// remembered as by [`Analyzer::each_term_cached`]. This is the grouping by term and document that the
    /// postings table holds (`storage/src/fulltext.rs`), done per document while its terms are at hand instead of
    /// by a GROUP BY over every term of a load.
    pub fn postings_cached(&mut self, text: &str, out: &mut Postings) {
        self.forget_if_full();
        out.pairs.clear();
        out.runs.clear();
        for (pos, w) in text.unicode_words().enumerate() {
            let id = self.term_id(w);
            out.pairs.push((id, pos as u32));
        }
        out.len = out.pairs.len() as u32;
        // positions are pushed ascending, so sorting the pairs groups each term's positions in order
        out.pairs.sort_unstable();
        let mut start = 0;
        for k in 1..=out.pairs.len() {
            if k == out.pairs.len() || out.pairs[k].0 != out.pairs[start].0 {
                out.runs.push((start, k));
                start = k;
            }
        }
    }

    /// The text of term `id` (from [`Postings::each`]).
    pub fn term_text(&self, id: u32) -> &str {
        &self.terms[id as usize]
    }

    /// The id of `word`'s term, from the cache or newly analyzed.
    fn term_id(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.cache.get(word) {
            return id;
        }
        let t = self.term(word);
        let id = match self.ids.get(&t) {
            Some(&id) => id,
            None => {
                let id = self.terms.len() as u32;
                self.ids.insert(t.clone(), id);
                self.terms.push(t);
                id
            }
        };
        self.cache.insert(word.to_string(), id);
        id
    }

    /// Starts the word cache afresh once it holds [`CACHE_WORDS`] words (between texts only, so that the ids a
    /// text's terms were given stay valid while it is written).
    fn forget_if_full(&mut self) {
        if self.cache.len() >= CACHE_WORDS {
            self.cache.clear();
            self.terms.clear();
            self.ids.clear();
        }
    }

    /// One word's term: lowercased, folded, stemmed.
    fn term(&self, word: &str) -> String {
        let folded = fold(word);
        match &self.stemmer {
            Some(s) => s.stem(&folded).into_owned(),
            None => folded,
        }
    }

    /// The words of `text` lowercased and folded, not stemmed (for prefixes).
    pub fn folded_words(&self, text: &str) -> Vec<String> {
        text.unicode_words().map(fold).collect()
    }
}

/// One document's postings, filled by [`Analyzer::postings_cached`] and reused from document to document.
#[derive(Default)]
pub struct Postings {
    /// (term id, position), sorted.
    pairs: Vec<(u32, u32)>,
    /// Each term's range of `pairs`.
    runs: Vec<(usize, usize)>,
    /// The document's length in terms.
    pub len: u32,
}

impl Postings {
    /// The number of distinct terms.
    pub fn terms(&self) -> usize {
        self.runs.len()
    }

    /// Each distinct term: its id ([`Analyzer::term_text`]) and its positions, ascending.
    pub fn each(&self, mut f: impl FnMut(u32, &mut dyn Iterator<Item = u32>)) {
        for &(a, b) in &self.runs {
            f(self.pairs[a].0, &mut self.pairs[a..b].iter().map(|p| p.1));
        }
    }
}

/// Lowercase, then drop every combining mark of the compatibility decomposition.
fn fold(word: &str) -> String {
    if word.is_ascii() {
        // nothing to decompose
        return word.to_ascii_lowercase();
    }
    word.chars().flat_map(char::to_lowercase).nfkd().filter(|c| !is_combining_mark(*c)).collect()
}

/// Whether a clause must, may or must not match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occur {
    Should,
    Must,
    MustNot,
}

/// What a clause matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// One term, or several at consecutive positions (a phrase).
    Terms(Vec<String>),
    /// Every indexed term that starts with this text.
    Prefix(String),
}

/// One clause of a search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clause {
    pub occur: Occur,
    pub what: Match,
}

/// Parses a search (see the module docs) into clauses, analyzing its words with `analyzer`. Never fails: an
/// unclosed quote runs to the end of the search.
pub fn parse_search(search: &str, analyzer: &Analyzer) -> Vec<Clause> {
    let mut out = Vec::new();
    let mut rest = search.trim_start();
    while !rest.is_empty() {
        let mut occur = Occur::Should;
        if let Some(r) = rest.strip_prefix('+') {
            occur = Occur::Must;
            rest = r;
        } else if let Some(r) = rest.strip_prefix('-') {
            occur = Occur::MustNot;
            rest = r;
        }
        let what;
        if let Some(r) = rest.strip_prefix('"') {
            let end = r.find('"').unwrap_or(r.len());
            what = Some(Match::Terms(analyzer.terms(&r[..end])));
            rest = r.get(end + 1..).unwrap_or("");
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let word = &rest[..end];
            rest = &rest[end..];
            what = match word.strip_suffix('*') {
                Some(stem) => match analyzer.folded_words(stem).as_slice() {
                    [one] => Some(Match::Prefix(one.clone())),
                    _ => Some(Match::Terms(analyzer.terms(stem))),
                },
                None => Some(Match::Terms(analyzer.terms(word))),
            };
        }
        match what {
            Some(Match::Terms(t)) if t.is_empty() => {}
            Some(what) => out.push(Clause { occur, what }),
            None => {}
        }
        rest = rest.trim_start();
    }
    out
}

/// Unquoted name of the postings table of fulltext attribute `aid`.
pub fn postings_table_name(aid: Entid) -> String {
    format!("ft_{aid}")
}

/// Unquoted name of the document table of fulltext attribute `aid`.
pub fn docs_table_name(aid: Entid) -> String {
    format!("ftd_{aid}")
}

/// Unquoted name of the term dictionary of fulltext attribute `aid`: `(term, tid, df)`, one row per term ever
/// indexed, with an ART index on `term`.
pub fn terms_table_name(aid: Entid) -> String {
    format!("ftt_{aid}")
}

/// Unquoted name of the one-row statistics table of fulltext attribute `aid`: `(n, total)`, the number of
/// documents and the sum of their lengths in terms.
pub fn stats_table_name(aid: Entid) -> String {
    format!("fts_{aid}")
}

/// SQL computing the document key `h` of value expression `v`: 0 for a cardinality-one attribute (the entity alone
/// names its one document), the low 64 bits of the value's MD5 for a cardinality-many one (MD5 is fixed by its RFC,
/// so stored keys stay right across DuckDB versions).
pub fn doc_key_sql(many: bool, v: &str) -> String {
    if many {
        format!("md5_number_lower({v})")
    } else {
        "0::UBIGINT".to_string()
    }
}

/// The tables a search reads, quoted.
struct Tables {
    /// `ft_<aid>(tid, e, h, tf, pos, len)`: the postings.
    post: String,
    /// `ftt_<aid>(term, tid, df)`: the term dictionary.
    terms: String,
    /// The statistics as a derived table `st(n, avgdl)`, from the one-row `fts_<aid>(n, total)`.
    st: String,
}

impl Tables {
    /// The dictionary rows of one term (none when it was never indexed): `tid, df`.
    fn term(&self, t: &str) -> String {
        format!("SELECT tid, df FROM {} WHERE term = {}", self.terms, string_value(t))
    }

    /// The dictionary rows of the terms that start with `prefix`: `tid, df`.
    fn prefix(&self, prefix: &str) -> String {
        format!("SELECT tid, df FROM {} WHERE starts_with(term, {})", self.terms, string_value(prefix))
    }
}

/// The SELECT (columns `e BIGINT, v VARCHAR, tx BIGINT, score DOUBLE`) of the documents of attribute `aid` that
/// match `clauses`, scored with BM25 (see the module docs), over the store's postings `ft_<aid>(tid, e, h, tf,
/// pos, len)`, documents `ftd_<aid>(e, h, len)`, term dictionary `ftt_<aid>(term, tid, df)`, statistics
/// `fts_<aid>(n, total)` and current datoms `cur_<aid>` (read only with `need_value`: without it `v` and `tx` are
/// NULL, and a search reads no value).
///
/// One statement of nested subqueries, no common table expressions: the single-term clauses together
/// ([`words_sql`]), each other clause on its own, and the hits that sum the clause scores per document. A term's
/// postings are found through its dictionary row (an ART point lookup on `term`) joined on `tid`; its `df` and the
/// statistics are read, not counted. Measured against counting them from the postings (storage/README.md
/// "The term dictionary, built"): the benchmark's top-10 search p50 3.99 / 4.03 ms against 4.36 / 4.40, alternating
/// runs.
pub fn search_sql(store: &StoreName, aid: Entid, many: bool, clauses: &[Clause], need_value: bool) -> String {
    let tb = Tables {
        post: store.table(&postings_table_name(aid)),
        terms: store.table(&terms_table_name(aid)),
        st: format!(
            "(SELECT n::DOUBLE AS n, (CASE WHEN n > 0 THEN total / n ELSE 0 END)::DOUBLE AS avgdl FROM {}) st",
            store.table(&stats_table_name(aid))
        ),
    };
    let cur = store.current(aid);
    let scoring: Vec<usize> = (0..clauses.len()).filter(|i| clauses[*i].occur != Occur::MustNot).collect();
    if scoring.is_empty() {
        return "SELECT NULL::BIGINT AS e, NULL::VARCHAR AS v, NULL::BIGINT AS tx, NULL::DOUBLE AS score WHERE false"
            .to_string();
    }
    let idf = |df: &str| format!("ln(1 + (st.n - {df} + 0.5) / ({df} + 0.5))");
    let norm = |len: &str| format!("({} * (1 - {b} + {b} * {len} / st.avgdl))", lit(K1), b = lit(B));
    // the scoring single-term clauses: the first clause of each term stands for every clause of that term
    let word = |c: &Clause| match (&c.what, c.occur) {
        (Match::Terms(t), Occur::Should | Occur::Must) if t.len() == 1 => Some(t[0].clone()),
        _ => None,
    };
    let mut words: Vec<(String, usize, u32)> = Vec::new(); // (term, first clause, clauses of it)
    for (i, c) in clauses.iter().enumerate() {
        if let Some(t) = word(c) {
            match words.iter_mut().find(|w| w.0 == t) {
                Some(w) => w.2 += 1,
                None => words.push((t, i, 1)),
            }
        }
    }
    // (relation of `c, e, h, s` rows, whether it has one row per document)
    let mut scored: Vec<(String, bool)> = Vec::new();
    if !words.is_empty() {
        scored.push((words_sql(&tb, &words, &idf, &norm("p.len")), words.len() == 1));
    }
    // the excluded clauses' relations of `e, h` rows, by clause
    let mut excluded: Vec<String> = Vec::new();
    for (i, c) in clauses.iter().enumerate() {
        if word(c).is_some() {
            continue;
        }
        let rel = match (&c.what, c.occur) {
            (Match::Terms(t), Occur::MustNot) if t.len() == 1 => {
                format!("SELECT p.e, p.h FROM {} p JOIN ({}) t ON p.tid = t.tid", tb.post, tb.term(&t[0]))
            }
            (Match::Prefix(pre), Occur::MustNot) => {
                format!("SELECT p.e, p.h FROM {} p JOIN ({}) t ON p.tid = t.tid", tb.post, tb.prefix(pre))
            }
            (Match::Prefix(pre), _) => format!(
                "SELECT {i} AS c, p.e, p.h, sum({} * p.tf * {} / (p.tf + {})) AS s FROM {} p \
                 JOIN ({}) t ON p.tid = t.tid, {} GROUP BY p.e, p.h",
                idf("t.df"),
                lit(K1 + 1.0),
                norm("p.len"),
                tb.post,
                tb.prefix(pre),
                tb.st
            ),
            (Match::Terms(terms), occur) => {
                // the phrase's occurrences: positions of its k-th term less k, equal across its terms; the
                // document's length rides along (one value per document), so no join with the documents
                let occurrences: Vec<String> = terms
                    .iter()
                    .enumerate()
                    .map(|(k, t)| {
                        format!(
                            "SELECT p.e, p.h, p.len, unnest(p.pos) - {k} AS p FROM {} p JOIN ({}) t ON p.tid = t.tid",
                            tb.post,
                            tb.term(t)
                        )
                    })
                    .collect();
                let tf = format!(
                    "SELECT e, h, len, count(*) AS tf FROM ({}) GROUP BY e, h, len",
                    occurrences.join(" INTERSECT ")
                );
                if occur == Occur::MustNot {
                    format!("SELECT e, h FROM ({tf})")
                } else {
                    // the phrase's idf, the sum of its terms' (a term never indexed adds nothing, and the phrase
                    // then matches nothing): one row from the dictionary's lookups
                    let lookups: Vec<String> = terms.iter().map(|t| tb.term(t)).collect();
                    format!(
                        "SELECT {i} AS c, o.e, o.h, i.idf * o.tf * {} / (o.tf + {}) AS s FROM ({tf}) o, \
                         (SELECT sum({}) AS idf FROM ({}) l, {}) i, {}",
                        lit(K1 + 1.0),
                        norm("o.len"),
                        idf("l.df"),
                        lookups.join(" UNION ALL "),
                        tb.st,
                        tb.st
                    )
                }
            }
        };
        if c.occur == Occur::MustNot {
            excluded.push(rel);
        } else {
            // a phrase's rows are one per document (its tf counted per document), and so are a prefix's (its
            // terms summed per document)
            scored.push((rel, true));
        }
    }
    // a required clause of a term another clause also names is checked through the term's first clause
    let mut musts: Vec<usize> = scoring
        .iter()
        .filter(|i| clauses[**i].occur == Occur::Must)
        .map(|&i| word(&clauses[i]).and_then(|t| words.iter().find(|w| w.0 == t)).map_or(i, |w| w.1))
        .collect();
    musts.sort_unstable();
    musts.dedup();
    let having = if musts.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = musts.iter().map(|i| i.to_string()).collect();
        format!(" HAVING count(*) FILTER (WHERE c IN ({})) = {}", list.join(", "), musts.len())
    };
    let rows: Vec<String> = scored.iter().map(|r| format!("({})", r.0)).collect();
    let hits = match scored.as_slice() {
        // one relation with a row per document is its own sum, and a required clause among it holds on every row
        // (its clause index is the relation's): no GROUP BY, whose setup costs DuckDB about 1 ms however few the
        // rows (storage/README.md "Fulltext")
        [(rel, true)] => format!("SELECT e, h, s AS score FROM ({rel})"),
        // a cardinality-one attribute's documents all have h = 0 (doc_key_sql): grouped by e alone, DuckDB hashes
        // one key instead of two (DuckDB's time over the Debian descriptions, 30 interleaved rounds under load:
        // "python library" 9.71 -> 8.65 ms, "web server" 7.66 -> 7.20)
        _ if !many => {
            format!("SELECT e, 0::UBIGINT AS h, sum(s) AS score FROM ({}) GROUP BY e{having}", rows.join(" UNION ALL "))
        }
        _ => format!("SELECT e, h, sum(s) AS score FROM ({}) GROUP BY e, h{having}", rows.join(" UNION ALL ")),
    };
    let excluded: Vec<String> = excluded
        .iter()
        .map(|rel| format!(" AND NOT EXISTS (SELECT 1 FROM ({rel}) x WHERE x.e = hits.e AND x.h = hits.h)"))
        .collect();
    if !need_value {
        // the index holds current datoms only: without ?v and ?tx the hits are the answer, and the values (the
        // long texts) are never read
        return format!(
            "SELECT hits.e AS e, NULL::VARCHAR AS v, NULL::BIGINT AS tx, hits.score AS score FROM ({hits}) hits \
             WHERE true{}",
            excluded.join("")
        );
    }
    format!(
        "SELECT c.e AS e, c.v AS v, c.tx AS tx, hits.score AS score FROM ({hits}) hits JOIN {cur} c \
         ON c.e = hits.e AND {} = hits.h WHERE true{}",
        doc_key_sql(many, "c.v"),
        excluded.join("")
    )
}

/// The relation (`c, e, h, s` rows) that scores every single-term clause of a search at once: one row per posting
/// of the `words` (term, its first clause `c`, the number of clauses that name it, whose scores it sums), scored
/// with its term's BM25 times that number. The terms' dictionary rows (in `UNION ALL`, one ART point lookup per
/// term, each row carrying its term's clause and number of clauses) are joined to the postings on `tid`; DuckDB builds the join's hash table from those few
/// rows and pushes their `tid`s into the postings' scan as a filter, which the zone maps of postings written in
/// `tid` order prune.
///
/// This replaced (2026-12-04) a scan of the postings per term by `term = 'x'` with df counted from them in an
/// ungrouped aggregate (storage/README.md "Fulltext" has both paths' measurements; [`search_sql`] the summary).
fn words_sql(tb: &Tables, words: &[(String, usize, u32)], idf: &dyn Fn(&str) -> String, norm: &str) -> String {
    // each lookup row carries its term's clause and number of clauses, so one expression scores every posting (a
    // CASE over the term's number cost 0.6 ms of DuckDB's profile of "python library")
    let lookups: Vec<String> = words
        .iter()
        .map(|(term, c, m)| {
            format!("SELECT {c} AS c, {m} AS m, tid, df FROM {} WHERE term = {}", tb.terms, string_value(term))
        })
        .collect();
    let weight = if words.iter().all(|w| w.2 == 1) { idf("t.df") } else { format!("t.m * {}", idf("t.df")) };
    format!(
        "SELECT t.c, p.e, p.h, {weight} * p.tf * {} / (p.tf + {norm}) AS s FROM {} p JOIN ({}) t \
         ON p.tid = t.tid, {}",
        lit(K1 + 1.0),
        tb.post,
        lookups.join(" UNION ALL "),
        tb.st
    )
}

/// A DOUBLE literal (DuckDB reads a bare `1.2` as a DECIMAL).
fn lit(x: f64) -> String {
    format!("{x:?}::DOUBLE")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analyzer() {
        let en = Analyzer::new("English").unwrap();
        assert_eq!(en.terms("Running dogs, Café-owners don't 3.14!"), ["run", "dog", "cafe", "owner", "don't", "3.14"]);
        let none = Analyzer::new("none").unwrap();
        assert_eq!(none.terms("Running ﬁles"), ["running", "files"]);
        assert!(Analyzer::new("klingon").err().unwrap().contains("klingon"));
    }

    #[test]
    fn postings_group_each_documents_terms() {
        let mut en = Analyzer::new("english").unwrap();
        let mut p = Postings::default();
        let mut got = |a: &mut Analyzer, text: &str| {
            a.postings_cached(text, &mut p);
            let mut out: Vec<(String, Vec<u32>)> = Vec::new();
            p.each(|id, pos| out.push((a.term_text(id).to_string(), pos.collect())));
            out.sort();
            (p.len, out)
        };
        let own = |s: &str, v: &[u32]| (s.to_string(), v.to_vec());
        assert_eq!(
            got(&mut en, "The dog and the Dogs"),
            (5, vec![own("and", &[2]), own("dog", &[1, 4]), own("the", &[0, 3])])
        );
        // the words are remembered: a second text reuses the ids, and its grouping is its own
        assert_eq!(got(&mut en, "dogs dog, a dog"), (4, vec![own("a", &[2]), own("dog", &[0, 1, 3])]));
        assert_eq!(got(&mut en, " -- "), (0, vec![]));
        let mut terms = Vec::new();
        en.each_term_cached("Dogs and cats", |t| terms.push(t.to_string()));
        assert_eq!(terms, en.terms("Dogs and cats"));
    }

    #[test]
    fn search_syntax() {
        let en = Analyzer::new("english").unwrap();
        let c = parse_search(r#"  +Databases -slow "network file  systems" comp* x86-64 -- "unclosed"#, &en);
        let t = |v: &[&str]| Match::Terms(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            c,
            vec![
                Clause { occur: Occur::Must, what: t(&["databas"]) },
                Clause { occur: Occur::MustNot, what: t(&["slow"]) },
                Clause { occur: Occur::Should, what: t(&["network", "file", "system"]) },
                Clause { occur: Occur::Should, what: Match::Prefix("comp".into()) },
                Clause { occur: Occur::Should, what: t(&["x86", "64"]) },
                Clause { occur: Occur::Should, what: t(&["unclos"]) },
            ]
        );
        assert!(parse_search("  -- + ", &en).is_empty());
    }

    #[test]
    fn sql_shape() {
        let en = Analyzer::new("english").unwrap();
        let store = StoreName::parse("mentat").unwrap();
        let sql = search_sql(&store, 100, false, &parse_search("+a \"b c\" -d", &en), true);
        assert!(sql.contains("\"mentat\".\"ft_100\"") && sql.contains("INTERSECT"), "{sql}");
        assert!(sql.contains("\"mentat\".\"ftt_100\" WHERE term = 'a'") && !sql.contains("WITH"), "{sql}");
        assert!(sql.contains("HAVING count(*) FILTER (WHERE c IN (0)) = 1") && sql.contains("NOT EXISTS"), "{sql}");
        assert!(search_sql(&store, 100, true, &parse_search("-d", &en), false).contains("WHERE false"));
    }
}
