//! Two scalars over mentat's fulltext analyzer ([`planner::fulltext::Analyzer`]: UAX #29 words, lowercased,
//! folded, stemmed in `language`, `english` by default, `none` for no stemming):
//!
//! * `mentat_tokenize(text VARCHAR [, language VARCHAR]) -> VARCHAR[]`: the terms of a text as the index sees
//!   them; the term at list index `i` is at position `i - 1`. For users, to see why a search matches.
//! * `mentat_postings(text VARCHAR [, language VARCHAR]) -> STRUCT(term VARCHAR, tf INTEGER, pos INTEGER[], len
//!   INTEGER)[]`: the text as one document of the postings table: each distinct term once with its frequency,
//!   its 0-based positions ascending and the document's length in terms (the same in every element; an empty
//!   list for a text without words). The index maintenance (`storage/src/fulltext.rs`) calls it inside its
//!   `INSERT ... SELECT`, so DuckDB runs the analysis on all cores.
//!
//! NULL in, NULL out. Errors: an unknown language (the message lists the known ones).

use duckdb::ffi;
use planner::fulltext::{Analyzer, Postings, DEFAULT_LANGUAGE};

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

type Fill = unsafe fn(
    ffi::duckdb_vector,
    usize,
    ffi::duckdb_vector,
    Option<ffi::duckdb_vector>,
    &mut Vec<(String, Analyzer)>,
) -> Result<(), String>;

unsafe fn execute_inner(input: ffi::duckdb_data_chunk, output: ffi::duckdb_vector, fill: Fill) -> Result<(), String> {
    let rows = ffi::duckdb_data_chunk_get_size(input) as usize;
    let columns = ffi::duckdb_data_chunk_get_column_count(input) as usize;
    let texts = ffi::duckdb_data_chunk_get_vector(input, 0);
    let langs = (columns > 1).then(|| ffi::duckdb_data_chunk_get_vector(input, 1));
    ANALYZERS.with(|cell| {
        let mut analyzers = cell.borrow_mut();
        fill(output, rows, texts, langs, &mut analyzers)
    })
}

/// The analyzer of row `row`'s language (the default without a language column), created on first use; None
/// for a NULL language.
unsafe fn analyzer_of(
    analyzers: &mut Vec<(String, Analyzer)>,
    langs: Option<ffi::duckdb_vector>,
    row: usize,
) -> Result<Option<usize>, String> {
    let lang = match langs {
        Some(v) => match text(v, row) {
            Some(l) => l,
            None => return Ok(None),
        },
        None => DEFAULT_LANGUAGE,
    };
    Ok(Some(match analyzers.iter().position(|(l, _)| l == lang) {
        Some(i) => i,
        None => {
            analyzers.push((lang.to_string(), Analyzer::new(lang)?));
            analyzers.len() - 1
        }
    }))
}

/// Sets the list entries of `output`'s rows (`None`: NULL).
unsafe fn set_entries(output: ffi::duckdb_vector, spans: Vec<Option<(u64, u64)>>) {
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
}

/// Grows list vector `list` by doubling to hold `need` elements (`capacity` tracks what was reserved).
unsafe fn reserve(list: ffi::duckdb_vector, capacity: &mut u64, need: u64, what: &str) -> Result<(), String> {
    if need <= *capacity {
        return Ok(());
    }
    let mut c = (*capacity * 2).max(4 * 2048);
    while c < need {
        c *= 2;
    }
    if ffi::duckdb_list_vector_reserve(list, c) != ffi::DuckDBSuccess {
        return Err(format!("{what}: cannot hold {c} elements in one vector"));
    }
    *capacity = c;
    Ok(())
}

