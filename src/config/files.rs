//! `FORMS_PUBLIC_URL`, `FORMS_FILE_*`, `FORMS_S3_*`: where uploaded files are kept and how
//! the links to them are made (docs/configuration.md, docs/intake.md "Files").

use std::net::SocketAddr;
use std::time::Duration;

use super::reader::{shorten, Reader};
use super::Secret;

#[derive(Debug, Clone)]
pub struct FilesConfig {
    /// The scheme, host and port download links start with, without a trailing `/`.
    pub public_url: String,
    /// How long a link in a webhook or an email works, counted from the submission's
    /// receipt (so every attempt of a delivery sends the same bytes).
    pub link_ttl: Duration,
    /// The longest a request with files may take to arrive, body and all.
    pub upload_timeout: Duration,
    /// How old an upload never attached to a submission must be before the sweeper
    /// removes it: longer than any upload may take.
    pub sweep_grace: Duration,
    /// S3-compatible object storage; `None`: files are kept in PostgreSQL.
    pub s3: Option<S3Config>,
}

#[derive(Debug, Clone)]
pub struct S3Config {
    /// The service's URL (`https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:9000`).
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: Secret,
    /// Requests as `endpoint/bucket/key` rather than `bucket.endpoint/key` (MinIO, moto,
    /// most self-hosted services).
    pub path_style: bool,
}

pub(super) fn read(r: &mut Reader, bind: SocketAddr) -> FilesConfig {
    let public_url = match r.raw("FORMS_PUBLIC_URL") {
        None => format!("http://{bind}"),
        Some(raw) => match url::Url::parse(raw.trim()) {
            Ok(url)
                if matches!(url.scheme(), "http" | "https")
                    && url.host().is_some()
                    && url.query().is_none()
                    && url.fragment().is_none() =>
            {
                raw.trim().trim_end_matches('/').to_string()
            }
            _ => {
                r.fail(
                    "FORMS_PUBLIC_URL",
                    format!("{:?} is not an absolute http(s) URL", shorten(&raw)),
                    "an absolute http or https URL without query or fragment, for example https://forms.example.com",
                );
                String::new()
            }
        },
    };
    let link_ttl = r.integer("FORMS_FILE_LINK_TTL_SECONDS", 604_800, 1, 31_536_000);
    let upload_timeout = r.integer("FORMS_FILE_UPLOAD_TIMEOUT_SECONDS", 600, 1, 86_400);
    let sweep_grace = r.integer("FORMS_FILE_SWEEP_GRACE_SECONDS", 3_600, 1, 604_800);
    if !r.failed(&[
        "FORMS_FILE_UPLOAD_TIMEOUT_SECONDS",
        "FORMS_FILE_SWEEP_GRACE_SECONDS",
    ]) && sweep_grace <= upload_timeout
    {
        // An upload still streaming must never look abandoned to the sweeper.
        r.fail(
            "FORMS_FILE_SWEEP_GRACE_SECONDS",
            format!("{sweep_grace} does not exceed the upload timeout of {upload_timeout} seconds"),
            "must exceed FORMS_FILE_UPLOAD_TIMEOUT_SECONDS",
        );
    }
    FilesConfig {
        public_url,
        link_ttl: Duration::from_secs(link_ttl),
        upload_timeout: Duration::from_secs(upload_timeout),
        sweep_grace: Duration::from_secs(sweep_grace),
        s3: read_s3(r),
    }
}

/// Object storage is on when `FORMS_S3_BUCKET` is set; then the endpoint and both keys
/// are required (no credentials picked up from elsewhere: what the process uses is what
/// its configuration says).
fn read_s3(r: &mut Reader) -> Option<S3Config> {
    let bucket = r.raw("FORMS_S3_BUCKET");
    let endpoint = r.raw("FORMS_S3_ENDPOINT");
    let region = r
        .raw("FORMS_S3_REGION")
        .unwrap_or_else(|| "us-east-1".to_string());
    let access_key_id = r.raw("FORMS_S3_ACCESS_KEY_ID");
    let secret_access_key = r.secret("FORMS_S3_SECRET_ACCESS_KEY", 1);
    let path_style = r.boolean("FORMS_S3_PATH_STYLE", false);
    let bucket = bucket?;
    let missing = |r: &mut Reader, name: &'static str| {
        r.fail(
            name,
            "unset while FORMS_S3_BUCKET is set".into(),
            "required with FORMS_S3_BUCKET",
        );
    };
    let endpoint = match endpoint {
        None => {
            missing(r, "FORMS_S3_ENDPOINT");
            String::new()
        }
        Some(raw) => match url::Url::parse(raw.trim()) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
                raw.trim().trim_end_matches('/').to_string()
            }
            _ => {
                r.fail(
                    "FORMS_S3_ENDPOINT",
                    format!("{:?} is not an absolute http(s) URL", shorten(&raw)),
                    "the object storage's http or https URL, for example https://s3.eu-west-1.amazonaws.com",
                );
                String::new()
            }
        },
    };
    if access_key_id.is_none() {
        missing(r, "FORMS_S3_ACCESS_KEY_ID");
    }
    if secret_access_key.is_none() && !r.failed(&["FORMS_S3_SECRET_ACCESS_KEY"]) {
        missing(r, "FORMS_S3_SECRET_ACCESS_KEY");
    }
    Some(S3Config {
        endpoint,
        bucket: bucket.trim().to_string(),
        region: region.trim().to_string(),
        access_key_id: access_key_id.unwrap_or_default().trim().to_string(),
        secret_access_key: secret_access_key.unwrap_or_else(|| Secret::new("")),
        path_style,
    })
}
