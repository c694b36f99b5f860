//! Turning a request body into ordered (name, value) pairs, repeated names kept in order.

use bytes::Bytes;
use serde::de::DeserializeSeed;

use crate::config::IntakeConfig;
use crate::error::ApiError;

/// The media types public intake accepts.
pub const SUPPORTED_MEDIA_TYPES: [&str; 3] = [
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "application/json",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    UrlEncoded,
    Multipart,
    Json,
}

/// The longest `received` value echoed in an `unsupported_media_type` answer.
const RECEIVED_ECHO_LIMIT: usize = 128;

/// Reads the media type: the `Content-Type` before `;`, trimmed and lower-cased.
pub fn media_type(content_type: Option<&str>) -> Result<MediaType, ApiError> {
    let essence = content_type
        .map(|value| {
            value
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    match essence.as_str() {
        "application/x-www-form-urlencoded" => Ok(MediaType::UrlEncoded),
        "multipart/form-data" => Ok(MediaType::Multipart),
        "application/json" => Ok(MediaType::Json),
        _ => Err(ApiError::UnsupportedMediaType {
            received: (!essence.is_empty())
                .then(|| essence.chars().take(RECEIVED_ECHO_LIMIT).collect()),
            supported: &SUPPORTED_MEDIA_TYPES,
        }),
    }
}

pub(crate) fn malformed(reason: impl Into<String>) -> ApiError {
    ApiError::MalformedFormBody {
        reason: reason.into(),
    }
}

pub async fn parse(
    media_type: MediaType,
    content_type: &str,
    body: Bytes,
    limits: &IntakeConfig,
) -> Result<Vec<(String, String)>, ApiError> {
    match media_type {
        MediaType::UrlEncoded => parse_urlencoded(&body, limits),
        MediaType::Multipart => parse_multipart(content_type, body, limits).await,
        MediaType::Json => parse_json(&body, limits),
    }
}

/// `application/x-www-form-urlencoded` as browsers send it. Unlike a lossy decoder, bytes
/// that do not decode to UTF-8 make the body malformed rather than turning silently into
/// U+FFFD, so what is stored is what was sent. Pairs are counted as they are made
/// ([`PartCount`]): the first past `FORMS_MAX_FIELDS` ends the parse before it is even
/// decoded, and every pair costs [`PART_OVERHEAD_BYTES`] and its name against the
/// allowance of `FORMS_MAX_BODY_BYTES` ([`PartCount::pair`]).
pub fn parse_urlencoded(
    body: &[u8],
    limits: &IntakeConfig,
) -> Result<Vec<(String, String)>, ApiError> {
    let decode = |raw: &[u8]| -> Result<String, ApiError> {
        let spaced: Vec<u8> = raw
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        percent_encoding::percent_decode(&spaced)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| malformed("the form body is not valid UTF-8 after percent-decoding"))
    };
    let mut count = PartCount::new(limits);
    let mut pairs = Vec::new();
    for piece in body.split(|&b| b == b'&').filter(|piece| !piece.is_empty()) {
        count.value()?;
        let (name, value) = match piece.iter().position(|&b| b == b'=') {
            Some(at) => (&piece[..at], &piece[at + 1..]),
            None => (piece, &b""[..]),
        };
        let (name, value) = (decode(name)?, decode(value)?);
        count.pair(&name)?;
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// `multipart/form-data` through multer. A part with a file name (`filename` or
/// `filename*`, see [`disposition_names_a_file`]) is refused by name: a file is never
/// silently dropped. Parts are counted as they are read ([`PartCount`]): the first past
/// `FORMS_MAX_FIELDS` ends the parse, and what the parts keep must fit the request's
/// allowance of `FORMS_MAX_BODY_BYTES`.
pub async fn parse_multipart(
    content_type: &str,
    body: Bytes,
    limits: &IntakeConfig,
) -> Result<Vec<(String, String)>, ApiError> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| malformed("the multipart content type has no boundary"))?;
    let stream =
        futures_util::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut count = PartCount::new(limits);
    let mut pairs = Vec::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(error) => return Err(malformed(multipart_reason(&error))),
        };
        let name = field.name().unwrap_or_default().to_string();
        // Not multer's `file_name()`: it knows only `filename=` (so `filename*=` slipped
        // through as text) and finds it by searching the header's text, quoted strings
        // included (so a name that contains `; filename=` read as a file).
        if part_is_a_file(field.headers())? {
            return Err(ApiError::FileUploadNotSupported { field: name });
        }
        count.value()?;
        count.part(field.headers(), &name)?;
        let bytes = field
            .bytes()
            .await
            .map_err(|error| malformed(multipart_reason(&error)))?;
        count.bytes(bytes.len())?;
        let value = String::from_utf8(bytes.to_vec())
            .map_err(|_| malformed("a multipart value is not valid UTF-8"))?;
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// What a part costs besides the bytes of its headers, its name and its value: the pair
/// it becomes and the parser's bookkeeping of it. Without it an empty part would cost
/// nothing, and a body of empty parts could hold memory far beyond its own size.
pub(crate) const PART_OVERHEAD_BYTES: usize = 64;

/// The parts of one multipart request, counted as they are read, so that a body of many
/// parts is refused at the first part too many rather than after it was read whole:
///
/// - every part that is no stored file (a text value, or a file input left empty) counts
///   towards `FORMS_MAX_FIELDS`; the first past it is `422 too_many_fields` (`received`
///   is then the limit plus one: nothing after it is read);
/// - every part (a file part too) costs [`PART_OVERHEAD_BYTES`], its headers (each
///   header's name and value), its name and, for a text part, its value, against the
///   request's allowance of `FORMS_MAX_BODY_BYTES`; past it, `413 request_body_too_large`.
pub(crate) struct PartCount {
    max_values: usize,
    values: usize,
    limit_bytes: usize,
    bytes: usize,
}

impl PartCount {
    pub(crate) fn new(limits: &IntakeConfig) -> PartCount {
        PartCount {
            max_values: limits.max_fields,
            values: 0,
            limit_bytes: limits.max_body_bytes,
            bytes: 0,
        }
    }

    /// One more value: refused past `FORMS_MAX_FIELDS`.
    pub(crate) fn value(&mut self) -> Result<(), ApiError> {
        self.values += 1;
        if self.values > self.max_values {
            return Err(ApiError::TooManyFields {
                limit: self.max_values,
                received: self.values,
            });
        }
        Ok(())
    }

    /// One more part: its overhead, its headers and its name against the allowance.
    pub(crate) fn part(
        &mut self,
        headers: &axum::http::HeaderMap,
        name: &str,
    ) -> Result<(), ApiError> {
        let header_bytes: usize = headers
            .iter()
            .map(|(header, value)| header.as_str().len() + value.len())
            .sum();
        self.bytes(
            PART_OVERHEAD_BYTES
                .saturating_add(header_bytes)
                .saturating_add(name.len()),
        )
    }

    /// A pair of a body that is no multipart one: its overhead and its name against the
    /// allowance (it was counted by [`PartCount::value`] already). Its value is not: values
    /// are the body's own bytes decoded, never longer, and each is made once; a name is
    /// made again for every value it names (a JSON array's items), so it is charged for
    /// each. A body at `FORMS_MAX_BODY_BYTES` of few pairs still fits.
    pub(crate) fn pair(&mut self, name: &str) -> Result<(), ApiError> {
        self.bytes(PART_OVERHEAD_BYTES.saturating_add(name.len()))
    }

    /// `more` bytes of a text value against the allowance.
    pub(crate) fn bytes(&mut self, more: usize) -> Result<(), ApiError> {
        self.bytes = self.bytes.saturating_add(more);
        if self.bytes > self.limit_bytes {
            return Err(ApiError::RequestBodyTooLarge {
                limit_bytes: self.limit_bytes,
            });
        }
        Ok(())
    }
}

/// Whether a part's headers say it is a file: its `Content-Disposition` names a file
/// ([`disposition_names_a_file`]). A part without the header is no file (its name is
/// empty, which the field rules refuse). multer keeps the last of a repeated header, the
/// same one its `name()` reads.
fn part_is_a_file(headers: &axum::http::HeaderMap) -> Result<bool, ApiError> {
    let Some(disposition) = headers.get(axum::http::header::CONTENT_DISPOSITION) else {
        return Ok(false);
    };
    disposition_names_a_file(disposition.as_bytes())
        .ok_or_else(|| malformed(MALFORMED_PART_HEADERS))
}

pub(crate) const MALFORMED_PART_HEADERS: &str = "a multipart part has malformed headers";

/// Whether a `Content-Disposition` value has a file-name parameter: `filename`, or the
/// extended `filename*` of RFC 5987/8187 (`filename*=UTF-8''cv.pdf`) and its RFC 2231
/// continuations (`filename*0`, `filename*0*`), parameter names compared without regard
/// to case. `None` when the value does not parse as a disposition type followed by
/// `; name=value` parameters, each value a token or a quoted string.
///
/// Parameters are split properly: a quoted string (with `\` escaping the next byte) may
/// hold `;`, `=` and anything else, so `name="x; filename*=y"` is one parameter, `name`,
/// and no file. Anything the split cannot place (a parameter without `=`, a stray quote,
/// text after a quoted string) is malformed rather than guessed at, so no reading of an
/// odd header can turn a file into a text field.
fn disposition_names_a_file(value: &[u8]) -> Option<bool> {
    disposition_parameters(value).map(|parameters| {
        parameters
            .iter()
            .any(|(name, _)| is_file_name_parameter(name))
    })
}

/// A `Content-Disposition` value's parameters in order: each name and its value (a
/// quoted string unquoted, `\` pairs resolved). `None` when the value does not parse (see
/// [`disposition_names_a_file`]).
fn disposition_parameters(value: &[u8]) -> Option<Vec<(&[u8], Vec<u8>)>> {
    let is_space = |byte: &u8| matches!(byte, b' ' | b'\t');
    let skip_spaces = |mut at: usize| {
        while value.get(at).is_some_and(is_space) {
            at += 1;
        }
        at
    };
    let token_end = |mut at: usize| {
        while value.get(at).copied().is_some_and(is_token_byte) {
            at += 1;
        }
        at
    };
    // The disposition type (`form-data`): a token.
    let mut at = skip_spaces(0);
    let type_end = token_end(at);
    if type_end == at {
        return None;
    }
    at = skip_spaces(type_end);
    let mut parameters = Vec::new();
    while at < value.len() {
        if value[at] != b';' {
            return None;
        }
        at = skip_spaces(at + 1);
        // A trailing or doubled `;` adds no parameter.
        if at == value.len() || value[at] == b';' {
            continue;
        }
        let name_start = at;
        at = token_end(at);
        if at == name_start {
            return None;
        }
        let name = &value[name_start..at];
        at = skip_spaces(at);
        if value.get(at) != Some(&b'=') {
            return None;
        }
        at = skip_spaces(at + 1);
        let mut text = Vec::new();
        if value.get(at) == Some(&b'"') {
            at += 1;
            loop {
                match value.get(at) {
                    None => return None,
                    Some(b'"') => break,
                    // A quoted pair: the escaped byte, whatever it is, is text.
                    Some(b'\\') => {
                        text.push(*value.get(at + 1)?);
                        at += 2;
                    }
                    Some(&byte) => {
                        text.push(byte);
                        at += 1;
                    }
                }
            }
            at += 1;
        } else {
            // A bare value may be empty (`name=`), as older clients send it.
            let start = at;
            at = token_end(at);
            text.extend_from_slice(&value[start..at]);
        }
        at = skip_spaces(at);
        parameters.push((name, text));
    }
    Some(parameters)
}

/// The file name a file part's `Content-Disposition` gives, for display only: the
/// extended `filename*` (RFC 8187, with RFC 2231 continuations) when present, else
/// `filename`; any path before the last `/` or `\\` dropped, control and format
/// characters removed ([`is_hidden_in_names`]), trailing dots and spaces removed, at most
/// 255 characters. `None` when the part is no file.
pub fn part_file_name(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(disposition) = headers.get(axum::http::header::CONTENT_DISPOSITION) else {
        return Ok(None);
    };
    let parameters = disposition_parameters(disposition.as_bytes())
        .ok_or_else(|| malformed(MALFORMED_PART_HEADERS))?;
    if !parameters
        .iter()
        .any(|(name, _)| is_file_name_parameter(name))
    {
        return Ok(None);
    }
    let lower = |name: &[u8]| String::from_utf8_lossy(name).to_ascii_lowercase();
    let mut plain = None;
    let mut extended = None;
    let mut pieces: Vec<(u32, bool, &[u8])> = Vec::new();
    for (name, text) in &parameters {
        match lower(name).as_str() {
            "filename" => plain = Some(String::from_utf8_lossy(text).into_owned()),
            "filename*" => extended = Some(decode_extended(text)),
            other => {
                let rest = other.trim_start_matches("filename*");
                let (index, encoded) = match rest.strip_suffix('*') {
                    Some(index) => (index, true),
                    None => (rest, false),
                };
                if let Ok(index) = index.parse::<u32>() {
                    pieces.push((index, encoded, text));
                }
            }
        }
    }
    let continued = (!pieces.is_empty()).then(|| {
        pieces.sort_by_key(|(index, _, _)| *index);
        let encoded = pieces.iter().any(|(_, encoded, _)| *encoded);
        let joined: Vec<u8> = pieces
            .iter()
            .flat_map(|(_, _, text)| text.iter().copied())
            .collect();
        if encoded {
            decode_extended(&joined)
        } else {
            String::from_utf8_lossy(&joined).into_owned()
        }
    });
    let name = extended.or(continued).or(plain).unwrap_or_default();
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let visible: String = base.chars().filter(|&c| !is_hidden_in_names(c)).collect();
    // Windows drops trailing dots and spaces when it saves a file, so `x.svg.` would be
    // `x.svg` there: the name is kept as it would be saved, and judged so.
    let saved = visible.trim_end_matches(['.', ' ']);
    Ok(Some(saved.chars().take(255).collect()))
}

/// Characters a file name loses: control characters (Unicode category Cc), format
/// characters (Cf: the bidirectional controls such as U+202E, which make `cod.exe`
/// display as `exe.doc`, zero-width spaces and joiners, the byte order mark) and the
/// line and paragraph separators (Zl, Zp). None of them is visible, so none can be part of
/// a name a person reads.
pub(crate) fn is_hidden_in_names(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// `charset'language'percent-encoded` (RFC 8187): UTF-8 decoded strictly where it can be,
/// ISO-8859-1 byte for character, anything else as lossy UTF-8.
fn decode_extended(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let mut parts = text.splitn(3, '\'');
    let (charset, encoded) = match (parts.next(), parts.next(), parts.next()) {
        (Some(charset), Some(_language), Some(encoded)) => (charset.to_ascii_lowercase(), encoded),
        _ => (String::new(), &*text),
    };
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(encoded).collect();
    if charset == "iso-8859-1" {
        return bytes.iter().map(|&b| char::from(b)).collect();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `filename`, `filename*`, `filename*0`, `filename*0*`, … in any case.
fn is_file_name_parameter(name: &[u8]) -> bool {
    const FILENAME: &[u8] = b"filename";
    name.len() >= FILENAME.len()
        && name[..FILENAME.len()].eq_ignore_ascii_case(FILENAME)
        && (name.len() == FILENAME.len() || name[FILENAME.len()] == b'*')
}

/// An RFC 9110 `tchar`: what a parameter name, a disposition type and a bare parameter
/// value are made of.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// multer's messages describe the structure only, but they are mapped to fixed texts so
/// nothing of the body can ever be echoed.
pub(crate) fn multipart_reason(error: &multer::Error) -> &'static str {
    match error {
        multer::Error::IncompleteStream | multer::Error::IncompleteFieldData { .. } => {
            "the multipart body ends before its closing boundary"
        }
        multer::Error::IncompleteHeaders | multer::Error::ReadHeaderFailed(_) => {
            MALFORMED_PART_HEADERS
        }
        multer::Error::DecodeHeaderName { .. } | multer::Error::DecodeHeaderValue { .. } => {
            "a multipart header could not be decoded"
        }
        _ => "the multipart body could not be parsed",
    }
}

/// A JSON object whose values are strings or arrays of strings. An empty array adds no
/// value (and so no field). Every entry is read in document order, a repeated key
/// included: `{"a":"1","a":"2"}` is the pairs `a=1` and `a=2`, as `a=1&a=2` would be,
/// where a `serde_json::Value` map would keep only the last.
///
/// The pairs are made as the document is read, never a tree of it, and counted as they
/// are made ([`PartCount`]): the first value past `FORMS_MAX_FIELDS` ends the parse
/// (nothing after it is read), and every pair costs [`PART_OVERHEAD_BYTES`] and its name
/// (once for each value it names) against the allowance of `FORMS_MAX_BODY_BYTES`
/// ([`PartCount::pair`]). Short of
/// that, the whole document is read before any value is judged, so a body that is not
/// JSON at all is "not valid JSON" wherever its first wrong value is.
pub fn parse_json(body: &[u8], limits: &IntakeConfig) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs = JsonPairs {
        count: PartCount::new(limits),
        pairs: Vec::new(),
        refused: None,
        not_strings: false,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let read = JsonTopLevel(&mut pairs)
        .deserialize(&mut deserializer)
        .and_then(|is_object| deserializer.end().map(|()| is_object));
    if let Some(refusal) = pairs.refused.take() {
        return Err(refusal);
    }
    let is_object = read.map_err(|_| malformed("the body is not valid JSON"))?;
    if !is_object {
        return Err(malformed("the JSON body must be an object"));
    }
    if pairs.not_strings {
        return Err(malformed(
            "JSON values must be strings or arrays of strings",
        ));
    }
    Ok(pairs.pairs)
}

/// The pairs of a JSON body as they are read, and what stopped or spoiled the reading.
struct JsonPairs {
    count: PartCount,
    pairs: Vec<(String, String)>,
    /// A limit passed: the parse stopped there, and this is the answer.
    refused: Option<ApiError>,
    /// A value that is no string (nor, at the top, an array of strings) was read past.
    not_strings: bool,
}

impl JsonPairs {
    /// One more pair, counted; past a limit the refusal is kept and the reading stops
    /// with an error that only says so.
    fn push<E: serde::de::Error>(&mut self, name: &str, value: &str) -> Result<(), E> {
        let counted = self.count.value().and_then(|()| self.count.pair(name));
        match counted {
            Ok(()) => {
                self.pairs.push((name.to_string(), value.to_string()));
                Ok(())
            }
            Err(refusal) => {
                self.refused = Some(refusal);
                Err(E::custom("a limit of the form was passed"))
            }
        }
    }
}

/// A JSON document's top level as [`parse_json`] needs it: `true` for an object, whose
/// entries are read into the pairs one by one in document order (repeated keys kept);
/// any other value is read to its end (so its syntax is still checked) and is `false`.
struct JsonTopLevel<'a>(&'a mut JsonPairs);

impl<'de> DeserializeSeed<'de> for JsonTopLevel<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Every kind of value has its `visit_` method: serde's default for a missing one is a
/// type error, which would be taken for invalid JSON.
impl<'de> serde::de::Visitor<'de> for JsonTopLevel<'_> {
    type Value = bool;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            map.next_value_seed(JsonEntry {
                pairs: &mut *self.0,
                name: &name,
                in_array: false,
            })?;
        }
        Ok(true)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// The value of one entry of the object (or, `in_array`, one item of an entry's array):
/// a string is a pair; an array of an entry is its items; anything else is read past
/// (its syntax still checked) and marks the body as holding a value that is no string.
struct JsonEntry<'a> {
    pairs: &'a mut JsonPairs,
    name: &'a str,
    in_array: bool,
}

