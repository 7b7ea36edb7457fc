//! The typed filter DSL: comparisons between a [`Column`] and a value of the
//! column's own Rust type, combined with `&`, `|` and `!`.
//!
//! A comparison with a value of another type, or between two columns, does not
//! compile. Values that have no OData literal (NaN, an out-of-range `u64`) are
//! reported before any request is sent.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{BitAnd, BitOr, Not};

use chrono::{DateTime, FixedOffset, Utc};
use uuid::Uuid;

use super::expr::{CmpOp, Expr};
use crate::columns::{Column, DynColumn};
use crate::edm::{EdmType, EdmValue};
use crate::entity::DynamicEntity;
use crate::error::{Error, ParseError, Result, ValidationError};

/// The most discrete comparisons the service accepts in one filter.
pub const MAX_COMPARISONS: usize = 15;

/// A filter over entities of type `E`: a typed expression tree that prints as
/// an OData `$filter`.
///
/// ```
/// use tablekit::filter::col;
///
/// let f = col::<String>("LastName").eq("O'Brien") & col::<i32>("Age").ge(30);
/// assert_eq!(f.to_odata().unwrap(), "LastName eq 'O''Brien' and Age ge 30");
/// ```
pub struct Filter<E> {
    inner: std::result::Result<Expr, String>,
    _entity: PhantomData<fn() -> E>,
}

impl<E> Clone for Filter<E> {
    fn clone(&self) -> Self {
        Filter {
            inner: self.inner.clone(),
            _entity: PhantomData,
        }
    }
}

impl<E> fmt::Debug for Filter<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Ok(e) => write!(f, "Filter({e})"),
            Err(reason) => write!(f, "Filter(invalid: {reason})"),
        }
    }
}

/// The filter's OData text, as [`to_odata`](Filter::to_odata) gives it, for
/// logs and messages; a filter that cannot be sent prints why instead
/// (`invalid filter: …`), which no query accepts either. Not checked against
/// the 15-comparison limit: [`to_odata`](Filter::to_odata) is the checked form.
///
/// ```
/// use tablekit::filter::col;
///
/// let f = col::<String>("LastName").eq("O'Brien") & col::<i64>("Views").gt(10);
/// assert_eq!(f.to_string(), "LastName eq 'O''Brien' and Views gt 10L");
/// assert_eq!(col::<f64>("Score").gt(f64::NAN).to_string().split(':').next(), Some("invalid filter"));
/// ```
impl<E> fmt::Display for Filter<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Ok(e) => fmt::Display::fmt(e, f),
            Err(reason) => write!(f, "invalid filter: {reason}"),
        }
    }
}

impl<E> Filter<E> {
    fn from_expr(expr: Expr) -> Self {
        Filter {
            inner: Ok(expr),
            _entity: PhantomData,
        }
    }

    fn invalid(reason: String) -> Self {
        Filter {
            inner: Err(reason),
            _entity: PhantomData,
        }
    }

    fn combine(self, other: Filter<E>, f: impl FnOnce(Expr, Expr) -> Expr) -> Self {
        match (self.inner, other.inner) {
            (Ok(a), Ok(b)) => Filter::from_expr(f(a, b)),
            (Err(e), _) | (_, Err(e)) => Filter::invalid(e),
        }
    }

    /// Both filters hold.
    pub fn and(self, other: impl Into<Filter<E>>) -> Self {
        self.combine(other.into(), Expr::and)
    }

    /// Either filter holds.
    pub fn or(self, other: impl Into<Filter<E>>) -> Self {
        self.combine(other.into(), Expr::or)
    }

