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
            ApiError::FileStorageUnavailable(what) => {
                tracing::error!(error = %what, "file storage unavailable")
            }
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use async_graphql::ErrorExtensions;

    use super::*;
    use crate::db::DbError;

    /// What the log received, line by line.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    #[test]
    fn an_operations_storage_failures_are_one_line() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        // Another test's thread may have registered these callsites while no subscriber
        // of its own wanted them: their cached interest is computed again with this one.
        tracing::callsite::rebuild_interest_cache();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        // Forty fields of one operation fail on an exhausted share of the pool.
        runtime.block_on(logging_storage_once(async {
            for _ in 0..40 {
                let _ = ApiError::from(DbError::ShareExhausted).extend();
            }
        }));
        let lines = captured.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("storage unavailable"), "{lines:?}");
        assert!(lines[0].contains("failed_fields=40"), "{lines:?}");
        // Outside an operation each failure is its own line, as before.
        let _ = ApiError::from(DbError::Unreachable).extend();
        assert_eq!(captured.lines().len(), 2);
        // An operation without storage failures writes nothing.
        runtime.block_on(logging_storage_once(async {}));
        assert_eq!(captured.lines().len(), 2);
    }
}
