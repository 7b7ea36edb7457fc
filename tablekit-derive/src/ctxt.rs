//! The error sink: every error found while parsing and checking, each with the
//! span of the token that caused it, reported together at the end.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// Collects errors; the derive reports all of them at once.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// Records an error pointing at `tokens`.
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, message: M) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// Records an error at `span`.
    pub(crate) fn error_at<M: Display>(&self, span: proc_macro2::Span, message: M) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new(span, message));
    }

    /// Records an error from syn.
    pub(crate) fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    /// The recorded errors, as one `compile_error!` per error.
    pub(crate) fn into_compile_errors(self) -> Option<proc_macro2::TokenStream> {
        let errors = self.errors.into_inner();
        if errors.is_empty() {
            return None;
        }
        Some(errors.iter().map(syn::Error::to_compile_error).collect())
    }
}
