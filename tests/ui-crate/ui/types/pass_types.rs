use tablekit::{TableEntity, TableProperties};

mod level {
    use tablekit::{Result, entity::{PropertyValue, PropertyWriter}};
    pub fn write<W: PropertyWriter + ?Sized>(v: &u8, name: &str, out: &mut W) -> Result<()> {
        out.int32(name, i32::from(*v))
    }
    pub fn read(v: PropertyValue<'_>) -> Result<u8> {
        Ok(v.to_i32()? as u8)
    }
}

#[derive(TableProperties)]
struct Inner {
    a: Option<bool>,
}

#[derive(TableEntity)]
#[tablekit(
    partition_key = "p",
    row_key = "r",
    rename_all = "camelCase",
    deny_unknown
)]
struct AllKinds {
    a: String,
    b: bytes::Bytes,
    c: chrono::DateTime<chrono::FixedOffset>,
    #[tablekit(edm = "Int64")]
    d: u16,
    #[tablekit(json)]
    e: Vec<String>,
    #[tablekit(flatten)]
    f: Inner,
    #[tablekit(with = "level")]
    g: u8,
    #[tablekit(as_str)]
    h: std::net::Ipv4Addr,
    #[tablekit(default = "seven")]
    i: i64,
}

fn seven() -> i64 {
    7
}

fn main() {}
