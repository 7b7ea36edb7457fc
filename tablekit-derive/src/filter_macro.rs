//! `filter!(|e| e.department == "Sales" && e.age >= min && !e.active)`: rewrites
//! Rust operators inside a closure into the typed filter calls (`eq`, `ge`, `and`,
//! `not`, ...), so rustc type-checks every comparison through the column handles.
//! A construct with no OData translation is a compile error at its span.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{BinOp, Expr, ExprClosure, Ident, Pat, UnOp};

/// Methods a column supports inside `filter!`, passed through as written.
const COLUMN_METHODS: &[&str] = &[
    "eq",
    "ne",
    "gt",
    "ge",
    "lt",
    "le",
    "between",
    "is_in",
    "starts_with",
    "is_none",
    "is_some",
];

/// `None` or `Some(value)` on the value side of a comparison: the Rust
/// meaning of comparing an `Option` field, which `filter!` keeps.
enum OptionValue<'e> {
    None,
    Some(&'e Expr),
}

/// Whether `e` is written `None` / `Some(x)` (or `Option::None`, ...).
fn option_value(e: &Expr) -> Option<OptionValue<'_>> {
    let last = |p: &syn::Path| p.segments.last().map(|s| s.ident.to_string());
    match e {
        Expr::Paren(p) => option_value(&p.expr),
        Expr::Group(g) => option_value(&g.expr),
        Expr::Path(p) if p.qself.is_none() && last(&p.path).as_deref() == Some("None") => {
            Some(OptionValue::None)
        }
        Expr::Call(c) if c.args.len() == 1 => match &*c.func {
            Expr::Path(p) if p.qself.is_none() && last(&p.path).as_deref() == Some("Some") => {
                Some(OptionValue::Some(&c.args[0]))
            }
            _ => None,
        },
        _ => None,
    }
}

struct Rewriter {
    param: Ident,
    errors: Vec<syn::Error>,
}

/// Entry point: the closure in, the rewritten closure (or the errors) out.
pub fn expand(input: TokenStream) -> TokenStream {
    let closure: ExprClosure = match syn::parse2(input) {
        Ok(c) => c,
        Err(e) => {
            let mut e = e;
            e.combine(syn::Error::new(
                Span::call_site(),
                "filter! takes a closure: filter!(|e| e.age >= 30 && e.active)",
            ));
            return e.to_compile_error();
        }
    };
    if closure.inputs.len() != 1 {
        return syn::Error::new(
            closure.inputs.span(),
            "filter! takes a closure of one argument, the entity's columns: |e| ...",
        )
        .to_compile_error();
    }
    let param = match &closure.inputs[0] {
        Pat::Ident(p) => p.ident.clone(),
        Pat::Type(t) => match &*t.pat {
            Pat::Ident(p) => p.ident.clone(),
            other => {
                return syn::Error::new(
                    other.span(),
                    "filter!'s closure argument must be a name, such as `e`",
                )
                .to_compile_error()
            }
        },
        other => {
            return syn::Error::new(
                other.span(),
                "filter!'s closure argument must be a name, such as `e`",
            )
            .to_compile_error()
        }
    };
    let mut r = Rewriter {
        param: param.clone(),
        errors: Vec::new(),
    };
    let body = r.condition(&closure.body);
    if !r.errors.is_empty() {
        let errors = r.errors.iter().map(syn::Error::to_compile_error);
        // Still a closure of the right shape, so no second error cascades.
        return quote! {
            |#param: &_| -> ::tablekit::Filter<_> {
                #(#errors)*
                ::core::unreachable!()
            }
        };
    }
    quote! {
        |#param: &_| { #body }
    }
}

impl Rewriter {
    fn fail(&mut self, span: Span, message: impl std::fmt::Display) -> TokenStream {
        self.errors.push(syn::Error::new(span, message.to_string()));
        quote!(::core::unreachable!())
    }

