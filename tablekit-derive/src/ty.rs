//! What the macro can tell about a field's type from its syntax alone. The
//! mapping of types to Edm types is *not* decided here: the generated code asks
//! the compiler through `tablekit::__private_0_1::Property`, so type aliases work and
//! an unsupported type is reported by the compiler at the field's type.

use syn::{GenericArgument, PathArguments, Type};

/// The last path segment of a plain path type, with its arguments.
fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        Type::Group(g) => last_segment(&g.elem),
        Type::Paren(p) => last_segment(&p.elem),
        _ => None,
    }
}

/// The single type argument of `Name<T>`.
fn single_arg<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let seg = last_segment(ty)?;
    if seg.ident != name {
        return None;
    }
    match &seg.arguments {
        PathArguments::AngleBracketed(args) if args.args.len() == 1 => match args.args.first() {
            Some(GenericArgument::Type(t)) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

/// `T` when the type is written `Option<T>`.
pub(crate) fn option_inner(ty: &Type) -> Option<&Type> {
    single_arg(ty, "Option")
}

/// The type without an outer `Option`.
pub(crate) fn strip_option(ty: &Type) -> &Type {
    option_inner(ty).unwrap_or(ty)
}

fn is_plain(ty: &Type, names: &[&str]) -> bool {
    last_segment(ty).is_some_and(|s| s.arguments.is_none() && names.iter().any(|n| s.ident == n))
}

/// Written `String` (or `std::string::String`, ...).
pub(crate) fn is_string(ty: &Type) -> bool {
    is_plain(ty, &["String"])
}

/// One of Rust's integer types.
pub(crate) fn is_integer(ty: &Type) -> bool {
    is_plain(
        ty,
        &[
            "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "isize", "usize",
        ],
    )
}

/// A type cheap to pass by value to a key builder.
pub(crate) fn is_copy_scalar(ty: &Type) -> bool {
    is_integer(ty) || is_plain(ty, &["bool", "char"])
}

/// `Option<ETag>` (any path to `ETag`).
pub(crate) fn is_option_etag(ty: &Type) -> bool {
    option_inner(ty).is_some_and(|t| is_plain(t, &["ETag"]))
}

/// `Option<DateTime<..>>`.
pub(crate) fn is_option_datetime(ty: &Type) -> bool {
    option_inner(ty).is_some_and(|t| single_arg(t, "DateTime").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Type {
        syn::parse_str(s).unwrap()
    }

    #[test]
    fn recognises_written_forms() {
        assert!(is_string(&t("String")));
        assert!(is_string(&t("std::string::String")));
        assert!(!is_string(&t("Option<String>")));
        assert!(is_integer(&t("u32")));
        assert!(option_inner(&t("Option<u32>")).is_some_and(is_integer));
        assert!(is_option_etag(&t("Option<tablekit::ETag>")));
        assert!(!is_option_etag(&t("tablekit::ETag")));
        assert!(is_option_datetime(&t(
            "Option<chrono::DateTime<chrono::Utc>>"
        )));
        assert!(!is_option_datetime(&t("chrono::DateTime<chrono::Utc>")));
    }
}
