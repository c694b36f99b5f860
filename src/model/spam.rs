//! Spam rules: what an endpoint's protection settings may be, and the local, cheap rules
//! that judge a submission's values (docs/intake.md, "Spam"). The captcha and Akismet,
//! which ask a service, are intake's (src/intake/screening.rs); these are pure.

use regex::{Regex, RegexBuilder};

use super::endpoint::{Setting, SettingError};

/// The field the form snippet fills with the signed time its form was served.
pub const FORM_STAMP_FIELD: &str = "_hymical_stamp";

/// An endpoint blocks at most this many words, patterns and senders.
pub const MAX_BLOCKED_WORDS: usize = 200;
pub const MAX_BLOCKED_PATTERNS: usize = 50;
pub const MAX_BLOCKED_SENDERS: usize = 200;
/// A blocked word or sender is at most this many characters; a pattern at most 500.
const MAX_ENTRY_LENGTH: usize = 200;
const MAX_PATTERN_LENGTH: usize = 500;
/// The compiled size one pattern may take: a pattern that needs more is refused when it
/// is set, so judging a submission costs a bounded time (the regex crate runs in time
/// linear in the input) and memory.
const PATTERN_SIZE_LIMIT: usize = 256 * 1024;
/// A minimum fill time is 1 s to an hour.
pub const MAX_MIN_FILL_SECONDS: i32 = 3600;
/// A provider's secret key is at most 200 characters.
const MAX_CAPTCHA_SECRET_LENGTH: usize = 200;

/// The folder of submissions a listing shows.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubmissionFolder {
    /// Submissions accepted (and those an operator marked not spam): what is delivered.
    #[default]
    Inbox,
    /// Submissions judged spam: stored, not delivered.
    Spam,
    /// Both.
    All,
}

impl SubmissionFolder {
    /// The `spam` column's value the folder holds (`None`: any).
    pub fn spam(self) -> Option<bool> {
        match self {
            SubmissionFolder::Inbox => Some(false),
            SubmissionFolder::Spam => Some(true),
            SubmissionFolder::All => None,
        }
    }
}

fn invalid(setting: Setting, reason: &'static str) -> SettingError {
    SettingError::Invalid { setting, reason }
}

/// A captcha provider's secret key: trimmed, 1–200 printable ASCII characters.
pub fn captcha_secret(raw: &str) -> Result<String, SettingError> {
    let secret = raw.trim();
    if secret.is_empty()
        || secret.len() > MAX_CAPTCHA_SECRET_LENGTH
        || !secret.bytes().all(|b| (0x21..=0x7e).contains(&b))
    {
        return Err(invalid(
            Setting::CaptchaSecret,
            "1 to 200 printable ASCII characters without spaces",
        ));
    }
    Ok(secret.to_string())
}

/// reCAPTCHA v3's threshold: a score from 0.0 to 1.0.
pub fn captcha_min_score(raw: f64) -> Result<f32, SettingError> {
    if !(0.0..=1.0).contains(&raw) {
        return Err(invalid(Setting::CaptchaMinScore, "a score from 0.0 to 1.0"));
    }
    // Scores are given in tenths; f32 holds every one of them closely enough.
    Ok(raw as f32)
}

pub fn max_links(raw: i32) -> Result<i32, SettingError> {
    if raw < 0 {
        return Err(invalid(Setting::MaxLinks, "0 or more"));
    }
    Ok(raw)
}

pub fn min_fill_seconds(raw: i32) -> Result<i32, SettingError> {
    if !(1..=MAX_MIN_FILL_SECONDS).contains(&raw) {
        return Err(invalid(Setting::MinFillSeconds, "1 to 3600 seconds"));
    }
    Ok(raw)
}

/// Blocked words: trimmed, lower-cased, duplicates dropped; each 1–200 characters.
pub fn blocked_words(raw: &[String]) -> Result<Vec<String>, SettingError> {
    let words = entries(
        raw,
        Setting::BlockedWords,
        MAX_BLOCKED_WORDS,
        MAX_ENTRY_LENGTH,
    )?;
    Ok(words.into_iter().map(|w| w.to_lowercase()).collect())
}

