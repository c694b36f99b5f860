//! Turning a request body into ordered (name, value) pairs, repeated names kept in order.

use bytes::Bytes;

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

fn malformed(reason: impl Into<String>) -> ApiError {
    ApiError::MalformedFormBody {
        reason: reason.into(),
    }
}

pub async fn parse(
    media_type: MediaType,
    content_type: &str,
    body: Bytes,
) -> Result<Vec<(String, String)>, ApiError> {
    match media_type {
        MediaType::UrlEncoded => parse_urlencoded(&body),
        MediaType::Multipart => parse_multipart(content_type, body).await,
        MediaType::Json => parse_json(&body),
    }
}

/// `application/x-www-form-urlencoded` as browsers send it. Unlike a lossy decoder, bytes
/// that do not decode to UTF-8 make the body malformed rather than turning silently into
/// U+FFFD, so what is stored is what was sent.
pub fn parse_urlencoded(body: &[u8]) -> Result<Vec<(String, String)>, ApiError> {
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
    body.split(|&b| b == b'&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (name, value) = match piece.iter().position(|&b| b == b'=') {
                Some(at) => (&piece[..at], &piece[at + 1..]),
                None => (piece, &b""[..]),
            };
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

/// `multipart/form-data` through multer. A part with a filename is refused by name: a
/// file is never silently dropped.
pub async fn parse_multipart(
    content_type: &str,
    body: Bytes,
) -> Result<Vec<(String, String)>, ApiError> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| malformed("the multipart content type has no boundary"))?;
    let stream =
        futures_util::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut pairs = Vec::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(error) => return Err(malformed(multipart_reason(&error))),
        };
        let name = field.name().unwrap_or_default().to_string();
        if field.file_name().is_some() {
            return Err(ApiError::FileUploadNotSupported { field: name });
        }
        let bytes = field
            .bytes()
            .await
            .map_err(|error| malformed(multipart_reason(&error)))?;
        let value = String::from_utf8(bytes.to_vec())
            .map_err(|_| malformed("a multipart value is not valid UTF-8"))?;
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// multer's messages describe the structure only, but they are mapped to fixed texts so
/// nothing of the body can ever be echoed.
fn multipart_reason(error: &multer::Error) -> &'static str {
    match error {
        multer::Error::IncompleteStream | multer::Error::IncompleteFieldData { .. } => {
            "the multipart body ends before its closing boundary"
        }
        multer::Error::IncompleteHeaders | multer::Error::ReadHeaderFailed(_) => {
            "a multipart part has malformed headers"
        }
        multer::Error::DecodeHeaderName { .. } | multer::Error::DecodeHeaderValue { .. } => {
            "a multipart header could not be decoded"
        }
        _ => "the multipart body could not be parsed",
    }
}

/// A JSON object whose values are strings or arrays of strings. An empty array adds no
/// value (and so no field).
pub fn parse_json(body: &[u8]) -> Result<Vec<(String, String)>, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| malformed("the body is not valid JSON"))?;
    let serde_json::Value::Object(object) = value else {
        return Err(malformed("the JSON body must be an object"));
    };
    let mut pairs = Vec::new();
    for (name, value) in object {
        match value {
            serde_json::Value::String(text) => pairs.push((name, text)),
            serde_json::Value::Array(items) => {
                for item in items {
                    match item {
                        serde_json::Value::String(text) => pairs.push((name.clone(), text)),
                        _ => {
                            return Err(malformed(
                                "JSON values must be strings or arrays of strings",
                            ))
                        }
                    }
                }
            }
            _ => {
                return Err(malformed(
                    "JSON values must be strings or arrays of strings",
                ))
            }
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        let parsed = parse_multipart("multipart/form-data; boundary=XyZ", Bytes::from(body))
            .await
            .unwrap();
        assert_eq!(
            parsed,
            pairs(&[("a", "one"), ("b", "zwei ✓"), ("a", "three")])
        );

        let file = "--XyZ\r\nContent-Disposition: form-data; name=\"cv\"; filename=\"cv.pdf\"\r\nContent-Type: application/pdf\r\n\r\n%PDF\r\n--XyZ--\r\n";
        match parse_multipart("multipart/form-data; boundary=XyZ", Bytes::from(file)).await {
            Err(ApiError::FileUploadNotSupported { field }) => assert_eq!(field, "cv"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_multipart("multipart/form-data", Bytes::from(body)).await,
            Err(ApiError::MalformedFormBody { .. })
        ));
        assert!(matches!(
            parse_multipart(
                "multipart/form-data; boundary=XyZ",
                Bytes::from(
                    "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated"
                )
            )
            .await,
            Err(ApiError::MalformedFormBody { .. })
        ));
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
        // Arbitrary bytes never panic and only ever yield pairs or a client error.
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            for media in [MediaType::UrlEncoded, MediaType::Multipart, MediaType::Json] {
                let result = runtime.block_on(parse(media, "multipart/form-data; boundary=b", Bytes::from(body.clone())));
                if let Err(error) = result {
                    prop_assert!(error.status().is_client_error(), "{error:?}");
                }
            }
        }
    }
}
