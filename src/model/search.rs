//! What a submission search may ask (docs/graphql.md, "Search"): words in the web search
//! syntax PostgreSQL's `websearch_to_tsquery` reads (`"a phrase"`, `-excluded`, `or`), or
//! one exact value. Both are checked here, before any statement: at most 200 characters,
//! no control characters, and something the search index can look up (a query of
//! exclusions alone, or of punctuation alone, would read every submission), so every
//! search costs an index lookup and no more.

/// The longest search or value taken.
pub const MAX_SEARCH_LENGTH: usize = 200;

/// The most submissions one person's data holds: a value more hold (such as `yes`) is a
/// common value, refused rather than answered or erased everywhere (an erasure is one
/// transaction of bounded size).
pub const MAX_PERSON_SUBMISSIONS: i64 = 10_000;

/// Why a search is refused, in words for `INVALID_INPUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("must be 1 to 200 characters")]
    Length,
    #[error("must not contain control characters")]
    Control,
    #[error("needs a word to find (a letter or digit, not only excluded with -)")]
    NothingToFind,
    #[error(
        "more than {} submissions hold it: a common value, not one person's",
        MAX_PERSON_SUBMISSIONS
    )]
    HeldByTooMany,
}

/// Words to search for, as written (PostgreSQL reads the syntax; nothing in it is an
/// operator of ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchWords(String);

impl SearchWords {
    pub fn parse(raw: &str) -> Result<SearchWords, SearchError> {
        let text = checked(raw)?;
        if !has_wanted_word(text) {
            return Err(SearchError::NothingToFind);
        }
        Ok(SearchWords(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One value a field holds, trimmed; matched letter case aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldValue(String);

impl FieldValue {
    pub fn parse(raw: &str) -> Result<FieldValue, SearchError> {
        let text = checked(raw)?;
        if !text.chars().any(char::is_alphanumeric) {
            return Err(SearchError::NothingToFind);
        }
        Ok(FieldValue(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn checked(raw: &str) -> Result<&str, SearchError> {
    let text = raw.trim();
    if text.is_empty() || text.chars().count() > MAX_SEARCH_LENGTH {
        return Err(SearchError::Length);
    }
    if text.chars().any(char::is_control) {
        return Err(SearchError::Control);
    }
    Ok(text)
}

/// Whether the web search syntax in `text` asks for at least one word, not only excludes:
/// a term (a run without spaces, or a quoted phrase) not led by `-`, holding a letter or
/// digit, other than the `or` between alternatives.
fn has_wanted_word(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let excluded = c == '-';
        if excluded {
            chars.next();
        }
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
        }
        let mut term = String::new();
        while let Some(&c) = chars.peek() {
            chars.next();
            if (quoted && c == '"') || (!quoted && c.is_whitespace()) {
                break;
            }
            term.push(c);
        }
        let alternative = !quoted && term.eq_ignore_ascii_case("or");
        if !excluded && !alternative && term.chars().any(char::is_alphanumeric) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_need_a_wanted_word() {
        for good in [
            "ada",
            "ada@example.com",
            "\"ada lovelace\" -babbage",
            "-spam ada",
            "ada or grace",
            "  Ünïcode  ",
            "\"unclosed phrase",
            "1234",
        ] {
            assert!(SearchWords::parse(good).is_ok(), "{good}");
        }
        for bad in ["-ada", "-\"ada lovelace\"", "!!! ???", "or", "- -x", "\"\""] {
            assert_eq!(
                SearchWords::parse(bad),
                Err(SearchError::NothingToFind),
                "{bad}"
            );
        }
    }

    #[test]
    fn length_and_control_characters_are_refused() {
        assert_eq!(SearchWords::parse("   "), Err(SearchError::Length));
        assert_eq!(
            SearchWords::parse(&"a".repeat(10_000)),
            Err(SearchError::Length)
        );
        assert!(SearchWords::parse(&"a".repeat(MAX_SEARCH_LENGTH)).is_ok());
        assert_eq!(SearchWords::parse("a\u{0}b"), Err(SearchError::Control));
        assert_eq!(FieldValue::parse("a\nb"), Err(SearchError::Control));
    }

    #[test]
    fn a_value_is_trimmed_and_needs_a_letter_or_digit() {
        assert_eq!(
            FieldValue::parse(" Ada@Example.com ").map(|v| v.as_str().to_string()),
            Ok("Ada@Example.com".to_string())
        );
        assert_eq!(FieldValue::parse("@@"), Err(SearchError::NothingToFind));
    }
}
