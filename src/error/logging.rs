//! Server-side failures in the log: by kind only (driver messages can quote submitted
//! values), and a storage failure once per operation however many of its fields failed.

use super::ApiError;

impl ApiError {
    /// Server-side failures are logged here, once, by kind only: driver messages can quote
    /// submitted values, so they never reach a log line or a client. Inside
    /// [`logging_storage_once`], storage failures are gathered into one line instead.
    pub(super) fn log(&self) {
        match self {
            ApiError::StorageUnavailable(error) => {
                let summary = error.summary();
                let gathered = OPERATION_STORAGE_FAILURES
                    .try_with(|failures| failures.record(&summary))
                    .is_ok();
                if !gathered {
                    tracing::error!(error = %summary, "storage unavailable");
                }
            }
            ApiError::Internal(what) => tracing::error!(error = %what, "internal error"),
            _ => {}
        }
    }
}

tokio::task_local! {
    static OPERATION_STORAGE_FAILURES: StorageFailures;
}

/// The storage failures of one operation: the first one's summary and how many.
#[derive(Default)]
struct StorageFailures {
    first: std::sync::OnceLock<String>,
    count: std::sync::atomic::AtomicUsize,
}

impl StorageFailures {
    fn record(&self, summary: &str) {
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self.first.set(summary.to_string());
    }
}

/// Runs one operation (a GraphQL request, whose fields may each fail on their own) so that
/// its storage failures are logged as one line when it ends, however many fields failed:
/// an exhausted pool is one fact, not a line per field.
pub async fn logging_storage_once<F: std::future::Future>(operation: F) -> F::Output {
    OPERATION_STORAGE_FAILURES
        .scope(StorageFailures::default(), async {
            let output = operation.await;
            OPERATION_STORAGE_FAILURES.with(|failures| {
                if let Some(first) = failures.first.get() {
                    let failed_fields = failures.count.load(std::sync::atomic::Ordering::Relaxed);
                    tracing::error!(error = %first, failed_fields, "storage unavailable");
                }
            });
            output
        })
        .await
}