    /// The filter does not hold.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Self {
        match self.inner {
            Ok(e) => Filter::from_expr(e.negate()),
            Err(e) => Filter::invalid(e),
        }
    }

    /// The expression tree, checked: every value has a literal and there are at
    /// most 15 comparisons.
    pub(crate) fn expr(&self) -> Result<&Expr> {
        let expr = self.inner.as_ref().map_err(|reason| {
            Error::invalid(ValidationError::Query {
                reason: reason.clone(),
            })
        })?;
        let n = expr.comparisons();
        if n > MAX_COMPARISONS {
            return Err(Error::invalid(ValidationError::Query {
                reason: format!(
                    "the filter has {n} comparisons; the service allows at most {MAX_COMPARISONS}"
                ),
            }));
        }
        Ok(expr)
    }

    /// The expression tree, without the check of the 15-comparison limit
    /// (`None`: a value without a literal).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn unchecked_expr(&self) -> Option<&Expr> {
        self.inner.as_ref().ok()
    }

    /// The OData `$filter` text.
    pub fn to_odata(&self) -> Result<String> {
        self.expr().map(ToString::to_string)
    }

    /// A filter for another entity type over the same expression (for projections).
    pub fn cast<F>(self) -> Filter<F> {
        Filter {
            inner: self.inner,
            _entity: PhantomData,
        }
    }

    /// The filter's comparisons, left to right as its text writes them: what
    /// it compares, whatever `and`, `or` and `not` join them. None for a
    /// filter that cannot be sent (a value without a literal).
    ///
    /// ```
    /// use tablekit::filter::Filter;
    ///
    /// let f = Filter::parse("Rating gt 3L and not (Name eq 'x')")?;
    /// let found: Vec<(&str, &str, String)> = f
    ///     .comparisons()
    ///     .map(|c| (c.property(), c.operator(), c.value().to_string()))
    ///     .collect();
    /// assert_eq!(found, [("Rating", "gt", "3L".to_owned()), ("Name", "eq", "'x'".to_owned())]);
    /// # Ok::<(), tablekit::filter::ParseError>(())
    /// ```
    pub fn comparisons(&self) -> impl Iterator<Item = Comparison<'_>> {
        let mut out = Vec::new();
        if let Ok(e) = &self.inner {
            collect_comparisons(e, &mut out);
        }
        out.into_iter()
    }

    /// Whether `entity` matches the filter, by the rules of the Table service
    /// (see [how entities are compared](mod@crate::filter#how-entities-are-compared)):
    /// the embedded store's evaluator, which the suite checks against Azurite.
    /// An error for a filter that cannot be sent (a value without a literal,
    /// more than 15 comparisons).
    ///
    /// Only with the `test-support` feature: a model of the service for tests
    /// (what a query should find), not a way to query.
    ///
    /// ```
    /// use tablekit::{filter::Filter, DynamicEntity};
    ///
    /// let a = DynamicEntity::new("Channel9", "a").with("Rating", 2); // Int32
    /// let b = DynamicEntity::new("Channel9", "b").with("Rating", 2.5); // Double
    /// let c = DynamicEntity::new("Channel9", "c"); // no Rating
    ///
    /// // The literal's type must be the property's: only B matches.
    /// let f = Filter::parse("Rating gt 1.2")?;
    /// assert!(!f.matches(&a)? && f.matches(&b)? && !f.matches(&c)?);
    ///
    /// // A missing property fails every comparison, so its negation holds.
    /// assert!(!Filter::parse("Rating ne 7")?.matches(&c)?);
    /// assert!(Filter::parse("not (Rating eq 7)")?.matches(&c)?);
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    #[cfg(any(test, feature = "test-support"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
    pub fn matches(&self, entity: &DynamicEntity) -> Result<bool> {
        self.expr().map(|e| super::eval::matches(e, entity))
    }
}

impl Filter<DynamicEntity> {
    /// Parses the text of an OData `$filter`, the subset of OData v3 the
    /// Table service accepts, as [`Query::filter_raw`](crate::table::Query::filter_raw)
    /// parses it before sending: the check of a filter a user typed, and a
    /// filter to look into ([`comparisons`](Self::comparisons)).
    ///
    /// The filter prints (`Display`, [`to_odata`](Self::to_odata)) in a
    /// canonical form (minimal parentheses, property first, literals spelled
    /// one way) that parses back to the same filter. An error is a
    /// [`ParseError`] (byte offset and reason), which converts into
    /// [`crate::Error`] with `?`. The service's limit of 15 comparisons is
    /// not checked here: [`to_odata`](Self::to_odata) checks it.
    ///
    /// ```
    /// use tablekit::filter::Filter;
    ///
    /// let f = Filter::parse("PartitionKey eq 'Sales'  and (RowKey ge 'empid_000100')")?;
    /// assert_eq!(f.to_string(), "PartitionKey eq 'Sales' and RowKey ge 'empid_000100'");
    /// // A literal on the left is moved to the right.
    /// assert_eq!(Filter::parse("5 lt Age")?.to_string(), "Age gt 5");
    /// // A Boolean property alone is a condition.
    /// assert_eq!(Filter::parse("not Active")?.to_string(), "not (Active eq true)");
    ///
    /// let err = Filter::parse("startswith(RowKey, 'a')").unwrap_err();
    /// assert_eq!(err.offset(), 0);
    /// # Ok::<(), tablekit::filter::ParseError>(())
    /// ```
    ///
    /// # Grammar
    ///
    /// ```text
    /// filter     := or END
    /// or         := and ("or" and)*                      left-associative
    /// and        := unary ("and" unary)*                 left-associative
    /// unary      := "not" operand | primary
    /// operand    := "(" or ")" | "not" operand | Property          (Property alone: `Property eq true`)
    /// primary    := "(" or ")" | side op side | Property           (exactly one side a Property)
    /// side       := Property | literal
    /// op         := "eq" | "ne" | "gt" | "ge" | "lt" | "le"
    /// Property   := [A-Za-z_][A-Za-z0-9_]*  (not a reserved word)
    /// ```
    ///
    /// * Keywords, operators and literal prefixes are case-sensitive, as on the
    ///   service: `EQ`, `And` or `DateTime'…'` are refused.
    /// * Any amount of ASCII whitespace may stand between tokens. The text is the
    ///   decoded `$filter` value: percent-decoding is the caller's (the URL layer's) job.
    /// * `Literal op Property` is normalised to property-first, the operator
    ///   flipped: `5 lt Age` reads as `Age gt 5`.
    /// * A Boolean property on its own is a condition: `Active` reads as
    ///   `Active eq true`, and `not Active` as `not (Active eq true)`.
    /// * In OData `not` binds tighter than the comparisons, so `not Active eq true`
    ///   would mean `(not Active) eq true`, a comparison of an expression, which the
    ///   service does not support. `not` therefore takes a parenthesised expression, a
    ///   Boolean property or another `not`; `not A eq 1` is refused with a hint to
    ///   write `not (A eq 1)`, which is also how a filter prints it.
    /// * Reserved words (`and`, `or`, `not`, the six operators, `true`, `false`,
    ///   `null` and the arithmetic operators `add`, `sub`, `mul`, `div`, `mod`) are never
    ///   property names here.
    ///
    /// # Literals
    ///
    /// | Text | Value |
    /// |---|---|
    /// | `'O''Brien'` (a quote inside is doubled) | `Edm.String` |
    /// | `123`, `-5` (must fit 32 bits) | `Edm.Int32` |
    /// | `123L`, `123l` | `Edm.Int64` |
    /// | `2.0`, `1e300`, `1.5E-7`, `2d`, `2.5D` | `Edm.Double` (finite) |
    /// | `true`, `false` | `Edm.Boolean` |
    /// | `datetime'2009-05-01T00:00:00Z'` | `Edm.DateTime` (any RFC 3339 form; no zone means UTC) |
    /// | `guid'01234567-89ab-cdef-0123-456789abcdef'` | `Edm.Guid` (hyphenated form only) |
    /// | `X'01ff'`, `binary'01FF'` | `Edm.Binary` (an even number of hex digits) |
    ///
    /// An integer without suffix that does not fit in 32 bits is **refused**, as the
    /// service refuses it (`Unrecognized 'Edm.Int32' literal`): write `3000000000L`.
    /// `Edm.Decimal` (`1m`) and `Edm.Single` (`1f`) literals, `null`, `NaN` and `INF`
    /// are refused too: the service stores none of them.
    pub fn parse(text: &str) -> std::result::Result<Self, ParseError> {
        super::parse::parse(text).map(Filter::from_expr)
    }
}

