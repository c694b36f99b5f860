//! A submission as a chat message: the body a chat platform's incoming webhook takes, for a
//! webhook destination whose format names the platform (docs/delivery.md, "Chat"). The
//! submitter writes every value, so each is shown as text only: it cannot mention anyone,
//! format, link or leave its field, and it fits the platform's limits (cut with a `…`
//! marker; fields past the limit are counted, not shown).

use serde_json::{json, Value};

use super::email::stored_fields;
use crate::files::FileMetadata;
use crate::model::state::WebhookFormat;

/// What a chat message says.
pub struct ChatMessage<'a> {
    pub endpoint_name: &'a str,
    pub submission_id: &'a str,
    pub received_at: &'a str,
    pub fields: &'a Value,
    pub files: &'a [FileMetadata],
}

/// Each platform's limits (their documentation's, with room to spare): fields shown, and
/// characters of a field's name, of its value and of the whole message.
struct Limits {
    fields: usize,
    name: usize,
    value: usize,
    total: usize,
}

impl Limits {
    /// Fields, name, value, total.
    const fn new(fields: usize, name: usize, value: usize, total: usize) -> Limits {
        Limits {
            fields,
            name,
            value,
            total,
        }
    }
}

/// A platform's message: its limits, how a submitted text is made harmless in it, one
/// field's JSON (of its escaped name and value), and the message around the fields.
struct Platform {
    limits: Limits,
    escape: fn(&str) -> String,
    field: fn(String, String) -> Value,
    message: fn(&ChatMessage<'_>, Vec<Value>) -> Value,
}

const MARKER: char = '…';

/// The body for `format`; `None` for the standard format, which is not a chat message.
pub fn body(format: WebhookFormat, message: &ChatMessage<'_>) -> Option<Vec<u8>> {
    let platform = match format {
        WebhookFormat::Standard => return None,
        WebhookFormat::Slack => &SLACK,
        WebhookFormat::Discord => &DISCORD,
        WebhookFormat::Teams => &TEAMS,
        WebhookFormat::Mattermost => &MATTERMOST,
        WebhookFormat::GoogleChat => &GOOGLE_CHAT,
    };
    let fields = pairs(message, &platform.limits, platform.escape)
        .into_iter()
        .map(|(name, value)| (platform.field)(name, value))
        .collect();
    // A JSON value's text (its `Display`), which cannot fail.
    Some((platform.message)(message, fields).to_string().into_bytes())
}

fn title(message: &ChatMessage<'_>) -> String {
    format!("New submission to {}", message.endpoint_name)
}

/// The fields as (name, value) pairs within `limits`, values joined by `, `, files as
/// `name: link`, each escaped by `escape` and then cut (so an escaped value still fits),
/// and the pair that says how many fields did not fit, if any.
fn pairs(
    message: &ChatMessage<'_>,
    limits: &Limits,
    escape: fn(&str) -> String,
) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = stored_fields(message.fields)
        .into_iter()
        .map(|field| (field.name, field.values.join(", ")))
        .collect();
    all.extend(
        message
            .files
            .iter()
            .map(|file| (file.field.clone(), format!("{}: {}", file.name, file.url))),
    );
    let mut shown = Vec::new();
    let mut used = title(message).chars().count();
    for (index, (name, value)) in all.iter().enumerate() {
        let name = cut(&escape(name), limits.name);
        let value = cut(&escape(value), limits.value);
        let size = name.chars().count() + value.chars().count();
        // One place is kept for the count of what did not fit.
        if shown.len() + 1 >= limits.fields || used + size + 40 > limits.total {
            let left = all.len() - index;
            shown.push((
                "…".to_string(),
                format!(
                    "{left} more field{} not shown",
                    if left == 1 { "" } else { "s" }
                ),
            ));
            return shown;
        }
        used += size;
        shown.push((name, value));
    }
    shown
}

/// Escaped `text` within `limit` characters: cut, with the marker as its last one. An
/// escaping backslash left last by the cut is dropped with what it escaped, so the marker
/// is never escaped and nothing unescaped follows a cut.
fn cut(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(limit.saturating_sub(1)).collect();
    let trailing = cut.chars().rev().take_while(|c| *c == '\\').count();
    if trailing % 2 == 1 {
        cut.pop();
    }
    cut.push(MARKER);
    cut
}

