//! Spam rules: what an endpoint's protection settings may be, and the local, cheap rules
//! that judge a submission's values (docs/intake.md, "Spam"). The captcha and Akismet,
//! which ask a service, are intake's (src/intake/screening.rs); these are pure.
//!
//! Text and rules are normalised alike before they are compared ([`normalise`]): a rule
//! written for `viagra` must not be beaten by a zero-width space, a Cyrillic `а` or
//! full-width letters, and an operator's rule typed with such characters must still match.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use regex::{Regex, RegexBuilder};
use regex_syntax::ast::{self, Ast, ClassSetItem};
use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
use unicode_security::confusable_detection::skeleton;

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
/// The blocked words are one expression of literals: 200 words of 200 characters, any
/// case, need about 4 MiB compiled (8 MiB in a script of two-byte letters), far past
/// one pattern's bound, so they have their own. Words that need more still (letters
/// whose normal form is long) are refused when they are set. The words' lazy DFA gets
/// a cache of its own size.
const WORDS_SIZE_LIMIT: usize = 16 * 1024 * 1024;
const WORDS_DFA_SIZE_LIMIT: usize = 2 * 1024 * 1024;
/// A minimum fill time is 1 s to an hour.
pub const MAX_MIN_FILL_SECONDS: i32 = 3600;
/// A provider's secret key is at most 200 characters.
const MAX_CAPTCHA_SECRET_LENGTH: usize = 200;
/// A character range in a blocked pattern's class (`[а-я]`) gets the normal forms of its
/// characters added when it spans at most this many; a wider one is matched as written
/// (the normal forms of a whole script would make the class, and the work, unbounded).
const MAX_RANGE_IMAGES: u32 = 2048;
/// The characters the ranges of one rule set's patterns may span together, counting each
/// range whose normal forms are added: finding them costs about 0.2 µs a character, so
/// this bounds what compiling a rule set spends on them to a few milliseconds. Patterns
/// whose ranges span more are refused when they are set; a stored rule set past it (a
/// row written by another program) has its further ranges matched as written.
pub const MAX_RANGE_EXPANSION: u32 = 16_384;

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
    let words: Vec<String> = words.into_iter().map(|w| w.to_lowercase()).collect();
    // They are matched as one expression, normalised: it must compile within the size
    // bound too, or intake could not read the endpoint.
    SpamRules::compile(None, &words, &[], &[]).map_err(|_| {
        invalid(
            Setting::BlockedWords,
            "the words together are too long to match within the size bound",
        )
    })?;
    Ok(words)
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
    let mut expansion = RangeExpansion::default();
    for pattern in &patterns {
        compile_pattern(pattern, &mut expansion).map_err(|_| {
            invalid(
                Setting::BlockedPatterns,
                "each pattern must be a regular expression of the regex crate's syntax, of bounded size",
            )
        })?;
    }
    if expansion.over {
        return Err(invalid(
            Setting::BlockedPatterns,
            "the character ranges of the patterns together span more than 16384 characters",
        ));
    }
    Ok(patterns)
}

/// Blocked senders: an address (`someone@example.com`) or a domain (`example.com`, or
/// `@example.com`, stored without the `@`), lower-cased, without a final root dot
/// (`example.com.` is `example.com`).
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
            let sender = sender.strip_prefix('@').unwrap_or(&sender);
            let sender = without_root_dot(sender).to_string();
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

/// What the ranges of one rule set's patterns have spanned so far ([`MAX_RANGE_EXPANSION`]).
#[derive(Debug, Default)]
struct RangeExpansion {
    spanned: u32,
    /// A range was left as written: it would have taken the rule set past the bound.
    over: bool,
}

impl RangeExpansion {
    /// Whether a range of `width` characters may have its normal forms added; counts it
    /// when it may.
    fn take(&mut self, width: u32) -> bool {
        match self.spanned.checked_add(width) {
            Some(spanned) if spanned <= MAX_RANGE_EXPANSION => {
                self.spanned = spanned;
                true
            }
            _ => {
                self.over = true;
                false
            }
        }
    }
}

fn compile_pattern(pattern: &str, expansion: &mut RangeExpansion) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&normalise_pattern(pattern, expansion)?)
        .case_insensitive(true)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
}

