//! A change to an optional setting as an update asks for it: leave it as it is, clear it,
//! or set it to a value that has passed its rule.

/// One setting's part of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Patch<T> {
    /// Left out of the update: unchanged.
    #[default]
    Keep,
    /// Given as null: no value any more.
    Clear,
    Set(T),
}

impl<T> Patch<T> {
    /// The value set checked (or turned into its stored form) by `rule`; keeping and
    /// clearing pass as they are.
    pub fn checked<U, E>(self, rule: impl FnOnce(T) -> Result<U, E>) -> Result<Patch<U>, E> {
        Ok(match self {
            Patch::Keep => Patch::Keep,
            Patch::Clear => Patch::Clear,
            Patch::Set(value) => Patch::Set(rule(value)?),
        })
    }

    /// Applies the change to the setting.
    pub fn apply(self, setting: &mut Option<T>) {
        match self {
            Patch::Keep => {}
            Patch::Clear => *setting = None,
            Patch::Set(value) => *setting = Some(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_leaves_clear_empties_and_set_replaces() {
        let mut setting = Some(1);
        Patch::Keep.apply(&mut setting);
        assert_eq!(setting, Some(1));
        Patch::Set(2).apply(&mut setting);
        assert_eq!(setting, Some(2));
        Patch::Clear.apply(&mut setting);
        assert_eq!(setting, None);
    }

    #[test]
    fn only_a_value_set_meets_the_rule() {
        let positive = |n: i32| if n > 0 { Ok(n) } else { Err("not positive") };
        assert_eq!(Patch::Set(3).checked(positive), Ok(Patch::Set(3)));
        assert_eq!(Patch::Set(-3).checked(positive), Err("not positive"));
        assert_eq!(Patch::<i32>::Clear.checked(positive), Ok(Patch::Clear));
        assert_eq!(Patch::<i32>::Keep.checked(positive), Ok(Patch::Keep));
    }
}
