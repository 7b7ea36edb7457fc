//! The exact fold of a plan's writes into one operation per entity: pure
//! code, no I/O.
//!
//! The writes of a plan are applied in order, as if one by one, to a state
//! kept per entity: what the stored entity must be before the transaction
//! (its *precondition*) and what the writes so far leave (its *content*).
//! The state then becomes the one operation of a transaction that leaves the
//! store exactly as the writes one by one would. Where no single operation
//! does (an insert then a delete of one entity), or where the writes one by
//! one would certainly be refused (an insert of an entity an earlier write
//! left in place), the fold refuses the plan. Nothing is joined because two
//! writes are equal: two inserts of one entity are refused, two additions of
//! one to a count add two.
//!
//! An ETag condition names the version its plan read, before the
//! transaction: every condition on one entity must name the same version,
//! and a later write under it is not refused for the earlier write's change.

use std::collections::HashMap;

use crate::edm::EdmValue;
use crate::entity::{EntityKey, IfMatch, UpdateMode};
use crate::error::DecodeError;
use crate::table::TransactionOp;
use crate::{DynamicEntity, ETag};

/// A change of an entity worked out from it as the writes before it leave
/// it: `None` in, the entity is absent; `None` out, delete it.
pub(crate) type ModifyFn<'f> = dyn Fn(Option<&DynamicEntity>) -> crate::error::Result<Option<DynamicEntity>>
    + Send
    + Sync
    + 'f;

/// One write of a plan, its reads done.
#[derive(Clone)]
pub(crate) enum Step<'f> {
    /// A write as the caller gave it.
    Op(TransactionOp),
    /// `delta` added to the integer `property` of the entity as `read`
    /// (`None`: absent, created from `created`).
    Add {
        key: EntityKey,
        property: String,
        delta: i64,
        created: DynamicEntity,
        read: Option<DynamicEntity>,
    },
    /// `f` applied to the entity as the writes before it leave it (the
    /// entity `read`, then those writes).
    Modify {
        key: EntityKey,
        f: std::sync::Arc<ModifyFn<'f>>,
        read: Option<DynamicEntity>,
    },
}

impl std::fmt::Debug for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Op(op) => op.fmt(f),
            Step::Add {
                key,
                property,
                delta,
                ..
            } => write!(f, "Add({key}, {property:?}, {delta:+})"),
            Step::Modify { key, .. } => write!(f, "Modify({key})"),
        }
    }
}

/// Why a fold failed: a composition no transaction can carry out exactly,
/// or a stored value an addition cannot use.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The writes of one entity cannot be one operation.
    Compose(String),
    /// A stored value is not what an addition needs.
    Decode(DecodeError),
    /// A change worked out from the entity failed.
    Modify(crate::Error),
}

impl From<String> for Refusal {
    fn from(s: String) -> Self {
        Refusal::Compose(s)
    }
}

/// A property value of the state: set, or an integer added to a base.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Set(EdmValue),
    Add {
        base: i64,
        delta: i64,
        /// Int64 (as read), else Int32.
        wide: bool,
    },
}

/// Properties in the order first set.
#[derive(Debug, Clone, Default)]
struct Props(Vec<(String, Value)>);

