//! The untyped filter expression: what an OData `$filter` says, as a tree.
//! The typed DSL builds it, the planner reads it, the text form prints it, and
//! the parser (for filters written by hand) produces it.

use std::fmt;

use crate::edm::{write_literal, EdmValue};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CmpOp {
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
    /// `lt`
    Lt,
    /// `le`
    Le,
}

impl CmpOp {
    /// The OData keyword.
    pub const fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
        }
    }

    /// Parses an OData keyword.
    pub fn from_keyword(s: &str) -> Option<CmpOp> {
        Some(match s {
            "eq" => CmpOp::Eq,
            "ne" => CmpOp::Ne,
            "gt" => CmpOp::Gt,
            "ge" => CmpOp::Ge,
            "lt" => CmpOp::Lt,
            "le" => CmpOp::Le,
            _ => return None,
        })
    }

    /// Whether `ordering` (of property against literal) satisfies the operator.
    #[cfg(any(
        test,
        feature = "embedded",
        feature = "test-support",
        feature = "fuzzing"
    ))]
    pub fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ordering == Equal,
            CmpOp::Ne => ordering != Equal,
            CmpOp::Gt => ordering == Greater,
            CmpOp::Ge => ordering != Less,
            CmpOp::Lt => ordering == Less,
            CmpOp::Le => ordering != Greater,
        }
    }

    /// The operator with its sides swapped (`5 lt Age` is `Age gt 5`).
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            other => other,
        }
    }
}

/// A filter expression over properties and literals.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Expr {
    /// `Property op literal`.
    Cmp {
        /// The property (or `PartitionKey`, `RowKey`, `Timestamp`).
        property: String,
        /// The operator.
        op: CmpOp,
        /// The literal.
        value: EdmValue,
    },
    /// Both hold.
    And(Box<Expr>, Box<Expr>),
    /// Either holds.
    Or(Box<Expr>, Box<Expr>),
    /// It does not hold.
    Not(Box<Expr>),
}

impl Expr {
    /// `property op value`.
    pub fn cmp(property: impl Into<String>, op: CmpOp, value: impl Into<EdmValue>) -> Expr {
        Expr::Cmp {
            property: property.into(),
            op,
            value: value.into(),
        }
    }

    /// `self and other`. Chains are kept left-associative (`a and (b and c)` is
    /// built as `(a and b) and c`, the same condition), so the text needs no
    /// parentheses and parses back to the same tree.
    pub fn and(self, other: Expr) -> Expr {
        match other {
            Expr::And(b1, b2) => self.and(*b1).and(*b2),
            other => Expr::And(Box::new(self), Box::new(other)),
        }
    }

    /// `self or other`, kept left-associative like [`Expr::and`].
    pub fn or(self, other: Expr) -> Expr {
        match other {
            Expr::Or(b1, b2) => self.or(*b1).or(*b2),
            other => Expr::Or(Box::new(self), Box::new(other)),
        }
    }

    /// `not self`.
    pub fn negate(self) -> Expr {
        Expr::Not(Box::new(self))
    }

    /// The number of discrete comparisons (the service allows 15 per filter).
    pub fn comparisons(&self) -> usize {
        match self {
            Expr::Cmp { .. } => 1,
            Expr::And(a, b) | Expr::Or(a, b) => a.comparisons() + b.comparisons(),
            Expr::Not(e) => e.comparisons(),
        }
    }

    fn precedence(&self) -> u8 {
        match self {
            Expr::Or(..) => 1,
            Expr::And(..) => 2,
            Expr::Cmp { .. } => 3,
            Expr::Not(_) => 4,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Expr::Cmp {
                property,
                op,
                value,
            } => {
                out.push_str(property);
                out.push(' ');
                out.push_str(op.as_str());
                out.push(' ');
                write_literal(out, value);
            }
            Expr::And(a, b) => self.write_binary(out, a, "and", b),
            Expr::Or(a, b) => self.write_binary(out, a, "or", b),
            Expr::Not(e) => {
                // `not` binds tighter than comparisons in OData: always group its operand.
                out.push_str("not (");
                e.write(out);
                out.push(')');
            }
        }
    }

