//! `#[derive(TableProperties)]`: a struct stored inside an entity with
//! `#[tablekit(flatten)]`.

use proc_macro2::TokenStream;
use quote::quote;

use super::decode::decode_body;
use super::encode::write_body;
use super::{d, tk};
use crate::ast::{Container, Kind};

pub(super) fn properties_struct(c: &Container) -> TokenStream {
    let tk = tk(c);
    let d = d(c);
    let ident = c.ident;
    let write = write_body(c);
    let body = decode_body(c, true);
    let fields = c.fields();
    let names: Vec<&str> = fields
        .iter()
        .filter(|f| f.is_stored() && !matches!(f.kind, Kind::Flatten))
        .map(|f| f.name.as_str())
        .collect();
    let nested = fields
        .iter()
        .filter(|f| matches!(f.kind, Kind::Flatten))
        .map(|f| {
            let ty = f.ty;
            let name = &f.name;
            quote!(#d::is_flattened::<#ty>(__tk_name, #name) ||)
        });
    let known_arm = if names.is_empty() {
        TokenStream::new()
    } else {
        quote!(#(#names)|* => true,)
    };
    quote! {
        #[allow(clippy::needless_question_mark)]
        const _: () = {
            #[automatically_derived]
            impl #d::TableProperties for #ident {
                fn write_properties<__TkW: #tk::__private_0_1::PropertyWriter + ?::core::marker::Sized>(
                    &self,
                    __tk_out: &mut __TkW,
                ) -> #d::Result<()> {
                    #write
                    ::core::result::Result::Ok(())
                }
                fn read_properties(
                    __tk_entity: &#tk::__private_0_1::RawEntity<'_>,
                    __tk_prefix: &::core::primitive::str,
                ) -> #d::Result<Self> {
                    #body
                }
                fn is_known(__tk_name: &::core::primitive::str) -> ::core::primitive::bool {
                    match __tk_name {
                        #known_arm
                        _ => #(#nested)* false,
                    }
                }
            }
        };
    }
}
