//! Join order and join conditions: turns a scope's sources and filters into a FROM/WHERE body.
//!
//! Sources are ordered most selective first (an equality with a constant or input on the source
//! alone, then other constant filters, then the rest), each next source preferably one that joins
//! the ones already placed, so the statement reads as a chain of `JOIN ... ON` from the constants
//! outwards. LEFT and LATERAL joins keep their place after the sources they reference. Column
//! equalities between two sources go in the later source's ON; everything else (constants,
//! predicates, anti joins) goes in WHERE, where DuckDB pushes it down to the scans.

use crate::algebrize::Source;
use crate::sql::{BinOp, Expr, FromItem, JoinKind, Name, Query, Select, TableSource};

/// The FROM/WHERE body of a scope (no select items).
pub fn body(sources: &[Source], filters: &[Expr]) -> Select {
    let order = order(sources, filters);
    let mut from: Vec<FromItem> = order.iter().map(|i| sources[*i].item.clone()).collect();
    if from.first().is_some_and(|f| f.kind == JoinKind::Left) {
        // A LEFT JOIN needs something on its left: one empty row.
        let unit = Select { items: vec![(Expr::int(1), Some("one".into()))], ..Default::default() };
        let source = TableSource::Subquery(Box::new(Query::Select(Box::new(unit))));
        from.insert(0, FromItem::inner(source, &Name::new("unit")));
    }
    let aliases: Vec<Name> = from.iter().map(|f| f.alias.clone()).collect();
    let mut wheres = Vec::new();
    for f in filters {
        match join_position(f, &aliases) {
            Some(pos) if pos > 0 && from[pos].kind == JoinKind::Inner => from[pos].on.push(f.clone()),
            _ => wheres.push(f.clone()),
        }
    }
    Select { from, filters: wheres, ..Default::default() }
}

/// For a column equality between sources of this scope, the position of the later one.
fn join_position(f: &Expr, aliases: &[Name]) -> Option<usize> {
    let Expr::Bin(BinOp::Eq, a, b) = f else {
        return None;
    };
    let (Expr::Col(x, _), Expr::Col(y, _)) = (strip_cast(a), strip_cast(b)) else {
        return None;
    };
    let px = aliases.iter().position(|n| n == x)?;
    let py = aliases.iter().position(|n| n == y)?;
    (px != py).then_some(px.max(py))
}

fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(inner, _) => inner,
        other => other,
    }
}

/// Selectivity rank of a source from the filters on it alone (lower is more selective).
fn rank(source: &Source, filters: &[Expr]) -> u8 {
    if source.values.is_some() || matches!(source.item.source, TableSource::Values { .. }) {
        return 0;
    }
    let alias = &source.item.alias;
    let mut best = 3;
    for f in filters {
        let mut refs = Vec::new();
        f.aliases(&mut refs);
        if refs.len() != 1 || refs[0] != *alias {
            continue;
        }
        let r = match f {
            Expr::Bin(BinOp::Eq, _, _) | Expr::InList(..) => 1,
            _ => 2,
        };
        best = best.min(r);
    }
    best
}

/// The order of sources: greedy by rank, preferring sources connected to those placed; pinned
/// sources last in their original order.
fn order(sources: &[Source], filters: &[Expr]) -> Vec<usize> {
    let ranks: Vec<u8> = sources.iter().map(|s| rank(s, filters)).collect();
    let mut free: Vec<usize> = (0..sources.len()).filter(|i| !sources[*i].pinned).collect();
    let mut placed: Vec<usize> = Vec::new();
    while !free.is_empty() {
        let connected: Vec<usize> = free
            .iter()
            .copied()
            .filter(|i| placed.iter().any(|p| connects(&sources[*i].item.alias, &sources[*p].item.alias, filters)))
            .collect();
        let pool = if connected.is_empty() { &free } else { &connected };
        let Some(&next) = pool.iter().min_by_key(|i| ranks[**i]) else {
            break;
        };
        placed.push(next);
        free.retain(|i| *i != next);
    }
    placed.extend((0..sources.len()).filter(|i| sources[*i].pinned));
    placed
}

fn connects(a: &Name, b: &Name, filters: &[Expr]) -> bool {
    filters.iter().any(|f| {
        let mut refs = Vec::new();
        f.aliases(&mut refs);
        refs.contains(a) && refs.contains(b)
    })
}
