//! Mutation fuzzing of the EDN reader, the query compiler and the pull compiler (issue 17, a first part): every
//! query and pull pattern written in the compiler's own tests is a seed; each round mutates one (deletes,
//! duplicates or swaps a span, inserts a token of Datalog's grammar) and compiles the result. The compiler must
//! answer or return an error, never panic, and never take a second. `MENTAT_FUZZ_ROUNDS` sets the number of
//! rounds (default 20,000 in the test suite) and `MENTAT_FUZZ_SEED` the generator's seed;
//! `MENTAT_FUZZ_ROUNDS=10000000 cargo test -p planner --release fuzz -- --nocapture` is the long run, which prints
//! its figures (10 million rounds: about two minutes on two cores).

use crate::layout::StoreName;
use crate::{compile_pull, compile_query, QueryOptions};
use std::time::{Duration, Instant};

/// The string literals of `source` that start like a query or a pull pattern (`"[:find`, `"[:db/id`, ...),
/// with `\"` and `\\` unescaped.
fn literals(source: &str, starts: &[&str]) -> Vec<String> {
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

/// xorshift64*: a seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&str] = &[
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "#{",
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
/// the seeds' words or a token, dropped or repeated), which keeps most brackets balanced so that the compiler
/// rather than the reader sees the input; else of its characters.
fn mutate(rng: &mut Rng, seed: &str, words: &[&str]) -> String {
    if rng.below(2) == 0 {
        let mut w: Vec<&str> = seed.split(' ').collect();
        for _ in 0..1 + rng.below(2) {
            let at = rng.below(w.len());
            let other = if rng.below(2) == 0 { words[rng.below(words.len())] } else { TOKENS[rng.below(TOKENS.len())] };
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
                let t = TOKENS[rng.below(TOKENS.len())];
                chars.splice(a..a, t.chars());
            }
        }
    }
    chars.into_iter().collect()
}

/// Runs `f` on `input`: a panic is a failure naming the input; returns whether it compiled and how long it took.
fn guarded(what: &str, input: &str, f: impl FnOnce() -> bool + std::panic::UnwindSafe) -> (bool, Duration) {
    let t = Instant::now();
    match std::panic::catch_unwind(f) {
        Ok(ok) => (ok, t.elapsed()),
        Err(_) => panic!("{what} panicked on {input:?}"),
    }
}

#[test]
fn fuzz_the_query_and_pull_compilers() {
    let rounds: usize = std::env::var("MENTAT_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
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
    assert!(queries.len() > 50 && patterns.len() > 10, "{} queries, {} patterns", queries.len(), patterns.len());
    let inputs = ["[]", "[\"a@b.c\"]", "[[1 2]]", "[[[1 \"a\"]]]", "[:issue/title]", "[#inst \"2021\" 3]"];
    let schema = crate::tests::schema();
    let store = StoreName::parse("mentat").expect("store");
    let opts = QueryOptions::default();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let seed: u64 = std::env::var("MENTAT_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5EED_2026_1201);
    let mut rng = Rng(seed.max(1));
    let words: Vec<&str> = queries.iter().chain(&patterns).flat_map(|q| q.split(' ')).collect();
    let (mut slowest, mut compiled, mut refused) = (Duration::ZERO, 0usize, 0usize);
    for _ in 0..rounds {
        let (ok, t) = if rng.below(4) == 0 {
            let seed = rng.below(patterns.len());
            let p = mutate(&mut rng, &patterns[seed], &words);
            let (schema, store, opts) = (&schema, &store, &opts);
            guarded("compile_pull", &p, || compile_pull(&p, schema, store, opts).is_ok())
        } else {
            let seed = rng.below(queries.len());
            let q = mutate(&mut rng, &queries[seed], &words);
            // a query without :in takes no inputs; one with takes a guess, right or wrong
            let i = if q.contains(":in") { Some(inputs[rng.below(inputs.len())]) } else { None };
            let (schema, store, opts) = (&schema, &store, &opts);
            guarded("compile_query", &format!("{q} with {i:?}"), || compile_query(&q, i, schema, store, opts).is_ok())
        };
        if ok {
            compiled += 1;
        } else {
            refused += 1;
        }
        slowest = slowest.max(t);
    }
    std::panic::set_hook(previous);
    println!(
        "fuzz: {rounds} rounds over {} queries and {} patterns: {compiled} compiled, {refused} refused, slowest {:?}",
        queries.len(),
        patterns.len(),
        slowest
    );
    assert!(slowest < Duration::from_secs(1), "an input took {slowest:?}");
}