/// Blocked patterns: each a regular expression (the `regex` crate's syntax, matched
/// without regard to case) that compiles within the size limit.
pub fn blocked_patterns(raw: &[String]) -> Result<Vec<String>, SettingError> {
    let patterns = entries(
        raw,
        Setting::BlockedPatterns,
        MAX_BLOCKED_PATTERNS,
        MAX_PATTERN_LENGTH,
    )?;
    for pattern in &patterns {
        compile_pattern(pattern).map_err(|_| {
            invalid(
                Setting::BlockedPatterns,
                "each pattern must be a regular expression of the regex crate's syntax, of bounded size",
            )
        })?;
    }
    Ok(patterns)
}

/// Blocked senders: an address (`someone@example.com`) or a domain (`example.com`, or
/// `@example.com`, stored without the `@`), lower-cased.
pub fn blocked_senders(raw: &[String]) -> Result<Vec<String>, SettingError> {
    let senders = entries(
        raw,
        Setting::BlockedSenders,
        MAX_BLOCKED_SENDERS,
        MAX_ENTRY_LENGTH,
    )?;
    senders
        .into_iter()
        .map(|sender| {
            let sender = sender.to_lowercase();
            let sender = sender.strip_prefix('@').unwrap_or(&sender).to_string();
            let domain = sender.rsplit('@').next().unwrap_or_default();
            let plausible = !domain.is_empty()
                && domain.contains('.')
                && sender.matches('@').count() <= 1
                && !sender.starts_with('@')
                && sender
                    .chars()
                    .all(|c| !c.is_whitespace() && !c.is_control() && c != ',' && c != ';');
            if plausible {
                Ok(sender)
            } else {
                Err(invalid(
                    Setting::BlockedSenders,
                    "each entry must be an address (someone@example.com) or a domain (example.com)",
                ))
            }
        })
        .collect()
}

fn entries(
    raw: &[String],
    setting: Setting,
    max_count: usize,
    max_length: usize,
) -> Result<Vec<String>, SettingError> {
    if raw.len() > max_count {
        return Err(invalid(setting, "too many entries"));
    }
    let mut kept: Vec<String> = Vec::new();
    for entry in raw {
        let entry = entry.trim();
        if entry.is_empty() || entry.chars().count() > max_length {
            return Err(invalid(
                setting,
                "each entry must be 1 to 200 characters (patterns 500)",
            ));
        }
        if !kept.iter().any(|k| k == entry) {
            kept.push(entry.to_string());
        }
    }
    Ok(kept)
}

fn compile_pattern(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
}

/// An endpoint's local rules, compiled once when intake reads the endpoint.
#[derive(Debug, Default)]
pub struct SpamRules {
    max_links: Option<usize>,
    /// Every blocked word, whole words, any case, in one expression.
    words: Option<Regex>,
    patterns: Vec<Regex>,
    senders: Vec<String>,
}

impl SpamRules {
    /// Compiles what was stored. A stored pattern that no longer compiles (a row written
    /// by another program) is an error, not a rule silently dropped.
    pub fn compile(
        max_links: Option<i32>,
        words: &[String],
        patterns: &[String],
        senders: &[String],
    ) -> Result<SpamRules, regex::Error> {
        let words = if words.is_empty() {
            None
        } else {
            let alternatives: Vec<String> = words.iter().map(|w| regex::escape(w)).collect();
            // Not `\b`: a word that ends in a symbol (`c++`) has no word boundary after it.
            let alternatives = alternatives.join("|");
            Some(compile_pattern(&format!(
                r"(?:^|\W)(?:{alternatives})(?:\W|$)"
            ))?)
        };
        Ok(SpamRules {
            max_links: max_links.map(|n| usize::try_from(n).unwrap_or(0)),
            words,
            patterns: patterns
                .iter()
                .map(|p| compile_pattern(p))
                .collect::<Result<_, _>>()?,
            senders: senders.to_vec(),
        })
    }

    /// Why the values are spam by these rules (empty: they are not). Each rule gives at
    /// most one reason; the reasons name the operator's rule, never the submitted text.
    pub fn judge<'a>(&self, values: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
        let mut reasons = Vec::new();
        if let Some(max) = self.max_links {
            let links: usize = values.clone().map(count_links).sum();
            if links > max {
                reasons.push(format!("{links} links, more than the {max} allowed"));
            }
        }
        if let Some(words) = &self.words {
            if values.clone().any(|v| words.is_match(v)) {
                reasons.push("a blocked word".to_string());
            }
        }
        if let Some(number) = self
            .patterns
            .iter()
            .position(|p| values.clone().any(|v| p.is_match(v)))
        {
            reasons.push(format!("blocked pattern {}", number + 1));
        }
        if !self.senders.is_empty() {
            let blocked = values
                .clone()
                .filter_map(plain_address)
                .find_map(|address| {
                    self.senders
                        .iter()
                        .find(|sender| sender_matches(sender, &address))
                });
            if let Some(sender) = blocked {
                reasons.push(format!("blocked sender {sender}"));
            }
        }
        reasons
    }
}

