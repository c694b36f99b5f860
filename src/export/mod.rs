//! `GET /submissions/export`: every matching submission as one JSON
//! document or one CSV file, streamed from a consistent snapshot, refused (never truncated)
//! above `FORMS_EXPORT_MAX_SUBMISSIONS`.
//!
//! A task holds one connection of its own (never one of the shared pool, which intake
//! needs) in a read-only REPEATABLE READ transaction: it counts, answers the handler
//! whether the export may go ahead, then reads pages of 500 rows by keyset and sends each
//! as a chunk of the response. Memory stays flat however large the export. At most
//! `FORMS_EXPORT_MAX_CONCURRENT` exports stream at once (more are refused with 429), and a
//! client that takes no chunk for `FORMS_HTTP_SEND_TIMEOUT_SECONDS`, or goes away, ends
//! the transaction and frees the connection.

pub mod csv_format;

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use tokio::sync::{mpsc, oneshot};

use crate::app::AppState;
use crate::auth;
use crate::clock::format_timestamp;
use crate::db::models::SubmissionRow;
use crate::db::submissions::SubmissionFilter;
use crate::db::{self, DbError};
use crate::error::ApiError;
use crate::model::ids::EndpointId;
use crate::model::search::{FieldValue, SearchWords};
use crate::model::spam::SubmissionFolder;

const PAGE: i64 = 500;

pub fn routes() -> Router<AppState> {
    Router::new().route("/submissions/export", get(export))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Csv,
}

fn parse_time(
    params: &HashMap<String, String>,
    name: &str,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    match params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map(|time| Some(time.with_timezone(&Utc)))
            .map_err(|_| ApiError::InvalidInput {
                field: name.into(),
                reason: "must be an RFC 3339 date-time".into(),
            }),
    }
}

fn request(params: &HashMap<String, String>) -> Result<(Format, SubmissionFilter), ApiError> {
    let format = match params.get("format").map(String::as_str) {
        None | Some("json") => Format::Json,
        Some("csv") => Format::Csv,
        Some(other) => {
            return Err(ApiError::UnsupportedExportFormat {
                received: other.chars().take(32).collect(),
                supported: &["json", "csv"],
            })
        }
    };
    let received_after = parse_time(params, "received_after")?;
    let received_before = parse_time(params, "received_before")?;
    if crate::clock::is_empty_range(received_after, received_before) {
        return Err(ApiError::InvalidTimeRange);
    }
    let folder = match params.get("folder").map(String::as_str) {
        None | Some("") | Some("inbox") => SubmissionFolder::Inbox,
        Some("spam") => SubmissionFolder::Spam,
        Some("all") => SubmissionFolder::All,
        Some(_) => {
            return Err(ApiError::InvalidInput {
                field: "folder".into(),
                reason: "inbox, spam or all".into(),
            })
        }
    };
    let search = params
        .get("search")
        .map(|raw| SearchWords::parse(raw).map_err(|e| ApiError::search_refused("search", e)))
        .transpose()?;
    let value = params
        .get("value")
        .map(|raw| FieldValue::parse(raw).map_err(|e| ApiError::search_refused("value", e)))
        .transpose()?;
    let filter = match params.get("endpoint_id").filter(|v| !v.is_empty()) {
        None => SubmissionFilter {
            project: None,
            endpoint_id: None,
            folder,
            received_after,
            received_before,
            search,
            value,
        },
        Some(raw) => match EndpointId::parse(raw) {
            Some(endpoint_id) => SubmissionFilter {
                project: None,
                endpoint_id: Some(endpoint_id),
                folder,
                received_after,
                received_before,
                search,
                value,
            },
            // No endpoint can have such an id: an empty export, as for an unknown one.
            None => SubmissionFilter::nothing(),
        },
    };
    Ok((format, filter))
}

