//! The query and pull compilers' mutation fuzz campaign (`planner::fuzz::compile_campaign`) with every compiled
//! statement handed to DuckDB's own parser (`duckdb_extract_statements` of libduckdb's C API, which parses without
//! binding, so the store's tables need not exist). Issue 17 asks that the compiler either returns an error or SQL
//! that DuckDB parses: a statement it cannot parse is a compiler bug. Prints the campaign's figures and the first
//! statements DuckDB refused; exits 1 when any was refused or an input took a second or more (a panic aborts the
//! run with the input that caused it).
//!
//! usage: mentat-fuzz-sql [--rounds N (1,000,000)] [--seed S]

use libduckdb_sys as ffi;
use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str) -> Option<u64> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.replace('_', "").parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = arg(&args, "--rounds").unwrap_or(1_000_000) as usize;
    let seed = arg(&args, "--seed").unwrap_or(0x5EED_2026_1201);
    let (mut db, mut conn): (ffi::duckdb_database, ffi::duckdb_connection) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: an in-memory database and one connection, both closed at the end; every pointer handed to DuckDB
    // lives across the call.
    unsafe {
        assert_eq!(ffi::duckdb_open(std::ptr::null(), &mut db), ffi::DuckDBSuccess, "duckdb_open");
        assert_eq!(ffi::duckdb_connect(db, &mut conn), ffi::DuckDBSuccess, "duckdb_connect");
    }
    let mut parse_time = Duration::ZERO;
    let check = |sql: &str| -> Result<(), String> {
        let text = CString::new(sql).map_err(|_| "a NUL byte inside the statement".to_string())?;
        let t = Instant::now();
        // SAFETY: `conn` is open; `extracted` is destroyed below whatever the outcome.
        let result = unsafe {
            let mut extracted: ffi::duckdb_extracted_statements = std::ptr::null_mut();
            let n = ffi::duckdb_extract_statements(conn, text.as_ptr(), &mut extracted);
            let r = if n == 0 {
                let why = ffi::duckdb_extract_statements_error(extracted);
                Err(if why.is_null() { "no statement".into() } else { CStr::from_ptr(why).to_string_lossy().into() })
            } else if n > 1 {
                Err(format!("{n} statements"))
            } else {
                Ok(())
            };
            ffi::duckdb_destroy_extracted(&mut extracted);
            r
        };
        parse_time += t.elapsed();
        result
    };
    let t = Instant::now();
    let c = planner::fuzz::compile_campaign(rounds, seed, check);
    let took = t.elapsed();
    // SAFETY: closing what was opened above.
    unsafe {
        ffi::duckdb_disconnect(&mut conn);
        ffi::duckdb_close(&mut db);
    }
    println!(
        "fuzz_sql: {rounds} rounds (seed {seed:#x}) over {} queries and {} pull patterns in {:.1} s: {} compiled, {} \
         refused by the compiler, {} refused by DuckDB's parser; slowest compile {:?}; parsing took {:.1} s",
        c.seeds_queries,
        c.seeds_patterns,
        took.as_secs_f64(),
        c.compiled,
        c.refused,
        c.check_failed,
        c.slowest,
        parse_time.as_secs_f64()
    );
    for (input, sql, why) in &c.check_failures {
        println!("--- DuckDB refused the statement of {input} ({why}):\n{sql}");
    }
    if c.check_failed > 0 || c.slowest >= Duration::from_secs(1) {
        std::process::exit(1);
    }
}
