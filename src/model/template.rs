//! A webhook destination's own body: a template (minijinja, sandboxed: no file, network or
//! environment access) rendered over the submission for a receiver that wants its own
//! shape (docs/delivery.md, "Templates"). Every value it prints is written as JSON (a
//! string in quotes, escaped), so a submitted value can add no key and break out of no
//! string; the output must be one JSON document. Bounded: at most 20,000 characters of
//! template, 100,000 steps of the engine, 256 KiB of output.

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde_json::{json, Value};

use super::endpoint::{Setting, SettingError};

pub const MAX_TEMPLATE_LENGTH: usize = 20_000;
/// Engine steps a rendering may take: far more than any body needs, and a loop that would
/// run on ends in milliseconds.
const FUEL: u64 = 100_000;
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// Why a template cannot be used, and where (a template's line and column, from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateProblem {
    pub line: usize,
    pub column: usize,
    pub reason: String,
}

impl std::fmt::Display for TemplateProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.reason
        )
    }
}

/// The engine every template runs in: a webhook body's values printed as JSON (`Json`),
/// an email's as plain text (`None`); a field the submission does not have printed as
/// `null` in JSON and as nothing in text (forms leave fields out), the `safe` filter
/// (which would print a value unescaped) removed, the step budget set.
fn environment(escape: AutoEscape) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(move |_| escape);
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    env.set_fuel(Some(FUEL));
    env.remove_filter("safe");
    env
}

/// Where `error` points in `source`, as line and column.
fn located(source: &str, error: &minijinja::Error, reason: String) -> TemplateProblem {
    let line = error.line().unwrap_or(1);
    let column = error
        .range()
        .map(|range| {
            let start = range.start.min(source.len());
            let line_start = source[..start].rfind('\n').map_or(0, |at| at + 1);
            source[line_start..start].chars().count() + 1
        })
        .unwrap_or(1);
    TemplateProblem {
        line,
        column,
        reason,
    }
}

/// Why rendering stopped, by its kind only: the engine's detail may quote a value.
fn kind_of(error: &minijinja::Error) -> String {
    match error.kind() {
        ErrorKind::OutOfFuel => "it runs too long (more than 100,000 steps)".to_string(),
        ErrorKind::UndefinedError => "it reads something the submission does not have".into(),
        kind => kind.to_string(),
    }
}

/// The body `source` renders over `context`: one JSON document of at most 256 KiB.
pub fn render(source: &str, context: &Value) -> Result<Vec<u8>, TemplateProblem> {
    let rendered = rendered(AutoEscape::Json, source, context)?;
    let at_end = |reason: &str| TemplateProblem {
        line: source.lines().count().max(1),
        column: 1,
        reason: reason.to_string(),
    };
    if rendered.len() > MAX_OUTPUT_BYTES {
        return Err(at_end("it renders more than 256 KiB"));
    }
    if serde_json::from_str::<serde::de::IgnoredAny>(&rendered).is_err() {
        return Err(at_end("it does not render one JSON document"));
    }
    Ok(rendered.into_bytes())
}

/// `source` compiled and rendered over `context`, values escaped by `escape`.
fn rendered(escape: AutoEscape, source: &str, context: &Value) -> Result<String, TemplateProblem> {
    let env = environment(escape);
    let template = env
        .template_from_str(source)
        .map_err(|error| located(source, &error, kind_of(&error)))?;
    template
        .render(context)
        .map_err(|error| located(source, &error, kind_of(&error)))
}

/// The error a template refused for `setting` is answered with.
fn refusal(setting: Setting) -> impl Fn(TemplateProblem) -> SettingError {
    move |problem| SettingError::Template {
        setting,
        problem: problem.to_string(),
    }
}

/// A template's length, checked before anything else: at most 20,000 characters.
fn within_length(setting: Setting, source: &str) -> Result<(), SettingError> {
    if source.chars().count() > MAX_TEMPLATE_LENGTH {
        return Err(refusal(setting)(TemplateProblem {
            line: 1,
            column: 1,
            reason: "a template is at most 20000 characters".into(),
        }));
    }
    Ok(())
}