/// One comparison of a filter, as [`Filter::comparisons`] gives them: a
/// property, an operator and a literal (`Rating gt 3`), the property always
/// on the left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison<'a> {
    property: &'a str,
    op: CmpOp,
    value: &'a EdmValue,
}

impl<'a> Comparison<'a> {
    /// The property compared: a custom property, or `PartitionKey`, `RowKey`
    /// or `Timestamp`.
    pub fn property(&self) -> &'a str {
        self.property
    }

    /// The operator's OData keyword: `eq`, `ne`, `gt`, `ge`, `lt` or `le`.
    pub fn operator(&self) -> &'static str {
        self.op.as_str()
    }

    /// The literal, with its Edm type ([`EdmValue::edm_type`]).
    pub fn value(&self) -> &'a EdmValue {
        self.value
    }
}

fn collect_comparisons<'e>(e: &'e Expr, out: &mut Vec<Comparison<'e>>) {
    match e {
        Expr::Cmp {
            property,
            op,
            value,
        } => out.push(Comparison {
            property,
            op: *op,
            value,
        }),
        Expr::And(a, b) | Expr::Or(a, b) => {
            collect_comparisons(a, out);
            collect_comparisons(b, out);
        }
        Expr::Not(a) => collect_comparisons(a, out),
    }
}

impl<E> BitAnd for Filter<E> {
    type Output = Filter<E>;
    fn bitand(self, rhs: Filter<E>) -> Filter<E> {
        self.and(rhs)
    }
}

impl<E> BitOr for Filter<E> {
    type Output = Filter<E>;
    fn bitor(self, rhs: Filter<E>) -> Filter<E> {
        self.or(rhs)
    }
}

impl<E> Not for Filter<E> {
    type Output = Filter<E>;
    fn not(self) -> Filter<E> {
        Filter::not(self)
    }
}

/// A Rust type that has an OData literal: the value types of comparable columns.
pub trait FilterValue {
    /// The Edm type every value of this Rust type is written as, when there is
    /// one: what [`Column::is_none`] and [`Column::is_some`] test a property
    /// against. The default, `None`, is for a type whose literal's type depends
    /// on the value; on such a column, those two tests are refused before any
    /// request (give the column an Edm type with `#[tablekit(edm = "...")]`).
    const EDM_TYPE: Option<EdmType> = None;

    /// The value as a typed literal, or why it has none.
    fn to_edm(&self) -> std::result::Result<EdmValue, String>;
}

macro_rules! filter_value {
    ($($t:ty [$edm:ident] => |$v:ident| $e:expr),* $(,)?) => {$(
        impl FilterValue for $t {
            const EDM_TYPE: Option<EdmType> = Some(EdmType::$edm);

            fn to_edm(&self) -> std::result::Result<EdmValue, String> {
                let $v = self;
                $e
            }
        }
    )*};
}

fn finite(v: f64) -> std::result::Result<EdmValue, String> {
    if v.is_finite() {
        Ok(EdmValue::Double(v))
    } else {
        Err(format!(
            "{v} has no OData literal; filters compare finite doubles only"
        ))
    }
}

