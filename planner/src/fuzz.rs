//! Mutation fuzzing helpers, shared by the fuzz tests of this crate (the EDN reader, the query and pull
//! compilers) and of `storage` (the transaction parser): a seeded generator, seeds taken from test sources, and
//! mutations that keep inputs close to the grammar. Issue 17's first part; the tests print their figures.

use std::time::{Duration, Instant};

/// The string literals of `source` that start like a query or a pull pattern (`"[:find`, `"[:db/id`, ...),
/// with `\"` and `\\` unescaped.
pub fn literals(source: &str, starts: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let b = source.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' && starts.iter().any(|s| source[i + 1..].starts_with(s)) {
            let mut s = String::new();
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                if b[j] == b'\\' && j + 1 < b.len() {
                    j += 1;
                }
                s.push(b[j] as char);
                j += 1;
            }
            out.push(s);
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// The brackets of EDN, which mutations insert besides the tokens of each grammar.
pub const BRACKETS: &[&str] = &["[", "]", "(", ")", "{", "}", "#{"];

/// Tokens of transaction data that mutations insert.
pub const TX_TOKENS: &[&str] = &[
    ":db/add",
    ":db/retract",
    ":db/retractEntity",
    ":db.fn/cas",
    ":db/cas",
    ":db.fn/retractAttribute",
    ":db/id",
    "\"t\"",
    "\"datomic.tx\"",
    "(transaction-tx)",
    "(lookup-ref :user/email \"a\")",
    "[:user/email \"a\"]",
    ":user/email",
    ":issue/label",
    ":issue/comment",
    ":nope/x",
    ":db/ident",
    ":db/valueType",
    ":db.type/string",
    ":db.type/ref",
    ":db/cardinality",
    ":db.cardinality/many",
    ":db/unique",
    ":db/isComponent",
    "#inst \"2021\"",
    "#uuid \"x\"",
    "1N",
    "1.5M",
    "nil",
    "true",
    "-1",
    "9223372036854775807",
    "\"",
    "\\",
    ";",
    " ",
];

/// xorshift64*: a seeded, dependency-free generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Tokens of Datalog queries and pull patterns that mutations insert.
pub const QUERY_TOKENS: &[&str] = &[
    "?x",
    "?e",
    "?a",
    "_",
    "$",
    "$2",
    "%",
    "...",
    ":find",
    ":where",
    ":in",
    ":with",
    ":keys",
    ":order",
    ":limit",
    ":issue/title",
    ":user/email",
    ":issue/_assignee",
    ":db/id",
    ":nope/x",
    "#inst \"2021\"",
    "#inst \"2021-13-45T99\"",
    "#uuid \"x\"",
    "\"",
    "\\",
    "1N",
    "1.5M",
    "-0",
    "9223372036854775807",
    "nil",
    "true",
    "*",
    "(pull ?e [*])",
    "(count ?x)",
    "(max 2 ?x)",
    "[(< ?x 3)]",
    "[(ground [1 2]) [?a ?b]]",
    "(not [?e :issue/title _])",
    "(or [?e :issue/title _])",
    "(rule ?x)",
    "[?e ?a ?v]",
    ";",
    "\n",
    " ",
    "{:user/friend ...}",
    "{:issue/label 3}",
    "[:issue/label :limit 1]",
    "(default :issue/title \"x\")",
];

/// One to three edits of `seed`: half the time of its words (whitespace-separated: a word replaced by another of
/// the seeds' `words` or one of `tokens`, dropped or repeated), which keeps most brackets balanced so that the compiler
/// rather than the reader sees the input; else of its characters.
pub fn mutate(rng: &mut Rng, seed: &str, words: &[&str], tokens: &[&str]) -> String {
    if rng.below(2) == 0 {
        let mut w: Vec<&str> = seed.split(' ').collect();
        for _ in 0..1 + rng.below(2) {
            let at = rng.below(w.len());
            let other = if rng.below(2) == 0 { words[rng.below(words.len())] } else { tokens[rng.below(tokens.len())] };
            match rng.below(4) {
                0 if w.len() > 1 => {
                    w.remove(at);
                }
                1 => w.insert(at, w[at]),
                _ => w[at] = other,
            }
        }
        return w.join(" ");
    }
    let mut chars: Vec<char> = seed.chars().collect();
    for _ in 0..1 + rng.below(3) {
        let n = chars.len();
        let (a, b) = {
            let a = rng.below(n + 1);
            let b = (a + rng.below(8)).min(n);
            (a, b)
        };
        match rng.below(4) {
            0 => {
                chars.drain(a..b);
            }
            1 => {
                let span: Vec<char> = chars[a..b].to_vec();
                let at = rng.below(chars.len() + 1);
                chars.splice(at..at, span);
            }
            2 if b > a && n > 1 => {
                let c = rng.below(n);
                chars.swap(a.min(n - 1), c);
            }
            _ => {
                let t = if rng.below(4) == 0 {
                    BRACKETS[rng.below(BRACKETS.len())]
                } else {
                    tokens[rng.below(tokens.len())]
                };
                chars.splice(a..a, t.chars());
            }
        }
    }
    chars.into_iter().collect()
}

/// Runs `f` on `input`: a panic is a failure naming the input; returns whether it compiled and how long it took.
pub fn guarded(what: &str, input: &str, f: impl FnOnce() -> bool + std::panic::UnwindSafe) -> (bool, Duration) {
    let t = Instant::now();
    match std::panic::catch_unwind(f) {
        Ok(ok) => (ok, t.elapsed()),
        Err(_) => panic!("{what} panicked on {input:?}"),
    }
}

