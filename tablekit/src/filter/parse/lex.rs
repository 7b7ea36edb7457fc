//! The lexer: the tokens of `$filter` text and the literals they carry.

use uuid::Uuid;

use crate::edm::{parse_datetime, EdmValue};
use crate::error::ParseError;

use super::Parser;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok<'a> {
    LParen,
    RParen,
    Ident(&'a str),
    Lit(EdmValue),
    End,
}

#[derive(Debug, Clone)]
pub(super) struct Token<'a> {
    pub(super) tok: Tok<'a>,
    pub(super) start: usize,
    pub(super) end: usize,
}

pub(super) fn describe(t: &Tok<'_>) -> String {
    match t {
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::Ident(w) => format!("`{w}`"),
        Tok::Lit(v) => format!("{} literal", v.edm_type()),
        Tok::End => "end of filter".into(),
    }
}

const RESERVED: &[&str] = &[
    "and", "or", "not", "eq", "ne", "gt", "ge", "lt", "le", "true", "false", "null", "add", "sub",
    "mul", "div", "mod",
];

pub(super) fn is_reserved(w: &str) -> bool {
    RESERVED.contains(&w)
}

pub(super) fn is_arithmetic(w: &str) -> bool {
    matches!(w, "add" | "sub" | "mul" | "div" | "mod")
}