filter_value! {
    String [String] => |v| Ok(EdmValue::String(v.clone())),
    bool [Boolean] => |v| Ok(EdmValue::Boolean(*v)),
    i8 [Int32] => |v| Ok(EdmValue::Int32(i32::from(*v))),
    i16 [Int32] => |v| Ok(EdmValue::Int32(i32::from(*v))),
    i32 [Int32] => |v| Ok(EdmValue::Int32(*v)),
    u8 [Int32] => |v| Ok(EdmValue::Int32(i32::from(*v))),
    u16 [Int32] => |v| Ok(EdmValue::Int32(i32::from(*v))),
    i64 [Int64] => |v| Ok(EdmValue::Int64(*v)),
    u32 [Int64] => |v| Ok(EdmValue::Int64(i64::from(*v))),
    u64 [Int64] => |v| i64::try_from(*v)
        .map(EdmValue::Int64)
        .map_err(|_| format!("{v} does not fit Edm.Int64")),
    f32 [Double] => |v| finite(f64::from(*v)),
    f64 [Double] => |v| finite(*v),
    DateTime<Utc> [DateTime] => |v| Ok(EdmValue::DateTime(*v)),
    DateTime<FixedOffset> [DateTime] => |v| Ok(EdmValue::DateTime(v.with_timezone(&Utc))),
    Uuid [Guid] => |v| Ok(EdmValue::Guid(*v)),
    Vec<u8> [Binary] => |v| Ok(EdmValue::Binary(v.clone())),
    bytes::Bytes [Binary] => |v| Ok(EdmValue::Binary(v.to_vec())),
}

/// A value of `edm`, any one: `Prop eq v or Prop ne v` holds exactly for the
/// entities whose `Prop` is stored as `edm` (a NaN Double is `ne` every
/// value), since a missing property, or one of another type, fails both.
fn presence_sample(edm: EdmType) -> EdmValue {
    match edm {
        EdmType::String => EdmValue::String(String::new()),
        EdmType::Binary => EdmValue::Binary(Vec::new()),
        EdmType::Boolean => EdmValue::Boolean(false),
        EdmType::DateTime => EdmValue::DateTime(DateTime::<Utc>::UNIX_EPOCH),
        EdmType::Double => EdmValue::Double(0.0),
        EdmType::Guid => EdmValue::Guid(Uuid::nil()),
        EdmType::Int32 => EdmValue::Int32(0),
        EdmType::Int64 => EdmValue::Int64(0),
    }
}

/// `name` is set and stored as `edm` (see [`presence_sample`]); the column's
/// Edm type is its override, else its Rust type's.
fn presence<E>(name: &str, edm: Option<EdmType>) -> Filter<E> {
    let Some(edm) = edm else {
        return Filter::invalid(format!(
            "{name}: is_none/is_some need the column's Edm type, and its Rust type has no fixed one \
             (FilterValue::EDM_TYPE); give the field `#[tablekit(edm = \"...\")]`"
        ));
    };
    let sample = presence_sample(edm);
    compare::<E>(name, CmpOp::Eq, Ok(sample.clone())).or(compare(name, CmpOp::Ne, Ok(sample)))
}

/// A value usable where a column of type `V` is compared: `V` itself, `&V`, and
/// `&str` for string columns.
#[diagnostic::on_unimplemented(
    message = "a column of type `{V}` cannot be compared with a value of type `{Self}`",
    label = "expected a `{V}` (or `&{V}`) here",
    note = "a filter compares a column with a value of the column's own Rust type; the service cannot compare two columns",
    note = "an `Option` is not a value: the service has no null. Compare with the value inside, and test absence with `e.field == None` in `filter!` or `column.is_none()`"
)]
pub trait IntoFilterValue<V> {
    /// The value as a typed literal, or why it has none.
    fn into_edm(self) -> std::result::Result<EdmValue, String>;
}

impl<V: FilterValue> IntoFilterValue<V> for V {
    fn into_edm(self) -> std::result::Result<EdmValue, String> {
        self.to_edm()
    }
}

impl<V: FilterValue> IntoFilterValue<V> for &V {
    fn into_edm(self) -> std::result::Result<EdmValue, String> {
        self.to_edm()
    }
}

impl IntoFilterValue<String> for &str {
    fn into_edm(self) -> std::result::Result<EdmValue, String> {
        Ok(EdmValue::String(self.to_owned()))
    }
}

impl IntoFilterValue<String> for &mut str {
    fn into_edm(self) -> std::result::Result<EdmValue, String> {
        Ok(EdmValue::String(self.to_owned()))
    }
}

/// The literal of a value for a property stored as `edm` (an `edm` override).
fn coerce(value: EdmValue, edm: Option<EdmType>) -> std::result::Result<EdmValue, String> {
    let Some(edm) = edm else { return Ok(value) };
    Ok(match (value, edm) {
        (v, t) if v.edm_type() == t => v,
        (EdmValue::Int32(i), EdmType::Int64) => EdmValue::Int64(i64::from(i)),
        (EdmValue::Int64(i), EdmType::Int32) => EdmValue::Int32(
            i32::try_from(i).map_err(|_| format!("{i} does not fit the column's Edm.Int32"))?,
        ),
        (EdmValue::Guid(g), EdmType::String) => EdmValue::String(g.hyphenated().to_string()),
        (v, t) => {
            return Err(format!(
                "a {} value cannot be written as the column's {t}",
                v.edm_type()
            ))
        }
    })
}

