//! EDN transaction data to typed terms (the first stage of the transactor).
//!
//! Follows Datomic's and Mentat's transaction grammar: list forms `[:db/add e a v]`, `[:db/retract e a v]`,
//! `[:db/retract e a]`, `[:db/retractEntity e]` (also `:db.fn/retractEntity`), `[:db.fn/retractAttribute e a]`,
//! `[:db/cas e a old new]` (also `:db.fn/cas`); map forms with an optional `:db/id`, nested maps, vector values
//! for cardinality-many attributes and reverse attributes `:ns/_attr`. Entity positions take entids, idents,
//! string tempids, lookup refs (`[:a v]` or `(lookup-ref :a v)`) and the current transaction
//! (`(transaction-tx)` or `"datomic.tx"`).

use crate::error::{Result, StorageError};
use crate::value::{scalar_from_edn, Val};
use edn_format::{Keyword, Symbol, Value as Edn};
use planner::schema::{Attribute, Entid, Schema, TupleSpec, Unique, ValueType, TUPLE_LEN};
use std::sync::Arc;

/// A tempid: one the user wrote, or one the transactor made for a map without `:db/id`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TempId {
    User(String),
    Internal(u64),
}

impl std::fmt::Display for TempId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TempId::User(s) => write!(f, "{s:?}"),
            TempId::Internal(n) => write!(f, "<map #{n}>"),
        }
    }
}

/// Something in entity position, before resolution.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntityPlace {
    Entid(Entid),
    Ident(String),
    TempId(TempId),
    /// `[:attr value]`: the entity whose unique attribute `attr` has `value`.
    LookupRef(Entid, Val),
    /// The transaction being run.
    Tx,
}

/// Something in value position: a typed scalar, or an entity for `:db.type/ref` attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValuePlace {
    Scalar(Val),
    Entity(EntityPlace),
    /// A `:db.type/tuple` value whose elements (nil as `None`) are resolved like values: a ref element may name an
    /// attribute installed by an earlier map form of the same transaction.
    Tuple(Vec<Option<ValuePlace>>),
}

/// The top-level transaction form a term came from, shared by all the terms that come from it and written out as
/// EDN text (its `Display`) only when an error names it: writing every form out as it was read cost 3% of a bulk
/// load (perf, 2026-12-04).
#[derive(Clone, Debug, Default)]
pub struct FormText {
    forms: Arc<Vec<Edn>>,
    at: usize,
}

impl FormText {
    /// The form at index `at` of a transaction's top-level `forms`.
    pub fn new(forms: Arc<Vec<Edn>>, at: usize) -> FormText {
        FormText { forms, at }
    }
}

impl std::fmt::Display for FormText {
    /// The form's EDN text, as [`planner::error::edn_text`] writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.forms.get(self.at) {
            Some(form) => f.write_str(&planner::error::edn_text(form)),
            None => Ok(()),
        }
    }
}

/// One operation of a transaction, attributes resolved to entids and values type-checked.
/// `form` is the top-level form it came from, written out as EDN text by the errors that name it.
#[derive(Clone, Debug)]
pub enum Term {
    Add { e: EntityPlace, a: Entid, v: ValuePlace, form: FormText },
    Retract { e: EntityPlace, a: Entid, v: ValuePlace, form: FormText },
    RetractAttribute { e: EntityPlace, a: Entid, form: FormText },
    RetractEntity { e: EntityPlace, form: FormText },
    Cas { e: EntityPlace, a: Entid, old: Option<ValuePlace>, new: ValuePlace, form: FormText },
}

impl Term {
    /// The term's entity position.
    pub fn entity(&self) -> &EntityPlace {
        match self {
            Term::Add { e, .. }
            | Term::Retract { e, .. }
            | Term::RetractAttribute { e, .. }
            | Term::RetractEntity { e, .. }
            | Term::Cas { e, .. } => e,
        }
    }

    /// The term's attribute (None for `:db/retractEntity`).
    pub fn attribute(&self) -> Option<Entid> {
        match self {
            Term::Add { a, .. } | Term::Retract { a, .. } | Term::RetractAttribute { a, .. } | Term::Cas { a, .. } => {
                Some(*a)
            }
            Term::RetractEntity { .. } => None,
        }
    }

