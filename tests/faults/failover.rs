//! A real highly available PostgreSQL on loopback: a pg_auto_failover monitor, a primary
//! and a standby, started and torn down here. Two server processes under steady intake
//! with a flaky receiver and a subscriber on one of them, all given the multi-host URL
//! `pg_autoctl show uri` prints and the service's default database settings; the primary
//! (its keeper and its postgres, the postmaster read from `postmaster.pid`) is killed with
//! SIGKILL again and again, each time after the standby took over and the old primary
//! rejoined as the new standby.
//!
//! Or the primary is cut off instead: iptables drops every packet to and from its port on
//! loopback, and its keeper's reports to the monitor (an owner match on the group its
//! processes alone run as), so connections to it hang rather than being refused and a
//! connect gets no answer. Once the standby took over, the lost node is killed, the rules
//! are removed (also on every other way out: a guard) and it rejoins. This needs root.
//!
//! Each failover's window is printed in two parts: the formation's (the primary lost → the
//! standby takes writes, polled directly every 50 ms) and the service's (the standby takes
//! writes → the first `202`). The monitor's settings are the test's fast ones unless
//! `FORMS_FAILOVER_MONITOR` names others (`defaults`, or `setting=value,…`), to measure
//! what a setting does (docs/operations.md, "Failover").
//!
//! With synchronous replication (pg_auto_failover's default): every `202` is stored, every
//! delivery delivered, attempt numbers are 1..n, nothing is left `processing`, and the
//! subscriber got every stored event exactly once. With asynchronous replication the run
//! counts what PostgreSQL lost (`202`s, events a subscriber saw that are gone) and still
//! requires that no subscriber skipped an event written after a failover. Each failover's
//! unavailability window (first failed request to the first `202` after it) is printed.
//! The rate-limit counters (an unlogged table) start empty on a promoted standby; a limit
//! still holds from then on.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hymical_forms::testing::config::Secret;

use crate::peers::{Behaviour, HostileReceiver};
use crate::probe;
use support::harness::{free_port, wait_for_status, ServeProcess, TestDb};
use support::ws_client::{event_id, Frame, WsClient};

/// The servers under load: the service's default database settings (the pool's size too:
/// the harness's is smaller), so that the service's part of each window is what an
/// operator gets; deliveries retried quickly (`crate::QUICK_DELIVERY`, with these) so
/// that the run settles in seconds.
const SERVER: &[(&str, &str)] = &[
    ("FORMS_DATABASE_POOL_SIZE", "16"),
    ("FORMS_WEBHOOK_MAX_ATTEMPTS", "20"),
];

/// A process intake-only with a tight limit on one endpoint, for the rate-limit check.
const LIMITED: &[(&str, &str)] = &[
    ("FORMS_RATE_LIMIT_ENABLED", "true"),
    ("FORMS_RATE_LIMIT_ENDPOINT_REQUESTS", "5"),
    ("FORMS_RATE_LIMIT_ENDPOINT_WINDOW_SECONDS", "3600"),
    ("FORMS_RATE_LIMIT_IP_REQUESTS", "100000"),
    ("FORMS_WORKER_ENABLED", "false"),
    ("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", "1"),
    ("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", "2"),
];

/// How long any one step of the cluster may take before the test gives up.
const STEP: Duration = Duration::from_secs(90);

/// The PostgreSQL version pg_auto_failover's Debian package is built for.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The monitor's settings unless `FORMS_FAILOVER_MONITOR` says otherwise: fail over in
/// seconds rather than the defaults' minute.
const FAST_MONITOR: &[&str] = &[
    "pgautofailover.health_check_period = 1000",
    "pgautofailover.health_check_retry_delay = 500",
    "pgautofailover.health_check_timeout = 1000",
    "pgautofailover.health_check_max_retries = 1",
    "pgautofailover.node_considered_unhealthy_timeout = 2000",
    "pgautofailover.primary_demote_timeout = 2000",
];

