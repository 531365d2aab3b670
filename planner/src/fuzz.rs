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
