//! `mentat_tokenize(text VARCHAR [, language VARCHAR]) -> VARCHAR[]`: the terms of a text as mentat's fulltext
//! index sees them ([`planner::fulltext::Analyzer`]: UAX #29 words, lowercased, folded, stemmed in `language`,
//! `english` by default, `none` for no stemming); the term at list index `i` is at position `i - 1`.
//!
//! The index maintenance (`storage/src/fulltext.rs`) calls it inside its `INSERT ... SELECT`, so DuckDB runs the
//! analysis in parallel, and users can call it to see why a search matches. NULL in, NULL out. Errors: an
//! unknown language (the message lists the known ones).

use duckdb::ffi;
use planner::fulltext::{Analyzer, DEFAULT_LANGUAGE};
use std::ffi::CString;

/// The text of row `row` of a VARCHAR vector, or None for NULL.
unsafe fn text(vector: ffi::duckdb_vector, row: usize) -> Option<&'static str> {
    let validity = ffi::duckdb_vector_get_validity(vector);
    if !validity.is_null() && !ffi::duckdb_validity_row_is_valid(validity, row as u64) {
        return None;
    }
    let data = ffi::duckdb_vector_get_data(vector) as *mut ffi::duckdb_string_t;
    let s = &mut *data.add(row);
    let len = ffi::duckdb_string_t_length(*s) as usize;
    let ptr = ffi::duckdb_string_t_data(s) as *const u8;
    // the chunk outlives this call's use of the text; invalid UTF-8 cannot reach a VARCHAR
    std::str::from_utf8(std::slice::from_raw_parts(ptr, len)).ok()
}

unsafe fn execute_inner(input: ffi::duckdb_data_chunk, output: ffi::duckdb_vector) -> Result<(), String> {
    let rows = ffi::duckdb_data_chunk_get_size(input) as usize;
    let columns = ffi::duckdb_data_chunk_get_column_count(input) as usize;
    let texts = ffi::duckdb_data_chunk_get_vector(input, 0);
    let langs = (columns > 1).then(|| ffi::duckdb_data_chunk_get_vector(input, 1));
    ANALYZERS.with(|cell| {
        let mut analyzers = cell.borrow_mut();
        fill(input, output, rows, texts, langs, &mut analyzers)
    })
}

thread_local! {
    /// Each DuckDB worker thread's analyzers, one per language, kept across chunks for their word caches.
    static ANALYZERS: std::cell::RefCell<Vec<(String, Analyzer)>> = const { std::cell::RefCell::new(Vec::new()) };
}

unsafe fn fill(
    _input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
    rows: usize,
    texts: ffi::duckdb_vector,
    langs: Option<ffi::duckdb_vector>,
    analyzers: &mut Vec<(String, Analyzer)>,
) -> Result<(), String> {
    // terms are written straight into the list's child vector, which grows by doubling
    let (mut written, mut capacity) = (0u64, 0u64);
    let mut child = ffi::duckdb_list_vector_get_child(output);
    let mut spans: Vec<Option<(u64, u64)>> = Vec::with_capacity(rows);
    for row in 0..rows {
        let lang = match langs {
            Some(v) => text(v, row),
            None => Some(DEFAULT_LANGUAGE),
        };
        let (Some(t), Some(lang)) = (text(texts, row), lang) else {
            spans.push(None);
            continue;
        };
        let i = match analyzers.iter().position(|(l, _)| l == lang) {
            Some(i) => i,
            None => {
                analyzers.push((lang.to_string(), Analyzer::new(lang)?));
                analyzers.len() - 1
            }
        };
        let start = written;
        let mut failed = false;
        analyzers[i].1.each_term_cached(t, |term| {
            if failed {
                return;
            }
            if written == capacity {
                capacity = (capacity * 2).max(4 * 2048);
                if ffi::duckdb_list_vector_reserve(output, capacity) != ffi::DuckDBSuccess {
                    failed = true;
                    return;
                }
                child = ffi::duckdb_list_vector_get_child(output);
            }
            ffi::duckdb_vector_assign_string_element_len(child, written, term.as_ptr() as *const _, term.len() as u64);
            written += 1;
        });
        if failed {
            return Err(format!("mentat_tokenize: cannot hold {capacity} terms in one vector"));
        }
        spans.push(Some((start, written - start)));
    }
    ffi::duckdb_list_vector_set_size(output, written);
    let entries = ffi::duckdb_vector_get_data(output) as *mut ffi::duckdb_list_entry;
    for (row, span) in spans.into_iter().enumerate() {
        match span {
            Some((offset, length)) => *entries.add(row) = ffi::duckdb_list_entry { offset, length },
            None => {
                ffi::duckdb_vector_ensure_validity_writable(output);
                ffi::duckdb_validity_set_row_invalid(ffi::duckdb_vector_get_validity(output), row as u64);
            }
        }
    }
    Ok(())
}

unsafe extern "C" fn execute(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) {
    let message = match std::panic::catch_unwind(|| unsafe { execute_inner(input, output) }) {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(_) => "mentat panicked while tokenizing".to_string(),
    };
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    ffi::duckdb_scalar_function_set_error(info, c.as_ptr());
}

/// Registers `mentat_tokenize` with one and two VARCHAR arguments.
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection) -> Result<(), String> {
    crate::sql::register_varchar_set(
        con,
        c"mentat_tokenize",
        1..=2,
        |varchar| ffi::duckdb_create_list_type(varchar),
        |f| ffi::duckdb_scalar_function_set_function(f, Some(execute)),
    )
}
