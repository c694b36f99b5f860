//! Executing subscriptions for many sockets at once.
//!
//! A dashboard fleet opens the same live subscription many times. Resolving and
//! serialising every event once per socket would cost most of the CPU at a thousand
//! subscribers, so identical live subscriptions of a process (same document, operation and
//! variables, no `afterEventId`) share one execution: each event is resolved and rendered
//! to JSON text once, and every member only frames and sends it. A member that falls too
//! far behind leaves the group and continues on an execution of its own that resumes after
//! the last event it received, so it still gets every event once, in order.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::parser::types::{OperationType, Selection};
use futures_util::{FutureExt, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::broadcast;

use super::subscription::{EventCursor, ResumeAfter};
use super::FormsSchema;
use crate::model::ids::ProjectId;

/// One execution result, rendered once for every socket that shows it.
#[derive(Clone, Debug)]
pub enum Rendered {
    /// An execution result as JSON text, and the event it shows (if it shows one).
    Result {
        payload: Arc<str>,
        event_id: Option<i64>,
    },
    /// The document did not parse or validate: the errors as a JSON array.
    RequestError(Arc<str>),
}

/// The parts of a GraphQL request over WebSocket, kept so that the request can be made
/// again (a member leaving its group resumes on a request of its own).
#[derive(Clone, Debug)]
pub struct Operation {
    pub query: String,
    pub operation_name: Option<String>,
    /// A JSON object, or null.
    pub variables: Value,
}

impl Operation {
    pub fn request(&self) -> async_graphql::Request {
        let mut request = async_graphql::Request::new(self.query.clone());
        if let Some(name) = &self.operation_name {
            request = request.operation_name(name.clone());
        }
        if self.variables.is_object() {
            request =
                request.variables(async_graphql::Variables::from_json(self.variables.clone()));
        }
        request
    }

    /// The key under which identical live subscriptions share an execution, or `None`
    /// when this one cannot share: not a subscription, anything but a single
    /// `deliveryStateChanged` field, or an `afterEventId` (its replay is its own). Only
    /// subscriptions that see the same projects (`view`: one project, or every project)
    /// share: what an execution sends depends on it.
    pub fn group_key(&self, view: Option<&ProjectId>) -> Option<String> {
        let document = async_graphql::parser::parse_query(&self.query).ok()?;
        let mut operations = document.operations.iter();
        let operation = match &self.operation_name {
            Some(name) => {
                operations
                    .find(|(op_name, _)| op_name.map(|n| n.as_str()) == Some(name.as_str()))?
                    .1
            }
            None => {
                let (_, operation) = operations.next()?;
                if operations.next().is_some() {
                    return None;
                }
                operation
            }
        };
        if operation.node.ty != OperationType::Subscription {
            return None;
        }
        let [item] = operation.node.selection_set.node.items.as_slice() else {
            return None;
        };
        let Selection::Field(field) = &item.node else {
            return None;
        };
        if field.node.name.node.as_str() != "deliveryStateChanged" {
            return None;
        }
        let resumes = field.node.arguments.iter().any(|(name, value)| {
            name.node.as_str() == "afterEventId"
                && value
                    .node
                    .clone()
                    .into_const_with(|variable| {
                        async_graphql::Value::from_json(self.variables[variable.as_str()].clone())
                    })
                    .map_or(true, |value| value != async_graphql::Value::Null)
        });
        if resumes {
            return None;
        }
        serde_json::to_string(&(&self.query, &self.operation_name, &self.variables, view)).ok()
    }
}

/// Executes `request` and renders each result once, noting which event it shows;
/// `cursor` follows the execution (see [`EventCursor`]).
pub fn render(
    schema: &FormsSchema,
    request: async_graphql::Request,
    cursor: Arc<EventCursor>,
) -> impl Stream<Item = Rendered> + Send + 'static {
    // A response is GraphQL values with string keys, which always serialize.
    const RESPONSES_ARE_JSON: &str = "a GraphQL response is JSON";
    let request = request.data(cursor.clone());
    schema
        .execute_stream(request)
        .enumerate()
        .map(move |(index, response)| {
            // A request error (the document did not parse or validate) has no path.
            let request_error = index == 0
                && !response.errors.is_empty()
                && response.errors.iter().all(|error| error.path.is_empty())
                && response.data == async_graphql::Value::Null;
            if request_error {
                let errors = serde_json::to_string(&response.errors).expect(RESPONSES_ARE_JSON);
                return Rendered::RequestError(errors.into());
            }
            let payload = serde_json::to_string(&response).expect(RESPONSES_ARE_JSON);
            // Results are produced one at a time: the cursor is this result's event (an
            // error result shows none).
            let event = cursor.current.load(Ordering::SeqCst);
            Rendered::Result {
                payload: payload.into(),
                event_id: (event >= 0 && response.errors.is_empty()).then_some(event),
            }
        })
}

