//! Two server processes on one database under steady intake, each endpoint delivering to
//! a webhook and to an email address, a receiver failing at random (500s, no answer,
//! resets), a mail server (aiosmtpd on loopback) deferring every fifth message with 451,
//! and repeated SIGKILLs of a random process with restarts. Afterwards every 202 is stored
//! with exactly one delivery per destination, all delivered; attempt numbers per delivery
//! are 1..n; nothing is left processing; and every email delivery's message reached the
//! mail server, found by the delivery id in its Message-ID. A message may arrive twice (at
//! least once): only for a delivery with more than one attempt recorded, a late attempt,
//! or a sender killed just after the server accepted it; the test counts them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::peers::{Behaviour, HostileReceiver};
use crate::probe;
use support::harness::{endpoint, wait_for_status, ServeProcess, TestDb};
use support::smtp_server::SmtpServer;

/// The servers: `crate::QUICK_DELIVERY` with ten attempts, and mail through the test's
/// SMTP server.
const SERVER: &[(&str, &str)] = &[
    ("FORMS_WEBHOOK_MAX_ATTEMPTS", "10"),
    ("FORMS_SMTP_HOST", "127.0.0.1"),
    ("FORMS_SMTP_TLS", "none"),
    ("FORMS_SMTP_FROM", "Hymical Forms <forms@example.com>"),
    ("FORMS_SMTP_TIMEOUT_SECONDS", "3"),
];

/// The mail server's reply to each DATA in turn: every fifth of the first `messages` is
/// 451 (deferred, retried on the schedule), the others and all after them 250. Bounded
/// and the same on every run; never two deferrals in a row.
fn smtp_script(messages: usize) -> String {
    (0..messages)
        .map(|n| if n % 5 == 2 { "451" } else { "250" })
        .collect::<Vec<_>>()
        .join(",")
}

