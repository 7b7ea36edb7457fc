// A runtime the harness does not know is a compile error naming what it takes.
use tablekit::testing::TestEnv;

async fn case(_env: TestEnv) {}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_threaded")]
    case,
);

fn main() {}