pub(super) fn arithmetic(offset: usize, w: &str) -> ParseError {
    ParseError::new(
        offset,
        format!("arithmetic (`{w}`) is not supported by the Table service"),
    )
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Parser<'a> {
    pub(super) fn peek(&mut self) -> Result<Token<'a>, ParseError> {
        if let Some(t) = &self.peeked {
            return Ok(t.clone());
        }
        let t = self.lex()?;
        self.peeked = Some(t.clone());
        Ok(t)
    }

    pub(super) fn next(&mut self) -> Result<Token<'a>, ParseError> {
        let t = self.peek()?;
        self.peeked = None;
        Ok(t)
    }

    pub(super) fn peek_is_word(&mut self, word: &str) -> Result<bool, ParseError> {
        Ok(matches!(self.peek()?.tok, Tok::Ident(w) if w == word))
    }

    // ---- lexer ------------------------------------------------------------

    fn lex(&mut self) -> Result<Token<'a>, ParseError> {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() && bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&b) = bytes.get(start) else {
            return Ok(Token {
                tok: Tok::End,
                start,
                end: start,
            });
        };
        let tok = match b {
            b'(' => {
                self.pos += 1;
                Tok::LParen
            }
            b')' => {
                self.pos += 1;
                Tok::RParen
            }
            b'\'' => Tok::Lit(EdmValue::String(self.lex_string(start)?)),
            b'0'..=b'9' => Tok::Lit(self.lex_number(start)?),
            b'-' if bytes.get(start + 1).is_some_and(u8::is_ascii_digit) => {
                Tok::Lit(self.lex_number(start)?)
            }
            b'-' => {
                return Err(ParseError::new(
                    start,
                    "unexpected `-`: only a number literal may be negative; \
                     arithmetic is not supported by the Table service",
                ))
            }
            b if is_ident_start(b) => {
                let mut end = start + 1;
                while end < bytes.len() && is_ident_char(bytes[end]) {
                    end += 1;
                }
                let word = &self.text[start..end];
                self.pos = end;
                if bytes.get(end) == Some(&b'\'') {
                    Tok::Lit(self.lex_typed(start, word)?)
                } else {
                    Tok::Ident(word)
                }
            }
            _ => {
                let ch = self.text[start..].chars().next().unwrap_or_default();
                let hint = match ch {
                    '=' | '<' | '>' | '!' => {
                        ": comparisons are written `eq`, `ne`, `gt`, `ge`, `lt`, `le`"
                    }
                    '&' | '|' => ": conditions are combined with `and`, `or`, `not`",
                    '+' | '*' | '/' | '%' => ": arithmetic is not supported by the Table service",
                    '"' => ": string literals are in single quotes",
                    _ => "",
                };
                return Err(ParseError::new(
                    start,
                    format!("unexpected character {ch:?}{hint}"),
                ));
            }
        };
        Ok(Token {
            tok,
            start,
            end: self.pos,
        })
    }

    /// Reads `'…'` starting at `start` (the opening quote), `''` standing for one
    /// quote; leaves `pos` after the closing quote.
    fn lex_string(&mut self, start: usize) -> Result<String, ParseError> {
        let bytes = self.text.as_bytes();
        let mut out = String::new();
        let mut i = start + 1;
        let mut chunk = i;
        loop {
            match bytes.get(i) {
                None => {
                    return Err(ParseError::new(
                        start,
                        "unterminated string literal: no closing `'`",
                    ))
                }
                Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => {
                    // The quote is ASCII, so both slice ends are char boundaries.
                    out.push_str(&self.text[chunk..=i]);
                    i += 2;
                    chunk = i;
                }
                Some(b'\'') => {
                    out.push_str(&self.text[chunk..i]);
                    self.pos = i + 1;
                    return Ok(out);
                }
                Some(_) => i += 1,
            }
        }
    }

    /// Reads the quoted body of `prefix'…'` (no escapes inside); `pos` is at the quote.
    fn lex_quoted_raw(
        &mut self,
        start: usize,
        prefix: &str,
    ) -> Result<(usize, &'a str), ParseError> {
        let body_start = self.pos + 1;
        let Some(len) = self.text[body_start..].find('\'') else {
            return Err(ParseError::new(
                start,
                format!("unterminated {prefix}'…' literal: no closing `'`"),
            ));
        };
        self.pos = body_start + len + 1;
        Ok((body_start, &self.text[body_start..body_start + len]))
    }

    fn lex_typed(&mut self, start: usize, prefix: &str) -> Result<EdmValue, ParseError> {
        match prefix {
            "datetime" => {
                let (at, body) = self.lex_quoted_raw(start, prefix)?;
                parse_datetime(body).map(EdmValue::DateTime).map_err(|_| {
                    ParseError::new(
                        at,
                        format!("{body:?} is not an ISO 8601 date and time (such as 2009-05-01T00:00:00Z)"),
                    )
                })
            }
            "guid" => {
                let (at, body) = self.lex_quoted_raw(start, prefix)?;
                match Uuid::try_parse(body) {
                    Ok(g) if body.len() == 36 => Ok(EdmValue::Guid(g)),
                    _ => Err(ParseError::new(
                        at,
                        format!(
                            "{body:?} is not a GUID in the form 01234567-89ab-cdef-0123-456789abcdef"
                        ),
                    )),
                }
            }
            "X" | "binary" => {
                let (at, body) = self.lex_quoted_raw(start, prefix)?;
                if body.len() % 2 != 0 {
                    return Err(ParseError::new(
                        at,
                        "a binary literal has an even number of hex digits",
                    ));
                }
                let hex = body.as_bytes();
                let digit = |i: usize| -> Result<u8, ParseError> {
                    let c = hex[i];
                    (c as char).to_digit(16).map(|d| d as u8).ok_or_else(|| {
                        ParseError::new(at + i, format!("{:?} is not a hex digit", char::from(c)))
                    })
                };
                let mut out = Vec::with_capacity(hex.len() / 2);
                for i in (0..hex.len()).step_by(2) {
                    out.push(digit(i)? << 4 | digit(i + 1)?);
                }
                Ok(EdmValue::Binary(out))
            }
            _ => {
                let hint = match prefix.to_ascii_lowercase().as_str() {
                    "datetime" => " (prefixes are case-sensitive: `datetime'…'`)".to_owned(),
                    "guid" => " (prefixes are case-sensitive: `guid'…'`)".to_owned(),
                    "x" | "binary" => {
                        " (prefixes are case-sensitive: `X'…'` or `binary'…'`)".to_owned()
                    }
                    "datetimeoffset" | "time" => {
                        " (the Table service stores no such type)".to_owned()
                    }
                    _ => String::new(),
                };
                Err(ParseError::new(
                    start,
                    format!(
                        "unknown literal prefix `{prefix}'`: expected `datetime'`, `guid'`, `X'` or `binary'`{hint}"
                    ),
                ))
            }
        }
    }

    /// Reads an Int32, Int64 or Double literal starting at `start` (a digit or `-`).
    fn lex_number(&mut self, start: usize) -> Result<EdmValue, ParseError> {
        let bytes = self.text.as_bytes();
        let digits = |mut i: usize| {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            i
        };
        let mut i = start;
        if bytes[i] == b'-' {
            i += 1;
        }
        i = digits(i);
        let mut is_double = false;
        if bytes.get(i) == Some(&b'.') {
            let j = digits(i + 1);
            if j == i + 1 {
                return Err(ParseError::new(
                    start,
                    "malformed number: a digit must follow the `.`",
                ));
            }
            i = j;
            is_double = true;
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(bytes.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            let k = digits(j);
            if k == j {
                return Err(ParseError::new(
                    start,
                    "malformed number: digits must follow the exponent",
                ));
            }
            i = k;
            is_double = true;
        }
        let number = &self.text[start..i];
        let double = |number: &str| match number.parse::<f64>() {
            Ok(d) if d.is_finite() => Ok(EdmValue::Double(d)),
            _ => Err(ParseError::new(
                start,
                format!("{number} is out of the range of an Edm.Double"),
            )),
        };
        let suffix = bytes.get(i).copied().filter(|b| b.is_ascii_alphabetic());
        let value = match suffix {
            Some(b'L' | b'l') if !is_double => {
                i += 1;
                number.parse::<i64>().map(EdmValue::Int64).map_err(|_| {
                    ParseError::new(
                        start,
                        format!("{number}L does not fit in an Edm.Int64 (64-bit signed integer)"),
                    )
                })?
            }
            Some(b'L' | b'l') => {
                return Err(ParseError::new(
                    start,
                    "malformed number: an Int64 literal (`L`) has no fraction or exponent",
                ))
            }
            Some(b'd' | b'D') => {
                i += 1;
                double(number)?
            }
            None if is_double => double(number)?,
            None => number.parse::<i32>().map(EdmValue::Int32).map_err(|_| {
                ParseError::new(
                    start,
                    format!(
                        "{number} does not fit in an Edm.Int32; write {number}L for an Edm.Int64"
                    ),
                )
            })?,
            Some(b'm' | b'M') => {
                return Err(ParseError::new(
                    start,
                    "Edm.Decimal literals are not supported: the Table service stores no decimals",
                ))
            }
            Some(b'f' | b'F') => {
                return Err(ParseError::new(
                    start,
                    "Edm.Single literals are not supported: write a Double (`2.5` or `2.5d`)",
                ))
            }
            Some(_) => {
                return Err(ParseError::new(
                    start,
                    format!("malformed number {:?}", self.until_delimiter(start)),
                ))
            }
        };
        if bytes
            .get(i)
            .is_some_and(|&b| is_ident_char(b) || b == b'.' || b == b'\'')
        {
            return Err(ParseError::new(
                start,
                format!("malformed number {:?}", self.until_delimiter(start)),
            ));
        }
        self.pos = i;
        Ok(value)
    }

    fn until_delimiter(&self, start: usize) -> &'a str {
        let rest = &self.text[start..];
        let end = rest
            .find(|c: char| c.is_ascii_whitespace() || c == '(' || c == ')')
            .unwrap_or(rest.len());
        &rest[..end]
    }

    // ---- parser -----------------------------------------------------------
}