/// Links in a value: each `http://`, `https://` or `www.` (any case) counts once.
fn count_links(value: &str) -> usize {
    let lower = value.to_ascii_lowercase();
    lower.matches("http://").count() + lower.matches("https://").count() + {
        // A `www.` that follows a scheme was counted with it.
        let total = lower.matches("www.").count();
        let after_scheme =
            lower.matches("http://www.").count() + lower.matches("https://www.").count();
        total - after_scheme
    }
}

/// A value that is one plain address, lower-cased.
fn plain_address(value: &str) -> Option<String> {
    let value = value.trim();
    let (local, domain) = value.split_once('@')?;
    let plain = !local.is_empty()
        && domain.contains('.')
        && !domain.contains('@')
        && value.len() <= 254
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == ',' || c == ';' || c == '<');
    plain.then(|| value.to_lowercase())
}

/// A blocked address matches itself; a blocked domain its addresses and its subdomains'.
fn sender_matches(sender: &str, address: &str) -> bool {
    if sender.contains('@') {
        return sender == address;
    }
    let domain = address.rsplit('@').next().unwrap_or_default();
    domain == sender
        || domain
            .strip_suffix(sender)
            .is_some_and(|prefix| prefix.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(words: &[&str], patterns: &[&str], senders: &[&str], links: Option<i32>) -> SpamRules {
        let own = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        SpamRules::compile(links, &own(words), &own(patterns), &own(senders))
            .expect("rules compile")
    }

    #[test]
    fn links_are_counted_once_each() {
        assert_eq!(
            count_links("see https://www.a.com and www.b.com, HTTP://c"),
            3
        );
        let judge = rules(&[], &[], &[], Some(1));
        assert!(judge
            .judge(["one https://a.example"].into_iter())
            .is_empty());
        assert_eq!(
            judge.judge(["https://a.example", "http://b.example"].into_iter()),
            vec!["2 links, more than the 1 allowed"]
        );
    }

    #[test]
    fn words_match_whole_words_in_any_case() {
        let judge = rules(&["casino", "c++"], &[], &[], None);
        assert_eq!(
            judge.judge(["Best CASINO here"].into_iter()),
            vec!["a blocked word"]
        );
        assert!(judge.judge(["casinos and occasion"].into_iter()).is_empty());
        assert_eq!(
            judge.judge(["I write c++ code"].into_iter()),
            vec!["a blocked word"]
        );
        assert!(judge.judge(["c+"].into_iter()).is_empty());
    }

    #[test]
    fn patterns_and_senders_are_named_by_the_rule() {
        let judge = rules(
            &[],
            &["^buy\\s+now", "crypto"],
            &["spam.example", "bad@ok.example"],
            None,
        );
        assert_eq!(
            judge.judge(["CRYPTO deals"].into_iter()),
            vec!["blocked pattern 2"]
        );
        assert_eq!(
            judge.judge(["x@mail.spam.example"].into_iter()),
            vec!["blocked sender spam.example"]
        );
        assert_eq!(
            judge.judge([" Bad@OK.example "].into_iter()),
            vec!["blocked sender bad@ok.example"]
        );
        assert!(judge
            .judge(["good@ok.example", "notspam.example"].into_iter())
            .is_empty());
    }

    #[test]
    fn settings_are_checked() {
        assert!(blocked_patterns(&["(unclosed".into()]).is_err());
        assert!(blocked_patterns(&["a{100000}{100000}".into()]).is_err());
        assert_eq!(
            blocked_senders(&["@Example.COM".into(), "a@b.example".into()]).expect("valid"),
            vec!["example.com", "a@b.example"]
        );
        assert!(blocked_senders(&["no-dot".into()]).is_err());
        assert!(blocked_senders(&["a b@c.example".into()]).is_err());
        assert!(captcha_secret("  0x4AAA  ").is_ok());
        assert!(captcha_secret("has space").is_err());
        assert!(captcha_min_score(1.5).is_err());
        assert!(min_fill_seconds(0).is_err());
        assert!(max_links(-1).is_err());
    }
}
