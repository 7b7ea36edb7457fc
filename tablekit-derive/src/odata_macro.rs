//! `odata!("LastName eq {name} and Age gt {age}")`: a hand-written filter whose
//! interpolated values are written as typed, escaped OData literals.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, LitStr, Token};

struct Input {
    template: LitStr,
    args: Vec<Expr>,
}

impl Parse for Input {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let template: LitStr = input.parse()?;
        let mut args = Vec::new();
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            let rest: Punctuated<Expr, Token![,]> = Punctuated::parse_terminated(input)?;
            args.extend(rest);
        }
        Ok(Input { template, args })
    }
}

enum Piece {
    Text(String),
    Value(TokenStream),
}

/// Entry point.
pub fn expand(input: TokenStream) -> TokenStream {
    match expand_inner(input) {
        Ok(t) => t,
        Err(e) => e.to_compile_error(),
    }
}

fn expand_inner(input: TokenStream) -> syn::Result<TokenStream> {
    let Input { template, args } = syn::parse2(input)?;
    let text = template.value();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut next_positional = 0;
    let mut chars = text.chars().peekable();
    let err = |m: String| syn::Error::new(template.span(), m);
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(ch) => name.push(ch),
                        None => return Err(err("odata!: a `{` is not closed; write `{{` for a brace".into())),
                    }
                }
                let name = name.trim();
                let value = if name.is_empty() {
                    let arg = args.get(next_positional).ok_or_else(|| {
                        err(format!("odata!: placeholder {} has no argument", next_positional + 1))
                    })?;
                    next_positional += 1;
                    quote!(#arg)
                } else if let Ok(index) = name.parse::<usize>() {
                    let arg = args
                        .get(index)
                        .ok_or_else(|| err(format!("odata!: there is no argument {index}")))?;
                    quote!(#arg)
                } else {
                    let ident: syn::Ident = syn::parse_str(name).map_err(|_| {
                        err(format!("odata!: `{{{name}}}` must name a variable, such as {{age}}"))
                    })?;
                    let ident = syn::Ident::new(&ident.to_string(), template.span());
                    quote!(#ident)
                };
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Value(value));
            }
            '}' => return Err(err("odata!: a `}` without `{`; write `}}` for a brace".into())),
            '\'' => {
                return Err(err(
                    "odata!: write values as {placeholders}, not quoted literals; they are quoted and escaped for you".into(),
                ))
            }
            other => literal.push(other),
        }
    }
    let says_null = |text: &str| {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == "null")
    };
    if pieces
        .iter()
        .any(|p| matches!(p, Piece::Text(t) if says_null(t)))
        || says_null(&literal)
    {
        return Err(err(
            "odata!: `null` is not supported: the Table service stores no nulls (a property that \
             is not set is missing, and every comparison with it is false). Test absence with \
             `filter!(|e| e.field == None)` or a column's `is_none()`"
                .into(),
        ));
    }
    if next_positional < args.len() {
        return Err(syn::Error::new(
            template.span(),
            format!(
                "odata!: {} arguments but {next_positional} `{{}}` placeholders",
                args.len()
            ),
        ));
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    let parts = pieces.iter().map(|p| match p {
        Piece::Text(t) => quote!(::tablekit::__private_0_1::ODataPiece::Text(#t)),
        Piece::Value(v) => quote!(::tablekit::__private_0_1::ODataPiece::Value(
            ::tablekit::__private_0_1::odata_value(&#v)
        )),
    });
    Ok(quote! {
        ::tablekit::__private_0_1::odata_build(&[#(#parts),*])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_values() {
        let out = expand(quote!("LastName eq {name} and Age gt {}", min + 0)).to_string();
        assert!(out.contains("Text (\"LastName eq \")"), "{out}");
        assert!(out.contains("odata_value (& name)"), "{out}");
        assert!(out.contains("odata_value (& min + 0)"), "{out}");
    }

    #[test]
    fn mistakes_are_errors() {
        for src in [
            quote!("Name eq '{name}'"),
            quote!("Name eq {name"),
            quote!("Name eq {}"),
            quote!("Name eq {}", a, b),
            quote!("Name eq {1 + 2}"),
            quote!("a } b"),
            quote!("Age eq null"),
            quote!("(Email ne null) and Age gt {}", 3),
        ] {
            let out = expand(src.clone()).to_string();
            assert!(out.contains("compile_error"), "{src}: {out}");
        }
    }
}