/// A value as the rules read it, and as the operator's words, senders and the literal
/// characters of patterns are read too, so that both sides compare alike:
/// - format characters (Unicode category Cf: zero-width spaces and joiners, the soft
///   hyphen, bidi controls, tags) are dropped: they are invisible and split words;
/// - NFKC: compatibility forms become their plain ones (full-width `ｈｔｔｐｓ` is
///   `https`, `＠` is `@`, the ligature `ﬁ` is `fi`);
/// - combining marks (Unicode category Mn) are stripped from the decomposed text, which
///   is then composed again: accents go (`víagra` and `v` + U+0301 + `iagra` are
///   `viagra`), other composed letters (Hangul syllables) stay whole;
/// - a character that is still not ASCII is lower-cased and replaced by its prototype
///   in Unicode's confusables (UTS #39's skeleton): Cyrillic `а` and `і` are `a` and
///   `i`, Greek `ο` is `o`. ASCII characters are kept as they are, so that patterns'
///   own syntax and classes (`\d`, `|`, `(?-i)`) keep their meaning.
///
/// ASCII text, most of what is sent, is answered as it is, without a copy.
pub fn normalise(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        return Cow::Borrowed(text);
    }
    let mut normal = String::with_capacity(text.len());
    // NFKD then NFC is NFKC, with the combining marks taken out in between.
    let stripped = text
        .chars()
        .filter(|c| !is_format(*c))
        .nfkd()
        .filter(|c| !is_mark(*c))
        .nfc();
    for c in stripped {
        if c.is_ascii() {
            normal.push(c);
        } else if !is_format(c) && !is_mark(c) {
            push_prototype(&mut normal, c);
        }
    }
    Cow::Owned(normal)
}

/// The precomposed Hangul syllables.
const HANGUL_SYLLABLES: std::ops::RangeInclusive<char> = '\u{AC00}'..='\u{D7A3}';

/// Category Mn: a combining mark that takes no space of its own (an accent).
fn is_mark(c: char) -> bool {
    c.general_category() == GeneralCategory::NonspacingMark
}

/// Category Cf.
fn is_format(c: char) -> bool {
    c.general_category() == GeneralCategory::Format
}

/// The confusables' prototype of a character that is not ASCII, lower-cased first (so
/// that a Cyrillic capital `І` is `i`, as an ASCII `I` is to a case-blind rule).
fn push_prototype(normal: &mut String, c: char) {
    for lower in c.to_lowercase() {
        if lower.is_ascii() {
            normal.push(lower);
            continue;
        }
        // A Hangul syllable looks like no letter of another script, but the skeleton
        // decomposes it into letters (jamo) that do (`ᄋ` is `o`): it is kept whole, so
        // that Korean text stays Korean to a pattern (`[가-힣]`).
        if HANGUL_SYLLABLES.contains(&lower) {
            normal.push(lower);
            continue;
        }
        let mut buffer = [0; 4];
        // The skeleton is decomposed: its marks are stripped as the text's were, and
        // what is left composed again.
        normal.extend(
            skeleton(lower.encode_utf8(&mut buffer))
                .filter(|c| !is_mark(*c))
                .nfc(),
        );
    }
}

/// A pattern whose literal characters are normalised as the text is: outside a class a
/// character whose normal form differs is replaced by it (`(?:…)`, so that a repetition
/// still applies to all of it); inside a class the normal forms of its characters are
/// added to the class. Syntax, escapes and ASCII are kept as written.
///
/// The ranges' normal forms are added while `expansion` allows ([`MAX_RANGE_EXPANSION`]).
fn normalise_pattern(
    pattern: &str,
    expansion: &mut RangeExpansion,
) -> Result<String, regex::Error> {
    if pattern.is_ascii() {
        return Ok(pattern.to_string());
    }
    let tree = ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|error| regex::Error::Syntax(error.to_string()))?;
    let visitor = PatternEdits {
        edits: Vec::new(),
        expansion,
    };
    let Ok(mut edits) = ast::visit(&tree, visitor);
    edits.sort_by_key(|edit| edit.0);
    let mut rewritten = String::with_capacity(pattern.len() * 2);
    let mut at = 0;
    for (start, end, replacement) in edits {
        // Spans from one parse never overlap; a span that did would be skipped whole.
        if start < at {
            continue;
        }
        rewritten.push_str(pattern.get(at..start).unwrap_or_default());
        rewritten.push_str(&replacement);
        at = end;
    }
    rewritten.push_str(pattern.get(at..).unwrap_or_default());
    Ok(rewritten)
}