    /// Every entity the term names: its entity position, then its values that are entities (a `:db/cas`'s old
    /// and new included).
    pub fn entity_places(&self) -> impl Iterator<Item = &EntityPlace> {
        let values: [Option<&ValuePlace>; 2] = match self {
            Term::Add { v, .. } | Term::Retract { v, .. } => [Some(v), None],
            Term::Cas { old, new, .. } => [old.as_ref(), Some(new)],
            Term::RetractAttribute { .. } | Term::RetractEntity { .. } => [None, None],
        };
        std::iter::once(self.entity()).chain(values.into_iter().flatten().filter_map(|v| match v {
            ValuePlace::Entity(p) => Some(p),
            // A tuple's ref elements are entids, installed idents or map entities of this transaction.
            ValuePlace::Scalar(_) | ValuePlace::Tuple(_) => None,
        }))
    }

    /// Adds `by` to the number of every internal tempid the term names (a run of forms read by its own builder,
    /// placed after runs that made `by` of them).
    fn shift_internal(&mut self, by: u64) {
        if by == 0 {
            return;
        }
        fn entity(e: &mut EntityPlace, by: u64) {
            if let EntityPlace::TempId(TempId::Internal(n)) = e {
                *n += by;
            }
        }
        fn value(v: &mut ValuePlace, by: u64) {
            match v {
                ValuePlace::Scalar(_) => {}
                ValuePlace::Entity(e) => entity(e, by),
                ValuePlace::Tuple(items) => items.iter_mut().flatten().for_each(|v| value(v, by)),
            }
        }
        match self {
            Term::Add { e, v, .. } | Term::Retract { e, v, .. } => {
                entity(e, by);
                value(v, by);
            }
            Term::RetractAttribute { e, .. } | Term::RetractEntity { e, .. } => entity(e, by),
            Term::Cas { e, old, new, .. } => {
                entity(e, by);
                old.iter_mut().for_each(|v| value(v, by));
                value(new, by);
            }
        }
    }

    /// The top-level form the term came from (its `Display` is its EDN text).
    pub fn form(&self) -> &FormText {
        match self {
            Term::Add { form, .. }
            | Term::Retract { form, .. }
            | Term::RetractAttribute { form, .. }
            | Term::RetractEntity { form, .. }
            | Term::Cas { form, .. } => form,
        }
    }
}

/// EDN bytes of one transaction past which its text is read on all cores (runs of whole forms, see
/// [`planner::parse::split_forms`]); below it a pool hand-off costs more than it saves.
pub const PARALLEL_READ_BYTES: usize = 16 * 1024;

/// Top-level forms of one transaction past which its terms are built on all cores ([`parse_forms`]).
pub const PARALLEL_TERM_FORMS: usize = 128;

/// Parses EDN text into the top-level vector of transaction forms. A text of [`PARALLEL_READ_BYTES`] or more is
/// read on all cores (rayon), in runs of whole forms; when a run fails to read, the whole text is read again
/// on one thread, so that errors are those of reading the text as written.
pub fn parse_edn(text: &str) -> Result<Vec<Edn>> {
    let threads = rayon::current_num_threads();
    if text.len() >= PARALLEL_READ_BYTES && threads > 1 {
        if let Some(runs) = planner::parse::split_forms(text, threads * 2) {
            use rayon::prelude::*;
            let read: Vec<Option<Vec<Edn>>> = runs.par_iter().map(|run| planner::parse::read_edn_seq(run)).collect();
            if read.iter().all(Option::is_some) {
                return Ok(read.into_iter().flatten().flatten().collect());
            }
        }
    }
    let v = planner::parse::read_edn(text).map_err(|e| StorageError::edn(text, &e))?;
    match v {
        Edn::Vector(items) | Edn::List(items) => Ok(items),
        other => Err(StorageError::bad_form(&other, "a transaction is a vector of forms")),
    }
}

/// Turns transaction forms into [`Term`]s against `schema`.
pub struct TermBuilder<'s> {
    schema: &'s Schema,
    next_internal: u64,
    /// Terms produced so far.
    pub terms: Vec<Term>,
    /// The top-level form being read.
    current: FormText,
    /// Idents declared by the map forms read so far (`{:db/ident :reg/course ...}`), with their entities: a tuple's
    /// ref elements (`:db/tupleAttrs [:reg/course ...]`) may name them before the schema holds them.
    declared: std::collections::HashMap<String, EntityPlace>,
}

