//! Key templates: `"empid_{employee_id:06}"` — literal text and fields, a field
//! optionally zero-padded to a fixed width (`{field:0N}`). `{{` and `}}` are
//! literal braces.

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// Literal text.
    Lit(String),
    /// A field; `width` is its zero-padded fixed width.
    Field { name: String, width: Option<usize> },
}

/// The right form of a template, for error messages.
pub(crate) const FORMS: &str =
    "literal text and fields, such as \"empid_{employee_id:06}\": {field} for the field's text, {field:0N} to zero-pad an integer to N digits, {{ and }} for braces";

/// Parses a template's text.
pub(crate) fn parse(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                lit.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                lit.push('}');
            }
            '}' => {
                return Err(format!(
                    "unmatched `}}` in key template {text:?}; write }}}} for a literal brace"
                ))
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => {
                            return Err(format!(
                                "unclosed `{{` in key template {text:?}; write {{{{ for a literal brace"
                            ))
                        }
                    }
                }
                let (name, spec) = match inner.split_once(':') {
                    Some((n, s)) => (n.trim(), Some(s)),
                    None => (inner.trim(), None),
                };
                if name.is_empty()
                    || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    || name.starts_with(|c: char| c.is_ascii_digit())
                {
                    return Err(format!(
                        "`{{{inner}}}` in key template {text:?} does not name a field; the forms: {FORMS}"
                    ));
                }
                let width = match spec {
                    None => None,
                    Some(spec) => Some(parse_spec(spec).ok_or_else(|| {
                        format!(
                            "unsupported format spec `:{spec}` for `{name}` in key template {text:?}; write {{{name}:0N}} to zero-pad to N digits (for example {{{name}:08}})"
                        )
                    })?),
                };
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                parts.push(Part::Field {
                    name: name.to_owned(),
                    width,
                });
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

/// `0N` with N from 1 to 99.
fn parse_spec(spec: &str) -> Option<usize> {
    let digits = spec.strip_prefix('0')?;
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|w| *w > 0)
}

/// The characters the service forbids in keys, if `text` holds one.
pub(crate) fn forbidden_char(text: &str) -> Option<char> {
    text.chars()
        .find(|c| matches!(c, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, width: Option<usize>) -> Part {
        Part::Field {
            name: name.into(),
            width,
        }
    }

    #[test]
    fn templates_parse_into_literals_and_fields() {
        assert_eq!(
            parse("empid_{employee_id:06}").unwrap(),
            vec![Part::Lit("empid_".into()), field("employee_id", Some(6))]
        );
        assert_eq!(
            parse("{id:06}_{year}").unwrap(),
            vec![
                field("id", Some(6)),
                Part::Lit("_".into()),
                field("year", None)
            ]
        );
        assert_eq!(parse("{{x}}").unwrap(), vec![Part::Lit("{x}".into())]);
        assert_eq!(parse("").unwrap(), vec![]);
    }

    #[test]
    fn malformed_templates_say_why() {
        for bad in [
            "{", "}", "{}", "{1a}", "{a:8}", "{a:x}", "{a:0}", "{a:>8}", "{a-b}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("{a:8}").unwrap_err().contains("{a:08}"));
    }
}