/// The edits a pattern's literals need: byte range in the pattern, and its replacement.
struct PatternEdits<'a> {
    edits: Vec<(usize, usize, String)>,
    expansion: &'a mut RangeExpansion,
}

impl PatternEdits<'_> {
    /// The normal form of one character, when it is one other character.
    fn image(c: char) -> Option<char> {
        if c.is_ascii() {
            return None;
        }
        let mut buffer = [0; 4];
        let normal = normalise(c.encode_utf8(&mut buffer));
        let mut chars = normal.chars();
        match (chars.next(), chars.next()) {
            (Some(image), None) if image != c => Some(image),
            _ => None,
        }
    }

    /// Adds `images` to a class after the item that ends at `end`.
    fn add_to_class(&mut self, end: usize, images: BTreeSet<char>) {
        if !images.is_empty() {
            let added: String = images
                .into_iter()
                .map(|c| regex_syntax::escape(c.encode_utf8(&mut [0; 4])))
                .collect();
            self.edits.push((end, end, added));
        }
    }
}

impl ast::Visitor for PatternEdits<'_> {
    type Output = Vec<(usize, usize, String)>;
    type Err = std::convert::Infallible;

    fn finish(self) -> Result<Self::Output, Self::Err> {
        Ok(self.edits)
    }

    fn visit_pre(&mut self, tree: &Ast) -> Result<(), Self::Err> {
        if let Ast::Literal(literal) = tree {
            if !literal.c.is_ascii() {
                let mut buffer = [0; 4];
                let normal = normalise(literal.c.encode_utf8(&mut buffer)).into_owned();
                if normal != literal.c.to_string() {
                    self.edits.push((
                        literal.span.start.offset,
                        literal.span.end.offset,
                        format!("(?:{})", regex_syntax::escape(&normal)),
                    ));
                }
            }
        }
        Ok(())
    }

    fn visit_class_set_item_pre(&mut self, item: &ClassSetItem) -> Result<(), Self::Err> {
        match item {
            ClassSetItem::Literal(literal) => {
                let images = PatternEdits::image(literal.c).into_iter().collect();
                self.add_to_class(literal.span.end.offset, images);
            }
            ClassSetItem::Range(range) => {
                let (first, last) = (u32::from(range.start.c), u32::from(range.end.c));
                let width = last.saturating_sub(first).saturating_add(1);
                if width <= MAX_RANGE_IMAGES && self.expansion.take(width) {
                    let images = (first..=last)
                        .filter_map(char::from_u32)
                        .filter_map(PatternEdits::image)
                        .filter(|image| !(range.start.c..=range.end.c).contains(image))
                        .collect();
                    self.add_to_class(range.span.end.offset, images);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// A domain without its final root dot (`example.com.` is `example.com`).
fn without_root_dot(domain: &str) -> &str {
    domain.strip_suffix('.').unwrap_or(domain)
}

/// An endpoint's local rules, compiled once when intake reads the endpoint; cloned
/// cheaply (screening hands them to a thread of their own), the compiled expressions
/// and their caches shared.
#[derive(Debug, Default, Clone)]
pub struct SpamRules(Arc<CompiledRules>);

#[derive(Debug, Default)]
struct CompiledRules {
    max_links: Option<usize>,
    /// Every blocked word, whole words, any case, in one expression.
    words: Option<Regex>,
    patterns: Vec<Regex>,
    senders: Vec<String>,
}

/// The rules did not finish before their deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfTime;

impl SpamRules {
    /// Compiles what was stored, normalised as the text will be ([`normalise`]). A
    /// stored pattern that no longer compiles (a row written by another program) is an
    /// error, not a rule silently dropped.
    pub fn compile(
        max_links: Option<i32>,
        words: &[String],
        patterns: &[String],
        senders: &[String],
    ) -> Result<SpamRules, regex::Error> {
        let words = if words.is_empty() {
            None
        } else {
            let alternatives: Vec<String> =
                words.iter().map(|w| regex::escape(&normalise(w))).collect();
            // Not `\b`: a word that ends in a symbol (`c++`) has no word boundary after it.
            // `_` separates words too (`buy_viagra`), though `\w` counts it a letter.
            let alternatives = alternatives.join("|");
            // Built from escaped literals: nothing in it to normalise again.
            Some(
                RegexBuilder::new(&format!(r"(?:^|[\W_])(?:{alternatives})(?:[\W_]|$)"))
                    .case_insensitive(true)
                    .size_limit(WORDS_SIZE_LIMIT)
                    .dfa_size_limit(WORDS_DFA_SIZE_LIMIT)
                    .build()?,
            )
        };
        Ok(SpamRules(Arc::new(CompiledRules {
            max_links: max_links.map(|n| usize::try_from(n).unwrap_or(0)),
            words,
            patterns: {
                // Past the bound (a row no setting would have allowed), ranges are
                // matched as written: compiling stays bounded.
                let mut expansion = RangeExpansion::default();
                patterns
                    .iter()
                    .map(|p| compile_pattern(p, &mut expansion))
                    .collect::<Result<_, _>>()?
            },
            senders: senders
                .iter()
                .map(|sender| without_root_dot(&normalise(sender).to_lowercase()).to_string())
                .collect(),
        })))
    }

    /// Whether both are the one compiled rule set (a clone of it), not just alike.
    #[cfg(test)]
    pub fn same_as(&self, other: &SpamRules) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// No rule at all: judging costs nothing.
    pub fn is_empty(&self) -> bool {
        let rules = &self.0;
        rules.max_links.is_none()
            && rules.words.is_none()
            && rules.patterns.is_empty()
            && rules.senders.is_empty()
    }

    /// Why the values are spam by these rules (empty: they are not). Each rule gives at
    /// most one reason; the reasons name the operator's rule, never the submitted text.
    pub fn judge<'a>(&self, values: impl Iterator<Item = &'a str>) -> Vec<String> {
        // Without a deadline the rules always finish.
        self.judge_until(values, None).unwrap_or_default()
    }

    /// [`SpamRules::judge`], stopping with `OutOfTime` once `deadline` has passed: it is
    /// looked at before each value is normalised and before each pattern runs over each
    /// value, so the work past it is at most one such step.
    pub fn judge_until<'a>(
        &self,
        values: impl Iterator<Item = &'a str>,
        deadline: Option<Instant>,
    ) -> Result<Vec<String>, OutOfTime> {
        let in_time = || match deadline {
            Some(deadline) if Instant::now() >= deadline => Err(OutOfTime),
            _ => Ok(()),
        };
        let rules = &self.0;
        let mut normal: Vec<Cow<'a, str>> = Vec::new();
        for value in values {
            in_time()?;
            normal.push(normalise(value));
        }
        let mut reasons = Vec::new();
        if let Some(max) = rules.max_links {
            let links: usize = normal.iter().map(|v| count_links(v)).sum();
            if links > max {
                reasons.push(format!("{links} links, more than the {max} allowed"));
            }
        }
        if let Some(words) = &rules.words {
            for value in &normal {
                in_time()?;
                if words.is_match(value) {
                    reasons.push("a blocked word".to_string());
                    break;
                }
            }
        }
        // One expression at a time rather than a `RegexSet`: the first matching rule's
        // position is the reason, the deadline is looked at between them (a set's one
        // pass over a value cannot be stopped), and each expression keeps its own lazy
        // DFA cache within `PATTERN_SIZE_LIMIT`, where fifty patterns in one automaton
        // would sooner exhaust a shared one and fall back to a slower engine.
        'patterns: for (number, pattern) in rules.patterns.iter().enumerate() {
            for value in &normal {
                in_time()?;
                if pattern.is_match(value) {
                    reasons.push(format!("blocked pattern {}", number + 1));
                    break 'patterns;
                }
            }
        }
        if !rules.senders.is_empty() {
            let blocked = normal
                .iter()
                .filter_map(|value| plain_address(value))
                .find_map(|address| {
                    rules
                        .senders
                        .iter()
                        .find(|sender| sender_matches(sender, &address))
                });
            if let Some(sender) = blocked {
                reasons.push(format!("blocked sender {sender}"));
            }
        }
        Ok(reasons)
    }
}

/// Links in a (normalised) value, each counted once: every `//` that follows a scheme
/// (`https://`), or that stands at the start or after a character that is neither a
/// letter, a digit nor `/` (a scheme-relative `//a.com`, `href=//a.com`), when a letter
/// or digit follows it; and every `www.` (any case) that does not follow one of those.
/// A `//` inside a path (`a.com/x//y`) is not another link.
fn count_links(value: &str) -> usize {
    let bytes = value.as_bytes();
    let mut links = 0;
    for (at, _) in value.match_indices("//") {
        let after = bytes.get(at + 2).copied().unwrap_or(b' ');
        let before = at.checked_sub(1).and_then(|i| bytes.get(i).copied());
        let starts_link = match before {
            None | Some(b':') => true,
            Some(b) => !b.is_ascii_alphanumeric() && b != b'/',
        };
        // Non-ASCII after `//` is a host too (an internationalised name).
        if starts_link && (after.is_ascii_alphanumeric() || after >= 0x80) {
            links += 1;
        }
    }
    let lower = value.to_ascii_lowercase();
    for (at, _) in lower.match_indices("www.") {
        if !lower[..at].ends_with("//") {
            links += 1;
        }
    }
    links
}

/// A (normalised) value that is one plain address, lower-cased, its domain without a
/// final root dot.
fn plain_address(value: &str) -> Option<String> {
    let value = without_root_dot(value.trim());
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
        // Words whose normal form is long (U+FDFA is 18 letters) must still compile
        // together, or they are refused when set.
        let long: Vec<String> = (0..200)
            .map(|i| format!("{i}{}", "\u{FDFA}".repeat(190)))
            .collect();
        assert!(blocked_words(&long).is_err());
        assert!(blocked_words(&long[..2]).is_ok());
        // The most words the settings allow, of the longest length, in any script.
        for letters in ["abcdefghij", "\u{0430}\u{0431}\u{0432}\u{0433}\u{0434}"] {
            let most: Vec<String> = (0..200)
                .map(|i| {
                    format!("{i}{}", letters.repeat(40))
                        .chars()
                        .take(200)
                        .collect()
                })
                .collect();
            assert!(blocked_words(&most).is_ok(), "{letters}");
        }
        assert_eq!(
            blocked_senders(&["Spam.Example.".into(), "a@b.example.".into()]).expect("valid"),
            vec!["spam.example", "a@b.example"]
        );
        assert!(blocked_senders(&["a b@c.example".into()]).is_err());
        // Ranges whose normal forms are added: up to the bound per rule set, not past.
        let range = "[\u{4E00}-\u{55FF}]"; // 2048 characters
        let per = (MAX_RANGE_EXPANSION / 2048) as usize;
        let ranges = |n: usize| (0..n).map(|i| format!("{i}{range}")).collect::<Vec<_>>();
        assert!(blocked_patterns(&ranges(per)).is_ok());
        match blocked_patterns(&ranges(per + 1)) {
            Err(SettingError::Invalid { setting, reason }) => {
                assert_eq!(setting, Setting::BlockedPatterns);
                assert!(reason.contains("16384 characters"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // One 500-character pattern of 166 such ranges.
        let packed = format!("[{}]", "\u{4E00}-\u{55FF}".repeat(166));
        assert!(blocked_patterns(std::slice::from_ref(&packed)).is_err());
        // Stored past the bound (another program's row), it still compiles, its further
        // ranges as written.
        let stored = SpamRules::compile(None, &[], &[packed], &[]).expect("compiles");
        assert!(!stored.judge(["\u{4E01}"].into_iter()).is_empty());
        assert!(captcha_secret("  0x4AAA  ").is_ok());
        assert!(captcha_secret("has space").is_err());
        assert!(captcha_min_score(1.5).is_err());
        assert!(min_fill_seconds(0).is_err());
        assert!(max_links(-1).is_err());
    }
}
