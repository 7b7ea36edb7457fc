use tablekit::odata;

fn main() {
    let age: Option<i32> = Some(30);
    let _ = odata!("Age eq {age}");
}
