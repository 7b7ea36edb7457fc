//! The stub emitted next to the errors of an invalid input: an impl of the
//! derived trait whose bodies are never run (the build fails anyway), so the
//! user sees the derive's errors and not a second wave of "the trait
//! `TableEntity` is not implemented" wherever the type is used.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::{Container, Mode};

pub(crate) fn stub(c: &Container) -> TokenStream {
    let tk = &c.krate;
    // A generic stub would repeat the generics error in another form.
    if !c.generics.params.is_empty() {
        return TokenStream::new();
    }
    let ident = c.ident;
    match c.mode {
        Mode::Entity => quote! {
            const _: () = {
                #[automatically_derived]
                #[allow(unused_variables, unreachable_code)]
                impl #tk::TableEntity for #ident {
                    fn partition_key(&self) -> #tk::__private_0_1::Cow<'_, ::core::primitive::str> {
                        ::core::unreachable!()
                    }
                    fn row_key(&self) -> #tk::__private_0_1::Cow<'_, ::core::primitive::str> {
                        ::core::unreachable!()
                    }
                    fn write_properties<__TkW: #tk::__private_0_1::PropertyWriter + ?::core::marker::Sized>(
                        &self,
                        __tk_out: &mut __TkW,
                    ) -> #tk::__private_0_1::Result<()> {
                        ::core::unreachable!()
                    }
                    fn decode(__tk_entity: &#tk::__private_0_1::RawEntity<'_>) -> #tk::__private_0_1::Result<Self> {
                        ::core::unreachable!()
                    }
                }
                #[automatically_derived]
                impl #tk::__private_0_1::EntityColumns for #ident {
                    type Columns = ();
                    fn columns() -> &'static () {
                        &()
                    }
                }
            };
        },
        Mode::Properties => quote! {
            const _: () = {
                #[automatically_derived]
                #[allow(unused_variables, unreachable_code)]
                impl #tk::__private_0_1::TableProperties for #ident {
                    fn write_properties<__TkW: #tk::__private_0_1::PropertyWriter + ?::core::marker::Sized>(
                        &self,
                        __tk_out: &mut __TkW,
                    ) -> #tk::__private_0_1::Result<()> {
                        ::core::unreachable!()
                    }
                    fn read_properties(
                        __tk_entity: &#tk::__private_0_1::RawEntity<'_>,
                        __tk_prefix: &::core::primitive::str,
                    ) -> #tk::__private_0_1::Result<Self> {
                        ::core::unreachable!()
                    }
                    fn is_known(__tk_name: &::core::primitive::str) -> ::core::primitive::bool {
                        ::core::unreachable!()
                    }
                }
            };
        },
    }
}