    /// A boolean condition: `&&`, `||`, `!`, comparisons, Boolean columns, calls.
    fn condition(&mut self, e: &Expr) -> TokenStream {
        match e {
            Expr::Paren(p) => self.condition(&p.expr),
            Expr::Group(g) => self.condition(&g.expr),
            Expr::Binary(b) => match b.op {
                BinOp::And(_) | BinOp::BitAnd(_) => {
                    let (l, r) = (self.condition(&b.left), self.condition(&b.right));
                    quote_spanned!(b.op.span()=> ::tablekit::__private_0_1::filter_and(#l, #r))
                }
                BinOp::Or(_) | BinOp::BitOr(_) => {
                    let (l, r) = (self.condition(&b.left), self.condition(&b.right));
                    quote_spanned!(b.op.span()=> ::tablekit::__private_0_1::filter_or(#l, #r))
                }
                BinOp::Eq(_) | BinOp::Ne(_) | BinOp::Lt(_) | BinOp::Le(_) | BinOp::Gt(_) | BinOp::Ge(_) => {
                    self.comparison(b)
                }
                _ => self.fail(
                    b.op.span(),
                    format_args!(
                        "filter! cannot translate `{}`: OData filters have no arithmetic; compute the value before the filter",
                        b.op.to_token_stream()
                    ),
                ),
            },
            Expr::Unary(u) if matches!(u.op, UnOp::Not(_)) => {
                let inner = self.condition(&u.expr);
                quote_spanned!(u.op.span()=> ::tablekit::__private_0_1::filter_not(#inner))
            }
            Expr::Field(_) if self.is_column(e) => {
                let c = self.column(e);
                quote_spanned!(e.span()=> ::tablekit::__private_0_1::filter_of(#c))
            }
            Expr::MethodCall(m) if self.is_column(&m.receiver) => self.column_call(m),
            Expr::If(i) => self.fail(
                i.if_token.span,
                "filter! cannot translate `if`: combine conditions with && and || instead",
            ),
            Expr::Lit(l) => self.fail(
                l.span(),
                "filter! needs a condition on a column here, not a constant",
            ),
            other => self.fail(
                other.span(),
                "filter! cannot translate this: use comparisons between a column of the closure's argument and a value, joined with &&, || and !",
            ),
        }
    }

    /// Whether an expression is a column of the closure's argument:
    /// `e.field` or `e.col::<V>("Name")`.
    fn is_column(&self, e: &Expr) -> bool {
        match e {
            Expr::Paren(p) => self.is_column(&p.expr),
            Expr::Field(f) => self.is_param(&f.base),
            Expr::MethodCall(m) => m.method == "col" && self.is_param(&m.receiver),
            _ => false,
        }
    }

    fn is_param(&self, e: &Expr) -> bool {
        matches!(e, Expr::Path(p) if p.path.is_ident(&self.param))
    }

    fn column(&self, e: &Expr) -> TokenStream {
        quote!((#e))
    }

    /// A column method call, passed through when the method is supported.
    fn column_call(&mut self, m: &syn::ExprMethodCall) -> TokenStream {
        let name = m.method.to_string();
        if !COLUMN_METHODS.contains(&name.as_str()) {
            return self.fail(
                m.method.span(),
                format_args!(
                    "filter! cannot translate the method `{name}`; a column supports {}",
                    COLUMN_METHODS.join(", ")
                ),
            );
        }
        let receiver = self.column(&m.receiver);
        let method = &m.method;
        let args: Vec<TokenStream> = m.args.iter().map(|a| self.value(a)).collect();
        quote_spanned!(m.span()=> #receiver.#method(#(#args),*))
    }

    /// `column op value` (or `value op column`), as a typed call.
    fn comparison(&mut self, b: &syn::ExprBinary) -> TokenStream {
        let (left_col, right_col) = (self.is_column(&b.left), self.is_column(&b.right));
        let (column, value, flipped) = match (left_col, right_col) {
            (true, false) => (&b.left, &b.right, false),
            (false, true) => (&b.right, &b.left, true),
            (true, true) => {
                return self.fail(
                    b.op.span(),
                    "filter! cannot compare two columns: the service compares a property with a constant only",
                )
            }
            (false, false) => {
                let column_method = [&*b.left, &*b.right].into_iter().find_map(|side| match side {
                    Expr::MethodCall(m) if self.is_column(&m.receiver) => Some(m.method.clone()),
                    _ => None,
                });
                if let Some(method) = column_method {
                    let message = format!(
                        "filter! cannot translate the method `{method}` on a column; a column supports {}",
                        COLUMN_METHODS.join(", ")
                    );
                    return self.fail(method.span(), message);
                }
                let arith = [&*b.left, &*b.right].into_iter().find_map(|side| match side {
                    Expr::Binary(a) => Some(a.op.span()),
                    _ => None,
                });
                if let Some(span) = arith {
                    return self.fail(
                        span,
                        "filter! cannot translate arithmetic: OData filters compare a property with a constant",
                    );
                }
                let message = format!(
                    "filter! needs a column of `{}` on one side of this comparison",
                    self.param
                );
                return self.fail(b.span(), message);
            }
        };
        if let Some(option) = option_value(value) {
            return self.option_comparison(b, column, option);
        }
        let method = match (&b.op, flipped) {
            (BinOp::Eq(_), _) => "eq",
            (BinOp::Ne(_), _) => "ne",
            (BinOp::Lt(_), false) | (BinOp::Gt(_), true) => "lt",
            (BinOp::Le(_), false) | (BinOp::Ge(_), true) => "le",
            (BinOp::Gt(_), false) | (BinOp::Lt(_), true) => "gt",
            (BinOp::Ge(_), false) | (BinOp::Le(_), true) => "ge",
            _ => unreachable_op(),
        };
        let method = Ident::new(method, b.op.span());
        let column = self.column(column);
        let value = self.value(value);
        quote_spanned!(b.op.span()=> #column.#method(#value))
    }

    /// `column == None`, `column != Some(v)`, ...: the comparisons of Rust's
    /// `Option`, where `None` is a property that is not set. `== None` is
    /// `is_none()`, `!= None` `is_some()`, `== Some(v)` `eq(v)` (set and
    /// equal), and `!= Some(v)` `not (eq(v))` (not set, or another value).
    /// Ordering against an `Option` is refused: the service has no order
    /// between a missing property and a value.
    fn option_comparison(
        &mut self,
        b: &syn::ExprBinary,
        column: &Expr,
        option: OptionValue<'_>,
    ) -> TokenStream {
        let span = b.op.span();
        let equal = match b.op {
            BinOp::Eq(_) => true,
            BinOp::Ne(_) => false,
            _ => {
                return self.fail(
                    span,
                    "filter! cannot order a column against `None` or `Some(..)`: the service has no order between a property that is not set and a value; compare with the value itself (`e.age < 30` holds only where Age is set)",
                )
            }
        };
        let column = self.column(column);
        match (option, equal) {
            (OptionValue::None, true) => quote_spanned!(span=> #column.is_none()),
            (OptionValue::None, false) => quote_spanned!(span=> #column.is_some()),
            (OptionValue::Some(v), true) => {
                let v = self.value(v);
                quote_spanned!(span=> #column.eq(#v))
            }
            (OptionValue::Some(v), false) => {
                let v = self.value(v);
                quote_spanned!(span=> ::tablekit::__private_0_1::filter_not(#column.eq(#v)))
            }
        }
    }

    /// A value: a literal, a variable or constant, a reference to one, a negative
    /// number. Anything computed is refused, so the filter's text is evident.
    fn value(&mut self, e: &Expr) -> TokenStream {
        match e {
            Expr::Lit(_) | Expr::Path(_) => e.to_token_stream(),
            Expr::Paren(p) => self.value(&p.expr),
            Expr::Group(g) => self.value(&g.expr),
            Expr::Reference(r) => {
                let inner = self.value(&r.expr);
                let and = r.and_token;
                let mutability = r.mutability;
                quote!(#and #mutability #inner)
            }
            Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) && matches!(&*u.expr, Expr::Lit(_)) => {
                e.to_token_stream()
            }
            Expr::Array(_) | Expr::Tuple(_) => {
                // is_in([..]) / between(a, b) lists: each element must be a value.
                let mut ok = true;
                let elems: Vec<&Expr> = match e {
                    Expr::Array(a) => a.elems.iter().collect(),
                    Expr::Tuple(t) => t.elems.iter().collect(),
                    _ => Vec::new(),
                };
                for el in elems {
                    if self.is_column(el) {
                        ok = false;
                        self.fail(el.span(), "filter! cannot compare two columns");
                    } else {
                        self.value(el);
                    }
                }
                if ok {
                    e.to_token_stream()
                } else {
                    quote!(::core::unreachable!())
                }
            }
            _ if self.is_column(e) => self.fail(
                e.span(),
                "filter! cannot compare two columns: the service compares a property with a constant only",
            ),
            Expr::Field(f) => self.fail(
                f.span(),
                format_args!(
                    "filter! cannot use a field of `{}` as a value: bind it to a local variable before the filter",
                    f.base.to_token_stream()
                ),
            ),
            Expr::MethodCall(m) => self.fail(
                m.method.span(),
                "filter! cannot call methods on values: compute the value before the filter",
            ),
            Expr::Binary(b) => self.fail(
                b.op.span(),
                "filter! cannot translate arithmetic: compute the value before the filter",
            ),
            Expr::If(i) => self.fail(i.if_token.span, "filter! cannot translate `if` in a value"),
            other => self.fail(
                other.span(),
                "filter! takes literals and variables as values; compute anything else before the filter",
            ),
        }
    }
}

fn unreachable_op() -> &'static str {
    // Only called for comparison operators, matched exhaustively above.
    "eq"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(s: &str) -> String {
        expand(s.parse().unwrap()).to_string()
    }

    #[test]
    fn operators_become_typed_calls() {
        let out = expand_str("|e| e.department == \"Sales\" && e.age >= min && !e.active");
        assert!(out.contains("filter_and"), "{out}");
        assert!(out.contains(". eq (\"Sales\")"), "{out}");
        assert!(out.contains(". ge (min)"), "{out}");
        assert!(out.contains("filter_not"), "{out}");
        assert!(out.contains("filter_of"), "{out}");
    }

    #[test]
    fn none_and_some_keep_the_meaning_of_option() {
        let out = expand_str("|e| e.age == None");
        assert!(out.contains(". is_none ()"), "{out}");
        let out = expand_str("|e| None != e.age");
        assert!(out.contains(". is_some ()"), "{out}");
        let out = expand_str("|e| e.age == Option::None");
        assert!(out.contains(". is_none ()"), "{out}");
        let out = expand_str("|e| e.age == Some(30)");
        assert!(
            out.contains(". eq (30)") && !out.contains("filter_not"),
            "{out}"
        );
        let out = expand_str("|e| e.age != Some(min)");
        assert!(
            out.contains("filter_not") && out.contains(". eq (min)"),
            "{out}"
        );
        let out = expand_str("|e| e.age.is_none() || e.name.is_some()");
        assert!(
            out.contains(". is_none ()") && out.contains(". is_some ()"),
            "{out}"
        );
        for refused in [
            "|e| e.age < None",
            "|e| e.age >= Some(3)",
            "|e| Some(3) > e.age",
        ] {
            let out = expand_str(refused);
            assert!(
                out.contains("cannot order a column against"),
                "{refused}: {out}"
            );
        }
    }

    #[test]
    fn constant_on_the_left_flips_the_operator() {
        let out = expand_str("|e| 30 < e.age");
        assert!(out.contains(". gt (30)"), "{out}");
    }

    #[test]
    fn untranslatable_constructs_are_errors() {
        for (src, msg) in [
            ("|e| e.age + 1 > 3", "arithmetic"),
            ("|e| 1 > 3", "needs a column"),
            ("|e| e.age > e.min", "two columns"),
            ("|e| e.age > x + 1", "arithmetic"),
            (
                "|e| e.name.to_uppercase() == \"X\"",
                "method `to_uppercase`",
            ),
            ("|e| if a { e.x } else { e.y }", "`if`"),
            ("|e| e.age > cfg.min", "field of `cfg`"),
            ("|e| e.age > f(x)", "literals and variables"),
        ] {
            let out = expand_str(src);
            assert!(out.contains("compile_error"), "{src}: {out}");
            assert!(
                out.contains(msg) || msg == "two columns" && out.contains("compile_error"),
                "{src}: {out}"
            );
        }
    }
}
