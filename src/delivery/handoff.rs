//! Claiming at intake: the way a process's intake hands deliveries it wrote already
//! claimed to the same process's worker (docs/delivery.md).
//!
//! At light load most of a delivery's wait from the `202` to its request is the claim's
//! own commit (a second WAL flush after intake's). When this process's worker has a free
//! request slot and its last claim found nothing else due, intake takes the slot before
//! its batch statement, the statement writes the delivery claimed (when the endpoint's
//! claim lock, cap and queue allow, as any claim), and after the commit the delivery and
//! its slot go to the worker, which sends it as if its own loop had claimed it. Under a
//! backlog the worker's claims come back full, so intake takes no slots. Slots intake took
//! but did not use go back with a wake-up for the worker, which may have found none free
//! meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::db::models::ClaimedDelivery;
use crate::db::submissions::IntakeClaim;
use crate::db::{queue, Db};
use crate::model::ids::{ClaimToken, DeliveryId};

/// A claimed delivery with the request slot it runs in.
pub type Started = (ClaimedDelivery, OwnedSemaphorePermit);

/// The worker's own claims, as intake sees them: how many have started and how many are
/// running. A claim that ran while an intake batch held endpoints' claim locks may have
/// skipped one of them (a try-lock), so that batch wakes the worker once it is done.
#[derive(Default)]
pub struct ClaimActivity {
    started: AtomicU64,
    running: AtomicUsize,
}

/// One of the worker's claims, running until dropped.
pub struct RunningClaim(Arc<ClaimActivity>);

impl ClaimActivity {
    pub fn begin(self: &Arc<Self>) -> RunningClaim {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.running.fetch_add(1, Ordering::AcqRel);
        RunningClaim(self.clone())
    }

    fn now(&self) -> (u64, usize) {
        (
            self.started.load(Ordering::Acquire),
            self.running.load(Ordering::Acquire),
        )
    }
}

impl Drop for RunningClaim {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The intake side: reserves slots, passes claimed deliveries on.
#[derive(Clone)]
pub struct Handoff {
    slots: Arc<Semaphore>,
    /// The worker's wake-up.
    wake: Arc<Notify>,
    caught_up: Arc<AtomicBool>,
    claims: Arc<ClaimActivity>,
    stopping: CancellationToken,
    sender: mpsc::UnboundedSender<Started>,
    lease: std::time::Duration,
    destination_concurrency: u32,
    batch_size: usize,
    /// Marks the wake-ups this process's intake sends only for other processes' workers.
    wake_mark: Arc<str>,
}

/// Slots taken for one intake batch; those not used go back when it is dropped, and wake
/// the worker, as does a claim of the worker's that overlapped the batch.
pub struct Reservation {
    permits: Vec<OwnedSemaphorePermit>,
    claim: IntakeClaim,
    sender: Option<mpsc::UnboundedSender<Started>>,
    wake: Option<Arc<Notify>>,
    /// The worker's claims when the slots were taken: (activity, started, running).
    claims_then: Option<(Arc<ClaimActivity>, u64, usize)>,
}

impl Handoff {
    /// `slots`: the worker's request slots; `wake`: its wake-up; `caught_up`: whether its
    /// last claim found less than it asked for (nothing else due); `claims`: its claims;
    /// `stopping`: the worker's shutdown; `wake_mark`: the payload of wake-ups meant for
    /// other processes' workers only (see [`IntakeClaim::wake_mark`]).
    pub fn new(
        slots: Arc<Semaphore>,
        wake: Arc<Notify>,
        caught_up: Arc<AtomicBool>,
        claims: Arc<ClaimActivity>,
        config: &WorkerConfig,
        stopping: CancellationToken,
        wake_mark: Arc<str>,
    ) -> (Handoff, mpsc::UnboundedReceiver<Started>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (
            Handoff {
                slots,
                wake,
                caught_up,
                claims,
                stopping,
                sender,
                lease: config.lease,
                destination_concurrency: config.destination_concurrency,
                batch_size: config.batch_size as usize,
                wake_mark,
            },
            receiver,
        )
    }

    /// Whether intake may claim for the worker now: it has nothing else due and is not
    /// stopping.
    pub fn may_claim(&self) -> bool {
        !self.stopping.is_cancelled() && self.caught_up.load(Ordering::Acquire)
    }

    /// Takes up to `wanted` free slots (at most the worker's batch size), none while the
    /// worker has a backlog of its own or is stopping.
    pub fn reserve(&self, wanted: usize) -> Reservation {
        let wanted = wanted.min(self.batch_size);
        if wanted == 0 || !self.may_claim() {
            return Reservation::none();
        }
        let permits = take_slots(&self.slots, wanted);
        let (started, running) = self.claims.now();
        Reservation {
            claims_then: (!permits.is_empty()).then(|| (self.claims.clone(), started, running)),
            claim: IntakeClaim {
                limit: permits.len() as u32,
                lease: self.lease,
                destination_concurrency: self.destination_concurrency,
                wake_mark: Some(self.wake_mark.clone()),
            },
            permits,
            sender: Some(self.sender.clone()),
            wake: Some(self.wake.clone()),
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
            wake: None,
            claims_then: None,
        }
    }

