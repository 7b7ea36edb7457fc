// What `tablekit-cli infer` prints for the samples of tests/integration/infer.rs.
// Rewritten by `TABLEKIT_BLESS=1 cargo nextest run -p tablekit-tests --test integration -E 'test(/infer::/)'`.

pub mod employees {
    // Inferred by `tablekit-cli infer Employees` from 3 entities.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    #[tablekit(row_key = "empid_{row:06}")]
    pub struct Employees {
        // PartitionKey: no common prefix or number form in 3 values, kept as text
        #[tablekit(partition_key)]
        pub partition_key: String,
        // RowKey: all 3 are "empid_" then 6 digits, zero-padded
        pub row: u32,
        // FirstName: String x3 in 3 of 3 entities
        pub first_name: String,
        // LastName: String x3 in 3 of 3 entities
        pub last_name: String,
        // Age: Int32 x3 in 3 of 3 entities
        pub age: i32,
        // EmailAddress: String x3 in 3 of 3 entities
        pub email_address: String,
        // Salary: Double x2 in 2 of 3 entities, so optional
        pub salary: Option<f64>,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }
}

pub mod blogs {
    // Inferred by `tablekit-cli infer Blogs` from 3 entities.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    pub struct Blogs {
        // PartitionKey: no common prefix or number form in 3 values, kept as text
        #[tablekit(partition_key)]
        pub partition_key: String,
        // RowKey: no common prefix or number form in 3 values, kept as text
        #[tablekit(row_key)]
        pub row_key: String,
        // Rating: Int32 x2 in 2 of 3 entities, so optional
        pub rating: Option<i32>,
        // Text: String x3 in 3 of 3 entities
        pub text: String,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }
}

pub mod social {
    // Inferred by `tablekit-cli infer SocialNetwork` from 3 entities.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    pub struct SocialNetworkBlog {
        // PartitionKey: one value seen, kept as text
        #[tablekit(partition_key)]
        pub partition_key: String,
        // RowKey: one value seen, kept as text
        #[tablekit(row_key)]
        pub row_key: String,
        // Text: String x1 in 1 of 1 entities
        pub text: String,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }

    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    #[tablekit(row_key = "2014-08-{row}")]
    pub struct SocialNetworkPhoto {
        // PartitionKey: no common prefix or number form in 2 values, kept as text
        #[tablekit(partition_key)]
        pub partition_key: String,
        // RowKey: all 2 start with "2014-08-"
        pub row: String,
        // Uri: String x2 in 2 of 2 entities
        pub uri: String,
        // Width: Int32 x2 in 2 of 2 entities
        pub width: i32,
        // Caption: String x1 in 1 of 2 entities, so optional
        pub caption: Option<String>,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }

    // 2 entity types, told apart by the String property "EntityType" that all 3 entities hold: "Blog" x1, "Photo" x2.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    pub enum SocialNetwork {
        Blog(SocialNetworkBlog),
        Photo(SocialNetworkPhoto),
        /// An entity of a type the sample did not show.
        #[tablekit(unknown)]
        Other(tablekit::DynamicEntity),
    }
}

pub mod org {
    // Inferred by `tablekit-cli infer Org` from 3 entities.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    pub struct OrgDepartment {
        // PartitionKey: one value seen, kept as text
        #[tablekit(partition_key)]
        pub partition_key: String,
        // RowKey: one value seen, kept as text
        #[tablekit(row_key)]
        pub row_key: String,
        // Manager: String x1 in 1 of 1 entities
        pub manager: String,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }

    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    #[tablekit(row_key = "EMPLOYEE_{row:06}")]
    pub struct OrgEmployee {
        // PartitionKey: no common prefix or number form in 2 values, kept as text
        #[tablekit(partition_key)]
        pub partition_key: String,
        // RowKey: all 2 are "EMPLOYEE_" then 6 digits, zero-padded
        pub row: u32,
        // Name: String x2 in 2 of 2 entities
        pub name: String,
        // Age: Int32 x2 in 2 of 2 entities
        pub age: i32,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }

    // 2 entity types, told apart by the RowKey prefix of all 3 entities: "DEPARTMENT_" x1, "EMPLOYEE_" x2.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    #[tablekit(row_key_prefix)]
    pub enum Org {
        #[tablekit(rename = "DEPARTMENT_")]
        Department(OrgDepartment),
        #[tablekit(rename = "EMPLOYEE_")]
        Employee(OrgEmployee),
        /// An entity of a type the sample did not show.
        #[tablekit(unknown)]
        Other(tablekit::DynamicEntity),
    }
}

pub mod edge_types {
    // Inferred by `tablekit-cli infer EdgeTypes` from 3 entities.
    #[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
    #[tablekit(partition_key = "{partition}", row_key = "r_{row:010}")]
    pub struct EdgeTypes {
        // PartitionKey: all 3 are "" then a number without leading zeros
        pub partition: u64,
        // RowKey: all 3 are "r_" then 10 digits, zero-padded
        pub row: u64,
        // Text: String x3 in 3 of 3 entities
        pub text: String,
        // Bytes: Binary x3 in 3 of 3 entities
        pub bytes: Vec<u8>,
        // Flag: Boolean x3 in 3 of 3 entities
        pub flag: bool,
        // When: DateTime x3 in 3 of 3 entities
        pub when: tablekit::chrono::DateTime<tablekit::chrono::Utc>,
        // Ratio: Double x3 in 3 of 3 entities
        pub ratio: f64,
        // Id: Guid x3 in 3 of 3 entities
        pub id: tablekit::uuid::Uuid,
        // Small: Int32 x3 in 3 of 3 entities
        pub small: i32,
        // Big: Int64 x3 in 3 of 3 entities
        pub big: i64,
        // Sometimes: Int64 x1 in 1 of 3 entities, so optional
        pub sometimes: Option<i64>,
        #[tablekit(etag)]
        pub etag: Option<tablekit::ETag>,
        #[tablekit(timestamp)]
        pub timestamp: Option<tablekit::chrono::DateTime<tablekit::chrono::Utc>>,
    }
}