/// The monitor's settings of this run, and how the printed figures name them.
fn monitor_settings() -> (Vec<String>, String) {
    match std::env::var("FORMS_FAILOVER_MONITOR") {
        Err(_) => (
            FAST_MONITOR.iter().map(|s| s.to_string()).collect(),
            "the test's fast monitor settings".into(),
        ),
        Ok(value) if value == "defaults" => {
            (Vec::new(), "pg_auto_failover's default settings".into())
        }
        Ok(value) => {
            let settings: Vec<String> = value
                .split(',')
                .map(|pair| {
                    let (name, setting) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("FORMS_FAILOVER_MONITOR: {pair:?}"));
                    let name = name.trim();
                    assert!(
                        name.starts_with("pgautofailover.")
                            && name
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                            && setting.trim().chars().all(|c| c.is_ascii_digit()),
                        "FORMS_FAILOVER_MONITOR: {pair:?} is not pgautofailover.name=number"
                    );
                    format!("{name} = {}", setting.trim())
                })
                .collect();
            let label = format!("monitor: defaults but {value}");
            (settings, label)
        }
    }
}

/// How the primary is lost.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// SIGKILL of its keeper's process group and its postmaster: the kernel closes its
    /// sockets, so connections to it are refused or reset at once.
    Kill,
    /// Its packets dropped (iptables on loopback): connections to it hang.
    CutOff,
}

/// iptables rules that cut a node off, removed when dropped: on every way out of the test,
/// a panic included. All on the loopback interface, each naming a port of the test's own.
struct CutOffRules {
    installed: Vec<Vec<String>>,
}

/// Marks the rules, so that one left by a test that was itself killed can be told apart.
const RULE_COMMENT: &str = "hymical-forms failover test";

impl CutOffRules {
    /// Drops everything sent to and from `port` on loopback, and what processes of the
    /// group `gid` send to the monitor's port (the lost node's keeper reports nothing).
    fn install(port: u16, monitor_port: u16, gid: u32) -> CutOffRules {
        let port = port.to_string();
        let monitor_port = monitor_port.to_string();
        let gid = gid.to_string();
        let rules: [&[&str]; 3] = [
            &["-o", "lo", "-p", "tcp", "--dport", &port],
            &["-o", "lo", "-p", "tcp", "--sport", &port],
            &[
                "-o",
                "lo",
                "-p",
                "tcp",
                "--dport",
                &monitor_port,
                "-m",
                "owner",
                "--gid-owner",
                &gid,
            ],
        ];
        let mut cut = CutOffRules {
            installed: Vec::new(),
        };
        for rule in rules {
            let mut spec: Vec<String> = rule.iter().map(|s| s.to_string()).collect();
            spec.extend(
                ["-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP"].map(String::from),
            );
            // A rule that fails to go in panics here; those in already come out on drop.
            iptables("-I", &spec);
            cut.installed.push(spec);
        }
        cut
    }
}

impl Drop for CutOffRules {
    fn drop(&mut self) {
        for spec in self.installed.drain(..).rev() {
            let mut args = vec!["-w".to_string(), "10".into(), "-D".into(), "OUTPUT".into()];
            args.extend(spec.iter().cloned());
            // No panic in a drop (it may run during one): a rule left behind is reported.
            match Command::new(iptables_program()).args(&args).output() {
                Ok(output) if output.status.success() => {}
                other => eprintln!(
                    "failover: could not remove the iptables rule {spec:?}: {other:?}; \
                     remove it with `iptables -D OUTPUT {}`",
                    spec.join(" ")
                ),
            }
        }
    }
}

/// Debian installs it in /usr/sbin, which a PATH may lack.
fn iptables_program() -> &'static str {
    if std::path::Path::new("/usr/sbin/iptables").exists() {
        "/usr/sbin/iptables"
    } else {
        "iptables"
    }
}

