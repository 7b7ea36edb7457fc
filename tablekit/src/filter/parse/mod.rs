//! The parser of OData `$filter` text (see [`parse`]).

use super::expr::{CmpOp, Expr};
use crate::edm::EdmValue;
use crate::error::ParseError;

mod lex;
#[cfg(test)]
mod tests;
use lex::{arithmetic, describe, is_arithmetic, is_reserved, Tok, Token};

/// How deeply parentheses and `not` may nest before the parser gives up
/// (the service's limit of 15 comparisons keeps real filters far below it).
const MAX_DEPTH: usize = 100;

/// Parses the text of an OData `$filter` into an [`Expr`]: the subset of OData
/// v3 that the Table service accepts. The grammar and the literals are in the
/// docs of `Filter::parse`, its public form. The text [`Expr`]'s `Display`
/// prints parses back to the same tree; the 15-comparison limit is not checked
/// here ([`Expr::comparisons`]).
pub(crate) fn parse(text: &str) -> Result<Expr, ParseError> {
    let mut p = Parser {
        text,
        pos: 0,
        peeked: None,
    };
    p.parse_all().map_err(|e| e.in_text(text))
}

impl Parser<'_> {
    fn parse_all(&mut self) -> Result<Expr, ParseError> {
        let p = self;
        let e = p.parse_or(0)?;
        let t = p.peek()?;
        match &t.tok {
            Tok::End => Ok(e),
            Tok::Ident(w) if CmpOp::from_keyword(w).is_some() => Err(ParseError::new(
                t.start,
                format!(
                    "unexpected `{w}`: the result of a comparison or of `not` cannot be compared; \
                 write `not (Property {w} literal)` or combine conditions with `and`/`or`"
                ),
            )
            .expecting("`and`, `or` or the end")),
            Tok::Ident(w) if is_arithmetic(w) => Err(arithmetic(t.start, w)),
            Tok::RParen => Err(
                ParseError::new(t.start, "unexpected `)` without a matching `(`")
                    .expecting("`and`, `or` or the end"),
            ),
            _ => Err(ParseError::new(
                t.start,
                format!(
                    "unexpected {} after a complete condition: expected `and`, `or` or the end",
                    describe(&t.tok)
                ),
            )
            .expecting("`and`, `or` or the end")),
        }
    }
}

/// One side of a comparison.
enum Side<'a> {
    Property(&'a str),
    Literal(EdmValue),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    peeked: Option<Token<'a>>,
}

impl<'a> Parser<'a> {
    fn check_depth(&self, depth: usize, at: usize) -> Result<(), ParseError> {
        if depth > MAX_DEPTH {
            Err(ParseError::new(
                at,
                format!("parentheses and `not` nest deeper than {MAX_DEPTH} levels"),
            ))
        } else {
            Ok(())
        }
    }

    fn parse_or(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let mut left = self.parse_and(depth)?;
        while self.peek_is_word("or")? {
            self.next()?;
            let right = self.parse_and(depth)?;
            left = left.or(right);
        }
        Ok(left)
    }

    fn parse_and(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let mut left = self.parse_unary(depth)?;
        while self.peek_is_word("and")? {
            self.next()?;
            let right = self.parse_unary(depth)?;
            left = left.and(right);
        }
        Ok(left)
    }

    fn parse_unary(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if self.peek_is_word("not")? {
            let not = self.next()?;
            self.check_depth(depth + 1, not.start)?;
            Ok(self.parse_not_operand(depth + 1)?.negate())
        } else {
            self.parse_primary(depth)
        }
    }

    /// What follows `not`: a group, another `not`, or a Boolean property.
    fn parse_not_operand(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let t = self.peek()?;
        match t.tok {
            // `not (…)` is one level, not two: it is how every `not` prints,
            // so a tree parsed within the limit prints as text within it.
            Tok::LParen => self.parse_group(depth - 1),
            Tok::Ident("not") => self.parse_unary(depth),
            Tok::Ident(name) if !is_reserved(name) => {
                self.next()?;
                self.reject_call(&t, name)?;
                let after = self.peek()?;
                if let Tok::Ident(w) = after.tok {
                    if CmpOp::from_keyword(w).is_some() {
                        return Err(ParseError::new(
                            t.start,
                            format!("`not` binds tighter than `{w}`: write `not ({name} {w} …)`"),
                        ));
                    }
                }
                Ok(Expr::cmp(name, CmpOp::Eq, true))
            }
            _ => Err(ParseError::new(
                t.start,
                format!(
                    "expected `(`, `not` or a Boolean property after `not`, found {}",
                    describe(&t.tok)
                ),
            )
            .expecting("`(`, `not` or a Boolean property")),
        }
    }