fn compare<E>(name: &str, op: CmpOp, value: std::result::Result<EdmValue, String>) -> Filter<E> {
    match value {
        Ok(v) => Filter::from_expr(Expr::cmp(name, op, v)),
        Err(reason) => Filter::invalid(format!("{name}: {reason}")),
    }
}

/// The successor of a prefix in the service's order (UTF-16 code units): the
/// smallest string greater than every string that starts with `prefix`;
/// `None` when there is none (empty prefix, or only U+FFFF characters).
pub fn prefix_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{FFFF}' => continue,
            // U+D7FF is followed in UTF-16 order by the surrogates, which encode
            // U+10000 and above; U+10FFFF (DBFF DFFF) by U+E000.
            '\u{D7FF}' => '\u{10000}',
            '\u{10FFFF}' => '\u{E000}',
            c => match char::from_u32(c as u32 + 1) {
                Some(n) => n,
                None => continue,
            },
        };
        chars.push(next);
        return Some(chars.into_iter().collect());
    }
    None
}

macro_rules! column_methods {
    ($E:ty) => {
        /// `column eq value`.
        pub fn eq<Q: IntoFilterValue<V>>(&self, value: Q) -> Filter<$E> {
            compare(
                self.name(),
                CmpOp::Eq,
                value
                    .into_edm()
                    .and_then(|v| coerce(v, self.edm_override())),
            )
        }
        /// `column ne value`.
        pub fn ne<Q: IntoFilterValue<V>>(&self, value: Q) -> Filter<$E> {
            compare(
                self.name(),
                CmpOp::Ne,
                value
                    .into_edm()
                    .and_then(|v| coerce(v, self.edm_override())),
            )
        }
        /// `column gt value`.
        pub fn gt<Q: IntoFilterValue<V>>(&self, value: Q) -> Filter<$E> {
            compare(
                self.name(),
                CmpOp::Gt,
                value
                    .into_edm()
                    .and_then(|v| coerce(v, self.edm_override())),
            )
        }
        /// `column ge value`.
        pub fn ge<Q: IntoFilterValue<V>>(&self, value: Q) -> Filter<$E> {
            compare(
                self.name(),
                CmpOp::Ge,
                value
                    .into_edm()
                    .and_then(|v| coerce(v, self.edm_override())),
            )
        }
        /// `column lt value`.
        pub fn lt<Q: IntoFilterValue<V>>(&self, value: Q) -> Filter<$E> {
            compare(
                self.name(),
                CmpOp::Lt,
                value
                    .into_edm()
                    .and_then(|v| coerce(v, self.edm_override())),
            )
        }
        /// `column le value`.
        pub fn le<Q: IntoFilterValue<V>>(&self, value: Q) -> Filter<$E> {
            compare(
                self.name(),
                CmpOp::Le,
                value
                    .into_edm()
                    .and_then(|v| coerce(v, self.edm_override())),
            )
        }
        /// The property is **not set** on the entity (an `Option` field that
        /// is `None`), or is stored as another Edm type than the column's,
        /// which a typed read could not decode anyway: what
        /// `filter!(|e| e.field == None)` writes.
        ///
        /// The Table service has no null: a property that is not set is
        /// missing, and every comparison with a missing property is false,
        /// `ne` included. So this is written as the negation of a test that
        /// holds for every value of the column's type,
        /// `not (Prop eq v or Prop ne v)`: two of the 15 comparisons a filter
        /// may hold. No index serves it; it reads the whole range it is
        /// given. Refused before any request if the column's Rust type has
        /// no fixed Edm type ([`FilterValue::EDM_TYPE`]).
        ///
        /// ```
        /// use tablekit::filter::col;
        ///
        /// let f = col::<i32>("Age").is_none();
        /// assert_eq!(f.to_odata().unwrap(), "not (Age eq 0 or Age ne 0)");
        /// ```
        pub fn is_none(&self) -> Filter<$E>
        where
            V: FilterValue,
        {
            self.is_some().not()
        }
        /// The property is set, as the column's Edm type: what
        /// `filter!(|e| e.field != None)` writes, `Prop eq v or Prop ne v`
        /// (see [`is_none`](Self::is_none)).
        ///
        /// ```
        /// use tablekit::filter::col;
        ///
        /// let f = col::<String>("Email").is_some();
        /// assert_eq!(f.to_odata().unwrap(), "Email eq '' or Email ne ''");
        /// ```
        pub fn is_some(&self) -> Filter<$E>
        where
            V: FilterValue,
        {
            presence(self.name(), self.edm_override().or(V::EDM_TYPE))
        }
        /// `low <= column <= high`: `column ge low and column le high`.
        pub fn between<Q: IntoFilterValue<V>, R: IntoFilterValue<V>>(
            &self,
            low: Q,
            high: R,
        ) -> Filter<$E> {
            self.ge(low).and(self.le(high))
        }
        /// The column equals one of the values: equalities joined with `or`.
        /// An empty list matches nothing and is refused before any request.
        pub fn is_in<I>(&self, values: I) -> Filter<$E>
        where
            I: IntoIterator,
            I::Item: IntoFilterValue<V>,
        {
            let mut out: Option<Filter<$E>> = None;
            for v in values {
                let f = self.eq(v);
                out = Some(match out {
                    None => f,
                    Some(acc) => acc.or(f),
                });
            }
            out.unwrap_or_else(|| {
                Filter::invalid(format!("{}: is_in needs at least one value", self.name()))
            })
        }
    };
}

