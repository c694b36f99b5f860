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
/// its configuration says), and without it every other `FORMS_S3_*` is an error (set for
/// nothing, it would leave files in PostgreSQL unnoticed).
fn read_s3(r: &mut Reader) -> Option<S3Config> {
    const OTHERS: [&str; 5] = [
        "FORMS_S3_ENDPOINT",
        "FORMS_S3_REGION",
        "FORMS_S3_ACCESS_KEY_ID",
        "FORMS_S3_SECRET_ACCESS_KEY",
        "FORMS_S3_PATH_STYLE",
    ];
    let bucket = r.raw("FORMS_S3_BUCKET");
    let endpoint = r.raw("FORMS_S3_ENDPOINT");
    let region = r.raw("FORMS_S3_REGION");
    let access_key_id = r.raw("FORMS_S3_ACCESS_KEY_ID");
    let secret_access_key = r.secret("FORMS_S3_SECRET_ACCESS_KEY", 1);
    let path_style = r.boolean("FORMS_S3_PATH_STYLE", false);
    let Some(bucket) = bucket else {
        for name in OTHERS {
            if r.raw(name).is_some() && !r.failed(&[name]) {
                r.fail(
                    name,
                    "set without FORMS_S3_BUCKET".into(),
                    "only with FORMS_S3_BUCKET (object storage for uploaded files)",
                );
            }
        }
        return None;
    };
    let missing: Vec<&str> = [
        ("FORMS_S3_ENDPOINT", endpoint.is_none()),
        ("FORMS_S3_ACCESS_KEY_ID", access_key_id.is_none()),
        (
            "FORMS_S3_SECRET_ACCESS_KEY",
            secret_access_key.is_none() && !r.failed(&["FORMS_S3_SECRET_ACCESS_KEY"]),
        ),
    ]
    .into_iter()
    .filter_map(|(name, unset)| unset.then_some(name))
    .collect();
    if !missing.is_empty() {
        r.fail(
            "FORMS_S3_BUCKET",
            format!("set without {}", missing.join(", ")),
            "with FORMS_S3_BUCKET, set FORMS_S3_ENDPOINT, FORMS_S3_ACCESS_KEY_ID and FORMS_S3_SECRET_ACCESS_KEY",
        );
    }
    let endpoint = match endpoint {
        None => String::new(),
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
    Some(S3Config {
        endpoint,
        bucket: bucket.trim().to_string(),
        region: region.map_or_else(|| "us-east-1".to_string(), |r| r.trim().to_string()),
        access_key_id: access_key_id.unwrap_or_default().trim().to_string(),
        secret_access_key: secret_access_key.unwrap_or_else(|| Secret::new("")),
        path_style,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(vars: &[(&str, &str)]) -> Result<Config, crate::config::ConfigErrors> {
        Config::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn object_storage_with_everything_it_needs() {
        let all = [
            ("FORMS_S3_BUCKET", "forms"),
            ("FORMS_S3_ENDPOINT", "http://127.0.0.1:9000/"),
            ("FORMS_S3_ACCESS_KEY_ID", "id"),
            ("FORMS_S3_SECRET_ACCESS_KEY", "hunter2"),
            ("FORMS_S3_PATH_STYLE", "true"),
        ];
        let s3 = load(&all).unwrap().files.s3.unwrap();
        assert_eq!(s3.endpoint, "http://127.0.0.1:9000");
        assert_eq!(s3.region, "us-east-1");
        assert!(s3.path_style);
        let errors = load(&[
            ("FORMS_S3_BUCKET", "forms"),
            ("FORMS_S3_ENDPOINT", "s3.example.com"),
            ("FORMS_S3_ACCESS_KEY_ID", "id"),
            ("FORMS_S3_SECRET_ACCESS_KEY", "hunter2"),
        ])
        .unwrap_err()
        .0;
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].variable, "FORMS_S3_ENDPOINT");
        assert!(!errors[0].to_string().contains("hunter2"));
        let defaults = load(&[]).unwrap().files;
        assert!(defaults.s3.is_none());
        assert_eq!(defaults.public_url, "http://127.0.0.1:8080");
        assert_eq!(defaults.link_ttl.as_secs(), 604_800);
        let public = load(&[("FORMS_PUBLIC_URL", "https://forms.example.com/")]).unwrap();
        assert_eq!(public.files.public_url, "https://forms.example.com");
    }
}