    /// `( or )`, with the opening parenthesis next.
    fn parse_group(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let open = self.next()?;
        self.check_depth(depth + 1, open.start)?;
        let inner = self.parse_or(depth + 1)?;
        let close = self.next()?;
        if close.tok != Tok::RParen {
            let found = match &close.tok {
                Tok::Ident(w) if CmpOp::from_keyword(w).is_some() => {
                    format!("`{w}` (a comparison's result cannot be compared)")
                }
                other => describe(other),
            };
            return Err(ParseError::new(
                close.start,
                format!(
                    "expected `)` to close the `(` at byte {}, found {found}",
                    open.start
                ),
            )
            .expecting("`)`"));
        }
        Ok(inner)
    }

    /// A property directly followed by `(` is a function call: refused.
    fn reject_call(&self, t: &Token<'a>, name: &str) -> Result<(), ParseError> {
        if self.text.as_bytes().get(t.end) == Some(&b'(') {
            Err(ParseError::new(
                t.start,
                format!(
                    "functions (`{name}(…)`) are not supported by the Table service; \
                     for a prefix use a range: `P ge 'abc' and P lt 'abd'`"
                ),
            ))
        } else {
            Ok(())
        }
    }

    fn parse_side(&mut self, what: &str) -> Result<(Side<'a>, usize), ParseError> {
        let t = self.next()?;
        match t.tok {
            Tok::Lit(v) => Ok((Side::Literal(v), t.start)),
            Tok::Ident("true") => Ok((Side::Literal(EdmValue::Boolean(true)), t.start)),
            Tok::Ident("false") => Ok((Side::Literal(EdmValue::Boolean(false)), t.start)),
            Tok::Ident("null") => Err(ParseError::new(
                t.start,
                "`null` is not supported: the Table service stores no nulls \
                 (a property that is not set is missing, and every comparison with it is false)",
            )),
            Tok::Ident(w) if is_arithmetic(w) => Err(arithmetic(t.start, w)),
            Tok::Ident(name) if !is_reserved(name) => {
                self.reject_call(&t, name)?;
                Ok((Side::Property(name), t.start))
            }
            other => Err(ParseError::new(
                t.start,
                format!("expected {what}, found {}", describe(&other)),
            )
            .expecting(what)),
        }
    }

    /// A group, a comparison, or a Boolean property on its own.
    fn parse_primary(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if self.peek()?.tok == Tok::LParen {
            return self.parse_group(depth);
        }
        let (left, left_at) = self.parse_side("a property, a literal, `(` or `not`")?;
        let t = self.peek()?;
        let op = match t.tok {
            Tok::Ident(w) => {
                if let Some(op) = CmpOp::from_keyword(w) {
                    op
                } else if is_arithmetic(w) {
                    return Err(arithmetic(t.start, w));
                } else if CmpOp::from_keyword(&w.to_ascii_lowercase()).is_some() {
                    return Err(ParseError::new(
                        t.start,
                        format!(
                            "unknown operator `{w}`: operators are case-sensitive, write `{}`",
                            w.to_ascii_lowercase()
                        ),
                    ));
                } else {
                    return self.lone(left, left_at, &t);
                }
            }
            _ => return self.lone(left, left_at, &t),
        };
        self.next()?;
        let (right, right_at) = self.parse_side("a literal or a property after the operator")?;
        match (left, right) {
            (Side::Property(p), Side::Literal(v)) => Ok(Expr::cmp(p, op, v)),
            (Side::Literal(v), Side::Property(p)) => Ok(Expr::cmp(p, op.flipped(), v)),
            (Side::Property(a), Side::Property(b)) => {
                let hint = [a, b]
                    .into_iter()
                    .map(str::to_ascii_lowercase)
                    .find(|w| w == "true" || w == "false")
                    .map(|w| format!(" (literals are case-sensitive: `{w}`)"))
                    .unwrap_or_default();
                Err(ParseError::new(
                    right_at,
                    format!(
                        "`{a} {} {b}` compares two properties; the Table service needs a literal on one side{hint}",
                        op.as_str()
                    ),
                ))
            }
            (Side::Literal(_), Side::Literal(_)) => Err(ParseError::new(
                left_at,
                "a comparison of two literals; one side must be a property",
            )),
        }
    }

    /// A side with no operator after it: a Boolean property stands for `eq true`.
    fn lone(&self, side: Side<'a>, at: usize, next: &Token<'a>) -> Result<Expr, ParseError> {
        match side {
            Side::Property(p) => Ok(Expr::cmp(p, CmpOp::Eq, true)),
            Side::Literal(_) => Err(ParseError::new(
                at,
                format!(
                    "a literal alone is not a condition: expected a comparison operator \
                     (`eq`, `ne`, `gt`, `ge`, `lt`, `le`) before {}",
                    describe(&next.tok)
                ),
            )
            .expecting("a comparison operator (`eq`, `ne`, `gt`, `ge`, `lt`, `le`)")),
        }
    }
}
