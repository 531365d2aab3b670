//! Key analysis: proves that the rows of a join are already distinct over a set of variables, so
//! that set semantics need no `DISTINCT` (lesson 4 of the prior art: `(count ?i)` over the entity
//! of a cardinality-one pattern is a plain `count(*)`).
//!
//! Each source declares a key (variables that determine at most one of its rows: `e` for a
//! cardinality-one attribute, `(e, v)` for cardinality many, every column for history, all columns
//! of a VALUES list or an `or` union). Starting from the requested variables plus constants, the
//! closure adds every variable of a source whose key is covered, and every computed variable whose
//! inputs are covered. If at the end every source's key is covered, a row is a function of the
//! requested variables, so distinct rows are distinct tuples.

use crate::algebrize::{Algebra, VarBinding};
use crate::parse::Var;
use std::collections::BTreeSet;

/// Whether the rows of `alg` are provably distinct over `vars`.
pub fn unique_over(alg: &Algebra, vars: &[Var]) -> bool {
    let mut closure: BTreeSet<&Var> = vars.iter().collect();
    closure.extend(alg.bindings.iter().filter(|(_, b)| matches!(b, VarBinding::Const(_))).map(|(v, _)| v));
    loop {
        let before = closure.len();
        for s in &alg.sources {
            if let Some(key) = &s.key {
                if key.iter().all(|k| closure.contains(k)) {
                    closure.extend(s.vars.iter());
                }
            }
        }
        for (inputs, out) in &alg.fds {
            if inputs.iter().all(|k| closure.contains(k)) {
                closure.insert(out);
            }
        }
        if closure.len() == before {
            break;
        }
    }
    alg.sources.iter().all(|s| s.key.as_ref().is_some_and(|key| key.iter().all(|k| closure.contains(k))))
}