/// Text for a format that reads Markdown: every character Markdown or a mention could use
/// is escaped with a backslash, and `@` is followed by a zero-width space, so `@everyone`
/// or `@channel` is text.
fn markdown_text(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\`*_~|>#-+=[](){}.!<&:".contains(c) {
            escaped.push('\\');
        }
        escaped.push(c);
        if c == '@' {
            escaped.push('\u{200B}');
        }
    }
    escaped
}

/// Text for a format that reads HTML-like markup (`<users/all>`, `<b>`): `&`, `<` and `>`
/// as entities.
fn entity_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Text shown as it is: Slack's `plain_text` reads no mention, link or formatting; only a
/// plain `@` word is broken, for clients that linkify.
fn plain(text: &str) -> String {
    text.replace('@', "@\u{200B}")
}

/// `value`, or `blank` for an empty one (where a platform refuses an empty text).
fn shown_empty(value: String, blank: &str) -> String {
    if value.is_empty() {
        blank.to_string()
    } else {
        value
    }
}

/// Slack incoming webhooks, Block Kit: a header and one section of two `plain_text`
/// fields per submitted field (at most 50 blocks, 3000 characters a text).
const SLACK: Platform = Platform {
    limits: Limits::new(48, 150, 1900, 35_000),
    escape: plain,
    field: |name, value| {
        let value = shown_empty(value, " ");
        json!({
            "type": "section",
            "fields": [
                { "type": "plain_text", "text": name, "emoji": false },
                { "type": "plain_text", "text": value, "emoji": false }
            ]
        })
    },
    message: |message, sections| {
        let header = json!({
            "type": "header",
            "text": { "type": "plain_text", "text": cut(&plain(&title(message)), 150), "emoji": false }
        });
        json!({
            // The notification's text: mrkdwn, so nothing submitted is in it.
            "text": entity_text(&title(message)),
            "blocks": std::iter::once(header).chain(sections).collect::<Vec<_>>(),
        })
    },
};

/// Discord webhooks: one embed whose fields are the submission (25 fields, 256 characters
/// a name, 1024 a value, 6000 in all), and no mention parsed at all.
const DISCORD: Platform = Platform {
    limits: Limits::new(25, 250, 1000, 5500),
    escape: markdown_text,
    field: |name, value| {
        let value = shown_empty(value, "\u{200B}");
        json!({ "name": name, "value": value, "inline": false })
    },
    message: |message, fields| {
        json!({
            "allowed_mentions": { "parse": [] },
            "embeds": [{
                "title": cut(&markdown_text(&title(message)), 250),
                "fields": fields,
                "footer": { "text": message.submission_id },
                "timestamp": message.received_at,
            }]
        })
    },
};

/// Microsoft Teams Workflows webhooks: a message with one Adaptive Card holding a title
/// and a FactSet (Teams reads a Markdown subset in both; about 28 KB a message).
const TEAMS: Platform = Platform {
    limits: Limits::new(50, 200, 1000, 20_000),
    escape: markdown_text,
    field: |name, value| json!({ "title": name, "value": value }),
    message: |message, facts| {
        json!({
            "type": "message",
            "attachments": [{
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": null,
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "body": [
                        { "type": "TextBlock", "text": markdown_text(&title(message)), "weight": "Bolder", "size": "Medium", "wrap": true },
                        { "type": "FactSet", "facts": facts },
                        { "type": "TextBlock", "text": markdown_text(message.submission_id), "isSubtle": true, "size": "Small", "wrap": true }
                    ]
                }
            }]
        })
    },
};

/// Mattermost incoming webhooks: a message attachment whose fields are the submission
/// (Markdown escaped; a post holds at most 16383 characters).
const MATTERMOST: Platform = Platform {
    limits: Limits::new(50, 200, 1000, 14_000),
    escape: markdown_text,
    field: |name, value| json!({ "title": name, "value": value, "short": false }),
    message: |message, fields| {
        let title = markdown_text(&title(message));
        json!({
            "text": title,
            "attachments": [{
                "fallback": title,
                "title": title,
                "fields": fields,
                "footer": message.submission_id,
            }]
        })
    },
};

/// Google Chat incoming webhooks: a card (cardsV2) with one decorated text per field (its
/// text reads a little HTML, escaped; a message holds at most 32,000 bytes).
const GOOGLE_CHAT: Platform = Platform {
    limits: Limits::new(50, 200, 1000, 12_000),
    escape: entity_text,
    field: |name, value| json!({ "decoratedText": { "topLabel": name, "text": value, "wrapText": true } }),
    message: |message, widgets| {
        let title = entity_text(&title(message));
        json!({
            "text": title,
            "cardsV2": [{
                "cardId": message.submission_id,
                "card": {
                    "header": { "title": title, "subtitle": message.submission_id },
                    "sections": [{ "widgets": widgets }]
                }
            }]
        })
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    fn message(fields: &Value) -> ChatMessage<'_> {
        ChatMessage {
            endpoint_name: "Contact",
            submission_id: "sub_1",
            received_at: "2026-12-07T10:00:00Z",
            fields,
            files: &[],
        }
    }

    #[test]
    fn escapes_make_mentions_and_markup_text() {
        assert_eq!(
            markdown_text("@everyone **x**"),
            "@\u{200B}everyone \\*\\*x\\*\\*"
        );
        assert_eq!(
            entity_text("<users/all> & <b>"),
            "&lt;users/all&gt; &amp; &lt;b&gt;"
        );
        assert_eq!(plain("<!channel> @here"), "<!channel> @\u{200B}here");
    }

    #[test]
    fn a_value_of_escaped_characters_still_fits_and_ends_unescaped() {
        let fields = json!({ "stars": ["*".repeat(3000)] });
        let discord: Value =
            serde_json::from_slice(&body(WebhookFormat::Discord, &message(&fields)).unwrap())
                .unwrap();
        let value = discord["embeds"][0]["fields"][0]["value"].as_str().unwrap();
        assert!(value.chars().count() <= 1000, "{}", value.chars().count());
        assert!(value.ends_with("\\*…"), "{}", &value[value.len() - 8..]);
    }

    #[test]
    fn long_values_are_cut_with_a_marker_and_extra_fields_counted() {
        let mut fields = serde_json::Map::new();
        for i in 0..40 {
            fields.insert(format!("f{i:02}"), json!(["x".repeat(5000)]));
        }
        let fields = Value::Object(fields);
        let discord: Value =
            serde_json::from_slice(&body(WebhookFormat::Discord, &message(&fields)).unwrap())
                .unwrap();
        let shown = discord["embeds"][0]["fields"].as_array().unwrap();
        assert!(shown.len() <= 25);
        let first = shown[0]["value"].as_str().unwrap();
        assert_eq!(first.chars().count(), 1000);
        assert!(first.ends_with(MARKER));
        let last = shown.last().unwrap()["value"].as_str().unwrap();
        assert!(last.ends_with("more fields not shown"), "{last}");
        assert!(discord.to_string().chars().count() < 6000 + 500);
        assert_eq!(discord["allowed_mentions"]["parse"], json!([]));
        assert!(body(WebhookFormat::Standard, &message(&fields)).is_none());
    }
}