/// The issue-tracker schema the compiler's own tests use (users, issues, labels), which the fuzz campaigns compile
/// their inputs against.
pub fn issue_schema() -> crate::schema::Schema {
    use crate::schema::{Attribute, Unique, ValueType};
    let attr = |e, i: &str, t, many, unique: Option<Unique>| {
        let mut a = Attribute::new(e, i, t);
        a.many = many;
        a.unique = unique;
        a.index = unique.is_some();
        a
    };
    let mut s = crate::layout::bootstrap_schema()
        .with_attribute(attr(100, ":user/email", ValueType::String, false, Some(Unique::Identity)))
        .with_attribute(attr(101, ":user/name", ValueType::String, false, None))
        .with_attribute(attr(102, ":issue/title", ValueType::String, false, None))
        .with_attribute(attr(103, ":issue/state", ValueType::Keyword, false, None))
        .with_attribute(attr(104, ":issue/priority", ValueType::Long, false, None))
        .with_attribute(attr(105, ":issue/assignee", ValueType::Ref, false, None))
        .with_attribute(attr(106, ":issue/reporter", ValueType::Ref, false, None))
        .with_attribute(attr(107, ":issue/created-at", ValueType::Instant, false, None))
        .with_attribute(attr(108, ":issue/label", ValueType::Ref, true, None))
        .with_attribute(attr(109, ":label/name", ValueType::String, false, Some(Unique::Identity)));
    s.add_ident(":priority/high", 200);
    s
}

/// What a campaign of [`compile_campaign`] did.
#[derive(Debug, Default)]
pub struct Campaign {
    pub seeds_queries: usize,
    pub seeds_patterns: usize,
    pub compiled: usize,
    pub refused: usize,
    /// Inputs whose compiled statement the `check` refused: `(input, statement, reason)`, the first 20.
    pub check_failures: Vec<(String, String, String)>,
    pub check_failed: usize,
    pub slowest: Duration,
}

/// A mutation campaign over the query and pull compilers: `rounds` inputs, each a mutation ([`mutate`]) of a query or
/// pull pattern written in the compiler's own tests and sources, compiled against [`issue_schema`] (a query with
/// `:in` gets one of a few inputs, right or wrong). A panic is a failure naming the input (see [`guarded`]). Every
/// statement that compiles is handed to `check` (for example DuckDB's parser); its `Err` is counted and kept.
pub fn compile_campaign(rounds: usize, seed: u64, mut check: impl FnMut(&str) -> Result<(), String>) -> Campaign {
    use crate::layout::StoreName;
    use crate::{compile_pull, compile_query, QueryOptions};
    let sources = [
        include_str!("tests.rs"),
        include_str!("tests_log.rs"),
        include_str!("rules.rs"),
        include_str!("pull.rs"),
        include_str!("entity.rs"),
    ];
    let mut queries = Vec::new();
    let mut patterns = Vec::new();
    for s in sources {
        queries.extend(literals(s, &["[:find"]));
        patterns.extend(literals(s, &["[:", "[*", "[{", "[["]).into_iter().filter(|p| !p.starts_with("[:find")));
    }
    let inputs = ["[]", "[\"a@b.c\"]", "[[1 2]]", "[[[1 \"a\"]]]", "[:issue/title]", "[#inst \"2021\" 3]"];
    let schema = issue_schema();
    let store = StoreName::parse("mentat").expect("store");
    let opts = QueryOptions::default();
    let mut rng = Rng(seed.max(1));
    let words: Vec<&str> = queries.iter().chain(&patterns).flat_map(|q| q.split(' ')).collect();
    let mut out = Campaign { seeds_queries: queries.len(), seeds_patterns: patterns.len(), ..Default::default() };
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for _ in 0..rounds {
        let (sql, t) = if rng.below(4) == 0 {
            let at = rng.below(patterns.len());
            let p = mutate(&mut rng, &patterns[at], &words, QUERY_TOKENS);
            let (schema, store, opts) = (&schema, &store, &opts);
            let sql =
                guarded_value("compile_pull", &p, || compile_pull(&p, schema, store, opts).ok().map(|c| c.many_sql()));
            (sql.0.map(|s| (p, s)), sql.1)
        } else {
            let at = rng.below(queries.len());
            let q = mutate(&mut rng, &queries[at], &words, QUERY_TOKENS);
            let i = if q.contains(":in") { Some(inputs[rng.below(inputs.len())]) } else { None };
            let (schema, store, opts) = (&schema, &store, &opts);
            let input = format!("{q} with inputs {i:?}");
            let sql = guarded_value("compile_query", &input, || {
                compile_query(&q, i, schema, store, opts).ok().map(|c| c.sql)
            });
            (sql.0.map(|s| (input, s)), sql.1)
        };
        out.slowest = out.slowest.max(t);
        match sql {
            Some((input, sql)) => {
                out.compiled += 1;
                if let Err(why) = check(&sql) {
                    out.check_failed += 1;
                    if out.check_failures.len() < 20 {
                        out.check_failures.push((input, sql, why));
                    }
                }
            }
            None => out.refused += 1,
        }
    }
    std::panic::set_hook(previous);
    out
}

/// [`guarded`] for a function that gives a value.
pub fn guarded_value<T>(what: &str, input: &str, f: impl FnOnce() -> T + std::panic::UnwindSafe) -> (T, Duration) {
    let t = Instant::now();
    match std::panic::catch_unwind(f) {
        Ok(v) => (v, t.elapsed()),
        Err(_) => panic!("{what} panicked on {input:?}"),
    }
}