/// Results a member may fall behind before it leaves its group.
const GROUP_BACKLOG: usize = 1_024;
/// How often a group without members notices and stops.
const MEMBERSHIP_CHECK: Duration = Duration::from_secs(1);

/// The shared executions of this process, by [`Operation::group_key`].
pub struct Groups {
    groups: Mutex<HashMap<String, Arc<Group>>>,
    backlog: usize,
}

impl Default for Groups {
    fn default() -> Self {
        Groups::with_backlog(GROUP_BACKLOG)
    }
}

/// Results rendered together: a burst of events reaches each member as one batch, which
/// it writes to its socket with one flush.
type RenderedBatch = Arc<[Rendered]>;

/// Results a group gathers into one batch at most.
const BATCH_LIMIT: usize = 256;

struct Group {
    /// `None` once the execution ended.
    sender: broadcast::Sender<Option<RenderedBatch>>,
    /// Where the execution has got to.
    cursor: Arc<EventCursor>,
}

/// A member's place in a group.
pub struct Membership {
    group: Arc<Group>,
    receiver: broadcast::Receiver<Option<RenderedBatch>>,
    /// Events up to this one were shown before the member joined.
    joined_after: i64,
}

impl Groups {
    /// Groups whose members may fall `backlog` results behind (tests use a tiny one).
    pub fn with_backlog(backlog: usize) -> Groups {
        Groups {
            groups: Mutex::new(HashMap::new()),
            backlog,
        }
    }

