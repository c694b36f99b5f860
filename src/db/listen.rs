//! The process's one `LISTEN` connection: notifications from every process reach this
//! one, which hands them to in-process subscribers.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::config::Secret;

/// Listens on `channels` until `shutdown`, reconnecting after failures. `on_notification`
/// gets each notification's channel and payload; after every (re)connection it is also
/// called with `None`, because anything sent while the connection was down was missed.
pub async fn run(
    url: Secret,
    channels: &'static [&'static str],
    on_notification: impl Fn(Option<(&str, &str)>) + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let session = async {
            let mut connection = AsyncPgConnection::establish(url.expose())
                .await
                .map_err(|e| e.to_string())?;
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
                        _ = shutdown.changed() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
            _ = shutdown.changed() => return,
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
                _ = shutdown.changed() => return,
            }
        }
    }
}
