//! Form fields: the rule a field's name follows, shared by public intake (every submitted
//! name) and endpoint settings (the honeypot field, which is a field name too), and how
//! many values a stored `fields` object holds.

/// What is wrong with a field name, in the order the checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    /// Longer than the limit, in characters (code points).
    TooLong {
        length: usize,
    },
    /// A control character: U+0000–U+001F or U+007F–U+009F.
    ControlCharacter,
}

/// Checks a field name: not empty, at most `max_length` characters, no control character
/// (checked in that order).
pub fn name_problem(name: &str, max_length: usize) -> Option<NameProblem> {
    if name.is_empty() {
        return Some(NameProblem::Empty);
    }
    let length = name.chars().count();
    if length > max_length {
        return Some(NameProblem::TooLong { length });
    }
    if name.chars().any(is_control) {
        return Some(NameProblem::ControlCharacter);
    }
    None
}

/// C0 and C1 control characters and DEL.
fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// How many values a stored `fields` object holds (for an idempotent replay's answer).
pub fn count_stored_values(fields: &serde_json::Value) -> usize {
    fields
        .as_object()
        .map(|object| {
            object
                .values()
                .map(|values| values.as_array().map_or(0, Vec::len))
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_in_order() {
        assert_eq!(name_problem("", 5), Some(NameProblem::Empty));
        assert_eq!(
            name_problem("abcdef\u{1}", 5),
            Some(NameProblem::TooLong { length: 7 })
        );
        for control in ["a\u{7f}", "a\u{85}", "a\n", "\u{0}"] {
            assert_eq!(
                name_problem(control, 5),
                Some(NameProblem::ControlCharacter),
                "{control:?}"
            );
        }
        assert_eq!(name_problem("ééééé", 5), None, "characters, not bytes");
    }
}
