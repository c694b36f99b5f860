//! The process's one `LISTEN` connection: notifications from every process reach this
//! one, which hands them to in-process subscribers.

use std::time::Duration;

use diesel_async::RunQueryDsl;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::ConnectionSettings;

/// Notified when a delivery became due now (a submission accepted, a replay): wakes the
/// workers. The statements in `sql/` name these channels literally; a test holds them to
/// these constants.
pub const DELIVERY_DUE: &str = "hymical_delivery_due";
/// Notified by every event write: wakes the event readers.
pub const DELIVERY_EVENT: &str = "hymical_delivery_event";
/// Notified with an endpoint's id by every change of it: drops intake's cached copy.
pub const ENDPOINT_CHANGED: &str = "hymical_endpoint_changed";
/// Notified with an audit entry's id when it commits: wakes the audit subscriptions.
pub const AUDIT_ENTRY: &str = "hymical_audit_entry";

/// Listens on `channels` until `shutdown`, reconnecting after failures. `on_notification`
/// gets each notification's channel and payload; after every (re)connection it is also
/// called with `None`, because anything sent while the connection was down was missed.
pub async fn run(
    settings: ConnectionSettings,
    channels: &'static [&'static str],
    on_notification: impl Fn(Option<(&str, &str)>) + Send + Sync + 'static,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let session = async {
            let mut connection = settings.connect().await.map_err(|e| e.to_string())?;
            for channel in channels {
                diesel::sql_query(format!("LISTEN {channel}"))
                    .execute(&mut connection)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(connection)
        };
        let mut connection = tokio::select! {
            connected = session => match connected {
                Ok(connection) => connection,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for notifications; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        backoff = Duration::from_millis(100);
        on_notification(None);
        let mut notifications = std::pin::pin!(connection.notifications_stream());
        loop {
            tokio::select! {
                next = notifications.next() => match next {
                    Some(Ok(notification)) => {
                        on_notification(Some((&notification.channel, &notification.payload)));
                    }
                    Some(Err(error)) => {
                        tracing::warn!(error = %error, "notification connection failed; reconnecting");
                        break;
                    }
                    None => {
                        tracing::warn!("notification connection closed; reconnecting");
                        break;
                    }
                },
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every channel a statement notifies is one of the constants above.
    #[test]
    fn statements_notify_only_the_known_channels() {
        let statements = [
            include_str!("sql/outbox_insert_batch.sql"),
            include_str!("sql/replay_requeue.sql"),
            include_str!("sql/write_events.sql"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for text in statements {
            for (at, _) in text.match_indices("pg_notify('") {
                let rest = &text[at + "pg_notify('".len()..];
                let channel = &rest[..rest.find('\'').expect("closing quote")];
                assert!(
                    [super::DELIVERY_DUE, super::DELIVERY_EVENT].contains(&channel),
                    "{channel}"
                );
                seen.insert(channel);
            }
        }
        assert_eq!(seen.len(), 2);
    }
}