/// What a template is rendered over: `submission` (`id`, `endpoint_id`, `received_at`),
/// `fields` (each name's values, a list), `values` (each name's values joined by `, `) and
/// `files` (each with `field`, `name`, `size`, `content_type`, `sha256`, `url`).
pub fn context(
    submission_id: &str,
    endpoint_id: &str,
    received_at: &str,
    fields: &Value,
    files: Value,
) -> Value {
    let values: serde_json::Map<String, Value> = fields
        .as_object()
        .map(|object| {
            object
                .iter()
                .map(|(name, values)| {
                    let joined = match values {
                        Value::Array(values) => values
                            .iter()
                            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                            .collect::<Vec<_>>()
                            .join(", "),
                        other => other.to_string(),
                    };
                    (name.clone(), Value::String(joined))
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "submission": { "id": submission_id, "endpoint_id": endpoint_id, "received_at": received_at },
        "fields": fields,
        "values": values,
        "files": files,
    })
}

/// A template as an operator sets it for `setting`: at most 20,000 characters, no
/// `autoescape` block (which would print values unescaped), compiling, and rendering one
/// JSON document over a sample submission whose fields are the names it reads (each
/// `["sample"]`). Refused with its line and column.
pub fn checked(setting: Setting, source: &str) -> Result<String, SettingError> {
    let refuse = refusal(setting);
    within_length(setting, source)?;
    if let Some(at) = source.to_ascii_lowercase().find("autoescape") {
        let line = source[..at].matches('\n').count() + 1;
        let column = source[..at].rfind('\n').map_or(at, |n| at - n - 1) + 1;
        return Err(refuse(TemplateProblem {
            line,
            column,
            reason: "autoescape cannot be turned off: every value is printed as JSON".into(),
        }));
    }
    let env = environment(AutoEscape::Json);
    let template = env.template_from_str(source).map_err(|error| {
        let reason = error
            .detail()
            .map_or_else(|| error.kind().to_string(), str::to_string);
        refuse(located(source, &error, reason))
    })?;
    let mut fields = serde_json::Map::new();
    for name in template.undeclared_variables(true) {
        if let Some(field) = name
            .strip_prefix("fields.")
            .or(name.strip_prefix("values."))
        {
            fields.insert(field.to_string(), json!(["sample"]));
        }
    }
    let sample = context(
        "sub_00000000000000000000000000000000",
        "sample",
        "2026-01-01T00:00:00Z",
        &Value::Object(fields),
        json!([]),
    );
    render(source, &sample).map_err(refuse)?;
    Ok(source.to_string())
}

/// An email destination's own subject and text, each a plain-text template over the same
/// context as a body template (an email is text: values are printed as written; the
/// subject is made one line).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, AsExpression, FromSqlRow,
)]
#[diesel(sql_type = diesel::sql_types::Jsonb)]
pub struct EmailTemplate {
    pub subject: Option<String>,
    pub text: Option<String>,
}
json_column!(EmailTemplate, "an email destination's template");

/// The longest subject a template makes, and the longest text.
const MAX_SUBJECT_CHARS: usize = 200;
const MAX_TEXT_BYTES: usize = 256 * 1024;

/// `source` rendered as plain text over `context`: at most `limit` bytes.
fn render_plain(source: &str, context: &Value, limit: usize) -> Result<String, TemplateProblem> {
    let rendered = rendered(AutoEscape::None, source, context)?;
    if rendered.len() > limit {
        return Err(TemplateProblem {
            line: source.lines().count().max(1),
            column: 1,
            reason: format!("it renders more than {limit} bytes"),
        });
    }
    Ok(rendered)
}

/// An email's subject from its template: one line (control characters become spaces),
/// trimmed, at most 200 characters.
pub fn render_subject(source: &str, context: &Value) -> Result<String, TemplateProblem> {
    let rendered = render_plain(source, context, MAX_TEXT_BYTES)?;
    let line: String = rendered
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Ok(line.trim().chars().take(MAX_SUBJECT_CHARS).collect())
}