impl<'s> TermBuilder<'s> {
    pub fn new(schema: &'s Schema) -> TermBuilder<'s> {
        TermBuilder {
            schema,
            next_internal: 0,
            terms: Vec::new(),
            current: FormText::default(),
            declared: Default::default(),
        }
    }

    /// Adds the terms of the top-level form `forms[at]`.
    pub fn add_form(&mut self, forms: &Arc<Vec<Edn>>, at: usize) -> Result<()> {
        let form = &forms[at];
        match form {
            Edn::Map(_) => {
                self.current = FormText::new(forms.clone(), at);
                self.map_form(form, form, None).map(|_| ())
            }
            Edn::Vector(items) | Edn::List(items) => {
                self.current = FormText::new(forms.clone(), at);
                self.list_form(items, form)
            }
            _ => Err(StorageError::bad_form(form, "expected a list form like [:db/add e a v] or a map")),
        }
    }

    fn list_form(&mut self, items: &[Edn], form: &Edn) -> Result<()> {
        let bad =
            |reason: &str| StorageError::BadForm { form: planner::error::edn_text(form), reason: reason.to_string() };
        let op = match items.first() {
            Some(Edn::Keyword(k)) => ident_text(k),
            _ => return Err(bad("the first element must be an operation keyword such as :db/add")),
        };
        match (op.as_str(), items.len()) {
            (":db/add", 4) | (":db/retract", 4) => {
                let (a, reverse) = self.attribute(&items[2], form)?;
                let add = op == ":db/add";
                let (e, v) = if reverse {
                    // [:db/add e :ns/_attr v] is [:db/add v :ns/attr e].
                    (self.entity(&items[3], form)?, ValuePlace::Entity(self.entity(&items[1], form)?))
                } else {
                    (self.entity(&items[1], form)?, self.value(a, &items[3], form)?)
                };
                if let ValuePlace::Entity(EntityPlace::TempId(TempId::Internal(_))) = v {
                    return Err(bad("nested maps are only allowed in map forms"));
                }
                self.terms.push(if add {
                    Term::Add { e, a: a.entid, v, form: self.current.clone() }
                } else {
                    Term::Retract { e, a: a.entid, v, form: self.current.clone() }
                });
                Ok(())
            }
            (":db/retract", 3) | (":db.fn/retractAttribute", 3) | (":db/retractAttribute", 3) => {
                let (a, reverse) = self.attribute(&items[2], form)?;
                if reverse {
                    return Err(bad("a reverse attribute cannot be retracted as a whole"));
                }
                let e = self.entity(&items[1], form)?;
                self.terms.push(Term::RetractAttribute { e, a: a.entid, form: self.current.clone() });
                Ok(())
            }
            (":db/retractEntity", 2) | (":db.fn/retractEntity", 2) => {
                let e = self.entity(&items[1], form)?;
                self.terms.push(Term::RetractEntity { e, form: self.current.clone() });
                Ok(())
            }
            (":db/cas", 5) | (":db.fn/cas", 5) => {
                let (a, reverse) = self.attribute(&items[2], form)?;
                if reverse {
                    return Err(bad("compare-and-swap takes a forward attribute"));
                }
                let e = self.entity(&items[1], form)?;
                let old = match &items[3] {
                    Edn::Nil => None,
                    v => Some(self.value(a, v, form)?),
                };
                let new = self.value(a, &items[4], form)?;
                self.terms.push(Term::Cas { e, a: a.entid, old, new, form: self.current.clone() });
                Ok(())
            }
            (
                ":db/add"
                | ":db/retract"
                | ":db/retractEntity"
                | ":db.fn/retractEntity"
                | ":db/cas"
                | ":db.fn/cas"
                | ":db.fn/retractAttribute"
                | ":db/retractAttribute",
                n,
            ) => Err(bad(&format!("wrong number of elements ({n}) for {op}"))),
            _ => Err(bad(&format!("unknown operation {op}"))),
        }
    }

    /// Expands a map form into terms and returns the entity it describes. `under` names the attribute that
    /// holds a nested map (None at top level).
    fn map_form(&mut self, map: &Edn, form: &Edn, under: Option<&Attribute>) -> Result<EntityPlace> {
        let Edn::Map(entries) = map else { unreachable!("map_form takes maps") };
        let mut e = None;
        for (k, v) in entries {
            if matches!(k, Edn::Keyword(kw) if keyword_is(kw, "db", "id")) {
                e = Some(self.entity(v, form)?);
            }
        }
        if let Some(parent) = under {
            let reachable = e.is_some()
                || parent.component
                || entries.keys().any(|k| match k {
                    Edn::Keyword(kw) => self
                        .schema
                        .attribute_by_ident(&ident_text(kw))
                        .is_some_and(|a| a.unique == Some(Unique::Identity)),
                    _ => false,
                });
            if !reachable {
                return Err(StorageError::DanglingEntity {
                    form: planner::error::edn_text(map),
                    attribute: parent.ident.clone(),
                });
            }
        }
        let e = match e {
            Some(e) => e,
            None => {
                self.next_internal += 1;
                EntityPlace::TempId(TempId::Internal(self.next_internal))
            }
        };
        for (k, v) in entries {
            if let (Edn::Keyword(kw), Edn::Keyword(ident)) = (k, v) {
                if keyword_is(kw, "db", "ident") {
                    self.declared.insert(ident_text(ident), e.clone());
                }
            }
        }
        for (k, v) in entries {
            if matches!(k, Edn::Keyword(kw) if keyword_is(kw, "db", "id")) {
                continue;
            }
            let (attr, reverse) = self.attribute(k, form)?;
            // Datomic's grammar takes the values of a cardinality-many attribute as a vector, a list or a set
            let values: Vec<&Edn> = match v {
                // A tuple is one value; a cardinality-many tuple attribute takes a collection of tuples.
                Edn::Vector(items) if attr.tuple.is_some() && !(attr.many && items.iter().all(is_collection)) => {
                    vec![v]
                }
                Edn::Vector(items) if !self.is_lookup_ref(attr, v) => items.iter().collect(),
                Edn::List(items) if !is_entity_call(v) => items.iter().collect(),
                Edn::Set(items) => items.iter().collect(),
                _ => vec![v],
            };
            if values.len() != 1 && !attr.many && !reverse {
                return Err(StorageError::BadForm {
                    form: planner::error::edn_text(form),
                    reason: format!("{} is cardinality one but was given {} values", attr.ident, values.len()),
                });
            }
            for value in values {
                if reverse {
                    let source = match value {
                        Edn::Map(_) => self.map_form(value, form, Some(attr))?,
                        other => self.entity(other, form)?,
                    };
                    self.terms.push(Term::Add {
                        e: source,
                        a: attr.entid,
                        v: ValuePlace::Entity(e.clone()),
                        form: self.current.clone(),
                    });
                } else {
                    let v = self.value(attr, value, form)?;
                    self.terms.push(Term::Add { e: e.clone(), a: attr.entid, v, form: self.current.clone() });
                }
            }
        }
        Ok(e)
    }

    fn is_lookup_ref(&self, attr: &Attribute, v: &Edn) -> bool {
        attr.value_type == ValueType::Ref
            && matches!(v, Edn::Vector(items) if items.len() == 2
                && matches!(&items[0], Edn::Keyword(k) if self.schema.attribute_by_ident(&ident_text(k)).is_some_and(|a| a.unique.is_some())))
    }

    /// Resolves an attribute position; returns the attribute and whether it was written in reverse.
    fn attribute(&self, a: &Edn, form: &Edn) -> Result<(&'s Attribute, bool)> {
        let unknown = |ident: String| StorageError::UnknownAttribute { ident, form: planner::error::edn_text(form) };
        match a {
            Edn::Keyword(k) => {
                let ident = ident_text(k);
                if let Some(attr) = self.schema.attribute_by_ident(&ident) {
                    return Ok((attr, false));
                }
                if let Some(forward) = reverse_of(k) {
                    if let Some(attr) = self.schema.attribute_by_ident(&forward) {
                        if attr.value_type != ValueType::Ref {
                            return Err(StorageError::BadForm {
                                form: planner::error::edn_text(form),
                                reason: format!("reverse attribute {ident} needs {forward} to be a ref attribute"),
                            });
                        }
                        return Ok((attr, true));
                    }
                }
                Err(unknown(ident))
            }
            Edn::Integer(e) => self.schema.attribute(*e).map(|a| (a, false)).ok_or_else(|| unknown(e.to_string())),
            other => Err(unknown(planner::error::edn_text(other))),
        }
    }

    /// Parses an entity position.
    pub fn entity(&self, e: &Edn, form: &Edn) -> Result<EntityPlace> {
        let bad =
            |reason: &str| StorageError::BadForm { form: planner::error::edn_text(form), reason: reason.to_string() };
        match e {
            Edn::Integer(i) => Ok(EntityPlace::Entid(*i)),
            Edn::Keyword(k) => Ok(EntityPlace::Ident(ident_text(k))),
            Edn::String(s) if s == "datomic.tx" => Ok(EntityPlace::Tx),
            Edn::String(s) => Ok(EntityPlace::TempId(TempId::User(s.clone()))),
            Edn::Vector(items) if items.len() == 2 => self.lookup_ref(&items[0], &items[1], e),
            Edn::List(items) => match items.as_slice() {
                [Edn::Symbol(s), a, v] if symbol_is(s, "lookup-ref") => self.lookup_ref(a, v, e),
                [Edn::Symbol(s)] if symbol_is(s, "transaction-tx") => Ok(EntityPlace::Tx),
                _ => Err(bad(&format!("{} is not an entity", planner::error::edn_text(e)))),
            },
            _ => Err(bad(&format!("{} is not an entity", planner::error::edn_text(e)))),
        }
    }

    fn lookup_ref(&self, a: &Edn, v: &Edn, whole: &Edn) -> Result<EntityPlace> {
        // the lookup ref's text only for errors (written for each of a bulk load's lookup refs, it cost ~2% of it)
        let err = |reason: String| StorageError::LookupRef { lookup_ref: planner::error::edn_text(whole), reason };
        let attr = match a {
            Edn::Keyword(k) => self.schema.attribute_by_ident(&ident_text(k)),
            Edn::Integer(e) => self.schema.attribute(*e),
            _ => None,
        }
        .ok_or_else(|| err(format!("unknown attribute {}", planner::error::edn_text(a))))?;
        if attr.unique.is_none() {
            return Err(err(format!("{} is not :db/unique", attr.ident)));
        }
        let val = if let Some(spec) = &attr.tuple {
            let place = self.tuple_value(attr, spec, v, whole, true)?;
            let ValuePlace::Tuple(items) = place else { unreachable!("tuple_value gives tuples") };
            let items = items
                .into_iter()
                .map(|i| match i {
                    None => Ok(None),
                    Some(ValuePlace::Scalar(s)) => Ok(Some(s)),
                    Some(ValuePlace::Entity(EntityPlace::Entid(e))) => Ok(Some(Val::Ref(e))),
                    Some(_) => Err(err("a lookup ref's tuple names entities by entid or installed ident".into())),
                })
                .collect::<Result<Vec<_>>>()?;
            Val::Tuple(items)
        } else if attr.value_type == ValueType::Ref {
            match v {
                Edn::Integer(i) => Val::Ref(*i),
                _ => return Err(err("a lookup ref on a ref attribute takes an entid".into())),
            }
        } else {
            scalar_from_edn(v, attr, &"").map_err(|_| {
                err(format!(
                    "{} does not match {} of type {}",
                    planner::error::edn_text(v),
                    attr.ident,
                    attr.value_type.ident()
                ))
            })?
        };
        Ok(EntityPlace::LookupRef(attr.entid, val))
    }

    /// Parses a value position for `attr`.
    fn value(&mut self, attr: &Attribute, v: &Edn, form: &Edn) -> Result<ValuePlace> {
        if let Some(spec) = &attr.tuple {
            return self.tuple_value(attr, spec, v, form, false);
        }
        if attr.value_type != ValueType::Ref {
            if matches!(v, Edn::Vector(items) if items.len() == 2 && matches!(items[0], Edn::Keyword(_)))
                || matches!(v, Edn::List(items) if matches!(items.first(), Some(Edn::Symbol(s)) if symbol_is(s, "lookup-ref")))
            {
                return Err(StorageError::LookupRef {
                    lookup_ref: planner::error::edn_text(v),
                    reason: format!(
                        "used as the value of {}, which is of type {}, not a ref",
                        attr.ident,
                        attr.value_type.ident()
                    ),
                });
            }
            return Ok(ValuePlace::Scalar(scalar_from_edn(v, attr, &planner::error::EdnText(form))?));
        }
        match v {
            Edn::Map(_) => Ok(ValuePlace::Entity(self.map_form(v, form, Some(attr))?)),
            Edn::Integer(_) | Edn::Keyword(_) | Edn::String(_) | Edn::Vector(_) | Edn::List(_) => {
                Ok(ValuePlace::Entity(self.entity(v, form)?))
            }
            _ => Err(StorageError::WrongType {
                value: planner::error::edn_text(v),
                attribute: attr.ident.clone(),
                expected: attr.value_type.ident().to_string(),
                form: planner::error::edn_text(form),
            }),
        }
    }
}

impl TermBuilder<'_> {
    /// A tuple value for `attr` (Datomic's rules): a vector of 2 to 8 elements, as many as a fixed tuple has
    /// positions, each of its position's type or nil. A composite tuple (`:db/tupleAttrs`) is the transactor's to
    /// maintain and is refused here, as Datomic refuses it.
    fn tuple_value(
        &self,
        attr: &Attribute,
        spec: &TupleSpec,
        v: &Edn,
        form: &Edn,
        composite_ok: bool,
    ) -> Result<ValuePlace> {
        let wrong = |why: String| StorageError::WrongType {
            value: planner::error::edn_text(v),
            attribute: attr.ident.clone(),
            expected: format!("{} ({why})", attr.value_type.ident()),
            form: planner::error::edn_text(form),
        };
        if matches!(spec, TupleSpec::Composite(_)) && !composite_ok {
            return Err(StorageError::BadForm {
                form: planner::error::edn_text(form),
                reason: format!(
                    "{} is a composite tuple of :db/tupleAttrs, kept by the transactor: assert its attributes instead",
                    attr.ident
                ),
            });
        }
        let Edn::Vector(items) = v else { return Err(wrong("a tuple is a vector".into())) };
        let len_ok = match spec {
            TupleSpec::Homogeneous(_) => TUPLE_LEN.contains(&items.len()),
            _ => items.len() == spec.positions().len(),
        };
        if !len_ok {
            let want = match spec {
                TupleSpec::Homogeneous(_) => "2 to 8".to_string(),
                _ => spec.positions().len().to_string(),
            };
            return Err(wrong(format!("{want} elements, not {}", items.len())));
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let t = spec.element(i).unwrap_or(ValueType::Tuple);
            let place = match (t, item) {
                (_, Edn::Nil) => None,
                (ValueType::Ref, Edn::Integer(e)) => Some(ValuePlace::Entity(EntityPlace::Entid(*e))),
                (ValueType::Ref, Edn::Keyword(k)) => {
                    let k = ident_text(k);
                    Some(ValuePlace::Entity(match (self.schema.entid(&k), self.declared.get(&k)) {
                        (Some(e), _) => EntityPlace::Entid(e),
                        (None, Some(p)) => p.clone(),
                        (None, None) => EntityPlace::Ident(k),
                    }))
                }
                (ValueType::Ref, _) => return Err(wrong(format!("element {i} must be an entid or an ident"))),
                (t, item) => {
                    let elem = Attribute::new(attr.entid, &attr.ident, t);
                    Some(ValuePlace::Scalar(
                        scalar_from_edn(item, &elem, &planner::error::EdnText(form))
                            .map_err(|_| wrong(format!("element {i} must be {}", t.a_name())))?,
                    ))
                }
            };
            out.push(place);
        }
        Ok(ValuePlace::Tuple(out))
    }
}

