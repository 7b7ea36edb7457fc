use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::edm::parse_datetime;
use crate::error::{Error, ValidationError};
use crate::filter::strategies;

fn cmp(p: &str, op: CmpOp, v: impl Into<EdmValue>) -> Expr {
    Expr::cmp(p, op, v)
}

fn eq(p: &str, v: impl Into<EdmValue>) -> Expr {
    cmp(p, CmpOp::Eq, v)
}

#[track_caller]
fn ok(text: &str) -> Expr {
    match parse(text) {
        Ok(e) => e,
        Err(err) => panic!("{text:?}: {err}"),
    }
}

/// The literal of `A eq <text>`.
#[track_caller]
fn lit(text: &str) -> EdmValue {
    match ok(&format!("A eq {text}")) {
        Expr::Cmp { value, .. } => value,
        other => panic!("{other:?}"),
    }
}

/// The error of `text`: (offset, message).
#[track_caller]
fn err(text: &str) -> (usize, String) {
    match parse(text) {
        Ok(e) => panic!("{text:?} parsed as {e:?}"),
        Err(e) => (e.offset(), e.message().to_owned()),
    }
}

#[track_caller]
fn err_at(text: &str, offset: usize, needle: &str) {
    let (at, message) = err(text);
    assert_eq!(at, offset, "{text:?}: {message}");
    assert!(
        message.contains(needle),
        "{text:?}: {message:?} lacks {needle:?}"
    );
}

fn dt(s: &str) -> EdmValue {
    EdmValue::DateTime(parse_datetime(s).unwrap())
}

#[test]
fn string_literals() {
    assert_eq!(lit("'Sales'"), "Sales".into());
    assert_eq!(lit("'O''Brien'"), "O'Brien".into());
    assert_eq!(lit("''"), "".into());
    assert_eq!(lit("''''"), "'".into());
    assert_eq!(lit("''''''"), "''".into());
    assert_eq!(lit("'a''''b'"), "a''b".into());
    assert_eq!(lit("'  spaced  '"), "  spaced  ".into());
    assert_eq!(lit("'日本語 😀 é'"), "日本語 😀 é".into());
    assert_eq!(lit("'and or not eq ( )'"), "and or not eq ( )".into());
    assert_eq!(lit("'tab\there\nnl'"), "tab\there\nnl".into());
}

#[test]
fn integer_literals() {
    assert_eq!(lit("123"), EdmValue::Int32(123));
    assert_eq!(lit("0"), EdmValue::Int32(0));
    assert_eq!(lit("-5"), EdmValue::Int32(-5));
    assert_eq!(lit("007"), EdmValue::Int32(7));
    assert_eq!(lit("2147483647"), EdmValue::Int32(i32::MAX));
    assert_eq!(lit("-2147483648"), EdmValue::Int32(i32::MIN));
    assert_eq!(lit("123L"), EdmValue::Int64(123));
    assert_eq!(lit("123l"), EdmValue::Int64(123));
    assert_eq!(lit("2147483648L"), EdmValue::Int64(2_147_483_648));
    assert_eq!(lit("-9223372036854775808L"), EdmValue::Int64(i64::MIN));
    assert_eq!(lit("9223372036854775807L"), EdmValue::Int64(i64::MAX));
    // Too big for Int32 without a suffix: refused, as the service does.
    err_at("A eq 2147483648", 5, "write 2147483648L");
    err_at("A eq -2147483649", 5, "does not fit in an Edm.Int32");
    err_at(
        "A eq 9223372036854775808L",
        5,
        "does not fit in an Edm.Int64",
    );
    err_at("A eq -9223372036854775809L", 5, "Edm.Int64");
}