impl<'de> DeserializeSeed<'de> for JsonEntry<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl JsonEntry<'_> {
    fn not_a_string<E>(self) -> Result<(), E> {
        self.pairs.not_strings = true;
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for JsonEntry<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<(), E> {
        self.pairs.push(self.name, value)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.in_array {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            return self.not_a_string();
        }
        while seq
            .next_element_seed(JsonEntry {
                pairs: &mut *self.pairs,
                name: self.name,
                in_array: true,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        self.not_a_string()
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.not_a_string()
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.not_a_string()
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.not_a_string()
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.not_a_string()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.not_a_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::fuzzing::intake_limits as limits;

    /// The parsers with the fuzz targets' limits (these shadow the glob import).
    fn parse_urlencoded(body: &[u8]) -> Result<Vec<(String, String)>, ApiError> {
        super::parse_urlencoded(body, &limits())
    }

    fn parse_json(body: &[u8]) -> Result<Vec<(String, String)>, ApiError> {
        super::parse_json(body, &limits())
    }

    fn five_fields() -> IntakeConfig {
        IntakeConfig {
            max_fields: 5,
            ..limits()
        }
    }

    #[test]
    fn urlencoded_parsing_stops_at_the_first_pair_past_the_field_limit() {
        // Many more pairs than the limit, then a tail that does not decode: the parser
        // never reaches it, so the answer is the count (the limit plus one).
        let body = format!("{}n=%FF", "a&".repeat(5 + 100_000));
        match super::parse_urlencoded(body.as_bytes(), &five_fields()) {
            Err(ApiError::TooManyFields { limit, received }) => {
                assert_eq!((limit, received), (5, 6))
            }
            other => panic!("{other:?}"),
        }
        // Exactly the limit is still parsed.
        let parsed = super::parse_urlencoded("a&".repeat(5).as_bytes(), &five_fields()).unwrap();
        assert_eq!(parsed.len(), 5);
    }

    #[test]
    fn json_parsing_stops_at_the_first_value_past_the_field_limit() {
        // In arrays or as repeated keys, then a tail that is not JSON at all.
        for body in [
            format!(r#"{{"a": [{}"#, r#""", "#.repeat(5 + 100_000)),
            format!("{{{} nonsense", r#""a": "", "#.repeat(5 + 100_000)),
        ] {
            match super::parse_json(body.as_bytes(), &five_fields()) {
                Err(ApiError::TooManyFields { limit, received }) => {
                    assert_eq!((limit, received), (5, 6))
                }
                other => panic!("{other:?}"),
            }
        }
        let parsed =
            super::parse_json(br#"{"a": ["", "", ""], "b": "", "a": ""}"#, &five_fields()).unwrap();
        assert_eq!(parsed.len(), 5);
    }

    #[test]
    fn every_pair_costs_its_overhead_against_the_allowance() {
        let small = IntakeConfig {
            max_fields: 1_000,
            max_body_bytes: 10 * (PART_OVERHEAD_BYTES + 1),
            ..limits()
        };
        // Ten pairs of a one-letter name fit; the eleventh, two bytes of body, does not.
        assert_eq!(
            super::parse_urlencoded("a&".repeat(10).as_bytes(), &small)
                .unwrap()
                .len(),
            10
        );
        let too_large = |result: Result<Vec<(String, String)>, ApiError>| matches!(result, Err(ApiError::RequestBodyTooLarge { limit_bytes }) if limit_bytes == 10 * (PART_OVERHEAD_BYTES + 1));
        assert!(too_large(super::parse_urlencoded(
            "a&".repeat(11).as_bytes(),
            &small
        )));
        assert!(too_large(super::parse_json(
            format!(r#"{{"a": [{}""]}}"#, r#""", "#.repeat(10)).as_bytes(),
            &small
        )));
        // Values are the body's own bytes: one pair as long as the allowance fits.
        let long = format!("a={}", "b".repeat(10 * (PART_OVERHEAD_BYTES + 1) - 2));
        assert_eq!(
            super::parse_urlencoded(long.as_bytes(), &small)
                .unwrap()
                .len(),
            1
        );
        let long = format!(
            r#"{{"a":"{}"}}"#,
            "b".repeat(10 * (PART_OVERHEAD_BYTES + 1) - 8)
        );
        assert_eq!(super::parse_json(long.as_bytes(), &small).unwrap().len(), 1);
        // A long name is charged for every value it names.
        let name = "n".repeat(200);
        assert!(too_large(super::parse_json(
            format!(r#"{{"{name}": ["", "", ""]}}"#).as_bytes(),
            &small
        )));
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn media_types() {
        assert_eq!(
            media_type(Some("application/x-www-form-urlencoded")).unwrap(),
            MediaType::UrlEncoded
        );
        assert_eq!(
            media_type(Some(" Multipart/Form-Data ; boundary=x")).unwrap(),
            MediaType::Multipart
        );
        assert_eq!(
            media_type(Some("APPLICATION/JSON; charset=utf-8")).unwrap(),
            MediaType::Json
        );
        for (header, received) in [
            (None, None),
            (Some(""), None),
            (Some("  ; charset=utf-8"), None),
            (Some("text/plain"), Some("text/plain".to_string())),
            (
                Some(&*format!("x/{}", "y".repeat(300))),
                Some(format!("x/{}", "y".repeat(126))),
            ),
        ] {
            match media_type(header) {
                Err(ApiError::UnsupportedMediaType { received: got, .. }) => {
                    assert_eq!(got, received, "{header:?}")
                }
                other => panic!("{header:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn urlencoded_keeps_order_and_repeats() {
        let parsed = parse_urlencoded(
            b"topics=billing&email=a%40b.c&topics=api&note=hello+world&empty=&bare",
        )
        .unwrap();
        assert_eq!(
            parsed,
            pairs(&[
                ("topics", "billing"),
                ("email", "a@b.c"),
                ("topics", "api"),
                ("note", "hello world"),
                ("empty", ""),
                ("bare", "")
            ])
        );
        assert_eq!(parse_urlencoded(b"").unwrap(), vec![]);
        assert_eq!(
            parse_urlencoded(b"n=%E2%9C%93").unwrap(),
            pairs(&[("n", "✓")])
        );
        assert!(matches!(
            parse_urlencoded(b"n=%FF"),
            Err(ApiError::MalformedFormBody { .. })
        ));
        assert_eq!(parse_urlencoded(b"a=1=2").unwrap(), pairs(&[("a", "1=2")]));
    }

    #[tokio::test]
    async fn multipart_fields_and_files() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\none\r\n--XyZ\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\nzwei ✓\r\n--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nthree\r\n--XyZ--\r\n";
        let parsed = parse_multipart(
            "multipart/form-data; boundary=XyZ",
            Bytes::from(body),
            &limits(),
        )
        .await
        .unwrap();
        assert_eq!(
            parsed,
            pairs(&[("a", "one"), ("b", "zwei ✓"), ("a", "three")])
        );

        let file = "--XyZ\r\nContent-Disposition: form-data; name=\"cv\"; filename=\"cv.pdf\"\r\nContent-Type: application/pdf\r\n\r\n%PDF\r\n--XyZ--\r\n";
        match parse_multipart(
            "multipart/form-data; boundary=XyZ",
            Bytes::from(file),
            &limits(),
        )
        .await
        {
            Err(ApiError::FileUploadNotSupported { field }) => assert_eq!(field, "cv"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_multipart("multipart/form-data", Bytes::from(body), &limits()).await,
            Err(ApiError::MalformedFormBody { .. })
        ));
        assert!(matches!(
            parse_multipart(
                "multipart/form-data; boundary=XyZ",
                Bytes::from(
                    "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated"
                ),
                &limits(),
            )
            .await,
            Err(ApiError::MalformedFormBody { .. })
        ));
    }

    /// `count` empty text parts named `a`, without the closing boundary.
    fn empty_parts(count: usize) -> String {
        "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n\r\n".repeat(count)
    }

    #[tokio::test]
    async fn multipart_parsing_stops_at_the_first_part_past_the_field_limit() {
        let limits = IntakeConfig {
            max_fields: 5,
            ..limits()
        };
        // Many more parts than the limit, then a tail that does not parse: the parser
        // never reaches it, so the answer is the count, not a malformed body.
        let body = format!("{}--XyZ\r\nthis is no part at all", empty_parts(5 + 10_000));
        match parse_multipart(
            "multipart/form-data; boundary=XyZ",
            Bytes::from(body),
            &limits,
        )
        .await
        {
            Err(ApiError::TooManyFields { limit, received }) => {
                assert_eq!((limit, received), (5, 6))
            }
            other => panic!("{other:?}"),
        }
        // Exactly the limit is still parsed.
        let body = format!("{}--XyZ--\r\n", empty_parts(5));
        let parsed = parse_multipart(
            "multipart/form-data; boundary=XyZ",
            Bytes::from(body),
            &limits,
        )
        .await
        .unwrap();
        assert_eq!(parsed.len(), 5);
    }

    #[tokio::test]
    async fn multipart_headers_and_names_count_against_the_allowance() {
        let limits = IntakeConfig {
            max_body_bytes: 1_000,
            ..limits()
        };
        let part = |name: &str, padding: usize| {
            format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\nX-Padding: {}\r\n\r\n\r\n",
                "p".repeat(padding)
            )
        };
        // Empty values, but headers of 400 bytes each: the third part passes 1,000.
        let body = format!(
            "{}{}{}--XyZ--\r\n",
            part("a", 400),
            part("b", 400),
            part("c", 400)
        );
        match parse_multipart(
            "multipart/form-data; boundary=XyZ",
            Bytes::from(body),
            &limits,
        )
        .await
        {
            Err(ApiError::RequestBodyTooLarge { limit_bytes }) => assert_eq!(limit_bytes, 1_000),
            other => panic!("{other:?}"),
        }
        // A long name counts as well, and so does every part's overhead.
        let long_name = "n".repeat(990 - PART_OVERHEAD_BYTES);
        let body = format!("{}--XyZ--\r\n", part(&long_name, 0));
        assert!(matches!(
            parse_multipart(
                "multipart/form-data; boundary=XyZ",
                Bytes::from(body),
                &limits
            )
            .await,
            Err(ApiError::RequestBodyTooLarge { .. })
        ));
        let mut count = PartCount::new(&limits);
        for _ in 0..1_000 / PART_OVERHEAD_BYTES {
            count.part(&axum::http::HeaderMap::new(), "").unwrap();
        }
        assert!(count.part(&axum::http::HeaderMap::new(), "").is_err());
    }

    /// One part with `disposition` as its `Content-Disposition`, through the parser.
    async fn one_part(disposition: &str) -> Result<Vec<(String, String)>, ApiError> {
        let body =
            format!("--XyZ\r\nContent-Disposition: {disposition}\r\n\r\nvalue\r\n--XyZ--\r\n");
        parse_multipart(
            "multipart/form-data; boundary=XyZ",
            Bytes::from(body),
            &limits(),
        )
        .await
    }

    #[tokio::test]
    async fn multipart_extended_file_names_are_files() {
        for disposition in [
            "form-data; name=\"cv\"; filename*=UTF-8''cv.pdf",
            "form-data; name=\"cv\"; FILENAME*=utf-8'en'%E2%82%AC.pdf",
            "form-data; name=\"cv\"; FileName=\"cv.pdf\"",
            "form-data; name=\"cv\"; filename*0=\"c\"; filename*1=\"v.pdf\"",
            "form-data; name=\"cv\"; filename*0*=UTF-8''cv.pdf",
            "form-data;name=cv;filename*=UTF-8''cv.pdf",
            "form-data; name=\"cv\" ; filename = \"\"",
            "form-data; name=\"cv\"; filename*=\"x; name=y\"",
        ] {
            match one_part(disposition).await {
                Err(ApiError::FileUploadNotSupported { field }) => {
                    assert_eq!(field, "cv", "{disposition}")
                }
                other => panic!("{disposition}: {other:?}"),
            }
        }
    }

    #[test]
    fn file_names_for_display() {
        let name = |disposition: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(
                axum::http::header::CONTENT_DISPOSITION,
                axum::http::HeaderValue::from_str(disposition).unwrap(),
            );
            part_file_name(&headers).unwrap()
        };
        assert_eq!(name("form-data; name=\"a\""), None);
        assert_eq!(
            name("form-data; name=\"cv\"; filename=\"cv.pdf\""),
            Some("cv.pdf".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename=\"x.pdf\"; filename*=UTF-8''%E2%82%AC.pdf"),
            Some("€.pdf".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename*=iso-8859-1'fr'caf%E9.txt"),
            Some("café.txt".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename*0=\"par\"; filename*1=\"ts.txt\""),
            Some("parts.txt".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename=\"../../etc/passwd\""),
            Some("passwd".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename=\"C:\\\\Users\\\\me\\\\a.png\""),
            Some("a.png".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename=\"\""),
            Some(String::new())
        );
        // Bidirectional controls and other invisible characters are removed, and so are
        // trailing dots and spaces.
        assert_eq!(
            name("form-data; name=cv; filename*=UTF-8''invoice%E2%80%AEfdp.exe"),
            Some("invoicefdp.exe".into())
        );
        assert_eq!(
            name(
                "form-data; name=cv; filename*=UTF-8''a%E2%81%A6b%E2%80%8Bc%EF%BB%BF%E2%80%A8.txt"
            ),
            Some("abc.txt".into())
        );
        assert_eq!(
            name("form-data; name=cv; filename=\"x.svg. . \""),
            Some("x.svg".into())
        );
    }

    #[tokio::test]
    async fn multipart_quoted_names_that_mention_a_file_name_are_text() {
        for (disposition, name) in [
            ("form-data; name=\"x; filename*=y\"", "x; filename*=y"),
            ("form-data; name=\"x; filename=y\"", "x; filename=y"),
            ("form-data; name=\"x\\\"; filename=y\"", "x\"; filename=y"),
            ("form-data; name=\"cv\"; filenames=\"no\"", "cv"),
            ("form-data; name=\"cv\"; file=\"no\";", "cv"),
        ] {
            assert_eq!(
                one_part(disposition).await.unwrap(),
                pairs(&[(name, "value")]),
                "{disposition}"
            );
        }
    }

    #[tokio::test]
    async fn multipart_dispositions_that_do_not_parse_are_malformed() {
        for disposition in [
            // The quote never closes: where the parameters end cannot be told.
            "form-data; name=\"cv; filename*=UTF-8''cv.pdf",
            // Text after a quoted string, a missing `;`, a parameter without `=`.
            "form-data; name=\"cv\" filename*=UTF-8''cv.pdf",
            "form-data; name=cv filename=cv.pdf",
            "form-data; name=\"cv\"; filename",
            "form-data filename=cv.pdf",
            "; name=\"cv\"",
            "form-data; name=c\"v",
            "form-data; name=\"cv\\",
        ] {
            match one_part(disposition).await {
                Err(ApiError::MalformedFormBody { reason }) => {
                    assert_eq!(reason, MALFORMED_PART_HEADERS, "{disposition}")
                }
                other => panic!("{disposition}: {other:?}"),
            }
        }
    }

    #[test]
    fn json_repeated_keys_keep_every_value_in_order() {
        assert_eq!(
            parse_json(br#"{"a":"1","a":"2"}"#).unwrap(),
            pairs(&[("a", "1"), ("a", "2")])
        );
        let parsed =
            parse_json(br#"{"a": "1", "b": "x", "a": ["2", "3"], "a": [], "a": "4"}"#).unwrap();
        assert_eq!(
            parsed,
            pairs(&[("a", "1"), ("b", "x"), ("a", "2"), ("a", "3"), ("a", "4")])
        );
        assert_eq!(
            parsed,
            parse_urlencoded(b"a=1&b=x&a=2&a=3&a=4").unwrap(),
            "the same pairs as the same form urlencoded"
        );
        // A repeated key is held to the same value rules as any other.
        assert!(matches!(
            parse_json(br#"{"a": "1", "a": 2}"#),
            Err(ApiError::MalformedFormBody { .. })
        ));
    }

    #[test]
    fn json_refusals_keep_their_reasons() {
        let reason = |body: &[u8]| match parse_json(body) {
            Err(ApiError::MalformedFormBody { reason }) => reason,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(body)),
        };
        for not_json in [
            &b""[..],
            b"{",
            b"[",
            b"[1, {\"a\": }]",
            b"{\"a\": 1,",
            b"{\"a\": \"1\"} x",
            b"{\"a\": \"1\"}{}",
            b"{\"a\": \"\\ud800\"}",
        ] {
            assert_eq!(
                reason(not_json),
                "the body is not valid JSON",
                "{not_json:?}"
            );
        }
        for not_an_object in [
            &b"[]"[..],
            b"[1, {\"a\": [null]}]",
            b"\"x\"",
            b"1",
            b"-1",
            b"1.5",
            b"true",
            b"null",
        ] {
            assert_eq!(
                reason(not_an_object),
                "the JSON body must be an object",
                "{not_an_object:?}"
            );
        }
        for not_strings in [
            &b"{\"a\": 1}"[..],
            b"{\"a\": [\"x\", 1]}",
            b"{\"a\": [[\"x\"]]}",
            b"{\"a\": {\"b\": \"c\"}}",
            b"{\"a\": \"1\", \"a\": null}",
        ] {
            assert_eq!(
                reason(not_strings),
                "JSON values must be strings or arrays of strings",
                "{not_strings:?}"
            );
        }
        // Nesting deep in a value is read past without building it (nor recursing), and
        // is no string.
        let deep = format!("{{\"a\": [{}{}]}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            reason(deep.as_bytes()),
            "JSON values must be strings or arrays of strings"
        );
    }

    #[test]
    fn json_objects_of_strings() {
        let parsed =
            parse_json(br#"{"z": "last?", "a": ["1", "2"], "none": [], "u": "\u00e9"}"#).unwrap();
        assert_eq!(
            parsed,
            pairs(&[("z", "last?"), ("a", "1"), ("a", "2"), ("u", "é")])
        );
        for bad in [
            &b"[]"[..],
            b"\"x\"",
            b"{\"a\": 1}",
            b"{\"a\": [1]}",
            b"{\"a\": null}",
            b"{\"a\": {}}",
            b"{",
            b"",
        ] {
            assert!(
                matches!(parse_json(bad), Err(ApiError::MalformedFormBody { .. })),
                "{bad:?}"
            );
        }
    }

    proptest! {
        // Any header value reads as file or not, or as malformed; it never panics.
        #[test]
        fn any_disposition_is_read_without_panic(value in proptest::collection::vec(any::<u8>(), 0..160)) {
            let _ = disposition_names_a_file(&value);
        }

        // Whatever a quoted name holds (`;`, `=`, `filename*=`, quoted pairs), it is the
        // name's text and never a file-name parameter.
        #[test]
        fn a_quoted_name_is_never_a_file(inside in "([^\"\\\\]|\\\\.|; ?[Ff]ile[Nn]ame\\*?=)*") {
            let disposition = format!("form-data; name=\"{inside}\"");
            prop_assert_eq!(disposition_names_a_file(disposition.as_bytes()), Some(false), "{}", disposition);
            let file = format!("{disposition}; filename*=UTF-8''cv.pdf");
            prop_assert_eq!(disposition_names_a_file(file.as_bytes()), Some(true), "{}", file);
        }

        // Arbitrary bytes never panic and only ever yield pairs or a client error.
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            for media in [MediaType::UrlEncoded, MediaType::Multipart, MediaType::Json] {
                let result = runtime.block_on(parse(media, "multipart/form-data; boundary=b", Bytes::from(body.clone()), &limits()));
                if let Err(error) = result {
                    prop_assert!(error.status().is_client_error(), "{error:?}");
                }
            }
        }
    }
}