/// Whether an EDN value is a vector, list or set (a collection of tuples for a cardinality-many tuple attribute).
fn is_collection(v: &Edn) -> bool {
    matches!(v, Edn::Vector(_) | Edn::List(_) | Edn::Set(_))
}

/// `:ns/_name` → `:ns/name`; None for a forward keyword.
fn reverse_of(k: &Keyword) -> Option<String> {
    let name = k.name().strip_prefix('_')?;
    Some(match k.namespace() {
        Some(ns) => format!(":{ns}/{name}"),
        None => format!(":{name}"),
    })
}

/// The text `:ns/name` of keyword `k`, as its `Display` writes it, built without the formatter: the transactor
/// looks an ident up for every datom of a map form (the formatter's share of a bulk load was 2 to 3%, perf).
pub(crate) fn ident_text(k: &Keyword) -> String {
    let name = k.name();
    match k.namespace() {
        Some(ns) => {
            let mut s = String::with_capacity(ns.len() + name.len() + 2);
            s.push(':');
            s.push_str(ns);
            s.push('/');
            s.push_str(name);
            s
        }
        None => {
            let mut s = String::with_capacity(name.len() + 1);
            s.push(':');
            s.push_str(name);
            s
        }
    }
}

/// Whether keyword `k` is `:ns/name`.
fn keyword_is(k: &Keyword, ns: &str, name: &str) -> bool {
    k.namespace() == Some(ns) && k.name() == name
}