#[test]
fn double_literals() {
    assert_eq!(lit("2.0"), EdmValue::Double(2.0));
    assert_eq!(lit("1e300"), EdmValue::Double(1e300));
    assert_eq!(lit("1.5E-7"), EdmValue::Double(1.5e-7));
    assert_eq!(lit("1.5e+7"), EdmValue::Double(1.5e7));
    assert_eq!(lit("-0.25"), EdmValue::Double(-0.25));
    assert_eq!(lit("2d"), EdmValue::Double(2.0));
    assert_eq!(lit("2.5D"), EdmValue::Double(2.5));
    assert_eq!(lit("1e3d"), EdmValue::Double(1000.0));
    assert_eq!(lit("5e-324"), EdmValue::Double(5e-324));
    assert_eq!(lit("1.7976931348623157e308"), EdmValue::Double(f64::MAX));
    err_at("A eq 1e400", 5, "out of the range of an Edm.Double");
    err_at("A eq 1.", 5, "a digit must follow the `.`");
    err_at("A eq 1e", 5, "digits must follow the exponent");
    err_at("A eq 1.5L", 5, "no fraction or exponent");
    err_at("A eq 1m", 5, "Edm.Decimal");
    err_at("A eq 1.5f", 5, "Edm.Single");
    err_at("A eq 12abc", 5, "malformed number \"12abc\"");
    err_at("A eq 1.2.3", 5, "malformed number");
    err_at("A eq 1Lx", 5, "malformed number");
}

#[test]
fn boolean_datetime_guid_binary_literals() {
    assert_eq!(lit("true"), EdmValue::Boolean(true));
    assert_eq!(lit("false"), EdmValue::Boolean(false));
    // 100 ns precision survives.
    let v = lit("datetime'2020-07-23T21:20:41.6667782Z'");
    assert_eq!(v, dt("2020-07-23T21:20:41.6667782Z"));
    let EdmValue::DateTime(d) = v else { panic!() };
    assert_eq!(chrono::Timelike::nanosecond(&d), 666_778_200);
    assert_eq!(
        lit("datetime'2009-05-01T00:00:00Z'"),
        dt("2009-05-01T00:00:00Z")
    );
    assert_eq!(
        lit("datetime'2009-05-01T02:00:00+02:00'"),
        dt("2009-05-01T00:00:00Z")
    );
    assert_eq!(
        lit("datetime'1601-01-01T00:00:00.0000000Z'"),
        EdmValue::DateTime(crate::edm::min_datetime())
    );
    let g = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    assert_eq!(lit("guid'01234567-89ab-cdef-0123-456789abcdef'"), g.into());
    assert_eq!(lit("guid'01234567-89AB-CDEF-0123-456789ABCDEF'"), g.into());
    assert_eq!(lit("X'01ff'"), vec![0x01u8, 0xff].into());
    assert_eq!(lit("binary'01FF'"), vec![0x01u8, 0xff].into());
    assert_eq!(lit("X''"), Vec::<u8>::new().into());

    err_at("A eq datetime'yesterday'", 14, "not an ISO 8601");
    err_at(
        "A eq datetime'2009-05-01",
        5,
        "unterminated datetime'…' literal",
    );
    err_at("A eq DateTime'2009-05-01T00:00:00Z'", 5, "case-sensitive");
    err_at(
        "A eq datetimeoffset'2009-05-01T00:00:00Z'",
        5,
        "no such type",
    );
    err_at(
        "A eq guid'0123456789abcdef0123456789abcdef'",
        10,
        "not a GUID",
    );
    err_at(
        "A eq guid'{01234567-89ab-cdef-0123-456789abcdef}'",
        10,
        "not a GUID",
    );
    err_at("A eq X'0'", 7, "even number of hex digits");
    err_at("A eq X'0g'", 8, "not a hex digit");
    err_at("A eq x'00'", 5, "case-sensitive");
    err_at("A eq foo'00'", 5, "unknown literal prefix `foo'`");
    err_at("A eq TRUE", 5, "literals are case-sensitive: `true`");
}

