use tablekit::odata;

fn main() {
    let _ = odata!("Age eq null");
}