/// Whether symbol `s` is the plain (namespace-less) symbol `name`.
fn symbol_is(s: &Symbol, name: &str) -> bool {
    s.namespace().is_none() && s.name() == name
}

/// Parses a whole transaction into terms.
pub fn parse_tx(text: &str, schema: &Schema) -> Result<Vec<Term>> {
    parse_forms(&Arc::new(parse_edn(text)?), schema)
}

/// Turns the top-level forms of a transaction into terms. [`PARALLEL_TERM_FORMS`] forms or more are turned on all
/// cores (rayon), in runs of forms with a builder each: the maps' internal tempids are numbered per run and then
/// shifted by the runs before, so the terms are those of one builder reading the forms in order, and the error
/// is the first form's that fails, as in order. A run that declares an ident (`:db/ident` in a map form, which a
/// later form's tuple may name) makes the forms be read again by one builder.
pub fn parse_forms(forms: &Arc<Vec<Edn>>, schema: &Schema) -> Result<Vec<Term>> {
    let threads = rayon::current_num_threads();
    if forms.len() >= PARALLEL_TERM_FORMS && threads > 1 {
        use rayon::prelude::*;
        let size = forms.len().div_ceil(threads * 2);
        let starts: Vec<usize> = (0..forms.len()).step_by(size).collect();
        let runs: Vec<Result<TermBuilder>> = starts
            .par_iter()
            .map(|&start| {
                let mut b = TermBuilder::new(schema);
                for at in start..(start + size).min(forms.len()) {
                    b.add_form(forms, at)?;
                }
                Ok(b)
            })
            .collect();
        let declares = runs.iter().any(|r| r.as_ref().is_ok_and(|b| !b.declared.is_empty()));
        if !declares {
            let mut terms = Vec::with_capacity(runs.iter().map(|r| r.as_ref().map_or(0, |b| b.terms.len())).sum());
            let mut shift = 0;
            for run in runs {
                let b = run?;
                terms.extend(b.terms.into_iter().map(|mut t| {
                    t.shift_internal(shift);
                    t
                }));
                shift += b.next_internal;
            }
            return Ok(terms);
        }
    }
    let mut b = TermBuilder::new(schema);
    for at in 0..forms.len() {
        b.add_form(forms, at)?;
    }
    Ok(b.terms)
}