macro_rules! string_methods {
    ($E:ty) => {
        /// The column starts with `prefix`, as the range the service can serve:
        /// `column ge 'prefix' and column lt '<successor>'` (just `ge ''` for an
        /// empty prefix, which every string satisfies).
        pub fn starts_with(&self, prefix: &str) -> Filter<$E> {
            let low = self.ge(prefix);
            match prefix_successor(prefix) {
                Some(high) => low.and(self.lt(high)),
                None => low,
            }
        }
    };
}

impl<E, V> Column<E, V> {
    column_methods!(E);

    fn edm_override(&self) -> Option<EdmType> {
        self.edm()
    }
}

impl<E> Column<E, String> {
    string_methods!(E);
}

impl<E> From<Column<E, bool>> for Filter<E> {
    /// A Boolean column used as a condition: `Column eq true`.
    fn from(c: Column<E, bool>) -> Self {
        c.eq(true)
    }
}

impl<E> From<&Column<E, bool>> for Filter<E> {
    fn from(c: &Column<E, bool>) -> Self {
        c.eq(true)
    }
}

impl<E> Not for Column<E, bool> {
    type Output = Filter<E>;
    fn not(self) -> Filter<E> {
        Filter::from(self).not()
    }
}

impl<E> BitAnd<Column<E, bool>> for Filter<E> {
    type Output = Filter<E>;
    fn bitand(self, rhs: Column<E, bool>) -> Filter<E> {
        self.and(rhs)
    }
}

impl<E> BitOr<Column<E, bool>> for Filter<E> {
    type Output = Filter<E>;
    fn bitor(self, rhs: Column<E, bool>) -> Filter<E> {
        self.or(rhs)
    }
}

impl<E> BitAnd<Filter<E>> for Column<E, bool> {
    type Output = Filter<E>;
    fn bitand(self, rhs: Filter<E>) -> Filter<E> {
        Filter::from(self).and(rhs)
    }
}

impl<E> BitOr<Filter<E>> for Column<E, bool> {
    type Output = Filter<E>;
    fn bitor(self, rhs: Filter<E>) -> Filter<E> {
        Filter::from(self).or(rhs)
    }
}

impl<V> DynColumn<V> {
    column_methods!(DynamicEntity);

    fn edm_override(&self) -> Option<EdmType> {
        None
    }
}

impl DynColumn<String> {
    string_methods!(DynamicEntity);
}