/// An email's text from its template, at most 256 KiB.
pub fn render_text(source: &str, context: &Value) -> Result<String, TemplateProblem> {
    render_plain(source, context, MAX_TEXT_BYTES)
}

/// An email template as an operator sets it: each part at most 20,000 characters,
/// compiling and rendering over a sample submission. Refused with the part's field and
/// where.
pub fn checked_email(
    subject: Option<&str>,
    text: Option<&str>,
) -> Result<EmailTemplate, SettingError> {
    let sample = context(
        "sub_00000000000000000000000000000000",
        "sample",
        "2026-01-01T00:00:00Z",
        &json!({}),
        json!([]),
    );
    let check = |setting: Setting, source: &str| {
        within_length(setting, source)?;
        render_plain(source, &sample, MAX_TEXT_BYTES)
            .map(|_| source.to_string())
            .map_err(refusal(setting))
    };
    Ok(EmailTemplate {
        subject: subject
            .map(|s| check(Setting::SubjectTemplate, s))
            .transpose()?,
        text: text.map(|t| check(Setting::TextTemplate, t)).transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(fields: Value) -> Value {
        context(
            "sub_1",
            "contact",
            "2026-12-07T10:00:00Z",
            &fields,
            json!([]),
        )
    }

    #[test]
    fn values_are_printed_as_json_and_cannot_add_keys() {
        let source = r#"{"text": {{ values.message }}, "id": {{ submission.id }}}"#;
        let hostile = sample(json!({ "message": ["\", \"admin\": true, \"x\": \"</script>"] }));
        let body = render(source, &hostile).expect("renders");
        let parsed: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(parsed.as_object().unwrap().len(), 2, "{parsed}");
        assert_eq!(parsed["text"], "\", \"admin\": true, \"x\": \"</script>");
    }

    #[test]
    fn an_email_template_prints_text_as_written_and_a_subject_on_one_line() {
        let hostile = sample(json!({ "name": ["Ann <b>\r\nBcc: x@example.org"] }));
        let subject = render_subject("New: {{ values.name }}", &hostile).expect("subject");
        assert_eq!(subject, "New: Ann <b>  Bcc: x@example.org");
        let text = render_text("Hello {{ values.name }}\nBye", &hostile).expect("text");
        assert!(text.contains("<b>\r\nBcc"));
        let refused = checked_email(Some("{{ values.x "), None).unwrap_err();
        assert!(
            refused.to_string().starts_with("line 1, column"),
            "{refused}"
        );
        let looping = checked_email(
            None,
            Some(
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            ),
        )
        .unwrap_err();
        assert!(looping.to_string().contains("runs too long"), "{looping}");
    }

    #[test]
    fn a_field_left_out_is_null() {
        let body = render(r#"{"c": {{ values.company }}}"#, &sample(json!({}))).expect("renders");
        assert_eq!(body, br#"{"c": null}"#);
    }

    #[test]
    fn bad_templates_are_refused_with_where() {
        let unclosed = checked(Setting::BodyTemplate, "{\"a\": {{ values.x }\n}").unwrap_err();
        assert!(
            unclosed.to_string().starts_with("line 1, column"),
            "{unclosed}"
        );
        let looping = checked(
            Setting::BodyTemplate,
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{}",
        )
        .unwrap_err();
        assert!(looping.to_string().contains("runs too long"), "{looping}");
        let not_json = checked(Setting::BodyTemplate, "text {{ values.x }}").unwrap_err();
        assert!(not_json.to_string().contains("JSON"), "{not_json}");
        let unescaped = checked(
            Setting::BodyTemplate,
            "{% autoescape false %}{{ values.x }}{% endautoescape %}",
        )
        .unwrap_err();
        assert!(unescaped.to_string().contains("autoescape"), "{unescaped}");
        let safe = checked(Setting::BodyTemplate, "{\"a\": \"{{ values.x|safe }}\"}").unwrap_err();
        assert!(safe.to_string().contains("line 1"), "{safe}");
        assert!(checked(Setting::BodyTemplate, "{\"a\": {{ values.company }}}").is_ok());
    }
}