/// The delivery id in a Message-ID (`<whd_…@example.com>`).
fn delivery_id(message_id: &str) -> Option<&str> {
    message_id
        .trim()
        .strip_prefix('<')?
        .split_once('@')
        .map(|(id, _)| id)
        .filter(|id| id.starts_with("whd_"))
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Posts forms to whichever servers are up, round robin, until `stop`; keeps the id of
/// every submission answered 202.
pub fn steady_intake(
    ports: Arc<Mutex<Vec<u16>>>,
    endpoints: &'static [&'static str],
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<String>>>,
    pause: Duration,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let mut refused = 0;
        let mut n = 0usize;
        // Bounded: at most a million posts, and `stop` ends it sooner.
        while !stop.load(Ordering::SeqCst) && n < 1_000_000 {
            n += 1;
            let port = {
                let ports = ports.lock().expect("ports");
                ports[n % ports.len()]
            };
            let endpoint = endpoints[n % endpoints.len()];
            let response = support::harness::post_urlencoded(
                &client,
                format!("http://127.0.0.1:{port}/f/{endpoint}"),
                format!("n={n}&note=chaos"),
            )
            .await;
            match response {
                Ok(response) if response.status() == 202 => {
                    let body: serde_json::Value = response.json().await.unwrap_or_default();
                    if let Some(id) = body["submission_id"].as_str() {
                        accepted.lock().expect("accepted").push(id.to_string());
                    }
                }
                _ => refused += 1,
            }
            tokio::time::sleep(pause).await;
        }
        refused
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn random_kills_of_two_servers_with_a_flaky_receiver_lose_nothing() {
    let kills = if crate::long() { 30 } else { 10 };
    let receiver = HostileReceiver::start(Behaviour::Chaos).await;
    let script = smtp_script(if crate::long() { 4000 } else { 1500 });
    let smtp = SmtpServer::start(&["--script", &script]);
    let smtp_port = smtp.port();
    let vars = [
        crate::QUICK_DELIVERY,
        SERVER,
        &[("FORMS_SMTP_PORT", smtp_port.as_str())],
    ]
    .concat();
    let db = TestDb::new().await;
    {
        let mut conn = db.connect().await;
        for id in ["chaos-a", "chaos-b"] {
            db.insert_webhook_endpoint(id, receiver.url()).await;
            hymical_forms::testing::db::destinations::append(
                &mut conn,
                hymical_forms::testing::db::models::DestinationRow::email(
                    endpoint(id).id,
                    vec![format!("{id}@example.com")],
                    None,
                    chrono::Utc::now(),
                ),
            )
            .await
            .expect("email destination");
        }
    }
    let mut servers = vec![
        ServeProcess::start(&db, &vars),
        ServeProcess::start(&db, &vars),
    ];
    for server in &servers {
        wait_for_status(&server.url("/ready"), 200).await;
    }
    let ports = Arc::new(Mutex::new(
        servers.iter().map(|s| s.port).collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let load = steady_intake(
        ports.clone(),
        &["chaos-a", "chaos-b"],
        stop.clone(),
        accepted.clone(),
        Duration::from_millis(5),
    );
    let started = Instant::now();
    let killed = AtomicUsize::new(0);
    let mut killed_at = Vec::new();
    for _ in 0..kills {
        let wait = Duration::from_millis(800 + u64::from(rand::random::<u16>() % 1700));
        tokio::time::sleep(wait).await;
        let victim = usize::from(rand::random::<u8>()) % servers.len();
        let dead = servers.remove(victim);
        killed_at.push(unix_seconds(SystemTime::now()));
        dead.kill();
        killed.fetch_add(1, Ordering::SeqCst);
        let fresh = ServeProcess::start(&db, &vars);
        wait_for_status(&fresh.url("/health"), 200).await;
        servers.insert(victim, fresh);
        *ports.lock().expect("ports") = servers.iter().map(|s| s.port).collect();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let refused = load.await.expect("load");
    let accepted = accepted.lock().expect("accepted").clone();
    assert!(accepted.len() > 100, "too little load: {}", accepted.len());

    // The servers that are up deliver everything that is left.
    let view = probe::settled(&db, Duration::from_secs(120)).await;
    let stored = probe::stored(&db, &accepted).await;
    let lost: Vec<&String> = accepted
        .iter()
        .filter(|id| !stored.iter().any(|(stored, _)| stored == *id))
        .collect();
    assert!(lost.is_empty(), "accepted but not stored: {lost:?}");
    let undelivered: Vec<_> = stored
        .iter()
        .filter(|(_, state)| state.as_deref() != Some("delivered"))
        .collect();
    assert!(undelivered.is_empty(), "{undelivered:?}");

    // Exactly one delivery per destination (the webhook and the email), delivered, and no
    // other.
    let per_destination = probe::per_destination(&db, &accepted).await;
    let submissions: HashSet<&str> = per_destination
        .iter()
        .map(|row| row.submission_id.as_str())
        .collect();
    assert_eq!(submissions.len(), accepted.len());
    let mut kinds: HashMap<&str, Vec<&str>> = HashMap::new();
    for row in &per_destination {
        kinds
            .entry(row.submission_id.as_str())
            .or_default()
            .push(row.kind.as_str());
    }
    let wrong_destinations: Vec<_> = kinds
        .iter()
        .filter(|(_, kinds)| {
            let mut kinds = (*kinds).clone();
            kinds.sort_unstable();
            kinds != ["email", "webhook"]
        })
        .collect();
    assert!(wrong_destinations.is_empty(), "{wrong_destinations:?}");
    let not_one: Vec<_> = per_destination
        .iter()
        .filter(|row| row.deliveries != 1 || row.delivered != 1)
        .collect();
    assert!(
        not_one.is_empty(),
        "not exactly one delivered delivery per destination: {not_one:?}"
    );
    let deliveries = probe::deliveries_of(&db, &accepted).await;
    assert_eq!(
        deliveries,
        2 * accepted.len() as i64,
        "a delivery of no destination"
    );

    let gaps = probe::numbering_gaps(&db).await;
    assert!(gaps.is_empty(), "attempt numbers with gaps: {gaps:?}");

    // Every email delivery's message reached the mail server, to its recipients; none
    // arrived for a delivery that does not exist.
    let emails = probe::email_deliveries(&db).await;
    assert!(
        emails.len() >= accepted.len(),
        "{} email deliveries",
        emails.len()
    );
    let messages = smtp.messages();
    let mut copies: HashMap<String, Vec<f64>> = HashMap::new();
    let mut recipients: HashMap<String, serde_json::Value> = HashMap::new();
    for message in &messages {
        let message_id = message["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|pair| pair[0].as_str().unwrap().eq_ignore_ascii_case("Message-ID"))
            .and_then(|pair| pair[1].as_str())
            .unwrap_or_default();
        let id = delivery_id(message_id)
            .unwrap_or_else(|| panic!("a message without a delivery's Message-ID: {message_id:?}"));
        copies
            .entry(id.to_string())
            .or_default()
            .push(message["received_at"].as_f64().unwrap());
        recipients.insert(id.to_string(), message["rcpt_tos"].clone());
    }
    let known: HashMap<&str, &probe::EmailDelivery> = emails
        .iter()
        .map(|email| (email.id.as_str(), email))
        .collect();
    let unknown: Vec<&String> = copies
        .keys()
        .filter(|id| !known.contains_key(id.as_str()))
        .collect();
    assert!(unknown.is_empty(), "messages for no delivery: {unknown:?}");
    let missing: Vec<&str> = known
        .keys()
        .filter(|id| !copies.contains_key(**id))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "email deliveries with no message: {missing:?}"
    );
    for email in &emails {
        let to = email.destination_url.trim_start_matches("mailto:");
        assert_eq!(recipients[&email.id], serde_json::json!([to]), "{email:?}");
    }

    // A second copy is at least once at work: the delivery has more than one attempt
    // recorded or a late one, or the process that sent the first copy was killed before it
    // could record it (a SIGKILL within moments after the server accepted it).
    let mut twice = 0;
    let mut twice_near_kill = 0;
    let mut twice_late = 0;
    let mut slowest_kill: f64 = 0.0;
    let mut most = 1;
    for (id, arrivals) in &copies {
        if arrivals.len() < 2 {
            continue;
        }
        twice += 1;
        most = most.max(arrivals.len());
        let email = known[id.as_str()];
        let mut arrivals = arrivals.clone();
        arrivals.sort_by(f64::total_cmp);
        let (first, second) = (arrivals[0], arrivals[1]);
        // Killed within a second after the server accepted the first copy (half a second's
        // slack for when each side reads the clock), before the second was sent.
        let kill_after = killed_at
            .iter()
            .map(|kill| kill - first)
            .filter(|after| *after > -0.5 && *after < 1.0 && first + after < second)
            .fold(None, |least: Option<f64>, after| {
                Some(least.map_or(after, |least| least.min(after)))
            });
        let near_kill = kill_after.is_some();
        if let Some(after) = kill_after {
            twice_near_kill += 1;
            slowest_kill = slowest_kill.max(after);
        }
        twice_late += usize::from(email.late > 0);
        assert!(
            email.attempts > 1 || email.late > 0 || near_kill,
            "{id} arrived {} times with one attempt recorded, none late, and no SIGKILL near its first copy ({email:?})",
            arrivals.len()
        );
    }
    let deferred: i64 = emails.iter().map(|email| email.deferred).sum();
    let retried = emails.iter().filter(|email| email.attempts > 1).count();

    let requests = receiver.hits();
    let chaos = receiver.chaos.lock().expect("chaos").len();
    println!(
        "chaos: {:.0} s, {} SIGKILLs, {} accepted (202), {} refused while a server was down, {} stored, {} deliveries delivered (a webhook's and an email's each), {} failed, {} requests to the receiver for {} submissions, {} lost",
        started.elapsed().as_secs_f64(),
        killed.load(Ordering::SeqCst),
        accepted.len(),
        refused,
        submissions.len(),
        view.delivered,
        view.failed,
        requests,
        chaos,
        lost.len()
    );
    println!(
        "chaos email: {} email deliveries, {} messages at the mail server, {} attempts deferred with 451 and retried ({} deliveries with more than one attempt), {} deliveries' messages arrived twice or more ({} with a SIGKILL at most {:.2} s after the first copy, {} with a late attempt; at most {} copies), 0 missing, 0 for no delivery",
        emails.len(),
        messages.len(),
        deferred,
        retried,
        twice,
        twice_near_kill,
        slowest_kill,
        twice_late,
        most
    );
    for server in servers {
        server.kill();
    }
}
