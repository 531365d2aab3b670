//! Mutation fuzzing of the EDN reader, the query compiler and the pull compiler (issue 17, a first part): every
//! query and pull pattern written in the compiler's own tests is a seed; each round mutates one (deletes,
//! duplicates or swaps a span, inserts a token of Datalog's grammar) and compiles the result. The compiler must
//! answer or return an error, never panic, and never take a second. `MENTAT_FUZZ_ROUNDS` sets the number of
//! rounds (default 20,000 in the test suite) and `MENTAT_FUZZ_SEED` the generator's seed;
//! `MENTAT_FUZZ_ROUNDS=10000000 cargo test -p planner --release fuzz -- --nocapture` is the long run, which prints
//! its figures (10 million rounds: about two minutes on two cores).

use crate::fuzz::{guarded, literals, mutate, Rng, QUERY_TOKENS};
use crate::layout::StoreName;
use crate::{compile_pull, compile_query, QueryOptions};
use std::time::Duration;

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
            let p = mutate(&mut rng, &patterns[seed], &words, QUERY_TOKENS);
            let (schema, store, opts) = (&schema, &store, &opts);
            guarded("compile_pull", &p, || compile_pull(&p, schema, store, opts).is_ok())
        } else {
            let seed = rng.below(queries.len());
            let q = mutate(&mut rng, &queries[seed], &words, QUERY_TOKENS);
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
