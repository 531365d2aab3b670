//! Mutation fuzzing of the EDN reader, the query compiler and the pull compiler (issue 17, a first part): every
//! query and pull pattern written in the compiler's own tests is a seed; each round mutates one (deletes,
//! duplicates or swaps a span, inserts a token of Datalog's grammar) and compiles the result. The compiler must
//! answer or return an error, never panic, and never take a second. `MENTAT_FUZZ_ROUNDS` sets the number of
//! rounds (default 20,000 in the test suite) and `MENTAT_FUZZ_SEED` the generator's seed;
//! `MENTAT_FUZZ_ROUNDS=10000000 cargo test -p planner --release fuzz -- --nocapture` is the long run, which prints
//! its figures (10 million rounds: about two minutes on two cores).

use crate::fuzz::compile_campaign;
use std::time::Duration;

#[test]
fn fuzz_the_query_and_pull_compilers() {
    let rounds: usize = std::env::var("MENTAT_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("MENTAT_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5EED_2026_1201);
    let c = compile_campaign(rounds, seed, |_| Ok(()));
    assert!(
        c.seeds_queries > 50 && c.seeds_patterns > 10,
        "{} queries, {} patterns",
        c.seeds_queries,
        c.seeds_patterns
    );
    println!(
        "fuzz: {rounds} rounds over {} queries and {} patterns: {} compiled, {} refused, slowest {:?}",
        c.seeds_queries, c.seeds_patterns, c.compiled, c.refused, c.slowest
    );
    assert!(c.slowest < Duration::from_secs(1), "an input took {:?}", c.slowest);
}