unsafe fn fill_postings(
    output: ffi::duckdb_vector,
    rows: usize,
    texts: ffi::duckdb_vector,
    langs: Option<ffi::duckdb_vector>,
    analyzers: &mut Vec<(String, Analyzer)>,
) -> Result<(), String> {
    const WHAT: &str = "mentat_postings";
    let (mut written, mut capacity) = (0u64, 0u64);
    let (mut positions, mut pos_capacity) = (0u64, 0u64);
    let mut spans: Vec<Option<(u64, u64)>> = Vec::with_capacity(rows);
    let mut doc = Postings::default();
    for row in 0..rows {
        // a NULL text is NULL whatever the language names (the language is not read for it)
        let Some(t) = text(texts, row) else {
            spans.push(None);
            continue;
        };
        let Some(i) = analyzer_of(analyzers, langs, row)? else {
            spans.push(None);
            continue;
        };
        let analyzer = &mut analyzers[i].1;
        analyzer.postings_cached(t, &mut doc);
        let start = written;
        reserve(output, &mut capacity, written + doc.terms() as u64, WHAT)?;
        // the struct's children, fetched after the reserve (which may move them)
        let st = ffi::duckdb_list_vector_get_child(output);
        let term_v = ffi::duckdb_struct_vector_get_child(st, 0);
        let tf = ffi::duckdb_vector_get_data(ffi::duckdb_struct_vector_get_child(st, 1)) as *mut i32;
        let pos_v = ffi::duckdb_struct_vector_get_child(st, 2);
        let len = ffi::duckdb_vector_get_data(ffi::duckdb_struct_vector_get_child(st, 3)) as *mut i32;
        reserve(pos_v, &mut pos_capacity, positions + doc.len as u64, WHAT)?;
        let pos_entries = ffi::duckdb_vector_get_data(pos_v) as *mut ffi::duckdb_list_entry;
        let pos_data = ffi::duckdb_vector_get_data(ffi::duckdb_list_vector_get_child(pos_v)) as *mut i32;
        doc.each(|id, pos| {
            let term = analyzer.term_text(id);
            ffi::duckdb_vector_assign_string_element_len(term_v, written, term.as_ptr() as *const _, term.len() as u64);
            let first = positions;
            for p in pos {
                *pos_data.add(positions as usize) = p as i32;
                positions += 1;
            }
            *pos_entries.add(written as usize) = ffi::duckdb_list_entry { offset: first, length: positions - first };
            *tf.add(written as usize) = (positions - first) as i32;
            *len.add(written as usize) = doc.len as i32;
            written += 1;
        });
        spans.push(Some((start, written - start)));
    }
    let st = ffi::duckdb_list_vector_get_child(output);
    ffi::duckdb_list_vector_set_size(ffi::duckdb_struct_vector_get_child(st, 2), positions);
    ffi::duckdb_list_vector_set_size(output, written);
    set_entries(output, spans);
    Ok(())
}

thread_local! {
    /// Each DuckDB worker thread's analyzers, one per language, kept across chunks for their word caches.
    static ANALYZERS: std::cell::RefCell<Vec<(String, Analyzer)>> = const { std::cell::RefCell::new(Vec::new()) };
}

unsafe fn fill_terms(
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
    let mut failed = None;
    for row in 0..rows {
        // a NULL text is NULL whatever the language names (the language is not read for it)
        let Some(t) = text(texts, row) else {
            spans.push(None);
            continue;
        };
        let Some(i) = analyzer_of(analyzers, langs, row)? else {
            spans.push(None);
            continue;
        };
        let start = written;
        analyzers[i].1.each_term_cached(t, |term| {
            if failed.is_some() {
                return;
            }
            if written == capacity {
                if let Err(e) = reserve(output, &mut capacity, written + 1, "mentat_tokenize") {
                    failed = Some(e);
                    return;
                }
                child = ffi::duckdb_list_vector_get_child(output);
            }
            ffi::duckdb_vector_assign_string_element_len(child, written, term.as_ptr() as *const _, term.len() as u64);
            written += 1;
        });
        if let Some(e) = failed {
            return Err(e);
        }
        spans.push(Some((start, written - start)));
    }
    ffi::duckdb_list_vector_set_size(output, written);
    set_entries(output, spans);
    Ok(())
}

unsafe fn execute(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
    fill: Fill,
) {
    let outcome = std::panic::catch_unwind(|| unsafe { execute_inner(input, output, fill) });
    crate::sql::finish_scalar(info, outcome, "mentat panicked while tokenizing");
}

unsafe extern "C" fn execute_terms(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) {
    execute(info, input, output, fill_terms)
}

unsafe extern "C" fn execute_postings(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) {
    execute(info, input, output, fill_postings)
}

/// Registers `mentat_tokenize` and `mentat_postings`, each with one and two VARCHAR arguments.
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection) -> Result<(), String> {
    crate::sql::register_varchar_set(
        con,
        c"mentat_tokenize",
        1..=2,
        |varchar| ffi::duckdb_create_list_type(varchar),
        |f| ffi::duckdb_scalar_function_set_function(f, Some(execute_terms)),
    )?;
    crate::sql::register_varchar_set(
        con,
        c"mentat_postings",
        1..=2,
        |varchar| {
            let mut int = ffi::duckdb_create_logical_type(ffi::DUCKDB_TYPE_DUCKDB_TYPE_INTEGER);
            let mut ints = ffi::duckdb_create_list_type(int);
            let mut members = [varchar, int, ints, int];
            let names = [c"term".as_ptr(), c"tf".as_ptr(), c"pos".as_ptr(), c"len".as_ptr()];
            let mut st = ffi::duckdb_create_struct_type(members.as_mut_ptr(), names.as_ptr() as *mut _, 4);
            let list = ffi::duckdb_create_list_type(st);
            ffi::duckdb_destroy_logical_type(&mut st);
            ffi::duckdb_destroy_logical_type(&mut ints);
            ffi::duckdb_destroy_logical_type(&mut int);
            list
        },
        |f| ffi::duckdb_scalar_function_set_function(f, Some(execute_postings)),
    )
}
