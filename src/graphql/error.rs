//! The resolvers' error: a failure as the one catalogue's [`ApiError`], turned into a GraphQL
//! error with `extensions.code` (and `extensions.details`) where async-graphql takes it.
//!
//! async-graphql converts any `Display` type into an error without a code. This type has no
//! `Display`, so that conversion cannot apply to it, and anything that converts into an
//! `ApiError` (a `DbError`, a refused setting…) converts into it: a resolver's `?` keeps the
//! code.

use async_graphql::ErrorExtensions;

use crate::error::ApiError;

pub struct ResolverError(ApiError);

/// A resolver's result; the error defaults to [`ResolverError`].
pub type Result<T, E = ResolverError> = std::result::Result<T, E>;

impl<E: Into<ApiError>> From<E> for ResolverError {
    fn from(error: E) -> Self {
        ResolverError(error.into())
    }
}

impl From<ResolverError> for async_graphql::Error {
    fn from(error: ResolverError) -> Self {
        error.0.extend()
    }
}

/// The setting's error, naming `field`: for an input whose field holds a setting under another
/// name than the usual one (a destination's `url`, an autoresponder's `addressField`,
/// checked by the rule of a webhook URL and of a Reply-To field), so that the error names
/// the field the client sent.
pub(super) fn refused_as(
    field: &'static str,
) -> impl Fn(crate::model::endpoint::SettingError) -> ApiError {
    move |error| match ApiError::from(error) {
        ApiError::InvalidWebhookUrl { reason, .. } => ApiError::InvalidWebhookUrl {
            field: field.into(),
            reason,
        },
        ApiError::InvalidInput { reason, .. } => ApiError::InvalidInput {
            field: field.into(),
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuse() -> Result<()> {
        Err(ApiError::InvalidTimeRange)?;
        Ok(())
    }

    #[test]
    fn question_mark_keeps_the_catalogue_code() {
        let error = async_graphql::Error::from(refuse().expect_err("refused"));
        let extensions = error.extensions.expect("extensions");
        assert_eq!(
            extensions.get("code"),
            Some(&async_graphql::Value::from("INVALID_TIME_RANGE"))
        );
    }
}