    /// How many shared executions are running.
    #[cfg(any(test, feature = "testing"))]
    pub fn running(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Group>>> {
        self.groups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Joins the group of `key`, starting its execution of `request` if there is none.
    pub fn join(
        self: &Arc<Self>,
        key: String,
        schema: &FormsSchema,
        request: impl FnOnce() -> async_graphql::Request,
    ) -> Membership {
        let mut groups = self.lock();
        if let Some(group) = groups.get(&key) {
            // Under the lock: the group cannot stop between these two.
            let joined_after = group.cursor.current.load(Ordering::SeqCst);
            return Membership {
                group: group.clone(),
                receiver: group.sender.subscribe(),
                joined_after,
            };
        }
        let (sender, receiver) = broadcast::channel(self.backlog);
        let cursor = Arc::new(EventCursor::default());
        let group = Arc::new(Group {
            sender,
            cursor: cursor.clone(),
        });
        groups.insert(key.clone(), group.clone());
        tokio::spawn(run_group(
            self.clone(),
            key,
            group.clone(),
            render(schema, request(), cursor),
        ));
        Membership {
            group,
            receiver,
            joined_after: -1,
        }
    }

    /// Removes the group if it has no member left; decides under the lock joins take.
    fn leave_if_empty(&self, key: &str, group: &Group) -> bool {
        let mut groups = self.lock();
        if group.sender.receiver_count() == 0 {
            groups.remove(key);
            true
        } else {
            false
        }
    }
}

async fn run_group(
    groups: Arc<Groups>,
    key: String,
    group: Arc<Group>,
    rendered: impl Stream<Item = Rendered> + Send + 'static,
) {
    let mut rendered = std::pin::pin!(rendered);
    let mut check = tokio::time::interval(MEMBERSHIP_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            next = rendered.next() => match next {
                Some(item) => {
                    // Whatever else is rendered already goes in the same batch.
                    let mut batch = vec![item];
                    let mut ended = false;
                    while batch.len() < BATCH_LIMIT {
                        match rendered.next().now_or_never() {
                            Some(Some(item)) => batch.push(item),
                            Some(None) => {
                                ended = true;
                                break;
                            }
                            None => break,
                        }
                    }
                    // No receiver left is not an error: the check below ends the group.
                    let _ = group.sender.send(Some(batch.into()));
                    if ended {
                        break;
                    }
                }
                None => break,
            },
            _ = check.tick() => {
                if groups.leave_if_empty(&key, &group) {
                    return;
                }
            }
        }
    }
    // The execution ended: new subscribers start a new one, members are told.
    let mut map = groups.lock();
    map.remove(&key);
    let _ = group.sender.send(None);
}

/// What a member shows, and how it resumes alone after falling behind.
pub fn member_stream(
    membership: Membership,
    resume: impl FnOnce() -> async_graphql::Request + Send + 'static,
    schema: FormsSchema,
) -> impl Stream<Item = Rendered> + Send + 'static {
    async_stream::stream! {
        let Membership { group, mut receiver, joined_after } = membership;
        let mut last = joined_after;
        loop {
            match receiver.recv().await {
                Ok(Some(batch)) => {
                    for item in batch.iter() {
                        if let Rendered::Result { event_id: Some(id), .. } = item {
                            if *id <= last {
                                continue;
                            }
                            last = *id;
                        }
                        let ends = matches!(item, Rendered::RequestError(_));
                        yield item.clone();
                        if ends {
                            return;
                        }
                    }
                }
                Ok(None) | Err(broadcast::error::RecvError::Closed) => return,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    drop(receiver);
                    // Resume after the last event shown to this member, or after where the
                    // group started if it showed none; a group that had not started yet
                    // showed nothing anyone could have missed.
                    let after = if last >= 0 {
                        last
                    } else {
                        group.cursor.started_after.load(Ordering::SeqCst)
                    };
                    let mut request = resume();
                    if after >= 0 {
                        request = request.data(ResumeAfter(after));
                    }
                    let cursor = Arc::new(EventCursor::default());
                    let mut alone = std::pin::pin!(render(&schema, request, cursor));
                    while let Some(item) = alone.next().await {
                        yield item;
                    }
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn operation(query: &str, variables: Value) -> Operation {
        Operation {
            query: query.into(),
            operation_name: None,
            variables,
        }
    }

    #[test]
    fn only_live_single_field_subscriptions_share() {
        let live = "subscription { deliveryStateChanged(states: [FAILED]) { id } }";
        assert!(operation(live, Value::Null).group_key(None).is_some());
        assert_eq!(
            operation(live, Value::Null).group_key(None),
            operation(live, Value::Null).group_key(None)
        );
        let with_variable =
            "subscription($after: ID) { deliveryStateChanged(afterEventId: $after) { id } }";
        assert!(operation(with_variable, json!({}))
            .group_key(None)
            .is_some());
        assert!(operation(with_variable, json!({ "after": null }))
            .group_key(None)
            .is_some());
        assert!(operation(with_variable, json!({ "after": "5" }))
            .group_key(None)
            .is_none());
        for unshared in [
            r#"subscription { deliveryStateChanged(afterEventId: "5") { id } }"#,
            "{ __typename }",
            "subscription { ... on Subscription { deliveryStateChanged { id } } }",
            "subscription { a: deliveryStateChanged { id } b: deliveryStateChanged { id } }",
            "subscription {",
        ] {
            assert!(
                operation(unshared, Value::Null).group_key(None).is_none(),
                "{unshared}"
            );
        }
        // Different variables or documents are different groups.
        let by_endpoint = "subscription($e: ID) { deliveryStateChanged(endpointId: $e) { id } }";
        assert_ne!(
            operation(by_endpoint, json!({ "e": "a" })).group_key(None),
            operation(by_endpoint, json!({ "e": "b" })).group_key(None)
        );
        // Subscribers that see different projects never share what they are sent.
        let project = ProjectId::generate();
        assert_ne!(
            operation(live, Value::Null).group_key(None),
            operation(live, Value::Null).group_key(Some(&project))
        );
        assert_ne!(
            operation(live, Value::Null).group_key(Some(&ProjectId::generate())),
            operation(live, Value::Null).group_key(Some(&project))
        );
    }
}