/// `iptables -w 10 ACTION OUTPUT spec…` (OUTPUT only: loopback traffic passes it once).
fn iptables(action: &str, spec: &[String]) {
    let output = Command::new(iptables_program())
        .args(["-w", "10", action, "OUTPUT"])
        .args(spec)
        .output()
        .expect("iptables runs (the iptables package; `cargo xtask setup` installs it)");
    assert!(
        output.status.success(),
        "iptables {action} OUTPUT {spec:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A group id no one else uses, one per node of each formation of this process: the
/// owner match that cuts a node's keeper off from the monitor tells the nodes apart by it
/// (they all run as the `postgres` user).
fn node_gid() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    assert!(n < 64, "more formations than node groups");
    2_000_000_000 + (std::process::id() % 1_000_000) * 64 + n
}

/// A pg_auto_failover formation on loopback: a monitor and two data nodes, each a
/// `pg_autoctl` process group of its own, run as the `postgres` user when we are root.
struct HaCluster {
    root: PathBuf,
    monitor_port: u16,
    monitor: Option<Child>,
    nodes: Vec<Node>,
    user: Option<(u32, u32)>,
    /// The rules cutting a node off, while one is.
    cut: Option<CutOffRules>,
}

struct Node {
    name: &'static str,
    port: u16,
    keeper: Option<Child>,
    /// The group its processes run as, when it is not the `postgres` user's (to be cut
    /// off by an owner match).
    gid: Option<u32>,
}

impl HaCluster {
    fn start(synchronous: bool, fault: Fault, monitor_settings: &[String]) -> HaCluster {
        let root = std::env::temp_dir().join(format!(
            "hymical-failover-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&root).expect("cluster root");
        let user = nix::unistd::geteuid().is_root().then(|| {
            let postgres = nix::unistd::User::from_name("postgres")
                .expect("users")
                .expect("a postgres user (the postgresql package makes it)");
            (postgres.uid.as_raw(), postgres.gid.as_raw())
        });
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid)).expect("chown");
        }
        let gid = || (fault == Fault::CutOff).then(node_gid);
        let mut cluster = HaCluster {
            root,
            monitor_port: free_port(),
            monitor: None,
            nodes: vec![
                Node {
                    name: "node1",
                    port: free_port(),
                    keeper: None,
                    gid: gid(),
                },
                Node {
                    name: "node2",
                    port: free_port(),
                    keeper: None,
                    gid: gid(),
                },
            ],
            user,
            cut: None,
        };
        let monitor = cluster.path("monitor");
        let port = cluster.monitor_port.to_string();
        cluster.run_to_end(&[
            "create",
            "monitor",
            "--pgdata",
            &monitor,
            "--pgport",
            &port,
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
        ]);
        // `create monitor` has no --listen: loopback only, before it first starts.
        cluster.run_to_end(&[
            "config",
            "set",
            "--pgdata",
            &monitor,
            "postgresql.listen_addresses",
            "127.0.0.1",
        ]);
        cluster.monitor = Some(cluster.spawn("monitor", &["run", "--pgdata", &monitor], None));
        cluster.until("the monitor answers", |c| {
            c.monitor_sql("SELECT 1").is_some()
        });
        for setting in monitor_settings {
            cluster
                .monitor_sql(&format!("ALTER SYSTEM SET {setting}"))
                .expect("monitor setting");
        }
        cluster
            .monitor_sql("SELECT pg_reload_conf()")
            .expect("reload");
        cluster.create_node(0);
        cluster.until("node1 is the single primary", |c| {
            c.states().iter().any(|(name, reported, goal)| {
                name == "node1" && reported == "single" && goal == "single"
            })
        });
        // The standby's base backup waits for a checkpoint: make it now.
        cluster.node_sql(0, "CHECKPOINT").expect("checkpoint");
        cluster.create_node(1);
        cluster.until_stable();
        if !synchronous {
            for index in 0..2 {
                let pgdata = cluster.path(cluster.nodes[index].name);
                cluster.run_to_end(&[
                    "set",
                    "node",
                    "replication-quorum",
                    "false",
                    "--pgdata",
                    &pgdata,
                ]);
            }
            cluster.until("replication is asynchronous", |c| {
                c.primary()
                    .and_then(|primary| c.node_sql(primary, "SHOW synchronous_standby_names"))
                    .is_some_and(|value| value.is_empty())
            });
        }
        cluster
    }

    fn path(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_as(args, None)
    }

    /// A `pg_autoctl` command, as the group `gid` when given (a node's own).
    fn command_as(&self, args: &[&str], gid: Option<u32>) -> Command {
        let mut command = Command::new("pg_autoctl");
        command
            .args(args)
            .env("HOME", &self.root)
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("XDG_DATA_HOME", self.root.join("data"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .env("PATH", format!("{PG_BIN}:/usr/bin:/bin:/usr/sbin:/sbin"))
            .current_dir(&self.root)
            .stdin(Stdio::null());
        if let Some((uid, postgres_gid)) = self.user {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid.unwrap_or(postgres_gid));
        }
        command
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join(format!("{name}.log")))
            .expect("log")
    }

    fn run_to_end(&self, args: &[&str]) {
        let output = self.command(args).output().expect("pg_autoctl runs");
        assert!(
            output.status.success(),
            "pg_autoctl {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn output(&self, args: &[&str]) -> String {
        let output = self.command(args).output().expect("pg_autoctl runs");
        assert!(output.status.success(), "pg_autoctl {args:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// A long-running `pg_autoctl` in a process group of its own (a SIGKILL of the group
    /// takes its postgres with it).
    fn spawn(&self, name: &str, args: &[&str], gid: Option<u32>) -> Child {
        use std::os::unix::process::CommandExt;
        let log = self.log(name);
        self.command_as(args, gid)
            .process_group(0)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("pg_autoctl starts")
    }

    fn create_node(&mut self, index: usize) {
        let pgdata = self.path(self.nodes[index].name);
        let port = self.nodes[index].port.to_string();
        let monitor = format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=prefer",
            self.monitor_port
        );
        let name = self.nodes[index].name;
        let child = self.spawn(
            name,
            &[
                "create",
                "postgres",
                "--pgdata",
                &pgdata,
                "--pgport",
                &port,
                "--hostname",
                "127.0.0.1",
                "--listen",
                "127.0.0.1",
                "--auth",
                "trust",
                "--no-ssl",
                "--monitor",
                &monitor,
                "--name",
                name,
                "--dbname",
                "forms",
                "--run",
            ],
            self.nodes[index].gid,
        );
        self.nodes[index].keeper = Some(child);
    }

    /// One value from a statement on the monitor (`None` when it cannot answer).
    fn monitor_sql(&self, sql: &str) -> Option<String> {
        query(self.monitor_port, "pg_auto_failover", sql)
    }

    fn node_sql(&self, index: usize, sql: &str) -> Option<String> {
        query(self.nodes[index].port, "forms", sql)
    }

    /// Each node's name, reported state and the state the monitor assigned it.
    fn states(&self) -> Vec<(String, String, String)> {
        self.monitor_sql(
            "SELECT string_agg(nodename || ':' || reportedstate || ':' || goalstate, ',') \
             FROM pgautofailover.node",
        )
        .unwrap_or_default()
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.split(':');
            Some((
                parts.next()?.to_string(),
                parts.next()?.to_string(),
                parts.next()?.to_string(),
            ))
        })
        .collect()
    }

    /// The index of the node the monitor holds for primary now (it may be waiting for a
    /// standby: `wait_primary`).
    fn primary(&self) -> Option<usize> {
        let states = self.states();
        self.nodes.iter().position(|node| {
            states.iter().any(|(name, reported, goal)| {
                name == node.name
                    && reported == goal
                    && ["primary", "wait_primary", "single"].contains(&reported.as_str())
            })
        })
    }

    /// A primary and a secondary, each in the state the monitor assigned.
    fn until_stable(&self) {
        self.until("a primary and a secondary", |c| {
            let states = c.states();
            let settled = |state: &str| {
                states
                    .iter()
                    .filter(|(_, reported, goal)| reported == state && goal == state)
                    .count()
                    == 1
            };
            settled("primary") && settled("secondary")
        });
    }

    fn until(&self, what: &str, mut done: impl FnMut(&HaCluster) -> bool) {
        let deadline = Instant::now() + STEP;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {STEP:?}; states {:?}\n{}",
                self.states(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        let mut text = String::new();
        for name in ["monitor", "node1", "node2"] {
            let log =
                std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            text.push_str(&format!("--- {name}.log (end)\n"));
            for line in tail.iter().rev() {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }

    /// The URL `pg_autoctl show uri` prints for the formation, with the user the nodes
    /// trust (it names none: libpq would take the operating system's).
    fn url(&self) -> Secret {
        let monitor = self.path("monitor");
        let printed = self.output(&[
            "show",
            "uri",
            "--pgdata",
            &monitor,
            "--formation",
            "default",
        ]);
        let rest = printed
            .strip_prefix("postgres://")
            .unwrap_or_else(|| panic!("unexpected URI {printed:?}"));
        assert!(rest.contains(','), "not a multi-host URI: {printed}");
        Secret::new(format!("postgres://postgres@{rest}"))
    }

    /// Loses the primary by `fault`; returns its index.
    fn lose_primary(&mut self, fault: Fault) -> usize {
        let index = self.primary().expect("a primary");
        match fault {
            Fault::Kill => self.kill(index),
            Fault::CutOff => {
                let gid = self.nodes[index].gid.expect("a node group of its own");
                self.cut = Some(CutOffRules::install(
                    self.nodes[index].port,
                    self.monitor_port,
                    gid,
                ));
            }
        }
        index
    }

    /// Whether the node takes writes now: promoted, and no longer read-only (a standby
    /// pg_auto_failover promotes stays read-only until the old primary is known demoted or
    /// the drain timeout ends). What a connection's read-write check asks, asked the same.
    fn writable(&self, index: usize) -> bool {
        self.node_sql(
            index,
            "SELECT (NOT pg_is_in_recovery() \
             AND current_setting('transaction_read_only') = 'off')::text",
        )
        .is_some_and(|value| value == "true")
    }

    /// Brings a lost node back: killed if it was cut off (it rejoins as a restarted node
    /// does), the rules removed, started again.
    fn rejoin(&mut self, index: usize) {
        if self.cut.is_some() {
            self.kill(index);
            self.cut = None;
        }
        self.restart(index);
    }

    /// SIGKILLs a node: its keeper's process group (which holds its postgres and the
    /// backends), and the postmaster by the pid in `postmaster.pid`.
    fn kill(&mut self, index: usize) {
        let pgdata = self.root.join(self.nodes[index].name);
        let postmaster = std::fs::read_to_string(pgdata.join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next().and_then(|pid| pid.trim().parse().ok()));
        if let Some(mut keeper) = self.nodes[index].keeper.take() {
            let group = nix::unistd::Pid::from_raw(keeper.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = keeper.wait();
        }
        if let Some(pid) = postmaster {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Starts a killed node's keeper again: it rejoins as the new standby.
    fn restart(&mut self, index: usize) {
        let pgdata = self.path(self.nodes[index].name);
        let name = self.nodes[index].name;
        let gid = self.nodes[index].gid;
        self.nodes[index].keeper = Some(self.spawn(name, &["run", "--pgdata", &pgdata], gid));
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        // A node cut off is let back first, so that its keeper can stop it.
        self.cut = None;
        // Each keeper stops its postgres on SIGTERM; the monitor last.
        let mut children: Vec<Child> = self
            .nodes
            .iter_mut()
            .filter_map(|node| node.keeper.take())
            .chain(self.monitor.take())
            .collect();
        for child in &children {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for child in &mut children {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The first column of the first row of `sql` on a server of the cluster, as text, over a
/// plain connection of its own (the nodes trust loopback).
fn query(port: u16, database: &str, sql: &str) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let config =
            format!("host=127.0.0.1 port={port} user=postgres dbname={database} connect_timeout=2");
        let (client, connection) = tokio::time::timeout(
            Duration::from_secs(3),
            tokio_postgres::connect(&config, tokio_postgres::NoTls),
        )
        .await
        .ok()?
        .ok()?;
        let task = tokio::spawn(connection);
        let rows = tokio::time::timeout(Duration::from_secs(5), client.simple_query(sql))
            .await
            .ok()?
            .ok()?;
        drop(client);
        let _ = task.await;
        rows.into_iter()
            .find_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some(row.get(0).unwrap_or_default().to_string())
                }
                tokio_postgres::SimpleQueryMessage::CommandComplete(_) => None,
                _ => None,
            })
            .or(Some(String::new()))
    })
}

/// One request of the load: when it was sent, when its answer came (or it failed), and
/// whether it was a `202`.
#[derive(Clone, Copy)]
struct Answer {
    sent: Instant,
    at: Instant,
    accepted: bool,
}

/// Posts forms to both servers in turn until `stop`; keeps every `202`'s submission id and
/// every answer's time and outcome.
fn load(
    ports: Vec<u16>,
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<String>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        // Bounded: at most a hundred thousand posts, and `stop` ends it sooner.
        for n in 0..100_000usize {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let port = ports[n % ports.len()];
            let sent = Instant::now();
            let response = support::harness::post_urlencoded(
                &client,
                format!("http://127.0.0.1:{port}/f/contact"),
                format!("n={n}&note=failover"),
            )
            .await;
            let id = match response {
                Ok(response) if response.status() == 202 => response
                    .json::<serde_json::Value>()
                    .await
                    .ok()
                    .and_then(|body| body["submission_id"].as_str().map(str::to_string)),
                _ => None,
            };
            answers.lock().expect("answers").push(Answer {
                sent,
                at: Instant::now(),
                accepted: id.is_some(),
            });
            if let Some(id) = id {
                accepted.lock().expect("accepted").push(id);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Every event id the subscription sends until `stop`, then until it is quiet for 3 s.
fn subscriber(mut client: WsClient, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<i64>> {
    tokio::spawn(async move {
        let mut ids = Vec::new();
        // Bounded by the test's own stop and by the quiet period after it.
        loop {
            match client.next_within(Duration::from_secs(3)).await {
                Some(Frame::Json(message)) if message["type"] == "next" => {
                    assert!(message["payload"]["errors"].is_null(), "{message}");
                    ids.push(event_id(
                        &message["payload"]["data"]["deliveryStateChanged"],
                    ));
                }
                Some(Frame::Json(message)) if message["type"] == "ka" => {}
                Some(other) => panic!("the subscription ended: {other:?}"),
                None if stop.load(Ordering::SeqCst) => break,
                None => {}
            }
        }
        ids
    })
}

/// Seconds from the sending of the first request after `from` that failed to the first
/// `202` after the last failure before `to`, and how many requests failed in between.
fn unavailability(answers: &[Answer], from: Instant, to: Instant) -> (f64, usize) {
    let failed: Vec<&Answer> = answers
        .iter()
        .filter(|answer| answer.sent >= from && answer.at <= to && !answer.accepted)
        .collect();
    let (Some(first), Some(last)) = (failed.first(), failed.last()) else {
        return (0.0, 0);
    };
    let recovered = answers
        .iter()
        .find(|answer| answer.at > last.at && answer.accepted)
        .map_or(to, |answer| answer.at);
    ((recovered - first.sent).as_secs_f64(), failed.len())
}

async fn event_ids(db: &TestDb) -> Vec<i64> {
    use diesel::{ExpressionMethods, QueryDsl};
    use diesel_async::RunQueryDsl;
    use hymical_forms::testing::db::schema::delivery_events::dsl::*;
    let mut conn = db.connect().await;
    delivery_events
        .order(id.asc())
        .select(id)
        .load(&mut conn)
        .await
        .expect("event ids")
}

async fn post_limited(port: u16) -> u16 {
    support::harness::post_urlencoded(
        &reqwest::Client::new(),
        format!("http://127.0.0.1:{port}/f/limited"),
        "a=1",
    )
    .await
    .map_or(0, |response| response.status().as_u16())
}

async fn run(synchronous: bool, fault: Fault) {
    let kills = match (fault, crate::long()) {
        (Fault::Kill, true) => 10,
        (Fault::Kill, false) => 3,
        (Fault::CutOff, true) => 3,
        (Fault::CutOff, false) => 1,
    };
    let label = match (fault, synchronous) {
        (Fault::Kill, true) => "failover (synchronous)",
        (Fault::Kill, false) => "failover (asynchronous)",
        (Fault::CutOff, true) => "failover, primary cut off (synchronous)",
        (Fault::CutOff, false) => "failover, primary cut off (asynchronous)",
    };
    let how = match fault {
        Fault::Kill => "SIGKILLs of the primary",
        Fault::CutOff => "primaries cut off",
    };
    if fault == Fault::CutOff {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("{label}: not run: cutting a node off takes iptables, which takes root");
            return;
        }
        // Before the formation's minute of start-up, not after it.
        iptables("-S", &[]);
    }
    let (settings, settings_label) = monitor_settings();
    let started = Instant::now();
    let mut cluster =
        tokio::task::spawn_blocking(move || HaCluster::start(synchronous, fault, &settings))
            .await
            .expect("cluster");
    let url = cluster.url();
    // Migrations connect through the same multi-host URL.
    hymical_forms::testing::db::migrations::run_pending(&url)
        .await
        .expect("migrate");
    let db = TestDb::external("forms", url.clone());
    let receiver = HostileReceiver::start(Behaviour::Chaos).await;
    db.insert_webhook_endpoint("contact", receiver.url()).await;
    db.insert_webhook_endpoint("limited", receiver.url()).await;
    let key = db.insert_admin_key("failover").await;
    let vars = [crate::QUICK_DELIVERY, SERVER].concat();
    let servers = [
        ServeProcess::start(&db, &vars),
        ServeProcess::start(&db, &vars),
    ];
    let limited = ServeProcess::start(&db, LIMITED);
    for server in servers.iter().chain([&limited]) {
        wait_for_status(&server.url("/ready"), 200).await;
    }
    let ws = format!("ws://127.0.0.1:{}/graphql/ws", servers[0].port);
    let mut client = WsClient::ready(&ws, &key).await;
    client.subscribe_events("s", r#"afterEventId: "0""#).await;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_subscriber = Arc::new(AtomicBool::new(false));
    let events = subscriber(client, stop_subscriber.clone());
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let intake = load(
        servers.iter().map(|server| server.port).collect(),
        stop.clone(),
        accepted.clone(),
        answers.clone(),
    );
    // Counted before the failovers: the limit's counter holds 3 of 5.
    for _ in 0..3 {
        assert_eq!(post_limited(limited.port).await, 202);
    }

    let mut failovers = Vec::new();
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let lost_at = Instant::now();
        let mut moved = cluster;
        let (back, victim, writable_at) = tokio::task::spawn_blocking(move || {
            let victim = moved.lose_primary(fault);
            let standby = 1 - victim;
            let deadline = Instant::now() + STEP;
            // Bounded by STEP; each poll by the query's own timeouts.
            while !moved.writable(standby) {
                assert!(
                    Instant::now() < deadline,
                    "the standby took no writes within {STEP:?}; states {:?}\n{}",
                    moved.states(),
                    moved.logs()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let writable_at = Instant::now();
            moved.until("the standby took over", |c| {
                c.primary().is_some_and(|primary| primary != victim)
            });
            (moved, victim, writable_at)
        })
        .await
        .expect("failover");
        cluster = back;
        // Service is back once a 202 is answered after the standby took writes.
        let deadline = Instant::now() + STEP;
        let recovered_at = loop {
            let first = answers
                .lock()
                .expect("answers")
                .iter()
                .rev()
                .take_while(|answer| answer.at > writable_at)
                .filter(|answer| answer.accepted)
                .last()
                .map(|answer| answer.at);
            if let Some(at) = first {
                break at;
            }
            assert!(
                Instant::now() < deadline,
                "no 202 within {STEP:?} of the standby taking writes\n{}\n{}",
                servers[0].log_text(),
                servers[1].log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut moved = cluster;
        cluster = tokio::task::spawn_blocking(move || {
            moved.rejoin(victim);
            moved.until_stable();
            moved
        })
        .await
        .expect("rejoin");
        failovers.push((lost_at, writable_at, recovered_at));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    intake.await.expect("load");
    let accepted = accepted.lock().expect("accepted").clone();
    let answers = answers.lock().expect("answers").clone();
    assert!(accepted.len() > 50, "too little load: {}", accepted.len());

    // The rate-limit counters are unlogged: the promoted server starts them empty, and the
    // limit holds from then on (5 more, then 429).
    let counted = db
        .count("SELECT count(*) AS n FROM rate_limit_counters")
        .await;
    let mut limited_statuses = Vec::new();
    for _ in 0..8 {
        limited_statuses.push(post_limited(limited.port).await);
    }
    assert_eq!(
        limited_statuses,
        [202, 202, 202, 202, 202, 429, 429, 429],
        "{}",
        limited.log_text()
    );

    // Everything left is delivered by the servers, on the last primary.
    let view = probe::settled(&db, Duration::from_secs(120)).await;
    let stored = probe::stored(&db, &accepted).await;
    let stored_ids: BTreeSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    let lost: Vec<&String> = accepted
        .iter()
        .filter(|id| !stored_ids.contains(id.as_str()))
        .collect();
    assert!(
        stored
            .iter()
            .all(|(_, state)| state.as_deref() == Some("delivered")),
        "not all delivered"
    );
    assert_eq!(view.failed, 0, "{view:?}");
    let gaps = probe::numbering_gaps(&db).await;
    assert!(gaps.is_empty(), "attempt numbering has gaps: {gaps:?}");

    // The subscriber: every stored event once, in order; with asynchronous replication it
    // may also have seen events the promoted server never got, but never skipped one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_subscriber.store(true, Ordering::SeqCst);
    let received = events.await.expect("subscriber");
    let in_table = event_ids(&db).await;
    let received_set: BTreeSet<i64> = received.iter().copied().collect();
    assert_eq!(received_set.len(), received.len(), "an event arrived twice");
    assert!(
        received.windows(2).all(|pair| pair[0] < pair[1]),
        "events out of order"
    );
    let missed: Vec<i64> = in_table
        .iter()
        .copied()
        .filter(|id| !received_set.contains(id))
        .collect();
    assert!(
        missed.is_empty(),
        "the subscriber missed events: {missed:?}"
    );
    let seen_but_lost = received.len() - (in_table.len() - missed.len());

    // Figures, not assertions: the service's part is documented (docs/operations.md) and
    // read from here; only a loss or a step past STEP fails the test.
    let windows: Vec<String> = failovers
        .iter()
        .map(|(lost, writable, recovered)| {
            let (window, failed) = unavailability(&answers, *lost, *recovered);
            format!(
                "{window:.1} s ({failed} failed answers) = formation {:.1} s (primary lost → \
                 standby writable) + service {:.1} s (writable → first 202)",
                (*writable - *lost).as_secs_f64(),
                (*recovered - *writable).as_secs_f64()
            )
        })
        .collect();
    // The first timeline and one per failover: each moved the event ids on once.
    let timelines = db.count("SELECT count(*) AS n FROM event_timelines").await;
    assert_eq!(timelines, kills as i64 + 1);
    if synchronous {
        assert!(lost.is_empty(), "accepted but not stored: {lost:?}");
        assert_eq!(seen_but_lost, 0, "events the subscriber saw are gone");
    }
    println!(
        "{label}, {settings_label}: {:.0} s, {kills} {how}, {} accepted (202), {} refused, \
         {} lost, {} stored and delivered; subscriber: {} events, 0 missed, 0 twice, {} seen \
         but lost with the old primary; {timelines} timelines; unavailability: {}; rate-limit counters after the \
         failovers: {counted} (unlogged, empty on the promoted standby), then 5 accepted and \
         3 refused (429)",
        started.elapsed().as_secs_f64(),
        accepted.len(),
        answers.iter().filter(|answer| !answer.accepted).count(),
        lost.len(),
        stored.len(),
        received.len(),
        seen_but_lost,
        windows.join(", "),
    );
    for server in servers {
        server.kill();
    }
    limited.kill();
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .expect("teardown");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkills_of_the_primary_with_synchronous_replication_lose_nothing() {
    run(true, Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkills_of_the_primary_with_asynchronous_replication_count_what_is_lost() {
    run(false, Fault::Kill).await;
}

/// The primary's packets dropped rather than its processes killed: connections to it hang
/// and a connect gets no answer. Nothing is lost, and both parts of each window are
/// printed: the service's must stay within seconds with its default settings.
#[tokio::test(flavor = "multi_thread")]
async fn a_primary_cut_off_with_synchronous_replication_loses_nothing() {
    run(true, Fault::CutOff).await;
}

/// The guard takes its rules out on a panic too (here on purpose, between installing them
/// and anything else), so that a failing failover test leaves no port of loopback cut off.
#[test]
fn cut_off_rules_are_removed_when_the_test_panics() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("cut-off rules: not run: iptables takes root");
        return;
    }
    let (port, monitor_port) = (free_port(), free_port());
    let listed = || {
        let output = Command::new(iptables_program())
            .args(["-w", "10", "-S", "OUTPUT"])
            .output()
            .expect("iptables runs");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| {
                line.contains(&format!("--dport {port} "))
                    || line.contains(&format!("--sport {port} "))
                    || line.contains(&format!("--dport {monitor_port} "))
            })
            .count()
    };
    let outcome = std::panic::catch_unwind(|| {
        let _rules = CutOffRules::install(port, monitor_port, node_gid());
        assert_eq!(listed(), 3, "the rules are in");
        panic!("a test that fails while a node is cut off");
    });
    assert!(outcome.is_err());
    assert_eq!(listed(), 0, "a rule was left behind");
}
