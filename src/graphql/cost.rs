//! Refusing expensive documents before anything expands them.
//!
//! async-graphql checks depth and complexity after validation, and validation visits every
//! fragment spread where it appears: fragments that spread each other several times over
//! grow exponentially (a 903-byte document cost seconds of CPU). Here the document's
//! nesting is measured on the raw text (so neither the parser nor anything after it
//! recurses deeply), and once parsed, the size of every operation with its fragments
//! expanded is computed with each fragment counted once (memoised), so the check itself is
//! linear in the document. Documents over the limits are refused with
//! `QUERY_TOO_COMPLEX`, in microseconds. Both ways in (HTTP and WebSocket) call [`admit`]
//! before anything else looks at the document.
//!
//! A document that fails validation gets at most [`MAX_VALIDATION_ERRORS`] errors back,
//! however many it has, and one too deep or too costly is refused with the figures: the
//! schema's extension [`ValidationLimits`].

use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextValidation};
use async_graphql::parser::types::{ExecutableDocument, OperationType, Selection, SelectionSet};
use async_graphql::{Positioned, ServerError, ValidationResult};

use crate::config::GraphqlConfig;
use crate::error::ApiError;

/// Brackets of any kind nested deeper than this refuse the document before it is parsed.
const MAX_NESTING: usize = 64;
/// Values (every string, number, list item and object entry) the variables may hold: far
/// more than any operation of this API takes, far fewer than the body limit would allow.
const MAX_VARIABLE_VALUES: usize = 10_000;
/// Validation errors answered for one document: enough to fix a document by, while a
/// document built to fail everywhere (24,000 errors from 194 KB) gets no more than this.
pub const MAX_VALIDATION_ERRORS: usize = 50;

/// Parses `request`'s document once (the executor reuses it) unless it is over the limits,
/// and says which kind of operation it will run (`None`: the document does not parse, or
/// names no operation it has; the executor reports why).
pub fn admit(
    request: &mut async_graphql::Request,
    limits: &GraphqlConfig,
) -> Result<Option<OperationType>, ApiError> {
    if nesting(&request.query) > MAX_NESTING {
        return Err(too_complex(format!(
            "brackets are nested more than {MAX_NESTING} deep"
        )));
    }
    let mut values = 0usize;
    for value in request.variables.values() {
        if !count_values(value, &mut values) {
            return Err(too_complex(format!(
                "the variables hold more than {MAX_VARIABLE_VALUES} values"
            )));
        }
    }
    let operation_name = request.operation_name.clone();
    let Ok(document) = request.parsed_query() else {
        return Ok(None);
    };
    check(document, limits)?;
    use async_graphql::parser::types::DocumentOperations;
    // Without a name only a document of one operation runs (the executor refuses others).
    let operation = match (&operation_name, &document.operations) {
        (Some(name), operations) => operations
            .iter()
            .find(|(op_name, _)| op_name.map(|n| n.as_str()) == Some(name.as_str()))
            .map(|(_, op)| op),
        (None, DocumentOperations::Single(op)) => Some(op),
        (None, DocumentOperations::Multiple(ops)) if ops.len() == 1 => ops.values().next(),
        (None, DocumentOperations::Multiple(_)) => None,
    };
    Ok(operation.map(|op| op.node.ty))
}

/// The schema's extension that judges a validated document's depth and complexity against
/// the limits (as the library's own limits would, but with `QUERY_TOO_COMPLEX` and the
/// figures), and keeps validation errors to [`MAX_VALIDATION_ERRORS`].
pub struct ValidationLimits {
    pub max_depth: usize,
    pub max_complexity: usize,
}

impl ExtensionFactory for ValidationLimits {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ValidationLimits {
            max_depth: self.max_depth,
            max_complexity: self.max_complexity,
        })
    }
}

#[async_trait::async_trait]
impl Extension for ValidationLimits {
    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await.map_err(cap_errors)?;
        let refuse = |reason: String| vec![refusal(too_complex(reason))];
        if result.complexity > self.max_complexity {
            return Err(refuse(format!(
                "it costs {}, more than FORMS_GRAPHQL_MAX_COMPLEXITY ({}); ask for smaller pages or fewer fields",
                result.complexity, self.max_complexity
            )));
        }
        if result.depth > self.max_depth {
            return Err(refuse(format!(
                "it is nested {} deep, more than FORMS_GRAPHQL_MAX_DEPTH ({})",
                result.depth, self.max_depth
            )));
        }
        Ok(result)
    }
}

/// A refused document as a request error of its answer.
fn refusal(error: ApiError) -> ServerError {
    use async_graphql::ErrorExtensions;
    error
        .extend()
        .into_server_error(async_graphql::Pos::default())
}