    /// What the batch statement may claim.
    pub fn claim(&self) -> IntakeClaim {
        self.claim.clone()
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

impl Drop for Reservation {
    fn drop(&mut self) {
        let unused = !self.permits.is_empty();
        // Released first, so that the worker finds them when it wakes: its claim may have
        // found no slot free while this batch held them, and slept.
        self.permits.clear();
        // A claim of the worker's that ran while this batch held endpoints' claim locks may
        // have skipped one with work: it looks again. (Other processes' workers are woken
        // by the statement's marked notification.)
        let overlapped = self
            .claims_then
            .as_ref()
            .is_some_and(|(claims, started, running)| *running > 0 || claims.now().0 > *started);
        if unused || overlapped {
            if let Some(wake) = &self.wake {
                wake.notify_one();
            }
        }
    }
}

/// Up to `wanted` of the free request slots, without waiting.
pub fn take_slots(slots: &Arc<Semaphore>, wanted: usize) -> Vec<OwnedSemaphorePermit> {
    (0..wanted)
        .map_while(|_| slots.clone().try_acquire_owned().ok())
        .collect()
}

/// Gives back claims whose requests never started (a stopping worker, a worker gone
/// before intake could pass them on, an intake batch whose answer was lost): pending
/// again, each only where the claim is still its holder's.
pub async fn hand_back<'a>(
    db: &Db,
    claims: impl IntoIterator<Item = (&'a DeliveryId, &'a ClaimToken)>,
) {
    let claims: Vec<_> = claims.into_iter().collect();
    if claims.is_empty() {
        return;
    }
    let result = db
        .run(async |conn| queue::hand_back(conn, &claims).await)
        .await;
    match result {
        Ok(0) => {}
        Ok(handed_back) => tracing::info!(handed_back, "handed back unstarted claims"),
        Err(error) => {
            tracing::warn!(claims = claims.len(), error = %error.summary(), "could not hand back claims; their leases will expire")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::DestinationKind;

    fn handoff(
        slots: &Arc<Semaphore>,
        wake: &Arc<Notify>,
    ) -> (Handoff, mpsc::UnboundedReceiver<Started>) {
        with_claims(slots, wake, &Arc::default())
    }

    fn with_claims(
        slots: &Arc<Semaphore>,
        wake: &Arc<Notify>,
        claims: &Arc<ClaimActivity>,
    ) -> (Handoff, mpsc::UnboundedReceiver<Started>) {
        let config = crate::config::Config::from_lookup(|_| None)
            .expect("defaults")
            .worker;
        Handoff::new(
            slots.clone(),
            wake.clone(),
            Arc::new(AtomicBool::new(true)),
            claims.clone(),
            &config,
            CancellationToken::new(),
            "test".into(),
        )
    }

    fn claimed() -> ClaimedDelivery {
        ClaimedDelivery {
            signing_secret: Some(format!("whsec_{}", "ab".repeat(32))),
            ..ClaimedDelivery::for_test(DestinationKind::Webhook, "https://receiver.example/hook")
        }
    }

    /// A worker whose claim found every slot taken by intake sleeps; the slots intake did
    /// not use must come back with a wake-up, or a delivery left pending meanwhile waits
    /// for the poll.
    #[tokio::test]
    async fn unused_slots_go_back_with_a_wake_up() {
        let slots = Arc::new(Semaphore::new(2));
        let wake = Arc::new(Notify::new());
        let (handoff, _handed) = handoff(&slots, &wake);
        let reservation = handoff.reserve(5);
        assert_eq!(reservation.claim().limit, 2);
        assert_eq!(slots.available_permits(), 0);
        drop(reservation);
        assert_eq!(slots.available_permits(), 2);
        tokio::time::timeout(std::time::Duration::from_secs(1), wake.notified())
            .await
            .expect("the worker is woken");
    }

    /// A reservation whose slots all went to claimed deliveries wakes nobody: the worker
    /// has them already.
    #[tokio::test]
    async fn used_slots_wake_nobody() {
        let slots = Arc::new(Semaphore::new(1));
        let wake = Arc::new(Notify::new());
        let (handoff, mut handed) = handoff(&slots, &wake);
        let mut reservation = handoff.reserve(1);
        assert!(reservation.start(claimed()).is_none());
        drop(reservation);
        let (_, permit) = handed.recv().await.expect("handed over with its slot");
        assert_eq!(slots.available_permits(), 0);
        drop(permit);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), wake.notified())
                .await
                .is_err(),
            "woken for nothing"
        );
    }

    /// A claim of the worker's that ran while the batch held claim locks (started before
    /// the slots were taken, or after) may have skipped an endpoint with work: the
    /// worker is woken once the batch is done, even with every slot used.
    #[tokio::test]
    async fn a_claim_that_overlapped_the_batch_is_told_to_look_again() {
        let woken = async |wake: &Arc<Notify>| {
            tokio::time::timeout(std::time::Duration::from_millis(50), wake.notified())
                .await
                .is_ok()
        };
        for started_before in [true, false] {
            let slots = Arc::new(Semaphore::new(2));
            let wake = Arc::new(Notify::new());
            let claims = Arc::new(ClaimActivity::default());
            let (handoff, mut handed) = with_claims(&slots, &wake, &claims);
            let early = started_before.then(|| claims.begin());
            let mut reservation = handoff.reserve(1);
            match early {
                // Still running when the slots were taken, done before the batch is.
                Some(running) => drop(running),
                // Started and done while the batch ran.
                None => drop(claims.begin()),
            }
            assert!(reservation.start(claimed()).is_none());
            drop(reservation);
            assert!(handed.recv().await.is_some());
            assert!(
                woken(&wake).await,
                "started before the slots: {started_before}"
            );
        }
    }
}
