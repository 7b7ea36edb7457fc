//! Property naming rules for `rename_all`.

/// How field names become property names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenameRule {
    /// `first_name` → `FirstName` (the default: the service's own convention).
    Pascal,
    /// `first_name` → `firstName`.
    Camel,
    /// `first_name` → `first_name`.
    Snake,
    /// `first_name` → `FIRST_NAME`.
    ScreamingSnake,
    /// `first_name` → `firstname`.
    Lower,
    /// `first_name` → `FIRSTNAME`.
    Upper,
}

/// The accepted spellings, for error messages.
pub(crate) const RULES: &str =
    "\"PascalCase\", \"camelCase\", \"snake_case\", \"SCREAMING_SNAKE_CASE\", \"lowercase\", \"UPPERCASE\"";

impl RenameRule {
    pub(crate) fn from_str(s: &str) -> Option<Self> {
        Some(match s {
            "PascalCase" => RenameRule::Pascal,
            "camelCase" => RenameRule::Camel,
            "snake_case" => RenameRule::Snake,
            "SCREAMING_SNAKE_CASE" => RenameRule::ScreamingSnake,
            "lowercase" => RenameRule::Lower,
            "UPPERCASE" => RenameRule::Upper,
            _ => return None,
        })
    }

    /// Applies the rule to a snake_case field name.
    pub(crate) fn apply(self, field: &str) -> String {
        match self {
            RenameRule::Pascal => pascal(field),
            RenameRule::Camel => {
                let p = pascal(field);
                let mut chars = p.chars();
                match chars.next() {
                    Some(first) => first.to_lowercase().chain(chars).collect(),
                    None => p,
                }
            }
            RenameRule::Snake => field.to_owned(),
            RenameRule::ScreamingSnake => field.to_ascii_uppercase(),
            RenameRule::Lower => field.replace('_', "").to_ascii_lowercase(),
            RenameRule::Upper => field.replace('_', "").to_ascii_uppercase(),
        }
    }
}

/// `first_name` → `FirstName`; a leading `_` is kept (`_x` → `_X`), since a
/// property name may start with `_` but not with a digit.
fn pascal(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let leading = field.len() - field.trim_start_matches('_').len();
    out.push_str(&field[..leading]);
    let mut upper = true;
    for ch in field[leading..].chars() {
        if ch == '_' {
            upper = true;
        } else if upper {
            out.extend(ch.to_uppercase());
            upper = false;
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_become_property_names() {
        let cases = [
            ("first_name", RenameRule::Pascal, "FirstName"),
            ("employee_id", RenameRule::Pascal, "EmployeeId"),
            ("age", RenameRule::Pascal, "Age"),
            ("_x", RenameRule::Pascal, "_X"),
            ("a2b_c", RenameRule::Pascal, "A2bC"),
            ("first_name", RenameRule::Camel, "firstName"),
            ("first_name", RenameRule::Snake, "first_name"),
            ("first_name", RenameRule::ScreamingSnake, "FIRST_NAME"),
            ("first_name", RenameRule::Lower, "firstname"),
            ("first_name", RenameRule::Upper, "FIRSTNAME"),
        ];
        for (field, rule, want) in cases {
            assert_eq!(rule.apply(field), want, "{field} {rule:?}");
        }
    }
}