#[test]
fn seed_filters() {
    use CmpOp::*;
    let cases: Vec<(&str, Expr)> = vec![
        (
            "PartitionKey eq 'Sales' and RowKey ge 'empid_000100' and RowKey lt 'empid_000200'",
            eq("PartitionKey", "Sales")
                .and(cmp("RowKey", Ge, "empid_000100"))
                .and(cmp("RowKey", Lt, "empid_000200")),
        ),
        (
            "PartitionKey eq 'Football' and RowKey lt '2521794455999999999'",
            eq("PartitionKey", "Football").and(cmp("RowKey", Lt, "2521794455999999999")),
        ),
        (
            "PartitionKey ge 'Football_7991_' and PartitionKey lt 'Football_7991`'",
            cmp("PartitionKey", Ge, "Football_7991_")
                .and(cmp("PartitionKey", Lt, "Football_7991`")),
        ),
        (
            "PartitionKey gt 'Football_7991' and PartitionKey lt 'Football_7992'",
            cmp("PartitionKey", Gt, "Football_7991")
                .and(cmp("PartitionKey", Lt, "Football_7992")),
        ),
        (
            "RowKey gt '2521871711999999999' and RowKey le '2521872575999999999'",
            cmp("RowKey", Gt, "2521871711999999999")
                .and(cmp("RowKey", Le, "2521872575999999999")),
        ),
        (
            "RowKey gt '2521792223999999999' and RowKey le '2521793087999999999'",
            cmp("RowKey", Gt, "2521792223999999999")
                .and(cmp("RowKey", Le, "2521793087999999999")),
        ),
        // The prefix trick (§12.2).
        (
            "PartitionKey ge 'PDC' and PartitionKey lt 'PDD'",
            cmp("PartitionKey", Ge, "PDC").and(cmp("PartitionKey", Lt, "PDD")),
        ),
        ("Rating gt 1.2", cmp("Rating", Gt, 1.2)),
        ("SchemaVersion lt 2", cmp("SchemaVersion", Lt, 2)),
        (
            "Timestamp ge datetime'2009-05-01T00:00:00Z'",
            Expr::cmp("Timestamp", Ge, dt("2009-05-01T00:00:00Z")),
        ),
        (
            "LastName eq 'Jones' and FirstName eq 'Don'",
            eq("LastName", "Jones").and(eq("FirstName", "Don")),
        ),
        ("LastName eq 'Jones'", eq("LastName", "Jones")),
        (
            "PartitionKey eq 'Sales' and LastName eq 'Smith'",
            eq("PartitionKey", "Sales").and(eq("LastName", "Smith")),
        ),
        (
            "PartitionKey eq 'Sales' and RowKey eq '2'",
            eq("PartitionKey", "Sales").and(eq("RowKey", "2")),
        ),
        (
            "PartitionKey eq 'Sales' and RowKey ge 'S' and RowKey lt 'T'",
            eq("PartitionKey", "Sales")
                .and(cmp("RowKey", Ge, "S"))
                .and(cmp("RowKey", Lt, "T")),
        ),
        (
            "PartitionKey eq 'Sales' and (RowKey eq '121' or RowKey eq '322')",
            eq("PartitionKey", "Sales").and(eq("RowKey", "121").or(eq("RowKey", "322"))),
        ),
        (
            "PartitionKey eq 'Sales' and RowKey ge 'empid_000123' and RowKey lt 'empid_000124'",
            eq("PartitionKey", "Sales")
                .and(cmp("RowKey", Ge, "empid_000123"))
                .and(cmp("RowKey", Lt, "empid_000124")),
        ),
        (
            "PartitionKey eq 'email_Sales' and RowKey ge 'a' and RowKey lt 'b'",
            eq("PartitionKey", "email_Sales")
                .and(cmp("RowKey", Ge, "a"))
                .and(cmp("RowKey", Lt, "b")),
        ),
        (
            "PartitionKey eq '<emp>' and RowKey ge '01' and RowKey le '02'",
            eq("PartitionKey", "<emp>")
                .and(cmp("RowKey", Ge, "01"))
                .and(cmp("RowKey", Le, "02")),
        ),
        // patterns.md writes each comparison in parentheses.
        (
            "(PartitionKey eq 'Sales') and (RowKey eq 'email_jonesj@contoso.com')",
            eq("PartitionKey", "Sales").and(eq("RowKey", "email_jonesj@contoso.com")),
        ),
        (
            "(PartitionKey eq 'Sales') and (RowKey ge 'empid_000100') and (RowKey le 'empid_000199')",
            eq("PartitionKey", "Sales")
                .and(cmp("RowKey", Ge, "empid_000100"))
                .and(cmp("RowKey", Le, "empid_000199")),
        ),
        (
            "(PartitionKey eq 'empid_Sales') and (RowKey ge '000100') and (RowKey le '000199')",
            eq("PartitionKey", "empid_Sales")
                .and(cmp("RowKey", Ge, "000100"))
                .and(cmp("RowKey", Le, "000199")),
        ),
        (
            "(PartitionKey eq 'Sales') and (RowKey ge 'email_a') and (RowKey lt 'email_b')",
            eq("PartitionKey", "Sales")
                .and(cmp("RowKey", Ge, "email_a"))
                .and(cmp("RowKey", Lt, "email_b")),
        ),
        (
            "PartitionKey eq 'Channel9' and Rating ge 3",
            eq("PartitionKey", "Channel9").and(cmp("Rating", Ge, 3)),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(ok(text), want, "{text}");
        // And the printer writes it back to the same tree.
        assert_eq!(ok(&want.to_string()), want, "{text}");
    }
}

#[test]
fn precedence_and_grouping() {
    let (a, b, c, d) = (eq("A", 1), eq("B", 2), eq("C", 3), eq("D", 4));
    assert_eq!(
        ok("A eq 1 or B eq 2 and C eq 3"),
        a.clone().or(b.clone().and(c.clone()))
    );
    assert_eq!(
        ok("A eq 1 and B eq 2 or C eq 3"),
        a.clone().and(b.clone()).or(c.clone())
    );
    // Nested `or` inside `and`.
    assert_eq!(
        ok("A eq 1 and (B eq 2 or C eq 3) and D eq 4"),
        a.clone().and(b.clone().or(c.clone())).and(d.clone())
    );
    assert_eq!(
        ok("(A eq 1 or B eq 2) and (C eq 3 or D eq 4)"),
        a.clone().or(b.clone()).and(c.clone().or(d.clone()))
    );
    // Left-associative.
    assert_eq!(
        ok("A eq 1 or B eq 2 or C eq 3"),
        a.clone().or(b.clone()).or(c.clone())
    );
    assert_eq!(
        ok("A eq 1 or (B eq 2 or C eq 3)"),
        a.clone().or(b.clone().or(c.clone()))
    );
    assert_eq!(ok("((((A eq 1))))"), a.clone());
    assert_eq!(ok("not (A eq 1)"), a.clone().negate());
    assert_eq!(ok("not(A eq 1)"), a.clone().negate());
    assert_eq!(ok("not not (A eq 1)"), a.clone().negate().negate());
    assert_eq!(
        ok("not (A eq 1) and B eq 2"),
        a.clone().negate().and(b.clone())
    );
    assert_eq!(
        ok("not (A eq 1 and B eq 2) or C eq 3"),
        a.clone().and(b.clone()).negate().or(c.clone())
    );
    assert_eq!(
        ok("A eq 1 and not (B eq 2 or C eq 3)"),
        a.clone().and(b.clone().or(c.clone()).negate())
    );
}

#[test]
fn literal_first_is_flipped() {
    use CmpOp::*;
    assert_eq!(ok("5 lt Age"), cmp("Age", Gt, 5));
    assert_eq!(ok("5 le Age"), cmp("Age", Ge, 5));
    assert_eq!(ok("5 gt Age"), cmp("Age", Lt, 5));
    assert_eq!(ok("5 ge Age"), cmp("Age", Le, 5));
    assert_eq!(ok("5 eq Age"), cmp("Age", Eq, 5));
    assert_eq!(ok("5 ne Age"), cmp("Age", Ne, 5));
    assert_eq!(ok("'Sales' eq PartitionKey"), eq("PartitionKey", "Sales"));
    assert_eq!(
        ok("datetime'2009-05-01T00:00:00Z' le Timestamp"),
        Expr::cmp("Timestamp", Ge, dt("2009-05-01T00:00:00Z"))
    );
}

#[test]
fn boolean_property_alone() {
    assert_eq!(ok("Active"), eq("Active", true));
    assert_eq!(ok("not Active"), eq("Active", true).negate());
    assert_eq!(ok("not not Active"), eq("Active", true).negate().negate());
    assert_eq!(
        ok("Active and not Deleted"),
        eq("Active", true).and(eq("Deleted", true).negate())
    );
    assert_eq!(
        ok("(Active) or Rating gt 3"),
        eq("Active", true).or(cmp("Rating", CmpOp::Gt, 3))
    );
    assert_eq!(ok("true eq Active"), eq("Active", true));
    err_at("not Active eq true", 4, "write `not (Active eq …)`");
    err_at("not 1", 4, "after `not`");
    err_at("not", 3, "after `not`");
}

#[test]
fn whitespace_is_free() {
    let want = eq("A", 1).and(eq("B", "x"));
    for text in [
        "A eq 1 and B eq 'x'",
        "  A   eq\t1\n and\r\nB eq 'x'   ",
        "(A eq 1)and(B eq 'x')",
        "( A eq 1 ) and ( B eq 'x' )",
    ] {
        assert_eq!(ok(text), want, "{text:?}");
    }
}

#[test]
fn refused_with_offset_and_reason() {
    err_at("", 0, "expected a property, a literal");
    err_at("   ", 3, "expected a property, a literal");
    err_at("startswith(RowKey, 'a')", 0, "functions (`startswith(…)`)");
    err_at(
        "substringof('a', RowKey)",
        0,
        "functions (`substringof(…)`)",
    );
    err_at(
        "A eq 1 and startswith(RowKey, 'a') eq true",
        11,
        "not supported",
    );
    err_at("A eq B", 5, "compares two properties");
    err_at("1 eq 2", 0, "two literals");
    err_at("A add 1 eq 2", 2, "arithmetic (`add`)");
    err_at("A eq 1 add 2", 7, "arithmetic (`add`)");
    err_at("A eq 1 + 2", 7, "arithmetic is not supported");
    err_at("A eq - 1", 5, "only a number literal may be negative");
    err_at("-A eq 1", 0, "only a number literal may be negative");
    err_at("A eq 1 xyz", 7, "unexpected `xyz`");
    err_at("A eq 1 B eq 2", 7, "unexpected `B`");
    err_at("A eq 'abc", 5, "unterminated string");
    err_at("A eq 'O''", 5, "unterminated string");
    err_at("A EQ 1", 2, "write `eq`");
    err_at("A eq 1 AND B eq 2", 7, "unexpected `AND`");
    err_at("A == 1", 2, "`eq`, `ne`");
    err_at("A eq 1 && B eq 2", 7, "`and`, `or`");
    err_at("A eq \"x\"", 5, "single quotes");
    err_at("A like 'x'", 2, "unexpected `like`");
    err_at("(A eq 1", 7, "expected `)` to close the `(` at byte 0");
    err_at("A eq 1)", 6, "without a matching `(`");
    err_at("()", 1, "expected a property");
    err_at("A eq 1 and", 10, "expected a property");
    err_at("A eq 1 or or B eq 2", 10, "found `or`");
    err_at("A eq", 4, "after the operator");
    err_at("A eq and", 5, "after the operator");
    err_at("A eq null", 5, "stores no nulls");
    err_at("1", 0, "a literal alone is not a condition");
    err_at("A eq 1 eq true", 7, "cannot be compared");
    err_at("(A eq 1) eq true", 9, "cannot be compared");
    err_at("((A eq 1) eq true)", 10, "cannot be compared");
    err_at("A eq 1 ⊕", 7, "unexpected character '⊕'");
    // Deep nesting fails cleanly instead of exhausting the stack.
    let deep = format!("{}A eq 1{}", "(".repeat(10_000), ")".repeat(10_000));
    err_at(&deep, MAX_DEPTH, "nest deeper");
    let nots = format!("{}(A eq 1)", "not ".repeat(10_000));
    assert!(err(&nots).1.contains("nest deeper"));
    // `not (…)` is one level: MAX_DEPTH bare `not`s print as that many
    // `not (`, which parse back (found by the `filter` fuzz target).
    let nots = format!("{}A", "not ".repeat(MAX_DEPTH));
    let printed = ok(&nots).to_string();
    assert_eq!(ok(&printed).to_string(), printed);
    let nots = format!("{}A", "not ".repeat(MAX_DEPTH + 1));
    assert!(err(&nots).1.contains("nest deeper"));
    // Nesting well inside the limit is fine.
    let ok_deep = format!("{}A eq 1{}", "(".repeat(50), ")".repeat(50));
    assert_eq!(ok(&ok_deep), eq("A", 1));
}

#[test]
fn converts_into_an_invalid_input_error() {
    let e: Error = parse("A eq B").unwrap_err().into();
    assert!(e.is_invalid_input());
    let text = e.to_string();
    assert!(text.contains("at byte 5"), "{text}");
    assert!(text.contains("compares two properties"), "{text}");
    assert_eq!(
        parse("A eq 'x").unwrap_err().to_string(),
        "invalid filter at byte 5: unterminated string literal: no closing `'`"
    );
}

#[test]
fn errors_keep_position_column_and_what_was_expected() {
    let e = parse("(Rating gt 3").unwrap_err();
    assert_eq!((e.position(), e.column()), (12, 13));
    assert_eq!(e.expected(), Some("`)`"));

    // The column counts characters, the position bytes.
    let e = parse("Name eq 'é' Rating").unwrap_err();
    assert_eq!((e.position(), e.column()), (13, 13));
    assert_eq!(e.expected(), Some("`and`, `or` or the end"));

    let e = parse("A eq 1 and\n  B gt").unwrap_err();
    assert_eq!((e.position(), e.column()), (17, 7));
    assert!(e.expected().is_some_and(|x| x.contains("literal")), "{e:?}");

    let e = parse("'x' B").unwrap_err();
    assert!(e
        .expected()
        .is_some_and(|x| x.starts_with("a comparison operator")));

    // Not a missing token: nothing to expect.
    assert_eq!(parse("A eq 'x").unwrap_err().expected(), None);

    let err: Error = parse("(A eq 1").unwrap_err().into();
    match err.validation() {
        Some(ValidationError::Filter(p)) => assert_eq!(p.position(), 7),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hand_built_trees_round_trip() {
    use CmpOp::*;
    let g = Uuid::from_u128(0xdead_beef_0000_4000_8000_0000_0000_0001);
    let leaves = vec![
        eq("A", "O'Brien"),
        eq("A", "''"),
        eq("A", ""),
        eq("A", "日本語 😀"),
        cmp("B", Ne, i32::MIN),
        cmp("B", Gt, i32::MAX),
        cmp("C", Ge, i64::MIN),
        cmp("C", Lt, i64::MAX),
        cmp("C", Le, 0i64),
        cmp("D", Gt, 1e300),
        cmp("D", Lt, -1.5e-7),
        cmp("D", Eq, 0.1),
        cmp("D", Eq, -0.0),
        cmp("D", Eq, f64::MIN_POSITIVE),
        cmp("D", Eq, 5e-324),
        cmp("D", Eq, f64::MAX),
        cmp("D", Eq, 2.0),
        eq("E", true),
        eq("E", false),
        Expr::cmp("Timestamp", Ge, dt("2020-07-23T21:20:41.6667782Z")),
        Expr::cmp("F", Eq, EdmValue::DateTime(crate::edm::min_datetime())),
        Expr::cmp("F", Eq, EdmValue::DateTime(crate::edm::max_datetime())),
        eq("G", g),
        eq("G", Uuid::nil()),
        eq("H", vec![0u8, 1, 0xab, 0xff]),
        eq("H", Vec::<u8>::new()),
        eq("PartitionKey", "Football_7991`"),
    ];
    let mut trees = leaves.clone();
    for (i, a) in leaves.iter().enumerate() {
        let b = &leaves[(i + 1) % leaves.len()];
        let c = &leaves[(i + 2) % leaves.len()];
        trees.push(a.clone().and(b.clone()));
        trees.push(a.clone().or(b.clone()));
        trees.push(a.clone().negate());
        trees.push(a.clone().and(b.clone()).negate());
        trees.push(a.clone().or(b.clone()).and(c.clone()));
        trees.push(a.clone().and(b.clone().or(c.clone())));
        trees.push(a.clone().or(b.clone().or(c.clone())));
        trees.push(a.clone().and(b.clone().and(c.clone())));
        trees.push(a.clone().or(b.clone().and(c.clone())).negate().negate());
        trees.push(a.clone().negate().or(b.clone().negate().and(c.clone())));
    }
    for t in trees {
        let text = t.to_string();
        assert_eq!(parse(&text), Ok(t), "{text}");
    }
}

proptest! {
    #[test]
    fn printed_trees_parse_back(e in strategies::expr(strategies::wide_literal())) {
        let text = e.to_string();
        prop_assert_eq!(parse(&text), Ok(e), "{}", text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn filter_like_text_never_panics(
        words in prop::collection::vec(
            prop::sample::select(vec![
                "A", "not", "and", "or", "eq", "lt", "(", ")", "'x'", "'", "''", "1", "-",
                "1L", "2.5", "1e", "true", "X'0", "guid'", "datetime'", "startswith(", "\t",
            ]),
            0..12,
        ),
        spaced in any::<bool>(),
    ) {
        let text = words.join(if spaced { " " } else { "" });
        if let Err(e) = parse(&text) {
            prop_assert!(e.offset() <= text.len());
        }
    }
}
