//! The generated code names everything by absolute path: a module that shadows
//! `Result`, `Option`, `String`, `Vec`, `Ok`, `Some`, `Default` and friends still
//! derives and runs.

#![allow(dead_code, non_camel_case_types)]

mod shadowed {
    use tablekit::{TableEntity, TableProperties};

    pub struct Result;
    pub struct Option;
    pub struct String;
    pub struct Vec;
    pub struct Cow;
    pub struct Box;
    pub struct Default;
    pub struct Some;
    pub struct None;
    pub struct Ok;
    pub struct Err;
    pub struct Column;
    pub trait Property {}
    pub trait PropertyWriter {}
    pub mod core {}
    pub mod std {}

    #[derive(TableProperties, Debug, PartialEq)]
    pub struct Inner {
        pub note: ::std::option::Option<::std::string::String>,
    }

    #[derive(TableEntity, Debug, PartialEq)]
    #[tablekit(partition_key = "{group}", row_key = "x_{id:03}", version = 1)]
    pub struct Shadowed {
        pub group: ::std::string::String,
        pub id: u16,
        pub name: ::std::string::String,
        pub tags: ::std::option::Option<i64>,
        #[tablekit(skip)]
        pub cache: ::std::vec::Vec<u8>,
        #[tablekit(json)]
        pub list: ::std::vec::Vec<u8>,
        #[tablekit(flatten)]
        pub inner: Inner,
        #[tablekit(etag)]
        pub etag: ::std::option::Option<tablekit::ETag>,
    }

    #[derive(TableEntity, Debug, PartialEq)]
    pub enum Either {
        One(Shadowed),
    }
}

#[test]
fn derives_with_shadowed_prelude_names() {
    use tablekit::{entity::RawEntity, TableEntity};
    let s = shadowed::Shadowed {
        group: "g".into(),
        id: 7,
        name: "n".into(),
        tags: Some(5),
        cache: vec![1],
        list: vec![1, 2],
        inner: shadowed::Inner { note: None },
        etag: None,
    };
    assert_eq!(shadowed::Shadowed::row_key(7).unwrap(), "x_007");
    let bag = tablekit::codec::to_dynamic(&s).unwrap();
    let back = shadowed::Shadowed::decode(&RawEntity::from_dynamic(&bag)).unwrap();
    assert_eq!(back.name, "n");
    assert_eq!(back.list, vec![1, 2]);
    assert!(back.cache.is_empty());
    let e = shadowed::Either::One(back);
    assert_eq!(e.row_key(), "x_007");
}
