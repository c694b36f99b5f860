//! Claiming at intake: the way a process's intake hands deliveries it wrote already
//! claimed to the same process's worker (docs/delivery.md).
//!
//! At light load most of a delivery's wait from the `202` to its request is the claim's
//! own commit (a second WAL flush after intake's). When this process's worker has a free
//! request slot and its last claim found nothing else due, intake takes the slot before
//! its batch statement, the statement writes the delivery claimed (when the endpoint's
//! claim lock, cap and queue allow, as any claim), and after the commit the delivery and
//! its slot go to the worker, which sends it as if its own loop had claimed it. Under a
//! backlog the worker's claims come back full, so intake takes no slots and the queue is
//! served in its order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::db::models::ClaimedDelivery;
use crate::db::submissions::IntakeClaim;
use crate::db::{queue, Db};

/// A claimed delivery with the request slot it runs in.
pub type Started = (ClaimedDelivery, OwnedSemaphorePermit);

/// The intake side: reserves slots, passes claimed deliveries on.
#[derive(Clone)]
pub struct Handoff {
    slots: Arc<Semaphore>,
    caught_up: Arc<AtomicBool>,
    stopping: CancellationToken,
    sender: mpsc::UnboundedSender<Started>,
    lease: std::time::Duration,
    endpoint_concurrency: u32,
    batch_size: usize,
}

/// Slots taken for one intake batch; those not used go back when it is dropped.
pub struct Reservation {
    permits: Vec<OwnedSemaphorePermit>,
    claim: IntakeClaim,
    sender: Option<mpsc::UnboundedSender<Started>>,
}

impl Handoff {
    /// `slots`: the worker's request slots; `caught_up`: whether its last claim found
    /// less than it asked for (nothing else due); `stopping`: the worker's shutdown.
    pub fn new(
        slots: Arc<Semaphore>,
        caught_up: Arc<AtomicBool>,
        config: &WorkerConfig,
        stopping: CancellationToken,
    ) -> (Handoff, mpsc::UnboundedReceiver<Started>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (
            Handoff {
                slots,
                caught_up,
                stopping,
                sender,
                lease: config.lease,
                endpoint_concurrency: config.endpoint_concurrency,
                batch_size: config.batch_size as usize,
            },
            receiver,
        )
    }

    /// Takes up to `wanted` free slots (at most the worker's batch size), none while the
    /// worker has a backlog of its own or is stopping.
    pub fn reserve(&self, wanted: usize) -> Reservation {
        let wanted = wanted.min(self.batch_size);
        if wanted == 0 || self.stopping.is_cancelled() || !self.caught_up.load(Ordering::Acquire) {
            return Reservation::none();
        }
        let permits = take_slots(&self.slots, wanted);
        Reservation {
            claim: IntakeClaim {
                limit: permits.len() as u32,
                lease: self.lease,
                endpoint_concurrency: self.endpoint_concurrency,
            },
            permits,
            sender: Some(self.sender.clone()),
        }
    }
}

impl Reservation {
    /// No slots: the batch claims nothing.
    pub fn none() -> Reservation {
        Reservation {
            permits: Vec::new(),
            claim: IntakeClaim::NONE,
            sender: None,
        }
    }

    /// What the batch statement may claim.
    pub fn claim(&self) -> IntakeClaim {
        self.claim
    }

    /// Passes a delivery the statement claimed to the worker with one of the slots.
    /// Returns it when the worker is gone (stopped meanwhile) or, impossibly, the
    /// statement claimed more than was reserved: the caller hands the claim back.
    pub fn start(&mut self, delivery: ClaimedDelivery) -> Option<ClaimedDelivery> {
        let (Some(sender), Some(permit)) = (&self.sender, self.permits.pop()) else {
            return Some(delivery);
        };
        sender
            .send((delivery, permit))
            .err()
            .map(|mpsc::error::SendError((delivery, _))| delivery)
    }
}

/// Up to `wanted` of the free request slots, without waiting.
pub fn take_slots(slots: &Arc<Semaphore>, wanted: usize) -> Vec<OwnedSemaphorePermit> {
    (0..wanted)
        .map_while(|_| slots.clone().try_acquire_owned().ok())
        .collect()
}

/// Gives back a claim whose request never started (a stopping worker, a worker gone
/// before intake could pass it on): pending again, if the claim is still the holder's.
pub async fn hand_back(db: &Db, delivery: &ClaimedDelivery) {
    let result = db
        .run(async |conn| queue::hand_back(conn, &delivery.id, &delivery.claim_token).await)
        .await;
    match result {
        Ok(true) => {
            tracing::info!(delivery_id = %delivery.id, "handed back an unstarted claim")
        }
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(delivery_id = %delivery.id, error = %error.summary(), "could not hand back a claim; its lease will expire")
        }
    }
}
