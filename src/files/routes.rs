//! `GET /files/{file_id}?expires=…&signature=…`: a file's bytes for whoever holds a link
//! this server signed and that has not expired, nor been handed to an API key revoked
//! since (docs/receiving-webhooks.md). The answer is an attachment with the type judged
//! at upload, never rendered by a browser as a page of this origin.

use std::collections::HashMap;

use axum::extract::{FromRef, Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::links::{self, Refused};
use super::{Files, FilesState};
use crate::error::ApiError;
use crate::model::ids::FileId;

/// The route, on any state that hands over the files (the application's, through
/// [`FromRef`]: this module needs nothing above it).
pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    FilesState: FromRef<S>,
{
    Router::new().route("/files/{file_id}", get(download))
}

async fn download(
    State(files): State<FilesState>,
    Path(file_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    match serve(&files, &file_id, &query).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn serve(
    files: &Files,
    file_id: &str,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let key = files.link_key().await?;
    let link = links::LinkQuery {
        expires: query.get("expires").map(String::as_str),
        holder: query.get("key").map(String::as_str),
        signature: query.get("signature").map(String::as_str),
    };
    let holder =
        links::verify(&key, file_id, link, files.clock.now()).map_err(|refused| match refused {
            Refused::Invalid => ApiError::FileLinkInvalid,
            Refused::Expired => ApiError::FileLinkExpired,
        })?;
    let not_found = || ApiError::FileNotFound {
        file_id: file_id.to_string(),
    };
    let id = FileId::parse(file_id).ok_or_else(not_found)?;
    // A link handed to an API key ends with the key: once it is revoked, expired, of a
    // deleted project (or gone), the link is as good as expired, in every process, from
    // the next download on. Checked on the connection that reads the file's row: one
    // checkout per download. (Only a key that saw the submission was handed the link,
    // and an endpoint never changes project, so the link names a file of the key's
    // project for as long as it works.)
    let now = files.clock.now();
    let (revoked, row) = files
        .db
        .run(async |conn| {
            let revoked = match &holder {
                Some(holder) => {
                    !crate::db::keys::unusable_among(conn, std::slice::from_ref(holder), now)
                        .await?
                        .is_empty()
                }
                None => false,
            };
            let row = crate::db::files::find_attached(conn, &id).await?;
            Ok((revoked, row))
        })
        .await?;
    if revoked {
        return Err(ApiError::FileLinkExpired);
    }
    let row = row.ok_or_else(not_found)?;
    let body = files
        .storage
        .read(&files.db, &row)
        .await
        .map_err(|error| ApiError::FileStorageUnavailable(error.to_string()))?;
    let mut response = body.into_response();
    let headers = response.headers_mut();
    let text = |value: &str| {
        HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
    };
    headers.insert(header::CONTENT_TYPE, text(&row.content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(row.size_bytes));
    headers.insert(
        header::CONTENT_DISPOSITION,
        text(&content_disposition(&row.name)),
    );
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "sandbox; default-src 'none'",
        ),
        (header::CACHE_CONTROL, "private, no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if let Some(sha256) = &row.sha256 {
        if let Ok(value) = HeaderValue::from_str(sha256) {
            headers.insert("x-content-sha256", value);
        }
    }
    Ok(response)
}

/// `attachment` with the name as RFC 8187 `filename*` (any character) and an ASCII
/// `filename` for old clients.
fn content_disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded =
        percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string();
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}