/// Whether `v` is the list form of a lookup ref or of the transaction's entity: `(lookup-ref a v)`,
/// `(transaction-tx)`.
fn is_entity_call(v: &Edn) -> bool {
    matches!(v, Edn::List(items) if matches!(items.first(), Some(Edn::Symbol(s))
        if symbol_is(s, "lookup-ref") || symbol_is(s, "transaction-tx")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use planner::layout::bootstrap_schema;

    #[test]
    fn keyword_and_symbol_texts_are_edn_formats_own() {
        // edn-format's Display is the reference: every keyword and symbol the reader makes, ours must match
        for text in [":db/id", ":a", ":user/_manager", ":x.y-z/a?b*c!", ":é/ü"] {
            let Ok(Edn::Keyword(k)) = edn_format::parse_str(text) else { panic!("{text} is a keyword") };
            assert_eq!(ident_text(&k), k.to_string(), "{text}");
            assert_eq!(ident_text(&k), text);
            if let Some(ns) = k.namespace() {
                assert!(keyword_is(&k, ns, k.name()));
                assert!(!keyword_is(&k, "other", k.name()));
            }
        }
        assert!(keyword_is(&Keyword::from_namespace_and_name("db", "id"), "db", "id"));
        assert!(!keyword_is(&Keyword::from_name("id"), "db", "id"));
        assert!(symbol_is(&Symbol::from_name("lookup-ref"), "lookup-ref"));
        assert!(!symbol_is(&Symbol::from_namespace_and_name("x", "lookup-ref"), "lookup-ref"));
    }

    /// Mutation fuzzing of the EDN reader and the transaction parser (issue 17, a first part): the transactions of
    /// the Python transaction tests are the seeds; the parser must answer or refuse, never panic, never take a
    /// second. `MENTAT_FUZZ_ROUNDS` rounds (default 20,000); the long run prints its figures.
    #[test]
    fn fuzz_the_transaction_parser() {
        use planner::fuzz::{guarded, literals, mutate, Rng, TX_TOKENS};
        let rounds: usize = std::env::var("MENTAT_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
        let sources = [
            include_str!("../../tests/test_transact.py"),
            include_str!("../../tests/test_tx_functions.py"),
            include_str!("../../tests/test_group_commit.py"),
        ];
        let seeds: Vec<String> = sources.iter().flat_map(|s| literals(s, &["[{", "[[:db", "[[\"", "[{:db"])).collect();
        assert!(seeds.len() > 40, "{} seeds", seeds.len());
        let words: Vec<&str> = seeds.iter().flat_map(|q| q.split(' ')).collect();
        let schema = schema();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let mut rng = Rng(0x7A_2026_1201);
        let (mut slowest, mut parsed) = (std::time::Duration::ZERO, 0usize);
        for _ in 0..rounds {
            let seed = rng.below(seeds.len());
            let t = mutate(&mut rng, &seeds[seed], &words, TX_TOKENS);
            let (ok, took) = guarded("parse_tx", &t, || parse_tx(&t, &schema).is_ok());
            parsed += ok as usize;
            slowest = slowest.max(took);
        }
        std::panic::set_hook(previous);
        println!("fuzz: {rounds} transactions from {} seeds: {parsed} parsed, slowest {slowest:?}", seeds.len());
        assert!(slowest < std::time::Duration::from_secs(1), "an input took {slowest:?}");
    }

    fn schema() -> Schema {
        let mut email = Attribute::new(100, ":user/email", ValueType::String);
        email.unique = Some(Unique::Identity);
        let mut label = Attribute::new(103, ":issue/label", ValueType::Ref);
        label.many = true;
        let mut lname = Attribute::new(104, ":label/name", ValueType::String);
        lname.unique = Some(Unique::Identity);
        let mut comp = Attribute::new(105, ":issue/comment", ValueType::Ref);
        comp.component = true;
        comp.many = true;
        let mut s = bootstrap_schema()
            .with_attribute(email)
            .with_attribute(Attribute::new(101, ":user/name", ValueType::String))
            .with_attribute(Attribute::new(102, ":issue/assignee", ValueType::Ref))
            .with_attribute(label)
            .with_attribute(lname)
            .with_attribute(comp)
            .with_attribute(Attribute::new(106, ":comment/text", ValueType::String));
        s.add_ident(":state/open", 200);
        s
    }

    #[test]
    fn list_forms_and_entity_places() {
        let s = schema();
        let t = parse_tx(
            r#"[[:db/add "u" :user/name "Ann"] [:db/add [:user/email "a@b.c"] :user/name "B"]
                [:db/add (lookup-ref :user/email "x") :user/name "C"] [:db/retract 65536 :user/name "D"]
                [:db/add (transaction-tx) :db/doc "tx"] [:db/retract 65536 :user/name]]"#,
            &s,
        )
        .unwrap();
        assert_eq!(t.len(), 6);
        assert!(
            matches!(&t[0], Term::Add { e: EntityPlace::TempId(TempId::User(u)), a: 101, v: ValuePlace::Scalar(Val::Str(n)), .. } if u == "u" && n == "Ann")
        );
        assert!(matches!(&t[1], Term::Add { e: EntityPlace::LookupRef(100, Val::Str(v)), .. } if v == "a@b.c"));
        assert!(matches!(&t[2], Term::Add { e: EntityPlace::LookupRef(100, _), .. }));
        assert!(matches!(&t[3], Term::Retract { e: EntityPlace::Entid(65536), .. }));
        assert!(matches!(&t[4], Term::Add { e: EntityPlace::Tx, a: 8, .. }));
        assert!(matches!(&t[5], Term::RetractAttribute { a: 101, .. }));
    }

    #[test]
    fn map_forms_nested_reverse_and_many() {
        let s = schema();
        let t = parse_tx(
            r#"[{:db/id "i" :issue/assignee [:user/email "a"] :issue/label [[:label/name "x"] [:label/name "y"]]
                 :issue/comment [{:comment/text "hi"}]}
                {:user/email "e" :issue/_assignee "i"}]"#,
            &s,
        )
        .unwrap();
        // assignee, two labels, one component comment (its own text + the ref), then the reverse form (email + ref).
        assert_eq!(t.len(), 7, "{t:#?}");
        let reverse = t.iter().find(|t| matches!(t, Term::Add { e: EntityPlace::TempId(TempId::User(u)), a: 102, v: ValuePlace::Entity(EntityPlace::TempId(TempId::Internal(_))), .. } if u == "i"));
        assert!(reverse.is_some(), "{t:#?}");
    }

    #[test]
    fn errors_name_the_form() {
        let s = schema();
        let e = parse_tx(r#"[[:db/add "u" :user/nope 1]]"#, &s).unwrap_err();
        assert_eq!(e.to_string(), r#"unknown attribute :user/nope in [:db/add "u" :user/nope 1]"#);
        let e = parse_tx(r#"[{:issue/assignee {:user/name "x"}}]"#, &s).unwrap_err();
        assert!(matches!(e, StorageError::DanglingEntity { .. }), "{e}");
        let e = parse_tx(r#"[[:db/add "u" :user/name [:user/email "x"]]]"#, &s).unwrap_err();
        assert!(e.to_string().contains("not a ref"), "{e}");
        let e = parse_tx(r#"[[:db/add [:user/name "x"] :user/name "y"]]"#, &s).unwrap_err();
        assert!(e.to_string().contains("is not :db/unique"), "{e}");
        let e = parse_tx(r#"[[:db/add "u" :user/name 1]]"#, &s).unwrap_err();
        assert!(matches!(e, StorageError::WrongType { .. }));
        assert!(matches!(parse_tx("[[:db/add", &s).unwrap_err(), StorageError::Edn { .. }));
        // the stray `]` closes the vector while the map is open: line 2, column 18
        let e = parse_tx("[{:user/email \"x@y.z\"\n  :user/name \"X\" ]", &s).unwrap_err();
        assert!(matches!(e, StorageError::Edn { row: 2, col: 18, .. }), "{e}");
        // the message shows the text (its newline as a space)
        assert!(e.to_string().ends_with("in `[{:user/email \"x@y.z\"   :user/name \"X\" ]`"), "{e}");
        // a nested map with a unique identity attribute is fine
        assert!(parse_tx(r#"[{:issue/assignee {:user/email "x"}}]"#, &s).is_ok());
    }
}