/// The Boolean dynamic column stands as a condition on its own (`Active eq true`).
impl From<DynColumn<bool>> for Filter<DynamicEntity> {
    fn from(c: DynColumn<bool>) -> Self {
        compare(c.name(), CmpOp::Eq, Ok(EdmValue::Boolean(true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::col;
    use crate::edm::parse_datetime;

    #[test]
    fn parsed_filters_are_the_parser_s_tree_and_print_canonically() {
        let f = Filter::parse("Rating gt 3 and (not (Name eq 'x') or 2L ge Big)").unwrap();
        assert_eq!(
            f.expr().unwrap(),
            &super::super::parse("Rating gt 3 and (not (Name eq 'x') or Big le 2L)").unwrap()
        );
        assert_eq!(
            f.to_string(),
            "Rating gt 3 and (not (Name eq 'x') or Big le 2L)"
        );
        let again = Filter::parse(&f.to_odata().unwrap()).unwrap();
        assert_eq!(again.expr().unwrap(), f.expr().unwrap());
        let err = Filter::parse("Rating gt").unwrap_err();
        assert_eq!(err, super::super::parse("Rating gt").unwrap_err());
    }

    #[test]
    fn comparisons_are_listed_left_to_right_with_the_property_first() {
        let f = col::<i32>("A").gt(1) & !(col::<String>("B").eq("b") | col::<i64>("C").le(3));
        let found: Vec<_> = f
            .comparisons()
            .map(|c| (c.property(), c.operator(), c.value().clone()))
            .collect();
        assert_eq!(
            found,
            [
                ("A", "gt", EdmValue::Int32(1)),
                ("B", "eq", EdmValue::from("b")),
                ("C", "le", EdmValue::Int64(3)),
            ]
        );
        let flipped = Filter::parse("5 lt Age").unwrap();
        let c = flipped.comparisons().next().unwrap();
        assert_eq!((c.property(), c.operator()), ("Age", "gt"));
        // A filter that cannot be sent compares nothing.
        assert_eq!(col::<f64>("D").gt(f64::NAN).comparisons().count(), 0);
    }

    #[test]
    fn a_dynamic_boolean_column_is_a_condition() {
        let f: Filter<DynamicEntity> = col::<bool>("Active").into();
        assert_eq!(f.to_string(), "Active eq true");
        let f = col::<i32>("A").gt(1).and(col::<bool>("Active"));
        assert_eq!(f.to_string(), "A gt 1 and Active eq true");
    }

    #[test]
    fn matching_checks_the_filter_first() {
        let e = DynamicEntity::new("p", "r").with("A", 2);
        assert!(col::<i32>("A").gt(1).matches(&e).unwrap());
        assert!(!col::<i64>("A").gt(1).matches(&e).unwrap());
        assert!(col::<f64>("A").gt(f64::NAN).matches(&e).is_err());
        let mut many = col::<i32>("A").eq(0);
        for i in 1..=MAX_COMPARISONS as i32 {
            many = many | col::<i32>("A").eq(i);
        }
        assert!(many.matches(&e).is_err());
    }

    struct Emp;
    #[allow(non_upper_case_globals)]
    const age: Column<Emp, i32> = Column::new("Age");
    #[allow(non_upper_case_globals)]
    const last: Column<Emp, String> = Column::new("LastName");
    #[allow(non_upper_case_globals)]
    const active: Column<Emp, bool> = Column::new("Active");
    #[allow(non_upper_case_globals)]
    const big: Column<Emp, u64> = Column::new("Big");
    #[allow(non_upper_case_globals)]
    const score: Column<Emp, f64> = Column::new("Score");

    fn text<E>(f: Filter<E>) -> String {
        f.to_odata().unwrap()
    }

    #[test]
    fn display_prints_the_odata_text_unchecked_or_why_it_cannot() {
        let f = age.ge(30) & !last.eq("O'Brien") | active;
        assert_eq!(f.to_string(), f.to_odata().unwrap());
        // Over the comparison limit: still printable, refused by to_odata.
        let mut wide = age.eq(0);
        for n in 1..16 {
            wide = wide.or(age.eq(n));
        }
        assert!(wide.to_odata().is_err());
        assert!(wide.to_string().starts_with("Age eq 0 or Age eq 1"));
        let nan = score.gt(f64::NAN);
        assert!(nan.to_string().starts_with("invalid filter: "), "{nan}");
    }

    #[test]
    fn golden_filters() {
        assert_eq!(text(last.eq("O'Brien")), "LastName eq 'O''Brien'");
        assert_eq!(
            text(age.ge(30) & last.eq("Jones")),
            "Age ge 30 and LastName eq 'Jones'"
        );
        assert_eq!(
            text(last.eq("a") & (age.lt(3) | age.gt(60))),
            "LastName eq 'a' and (Age lt 3 or Age gt 60)"
        );
        assert_eq!(
            text(!active & age.eq(1)),
            "not (Active eq true) and Age eq 1"
        );
        assert_eq!(text(age.eq(1) & active), "Age eq 1 and Active eq true");
        assert_eq!(text(age.between(18, 65)), "Age ge 18 and Age le 65");
        assert_eq!(
            text(age.is_in([1, 2, 3])),
            "Age eq 1 or Age eq 2 or Age eq 3"
        );
        assert_eq!(text(score.gt(2.0)), "Score gt 2.0");
        assert_eq!(text(big.le(9_000_000_000_u64)), "Big le 9000000000L");
        assert_eq!(
            text(
                col::<DateTime<Utc>>("Timestamp")
                    .ge(parse_datetime("2009-05-01T00:00:00Z").unwrap())
            ),
            "Timestamp ge datetime'2009-05-01T00:00:00.0000000Z'"
        );
    }

    #[test]
    fn edm_overrides_change_the_literal_type() {
        const WIDE: Column<Emp, i32> = Column::with_edm("Wide", EdmType::Int64);
        const ID: Column<Emp, Uuid> = Column::with_edm("Id", EdmType::String);
        assert_eq!(text(WIDE.ge(30)), "Wide ge 30L");
        let id = Uuid::from_u128(1);
        assert_eq!(
            text(ID.eq(id)),
            "Id eq '00000000-0000-0000-0000-000000000001'"
        );
    }

    #[test]
    fn starts_with_is_the_range_trick() {
        assert_eq!(
            text(last.starts_with("PDC")),
            "LastName ge 'PDC' and LastName lt 'PDD'"
        );
        assert_eq!(text(last.starts_with("")), "LastName ge ''");
        assert_eq!(
            text(last.starts_with("a\u{FFFF}")),
            "LastName ge 'a\u{FFFF}' and LastName lt 'b'"
        );
        assert_eq!(text(last.starts_with("\u{FFFF}")), "LastName ge '\u{FFFF}'");
        assert_eq!(
            text(last.starts_with("Football_7991_")),
            "LastName ge 'Football_7991_' and LastName lt 'Football_7991`'"
        );
    }

    #[test]
    fn successor_follows_utf16_order() {
        assert_eq!(prefix_successor("a\u{D7FF}").as_deref(), Some("a\u{10000}"));
        assert_eq!(
            prefix_successor("a\u{10FFFF}").as_deref(),
            Some("a\u{E000}")
        );
        assert_eq!(
            prefix_successor("a\u{10000}").as_deref(),
            Some("a\u{10001}")
        );
        // In UTF-16, U+10000 (D800 DC00) sorts between U+D7FF and U+E000.
        let units = |s: &str| s.encode_utf16().collect::<Vec<_>>();
        assert!(units("a\u{D7FF}z") < units("a\u{10000}"));
        assert!(units("a\u{10000}") < units("a\u{E000}"));
    }

    #[test]
    fn values_without_a_literal_are_refused_before_io() {
        for bad in [
            score.eq(f64::NAN),
            score.eq(f64::INFINITY),
            big.eq(u64::MAX),
            age.is_in(Vec::<i32>::new()),
        ] {
            let err = bad.to_odata().unwrap_err();
            assert!(err.is_invalid_input(), "{err}");
        }
        // An invalid part poisons the whole filter.
        assert!((age.eq(1) | score.eq(f64::NAN)).to_odata().is_err());
    }

    #[test]
    fn more_than_fifteen_comparisons_are_refused() {
        let ok = age.is_in(0..15);
        assert!(ok.to_odata().is_ok());
        let err = age.is_in(0..16).to_odata().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: query is invalid: the filter has 16 comparisons; the service allows at most 15"
        );
        assert!(last
            .starts_with("x")
            .and(age.is_in(0..14))
            .to_odata()
            .is_err());
    }

    /// Every (Rust type, stored value) pair: `is_some` holds exactly where
    /// the property is stored as the column's Edm type (NaN included), and
    /// `is_none` exactly where it is missing or of another type, on the
    /// evaluator that follows the service's rules.
    #[test]
    fn is_none_and_is_some_split_entities_by_presence_as_the_column_type() {
        use crate::filter::eval::matches;
        let stored: Vec<Option<EdmValue>> = vec![
            None,
            Some(EdmValue::String(String::new())),
            Some(EdmValue::String("x".into())),
            Some(EdmValue::Binary(vec![])),
            Some(EdmValue::Binary(vec![1])),
            Some(EdmValue::Boolean(false)),
            Some(EdmValue::Boolean(true)),
            Some(EdmValue::DateTime(DateTime::<Utc>::UNIX_EPOCH)),
            Some(EdmValue::DateTime(
                parse_datetime("2024-05-01T00:00:00Z").unwrap(),
            )),
            Some(EdmValue::Double(0.0)),
            Some(EdmValue::Double(-0.0)),
            Some(EdmValue::Double(f64::NAN)),
            Some(EdmValue::Double(f64::INFINITY)),
            Some(EdmValue::Guid(Uuid::nil())),
            Some(EdmValue::Guid(Uuid::from_u128(7))),
            Some(EdmValue::Int32(0)),
            Some(EdmValue::Int32(i32::MIN)),
            Some(EdmValue::Int64(0)),
            Some(EdmValue::Int64(i64::MAX)),
        ];
        fn check<V: FilterValue>(stored: &[Option<EdmValue>]) {
            let edm = V::EDM_TYPE.expect("built-in types have one");
            let some = col::<V>("P").is_some();
            let none = col::<V>("P").is_none();
            assert_eq!(none.expr().unwrap().comparisons(), 2);
            for value in stored {
                let mut e = DynamicEntity::new("pk", "rk");
                if let Some(v) = value {
                    e = e.with("P", v.clone());
                }
                let present = value.as_ref().is_some_and(|v| v.edm_type() == edm);
                assert_eq!(
                    matches(some.expr().unwrap(), &e),
                    present,
                    "{edm} is_some {value:?}"
                );
                assert_eq!(
                    matches(none.expr().unwrap(), &e),
                    !present,
                    "{edm} is_none {value:?}"
                );
            }
        }
        check::<String>(&stored);
        check::<Vec<u8>>(&stored);
        check::<bool>(&stored);
        check::<DateTime<Utc>>(&stored);
        check::<f64>(&stored);
        check::<Uuid>(&stored);
        check::<i32>(&stored);
        check::<u8>(&stored);
        check::<i64>(&stored);
        check::<u64>(&stored);
    }

    #[test]
    fn presence_follows_an_edm_override_and_refuses_a_type_without_one() {
        const WIDE: Column<Emp, i32> = Column::with_edm("Wide", EdmType::Int64);
        assert_eq!(text(WIDE.is_some()), "Wide eq 0L or Wide ne 0L");
        assert_eq!(text(age.is_none()), "not (Age eq 0 or Age ne 0)");
        assert_eq!(
            text(last.eq("a").and(last.is_none())),
            "LastName eq 'a' and not (LastName eq '' or LastName ne '')"
        );

        struct Code(u16);
        impl FilterValue for Code {
            fn to_edm(&self) -> std::result::Result<EdmValue, String> {
                Ok(EdmValue::Int32(i32::from(self.0)))
            }
        }
        const CODE: Column<Emp, Code> = Column::new("Code");
        assert_eq!(text(CODE.eq(Code(3))), "Code eq 3");
        let err = CODE.is_none().to_odata().unwrap_err().to_string();
        assert!(
            err.contains("Code: is_none/is_some need the column's Edm type"),
            "{err}"
        );
        const TYPED: Column<Emp, Code> = Column::with_edm("Code", EdmType::Int32);
        assert_eq!(text(TYPED.is_some()), "Code eq 0 or Code ne 0");
    }
}