async fn export(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    // An export takes every submission's fields out at once: not for a read key.
    let authorized = auth::authenticate_headers(&app.db, &headers, app.clock.now())
        .await
        .and_then(|key| key.require_admin().map(|()| key));
    let key = match authorized {
        Ok(key) => key,
        Err(error) => return error.into_response(),
    };
    let (format, mut filter) = match request(&params) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    // Only what the key sees: another project's endpoint exports as an unknown one does.
    filter.project = key.view.clone();
    // Recorded before anything goes out: an export that fails later is still on record.
    let address = crate::http::client_address(
        peer.ip(),
        &headers,
        app.config.rate_limit.trusted_proxy_hops,
    );
    let arguments = serde_json::Value::Object(
        params
            .iter()
            .map(|(name, value)| (name.clone(), serde_json::Value::String(value.clone())))
            .collect(),
    );
    // The entry belongs to the project of the endpoint exported, when one is named.
    let project = match (&key.view, &filter.endpoint_id) {
        (Some(view), _) => Some(view.clone()),
        (None, Some(endpoint)) => {
            let owner = app
                .db
                .run(async |conn| {
                    db::projects::owner_of(conn, db::projects::Owned::Endpoint(endpoint)).await
                })
                .await;
            match owner {
                Ok(owner) => owner,
                Err(error) => return ApiError::from(error).into_response(),
            }
        }
        (None, None) => None,
    };
    let read = crate::audit::Read {
        key: &key,
        address: &address,
        operation: "export",
        targets: filter.endpoint_id.iter().map(ToString::to_string).collect(),
        arguments,
        project,
        at: app.clock.now(),
    };
    if let Err(error) = app.audit.record_read(read).await {
        return ApiError::from(error).into_response();
    }
    let Ok(slot) = app.exports.clone().try_acquire_owned() else {
        return ApiError::TooManyExports {
            limit: app.config.export_max_concurrent,
        }
        .into_response();
    };
    // A snapshot a little behind the primary is as good a copy: the replica's, while it is
    // within its lag.
    let connection = match app.export_connection().connect().await {
        Ok(connection) => connection,
        Err(error) => return ApiError::from(error).into_response(),
    };
    let (verdict_sender, verdict) = oneshot::channel();
    let (chunks, body) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let limits = Limits {
        submissions: app.config.export_max_submissions,
        send_timeout: app.config.http.send_timeout,
        call_timeout: app.config.database.call_timeout(),
    };
    tokio::spawn(async move {
        let mut connection = connection;
        stream(
            &mut connection,
            filter,
            format,
            limits,
            verdict_sender,
            chunks,
        )
        .await;
        // The connection closes here, with the export's slot.
        drop(slot);
    });
    match verdict.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return error.into_response(),
        Err(_) => return ApiError::Internal("the export task ended early".into()).into_response(),
    }
    let (extension, content_type) = match format {
        Format::Json => ("json", "application/json; charset=utf-8"),
        Format::Csv => ("csv", "text/csv; charset=utf-8"),
    };
    let filename = format!(
        "attachment; filename=\"hymical-submissions-{}.{extension}\"",
        app.clock.now().format("%Y-%m-%d")
    );
    let stream = futures_util::stream::unfold(body, |mut body| async move {
        body.recv().await.map(|chunk| (chunk, body))
    });
    let mut response = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(value) = HeaderValue::from_str(&filename) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// What bounds one export.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// More matching submissions than this: refused.
    submissions: u64,
    /// A client that takes no chunk for this long is given up on.
    send_timeout: std::time::Duration,
    /// One database read may take this long.
    call_timeout: std::time::Duration,
}

/// Why streaming stopped early.
enum Stop {
    Database(diesel::result::Error),
    /// The database did not answer within the call deadline.
    Deadline,
    /// The client went away or stopped reading, or the export was refused before it began.
    Ended,
}

impl From<diesel::result::Error> for Stop {
    fn from(error: diesel::result::Error) -> Self {
        Stop::Database(error)
    }
}