impl Props {
    fn of(e: &DynamicEntity) -> Props {
        Props(
            e.properties
                .iter()
                .map(|(n, v)| (n.to_string(), Value::Set(v.clone())))
                .collect(),
        )
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.0.iter_mut().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn set(&mut self, name: &str, value: Value) {
        match self.get_mut(name) {
            Some(v) => *v = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    /// `other`'s properties over these, as a merge of `other` does.
    fn overlay(&mut self, other: Props) {
        for (name, value) in other.0 {
            self.set(&name, value);
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Pre {
    /// Anything, or nothing (an upsert).
    Unconstrained,
    /// No entity (an insert).
    Absent,
    /// An entity, of this version when the condition names one.
    Exists(IfMatch),
}

#[derive(Debug, Clone)]
enum Content {
    Deleted,
    Replaced(Props),
    Merged(Props),
}

#[derive(Debug, Clone)]
struct State {
    pre: Pre,
    content: Content,
}

fn describe(key: &EntityKey) -> String {
    format!("({:?}, {:?})", key.partition_key, key.row_key)
}

fn etag_text(c: &IfMatch) -> String {
    match c {
        IfMatch::Any => "any version".into(),
        IfMatch::ETag(e) => format!("ETag {}", e.as_str()),
    }
}

/// Adds the condition `c` to the precondition: all conditions name the
/// version read before the transaction.
fn require(pre: &mut Pre, c: &IfMatch) -> Result<(), String> {
    let IfMatch::ETag(e) = c else {
        return Ok(());
    };
    match pre {
        Pre::Unconstrained | Pre::Exists(IfMatch::Any) => {
            *pre = Pre::Exists(IfMatch::ETag(e.clone()));
            Ok(())
        }
        Pre::Exists(IfMatch::ETag(e0)) if e0 == e => Ok(()),
        Pre::Exists(other) => Err(format!(
            "conditions on two versions ({} and {}); a transaction can hold one",
            etag_text(other),
            etag_text(c)
        )),
        Pre::Absent => Err(format!(
            "a condition on {} of an entity the plan inserts",
            etag_text(c)
        )),
    }
}

fn int_of(e: &DynamicEntity, property: &str) -> Result<(i64, bool), Refusal> {
    match e.get(property) {
        Some(EdmValue::Int32(n)) => Ok((i64::from(*n), false)),
        Some(EdmValue::Int64(n)) => Ok((*n, true)),
        Some(other) => Err(Refusal::Decode(DecodeError::for_property(
            property.to_string(),
            format!("cannot add to a {} value", other.edm_type()),
        ))),
        None => Err(Refusal::Decode(DecodeError::for_property(
            property.to_string(),
            format!("Invalid entity, {property} property not found."),
        ))),
    }
}

fn etag_of(e: &DynamicEntity) -> Result<ETag, Refusal> {
    e.etag.clone().ok_or_else(|| {
        Refusal::Decode(DecodeError::new(format!(
            "the read of {} came without an ETag",
            describe(&EntityKey::new(&e.partition_key, &e.row_key))
        )))
    })
}

/// The content of an entity created by an addition: its value is the
/// addition, at least 0.
fn created_props(created: &DynamicEntity, property: &str, delta: i64) -> Props {
    let mut p = Props::of(created);
    p.set(
        property,
        Value::Add {
            base: 0,
            delta: delta.max(0),
            wide: false,
        },
    );
    p
}

/// The entity as `state` leaves the one `read`.
fn current(
    state: Option<&State>,
    key: &EntityKey,
    read: Option<&DynamicEntity>,
) -> Result<Option<DynamicEntity>, Refusal> {
    let Some(s) = state else {
        return Ok(read.cloned());
    };
    Ok(match &s.content {
        Content::Deleted => None,
        Content::Replaced(p) => Some(entity(key, p.clone())?),
        Content::Merged(p) => {
            let mut e = match (&s.pre, read) {
                (Pre::Absent, _) | (_, None) => {
                    DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str())
                }
                (_, Some(r)) => {
                    let mut r = r.clone();
                    r.etag = None;
                    r.timestamp = None;
                    r
                }
            };
            for (name, value) in entity(key, p.clone())?.properties.iter() {
                e.set(name.to_string(), value.clone());
            }
            Some(e)
        }
    })
}

/// `f`'s change of the entity as `state` leaves the one `read`.
fn modify(
    state: Option<State>,
    key: &EntityKey,
    f: &ModifyFn<'_>,
    read: Option<DynamicEntity>,
) -> Result<Option<State>, Refusal> {
    let now = current(state.as_ref(), key, read.as_ref())?;
    let new = f(now.as_ref()).map_err(Refusal::Modify)?;
    let content = match new {
        Some(mut e) => {
            e.partition_key = key.partition_key.clone();
            e.row_key = key.row_key.clone();
            Content::Replaced(Props::of(&e))
        }
        None if now.is_none() => return Ok(state),
        None => Content::Deleted,
    };
    let at = describe(key);
    let mut s = match state {
        Some(mut s) => {
            s.content = content;
            s
        }
        None => State {
            pre: match &read {
                Some(r) => Pre::Exists(IfMatch::ETag(etag_of(r)?)),
                None => Pre::Absent,
            },
            content,
        },
    };
    match &read {
        Some(r) if s.pre != Pre::Absent => {
            require(&mut s.pre, &IfMatch::ETag(etag_of(r)?))
                .map_err(|why| format!("{at}: {why}"))?;
        }
        None if s.pre == Pre::Unconstrained => s.pre = Pre::Absent,
        _ => {}
    }
    if matches!(s.content, Content::Deleted) && s.pre == Pre::Absent {
        // Created and deleted in one plan: nothing one operation does.
        return Err(format!(
            "{at} is inserted and deleted in one plan: no single operation does that"
        )
        .into());
    }
    Ok(Some(s))
}

/// What `content` becomes when `e` is written over it in `mode` (a merge
/// lays `e`'s properties over it; a replace, or a write over a deleted
/// entity, leaves `e`'s alone).
fn written_over(content: Content, e: &DynamicEntity, mode: UpdateMode) -> Content {
    match (content, mode) {
        (Content::Replaced(mut p), UpdateMode::Merge) => {
            p.overlay(Props::of(e));
            Content::Replaced(p)
        }
        (Content::Merged(mut p), UpdateMode::Merge) => {
            p.overlay(Props::of(e));
            Content::Merged(p)
        }
        _ => Content::Replaced(Props::of(e)),
    }
}

fn apply(state: Option<State>, key: &EntityKey, step: Step<'_>) -> Result<State, Refusal> {
    use TransactionOp::{Delete, Insert, Update, Upsert};
    let Some(mut s) = state else {
        return Ok(match step {
            Step::Op(Insert(e)) => State {
                pre: Pre::Absent,
                content: Content::Replaced(Props::of(&e)),
            },
            Step::Op(Upsert(e, UpdateMode::Merge)) => State {
                pre: Pre::Unconstrained,
                content: Content::Merged(Props::of(&e)),
            },
            Step::Op(Upsert(e, UpdateMode::Replace)) => State {
                pre: Pre::Unconstrained,
                content: Content::Replaced(Props::of(&e)),
            },
            Step::Op(Update(e, mode, c)) => State {
                pre: Pre::Exists(c),
                content: match mode {
                    UpdateMode::Merge => Content::Merged(Props::of(&e)),
                    UpdateMode::Replace => Content::Replaced(Props::of(&e)),
                },
            },
            Step::Op(Delete(_, c)) => State {
                pre: Pre::Exists(c),
                content: Content::Deleted,
            },
            Step::Modify { .. } => unreachable!("a change by a function is folded by modify()"),
            Step::Add {
                property,
                delta,
                created,
                read,
                ..
            } => match read {
                Some(r) => {
                    let (base, wide) = int_of(&r, &property)?;
                    let mut p = Props::default();
                    p.set(&property, Value::Add { base, delta, wide });
                    State {
                        pre: Pre::Exists(IfMatch::ETag(etag_of(&r)?)),
                        content: Content::Merged(p),
                    }
                }
                None => State {
                    pre: Pre::Absent,
                    content: Content::Replaced(created_props(&created, &property, delta)),
                },
            },
        });
    };
    let at = describe(key);
    match step {
        Step::Modify { .. } => unreachable!("a change by a function is folded by modify()"),
        Step::Op(Insert(e)) => match s.content {
            Content::Deleted => s.content = Content::Replaced(Props::of(&e)),
            _ => {
                return Err(format!(
                    "{at} is inserted after a write that leaves it in place: the service would refuse the insert (409)"
                )
                .into())
            }
        },
        Step::Op(Upsert(e, mode)) => s.content = written_over(s.content, &e, mode),
        Step::Op(Update(e, mode, c)) => {
            if matches!(s.content, Content::Deleted) {
                return Err(format!(
                    "{at} is updated after its delete: the service would answer 404"
                )
                .into());
            }
            require(&mut s.pre, &c).map_err(|why| format!("{at}: {why}"))?;
            s.content = written_over(s.content, &e, mode);
        }
        Step::Op(Delete(_, c)) => {
            match (&s.content, &s.pre) {
                (Content::Deleted, _) => {
                    return Err(format!(
                        "{at} is deleted twice: the second delete would find nothing (404)"
                    )
                    .into())
                }
                (_, Pre::Absent) => {
                    return Err(format!(
                        "{at} is inserted and deleted in one plan: no single operation does that"
                    )
                    .into())
                }
                _ => {}
            }
            require(&mut s.pre, &c).map_err(|why| format!("{at}: {why}"))?;
            if s.pre == Pre::Unconstrained {
                return Err(format!(
                    "{at} is upserted and deleted in one plan: no single operation does that"
                )
                .into());
            }
            s.content = Content::Deleted;
        }
        Step::Add {
            property,
            delta,
            created,
            read,
            ..
        } => {
            match &read {
                // The addition is of the version read: every condition names it.
                Some(r) if s.pre != Pre::Absent => {
                    require(&mut s.pre, &IfMatch::ETag(etag_of(r)?))
                        .map_err(|why| format!("{at}: {why}"))?;
                }
                // Read as absent: the addition holds only if it still is
                // (an upsert would merge over an entity created meanwhile).
                None if s.pre == Pre::Unconstrained => s.pre = Pre::Absent,
                _ => {}
            }
            match &mut s.content {
                Content::Deleted => {
                    s.content = Content::Replaced(created_props(&created, &property, delta))
                }
                Content::Replaced(p) | Content::Merged(p) if p.has(&property) => {
                    match p.get_mut(&property).expect("checked above") {
                        Value::Add { delta: d, .. } => *d += delta,
                        Value::Set(v) => {
                            let (n, wide) = match v {
                                EdmValue::Int32(n) => (i64::from(*n), false),
                                EdmValue::Int64(n) => (*n, true),
                                other => {
                                    return Err(Refusal::Decode(DecodeError::for_property(
                                        property.clone(),
                                        format!(
                                            "cannot add to a {} value",
                                            other.edm_type()
                                        ),
                                    )))
                                }
                            };
                            *v = finish(
                                &property,
                                Value::Add {
                                    base: n,
                                    delta,
                                    wide,
                                },
                            )?;
                        }
                    }
                }
                Content::Replaced(_) => {
                    return Err(format!(
                        "{at}: an addition to {property:?}, which an earlier replace leaves out"
                    )
                    .into())
                }
                Content::Merged(p) => {
                    // The stored value, which the merges leave: as read.
                    let Some(r) = &read else {
                        return Err(format!(
                            "{at}: an addition to {property:?} of an entity read as absent and merged by the plan, which leaves it out"
                        )
                        .into());
                    };
                    let (base, wide) = int_of(r, &property)?;
                    p.set(&property, Value::Add { base, delta, wide });
                }
            }
        }
    }
    Ok(s)
}

/// The stored value of an addition.
fn finish(property: &str, v: Value) -> Result<EdmValue, Refusal> {
    let Value::Add { base, delta, wide } = v else {
        let Value::Set(v) = v else { unreachable!() };
        return Ok(v);
    };
    let overflow = || {
        Refusal::Decode(DecodeError::for_property(
            property.to_string(),
            format!("{base} + {delta} overflows"),
        ))
    };
    let n = base.checked_add(delta).ok_or_else(overflow)?;
    Ok(if wide {
        EdmValue::Int64(n)
    } else {
        EdmValue::Int32(i32::try_from(n).map_err(|_| overflow())?)
    })
}

fn entity(key: &EntityKey, props: Props) -> Result<DynamicEntity, Refusal> {
    let mut e = DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str());
    for (name, value) in props.0 {
        let v = finish(&name, value)?;
        e.set(name, v);
    }
    Ok(e)
}

/// The one operation of each entity the steps write, in the order each
/// entity is first written.
pub(crate) fn fold(steps: Vec<Step<'_>>) -> Result<Vec<TransactionOp>, Refusal> {
    let mut order: Vec<EntityKey> = Vec::new();
    let mut states: HashMap<EntityKey, State> = HashMap::new();
    for step in steps {
        let key = match &step {
            Step::Op(op) => op.key(),
            Step::Add { key, .. } | Step::Modify { key, .. } => key.clone(),
        };
        let before = states.remove(&key);
        let first = before.is_none();
        let after = match step {
            Step::Modify { f, read, .. } => match modify(before, &key, &*f, read)? {
                Some(after) => after,
                None => continue,
            },
            step => apply(before, &key, step)?,
        };
        if first {
            order.push(key.clone());
        }
        states.insert(key, after);
    }
    let mut ops = Vec::with_capacity(order.len());
    for key in order {
        let s = states.remove(&key).expect("every key has a state");
        let at = describe(&key);
        ops.push(match (s.pre, s.content) {
            (Pre::Absent, Content::Replaced(p) | Content::Merged(p)) => {
                TransactionOp::Insert(entity(&key, p)?)
            }
            (Pre::Unconstrained, Content::Merged(p)) => {
                TransactionOp::Upsert(entity(&key, p)?, UpdateMode::Merge)
            }
            (Pre::Unconstrained, Content::Replaced(p)) => {
                TransactionOp::Upsert(entity(&key, p)?, UpdateMode::Replace)
            }
            (Pre::Exists(c), Content::Merged(p)) => {
                TransactionOp::Update(entity(&key, p)?, UpdateMode::Merge, c)
            }
            (Pre::Exists(c), Content::Replaced(p)) => {
                TransactionOp::Update(entity(&key, p)?, UpdateMode::Replace, c)
            }
            (Pre::Exists(c), Content::Deleted) => TransactionOp::Delete(key, c),
            (Pre::Absent | Pre::Unconstrained, Content::Deleted) => {
                return Err(
                    format!("{at} ends deleted from a state no single operation expects").into(),
                )
            }
        });
    }
    Ok(ops)
}