    fn write_binary(&self, out: &mut String, a: &Expr, keyword: &str, b: &Expr) {
        let mine = self.precedence();
        // Left-associative: a looser left child needs parentheses; a right child
        // of the same or looser binding does too, so the text keeps the tree's shape.
        let left = a.precedence() < mine;
        let right = matches!(b, Expr::And(..) | Expr::Or(..)) && b.precedence() <= mine;
        if left {
            out.push('(');
        }
        a.write(out);
        if left {
            out.push(')');
        }
        out.push(' ');
        out.push_str(keyword);
        out.push(' ');
        if right {
            out.push('(');
        }
        b.write(out);
        if right {
            out.push(')');
        }
    }
}

/// The OData text, with minimal parentheses and a stable spelling.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.write(&mut s);
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(p: &str, v: i32) -> Expr {
        Expr::cmp(p, CmpOp::Eq, v)
    }

    #[test]
    fn parentheses_are_minimal_and_keep_the_tree() {
        let e = c("A", 1).and(c("B", 2)).and(c("C", 3));
        assert_eq!(e.to_string(), "A eq 1 and B eq 2 and C eq 3");
        let e = c("A", 1).and(c("B", 2).or(c("C", 3)));
        assert_eq!(e.to_string(), "A eq 1 and (B eq 2 or C eq 3)");
        let e = c("A", 1).or(c("B", 2)).and(c("C", 3));
        assert_eq!(e.to_string(), "(A eq 1 or B eq 2) and C eq 3");
        let e = c("A", 1).or(c("B", 2).and(c("C", 3)));
        assert_eq!(e.to_string(), "A eq 1 or B eq 2 and C eq 3");
        let e = c("A", 1).or(c("B", 2).or(c("C", 3)));
        assert_eq!(e.to_string(), "A eq 1 or B eq 2 or C eq 3");
        assert_eq!(e, c("A", 1).or(c("B", 2)).or(c("C", 3)));
        // Built by hand, a right-nested chain keeps its parentheses.
        let e = Expr::And(
            Box::new(c("A", 1)),
            Box::new(Expr::And(Box::new(c("B", 2)), Box::new(c("C", 3)))),
        );
        assert_eq!(e.to_string(), "A eq 1 and (B eq 2 and C eq 3)");
        let e = c("A", 1).and(c("B", 2)).negate();
        assert_eq!(e.to_string(), "not (A eq 1 and B eq 2)");
        let e = c("A", 1).negate().and(c("B", 2));
        assert_eq!(e.to_string(), "not (A eq 1) and B eq 2");
    }

    #[test]
    fn literals_by_type() {
        let lit = |v: EdmValue| {
            let mut s = String::new();
            write_literal(&mut s, &v);
            s
        };
        assert_eq!(lit("O'Brien".into()), "'O''Brien'");
        assert_eq!(lit(123.into()), "123");
        assert_eq!(lit(123i64.into()), "123L");
        assert_eq!(lit(i64::MIN.into()), "-9223372036854775808L");
        assert_eq!(lit(2.0.into()), "2.0");
        assert_eq!(lit(1e300.into()), "1e300");
        assert_eq!(lit(0.1.into()), "0.1");
        assert_eq!(lit(true.into()), "true");
        assert_eq!(
            lit(crate::edm::parse_datetime("2020-07-23T21:20:41.6667782Z")
                .unwrap()
                .into()),
            "datetime'2020-07-23T21:20:41.6667782Z'"
        );
        assert_eq!(
            lit(uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef).into()),
            "guid'01234567-89ab-cdef-0123-456789abcdef'"
        );
        assert_eq!(lit(vec![0x01u8, 0xff].into()), "X'01ff'");
    }

    #[test]
    fn comparisons_are_counted() {
        let e = c("A", 1).and(c("B", 2).or(c("C", 3))).negate();
        assert_eq!(e.comparisons(), 3);
    }
}
