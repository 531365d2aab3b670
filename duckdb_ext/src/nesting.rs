//! A guard at the entry points: EDN text nested deeper than [`MAX_DEPTH`], or with a `\u` character literal whose
//! digits are not ASCII, is refused before any reader sees it; so is the SQL of an import's source query nested
//! deeper than that ([`check_sql`]).
//!
//! The EDN readers, the printers of their errors and the drop of what they read all recurse once per level, on
//! the stack of the caller's thread; a few thousand `[` (about 7,000 on an 8 MB stack, far fewer on the smaller
//! stacks of other hosts' threads) overflowed it and killed the whole process with SIGSEGV. No query, pull
//! pattern, input or transaction needs anything near this depth.

/// The deepest nesting of `[`, `(`, `{` and `#{` accepted in one EDN text.
pub(crate) const MAX_DEPTH: usize = 256;

/// Ok when `text` nests no deeper than [`MAX_DEPTH`]; otherwise an error that says so, naming `what` the text is.
/// Brackets inside strings, character literals (`\[`) and comments do not count.
pub(crate) fn check(text: &str, what: &str) -> Result<(), String> {
    // a `\u` character literal with a non-ASCII character among its 4 digits made the reader slice inside that
    // character and panic
    if let Some(i) = planner::parse::char_literal_panics(text) {
        return Err(format!("{what} has a malformed character literal at byte {i}: \\u needs 4 hex digits"));
    }
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => i = planner::parse::string_end(b, i),
            b'\\' => i += 1, // a character literal: `\[` is no bracket
            b';' => i = planner::parse::comment_end(b, i),
            b'[' | b'(' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!(
                        "{what} nests brackets more than {MAX_DEPTH} levels deep (at byte {i}); mentat refuses it \
                         rather than read it"
                    ));
                }
            }
            b']' | b')' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Ok when the SQL `text` nests parentheses no deeper than [`MAX_DEPTH`]; otherwise an error that says so,
/// naming `what` the text is. DuckDB's own parser takes minutes over ten thousand nested parentheses (a hang of
/// the caller's statement, found by `benchmarks/py/fuzz_ext.py`), and no source query of an import needs a
/// fraction of that. Parentheses inside string literals, quoted identifiers and comments do not count.
pub(crate) fn check_sql(text: &str, what: &str) -> Result<(), String> {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            // '...' and "..." (a doubled quote inside is two quoted runs back to back, which counts the same)
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 1;
            }
            b'(' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!(
                        "{what} nests parentheses more than {MAX_DEPTH} levels deep (at byte {i}); mentat refuses \
                         it rather than hand it to DuckDB's parser"
                    ));
                }
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_parentheses_are_counted_outside_literals_identifiers_and_comments() {
        let deep = |n: usize| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n));
        assert!(check_sql(&deep(MAX_DEPTH), "x").is_ok());
        let e = check_sql(&deep(MAX_DEPTH + 1), "mentat_import: the source query").unwrap_err();
        assert!(e.starts_with("mentat_import: the source query nests parentheses more than 256"), "{e}");
        assert!(check_sql(&"(".repeat(10_000), "x").is_err());
        let data = "(".repeat(1000);
        for s in [
            format!("SELECT '{data}' AS a"),
            format!("SELECT 1 AS \"{data}\""),
            format!("SELECT 1 -- {data}\n"),
            format!("SELECT /* {data} */ 1"),
            format!("SELECT 'it''s {data}'"),
        ] {
            assert!(check_sql(&s, "x").is_ok(), "{s}");
        }
        assert!(check_sql("SELECT '(((", "x").is_ok() && check_sql("/* ((", "x").is_ok());
    }

    #[test]
    fn depth_is_counted_outside_strings_characters_and_comments() {
        let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert!(check(&deep(MAX_DEPTH), "x").is_ok());
        let e = check(&deep(MAX_DEPTH + 1), "the query").unwrap_err();
        assert!(e.starts_with("the query nests brackets more than 256 levels deep"), "{e}");
        assert!(check(&"[".repeat(100_000), "x").is_err());
        assert!(check(&"#{".repeat(MAX_DEPTH + 1), "x").is_err());
        // brackets that are data
        let s = format!("[\"{}\" \\[ ; {}\n]", "[".repeat(1000), "(".repeat(1000));
        assert!(check(&s, "x").is_ok());
        assert!(check("[\"a\\\"[[[[\"]", "x").is_ok());
        assert!(check("", "x").is_ok() && check("\"unterminated [[[", "x").is_ok());
        // a \u character literal with a multi-byte character among its digits (the reader panicked on it)
        assert!(check("\\uabc\u{e9}", "x").unwrap_err().contains("malformed character literal"));
        assert!(check("[\\ucd\u{200b}]", "x").is_err());
        assert!(check("[\\ucd,\u{200b}]", "x").is_err()); // the reader reads on past a comma (fuzz_ext, seed 2)
        assert!(check("[\\u0041 \\u \\o101 \"\\u00e9\" \"\\uab\u{e9}\"]", "x").is_ok());
        assert!(check("[\\o \"\u{e9}\" \\u,\"\u{e9}\"]", "x").is_ok()); // the characters o and u, then strings
        assert!(check("[:no/s\\uch\"\u{200b}\u{200d}\"]", "x").is_err()); // the reader reads on past a quote
    }
}