/// The first [`MAX_VALIDATION_ERRORS`] errors, and one more saying how many were left out.
fn cap_errors(mut errors: Vec<ServerError>) -> Vec<ServerError> {
    if errors.len() > MAX_VALIDATION_ERRORS {
        let left_out = errors.len() - MAX_VALIDATION_ERRORS;
        errors.truncate(MAX_VALIDATION_ERRORS);
        errors.push(ServerError::new(
            format!("{left_out} more validation errors were left out"),
            None,
        ));
    }
    errors
}

/// Adds the values in `value` to `count`; false once it passes the limit.
fn count_values(value: &async_graphql::Value, count: &mut usize) -> bool {
    *count += 1;
    if *count > MAX_VARIABLE_VALUES {
        return false;
    }
    match value {
        async_graphql::Value::List(items) => items.iter().all(|item| count_values(item, count)),
        async_graphql::Value::Object(fields) => {
            fields.values().all(|field| count_values(field, count))
        }
        _ => true,
    }
}

fn too_complex(reason: String) -> ApiError {
    ApiError::QueryTooComplex { reason }
}

/// The deepest nesting of `{`, `[` and `(` outside strings and comments.
fn nesting(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut deepest, mut at) = (0usize, 0usize, 0usize);
    while at < bytes.len() {
        match bytes[at] {
            b'#' => {
                while at < bytes.len() && bytes[at] != b'\n' && bytes[at] != b'\r' {
                    at += 1;
                }
            }
            b'"' if bytes[at..].starts_with(b"\"\"\"") => {
                at += 3;
                while at < bytes.len() && !bytes[at..].starts_with(b"\"\"\"") {
                    at += if bytes[at..].starts_with(b"\\\"\"\"") {
                        4
                    } else {
                        1
                    };
                }
                at += 2;
            }
            b'"' => {
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' && bytes[at] != b'\n' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' | b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    deepest
}

/// The limits on a parsed document.
fn check(document: &ExecutableDocument, limits: &GraphqlConfig) -> Result<(), ApiError> {
    if document.fragments.len() > limits.max_fragments {
        return Err(too_complex(format!(
            "the document defines {} fragments; at most {} are allowed",
            document.fragments.len(),
            limits.max_fragments
        )));
    }
    let mut sizes = Sizes {
        document,
        memo: HashMap::new(),
        cap: limits.max_expanded_fields,
    };
    let mut total = 0usize;
    for (_, operation) in document.operations.iter() {
        total = total.saturating_add(sizes.of_set(&operation.node.selection_set)?);
        if total > limits.max_expanded_fields {
            break;
        }
    }
    if total > limits.max_expanded_fields {
        return Err(too_complex(format!(
            "the document selects more than {} fields once its fragments are expanded",
            limits.max_expanded_fields
        )));
    }
    Ok(())
}

/// Expanded sizes of fragments, each computed once.
struct Sizes<'a> {
    document: &'a ExecutableDocument,
    /// `None` while a fragment is being sized: meeting it again is a cycle.
    memo: HashMap<&'a str, Option<usize>>,
    /// Sizes stop growing past this (any size above it is refused).
    cap: usize,
}

impl<'a> Sizes<'a> {
    fn of_set(&mut self, set: &'a Positioned<SelectionSet>) -> Result<usize, ApiError> {
        let mut size = 0usize;
        for item in &set.node.items {
            let item_size = match &item.node {
                Selection::Field(field) => {
                    // The field, each of its directives, and what it selects.
                    1usize
                        .saturating_add(field.node.directives.len())
                        .saturating_add(self.of_set(&field.node.selection_set)?)
                }
                Selection::InlineFragment(fragment) => fragment
                    .node
                    .directives
                    .len()
                    .saturating_add(self.of_set(&fragment.node.selection_set)?),
                Selection::FragmentSpread(spread) => spread
                    .node
                    .directives
                    .len()
                    .saturating_add(self.of_fragment(spread.node.fragment_name.node.as_str())?),
            };
            size = size
                .saturating_add(item_size)
                .min(self.cap.saturating_add(1));
        }
        Ok(size)
    }

    fn of_fragment(&mut self, name: &'a str) -> Result<usize, ApiError> {
        match self.memo.get(name) {
            Some(Some(size)) => return Ok(*size),
            Some(None) => {
                return Err(too_complex(format!(
                    "fragment {name} spreads itself (directly or through others)"
                )))
            }
            None => {}
        }
        // An unknown fragment costs nothing here; validation reports it.
        let Some((key, fragment)) = self.document.fragments.get_key_value(name) else {
            return Ok(0);
        };
        self.memo.insert(key.as_str(), None);
        let size = self.of_set(&fragment.node.selection_set)?;
        self.memo.insert(key.as_str(), Some(size));
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> GraphqlConfig {
        GraphqlConfig {
            max_depth: 12,
            max_complexity: 2000,
            max_page_size: 100,
            max_expanded_fields: 5000,
            max_fragments: 100,
            max_database_calls: 50,
            database_connections: 8,
            concurrent_operations: 1,
        }
    }

    fn admitted(query: &str) -> Result<(), ApiError> {
        admit(&mut async_graphql::Request::new(query), &limits()).map(|_| ())
    }

    /// Fragments that each spread the previous one twice: 2^depth fields when expanded.
    fn fragment_bomb(depth: usize) -> String {
        let mut query = String::from("query { ...f0 }\nfragment f1 on Query { version }\n");
        for level in 1..depth {
            query.push_str(&format!(
                "fragment f{} on Query {{ ...f{level} ...f{level} }}\n",
                level + 1
            ));
        }
        query.replace("...f0", &format!("...f{depth}"))
    }

    #[test]
    fn the_operation_run_is_named() {
        let document = "query A { version } mutation B { deleteSubmission(id: \"x\") { deletedSubmissionId } }";
        let kind = |name: Option<&str>| {
            let mut request = async_graphql::Request::new(document);
            if let Some(name) = name {
                request = request.operation_name(name);
            }
            admit(&mut request, &limits())
        };
        assert_eq!(
            kind(None).ok(),
            Some(None),
            "no name among two: nothing runs"
        );
        assert_eq!(kind(Some("B")).ok(), Some(Some(OperationType::Mutation)));
        assert_eq!(kind(Some("C")).ok(), Some(None));
        let single = admit(
            &mut async_graphql::Request::new("mutation { x }"),
            &limits(),
        );
        assert_eq!(single.ok(), Some(Some(OperationType::Mutation)));
    }

    #[test]
    fn ordinary_documents_pass() {
        assert!(admitted("{ endpoints(first: 5) { edges { node { id name } } } }").is_ok());
        assert!(admitted(
            "query { ...a } fragment a on Query { version ...b } fragment b on Query { version }"
        )
        .is_ok());
        // What does not parse is left to the executor.
        assert!(admitted("{ endpoints(").is_ok());
    }

    #[test]
    fn a_fragment_bomb_is_refused_in_linear_time() {
        assert!(admitted(&fragment_bomb(10)).is_ok(), "2^10 fields fit");
        let started = std::time::Instant::now();
        assert!(matches!(
            admitted(&fragment_bomb(60)),
            Err(ApiError::QueryTooComplex { .. })
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn alias_floods_deep_nesting_cycles_and_fragment_floods_are_refused() {
        let aliases: String = (0..6000).map(|i| format!("a{i}: version ")).collect();
        assert!(matches!(
            admitted(&format!("{{ {aliases} }}")),
            Err(ApiError::QueryTooComplex { .. })
        ));
        let deep = format!("{}{}", "{ a ".repeat(10_000), "}".repeat(10_000));
        assert!(matches!(
            admitted(&deep),
            Err(ApiError::QueryTooComplex { .. })
        ));
        let deep_list = format!("{{ a(x: {}1{}) }}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            admitted(&deep_list),
            Err(ApiError::QueryTooComplex { .. })
        ));
        // Brackets inside strings and comments do not count.
        let quoted = format!("{{ a(x: \"{}\") }} # {}", "{".repeat(200), "[".repeat(200));
        assert!(admitted(&quoted).is_ok());
        assert!(matches!(
            admitted("query { ...a } fragment a on Query { ...b } fragment b on Query { ...a }"),
            Err(ApiError::QueryTooComplex { .. })
        ));
        let mut flood = async_graphql::Request::new("query($ids: [ID!]) { version }");
        flood = flood.variables(async_graphql::Variables::from_json(serde_json::json!({
            "ids": (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>()
        })));
        assert!(matches!(
            admit(&mut flood, &limits()),
            Err(ApiError::QueryTooComplex { .. })
        ));
        let many: String = (0..101)
            .map(|i| format!("fragment f{i} on Query {{ version }} "))
            .collect();
        assert!(matches!(
            admitted(&format!("{{ version }} {many}")),
            Err(ApiError::QueryTooComplex { .. })
        ));
    }
}

#[cfg(test)]
mod capped {
    use super::*;

    #[test]
    fn validation_errors_are_capped_with_a_count_of_the_rest() {
        let errors = (0..120)
            .map(|i| ServerError::new(format!("error {i}"), None))
            .collect();
        let capped = cap_errors(errors);
        assert_eq!(capped.len(), MAX_VALIDATION_ERRORS + 1);
        assert_eq!(capped[0].message, "error 0");
        assert_eq!(
            capped[MAX_VALIDATION_ERRORS].message,
            "70 more validation errors were left out"
        );
        let few: Vec<ServerError> = (0..3)
            .map(|i| ServerError::new(format!("e{i}"), None))
            .collect();
        assert_eq!(cap_errors(few).len(), 3);
    }
}