async fn stream(
    connection: &mut AsyncPgConnection,
    filter: SubmissionFilter,
    format: Format,
    limits: Limits,
    verdict: oneshot::Sender<Result<(), ApiError>>,
    chunks: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let limit = limits.submissions;
    let mut verdict = Some(verdict);
    let result = connection
        .build_transaction()
        .repeatable_read()
        .read_only()
        .run(async |conn| {
            let count = bounded(limits, db::submissions::count(conn, &filter)).await? as u64;
            if count > limit {
                if let Some(verdict) = verdict.take() {
                    let _ = verdict.send(Err(ApiError::ExportTooLarge { limit, count }));
                }
                return Err(Stop::Ended);
            }
            // CSV needs every field name for its header before the first row.
            let csv_header = match format {
                Format::Csv => Some(csv_format::header(
                    &field_names(conn, &filter, limits).await?,
                )),
                Format::Json => None,
            };
            if let Some(verdict) = verdict.take() {
                let _ = verdict.send(Ok(()));
            }
            let send = |bytes: Vec<u8>| {
                let chunks = chunks.clone();
                async move {
                    match tokio::time::timeout(
                        limits.send_timeout,
                        chunks.send(Ok(Bytes::from(bytes))),
                    )
                    .await
                    {
                        Ok(Ok(())) => Ok(()),
                        // Gone, or not reading: either way nobody will take the rest.
                        Ok(Err(_)) | Err(_) => Err(Stop::Ended),
                    }
                }
            };
            let names = match &csv_header {
                Some((bytes, names)) => {
                    send(bytes.clone()).await?;
                    names.clone()
                }
                None => {
                    send(b"{\"submissions\":[".to_vec()).await?;
                    Vec::new()
                }
            };
            let mut after = None;
            let mut first = true;
            loop {
                let rows = page(conn, &filter, after.take(), limits).await?;
                let Some(last) = rows.last() else { break };
                after = Some((last.received_at, last.id.to_string()));
                let chunk = match format {
                    Format::Json => json_rows(&rows, &mut first),
                    Format::Csv => csv_format::rows(&rows, &names),
                };
                send(chunk).await?;
                if (rows.len() as i64) < PAGE {
                    break;
                }
            }
            if format == Format::Json {
                send(b"]}".to_vec()).await?;
            }
            Ok(())
        })
        .await;
    let failure = match result {
        Ok(()) | Err(Stop::Ended) => None,
        Err(Stop::Database(error)) => Some(DbError::Query(error)),
        Err(Stop::Deadline) => Some(DbError::Deadline(limits.call_timeout)),
    };
    let Some(failure) = failure else {
        return;
    };
    match verdict.take() {
        Some(verdict) => {
            let _ = verdict.send(Err(ApiError::from(failure)));
        }
        None => {
            // The status is already sent: break the body so the client sees a failed
            // transfer rather than a document that looks complete.
            tracing::error!(error = %failure.summary(), "export failed mid-stream");
            let _ = chunks
                .send(Err(std::io::Error::other("export failed")))
                .await;
        }
    }
}

/// A database read of the export, within the call deadline.
async fn bounded<T>(
    limits: Limits,
    read: impl std::future::Future<Output = Result<T, DbError>>,
) -> Result<T, Stop> {
    match tokio::time::timeout(limits.call_timeout, read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(DbError::Query(error))) => Err(Stop::Database(error)),
        Ok(Err(_)) => Err(Stop::Ended),
        Err(_) => Err(Stop::Deadline),
    }
}

async fn page(
    conn: &mut AsyncPgConnection,
    filter: &SubmissionFilter,
    after: Option<(DateTime<Utc>, String)>,
    limits: Limits,
) -> Result<Vec<SubmissionRow>, Stop> {
    bounded(limits, db::submissions::page(conn, filter, after, PAGE)).await
}

/// Field names in order of first appearance over the whole export (newest first).
async fn field_names(
    conn: &mut AsyncPgConnection,
    filter: &SubmissionFilter,
    limits: Limits,
) -> Result<Vec<String>, Stop> {
    let mut names = indexmap::IndexSet::new();
    let mut after = None;
    loop {
        let rows = page(conn, filter, after.take(), limits).await?;
        let Some(last) = rows.last() else { break };
        after = Some((last.received_at, last.id.to_string()));
        for row in &rows {
            if let Some(object) = row.fields.as_object() {
                names.extend(object.keys().cloned());
            }
        }
        if (rows.len() as i64) < PAGE {
            break;
        }
    }
    Ok(names.into_iter().collect())
}

fn json_rows(rows: &[SubmissionRow], first: &mut bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * 256);
    for row in rows {
        if !std::mem::take(first) {
            out.push(b',');
        }
        let item = serde_json::json!({
            "id": row.id,
            "endpoint_id": row.endpoint_id,
            "received_at": format_timestamp(row.received_at),
            "fields": row.fields,
        });
        let _ = serde_json::to_writer(&mut out, &item);
    }
    out
}
