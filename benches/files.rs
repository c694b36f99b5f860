//! Intake of forms with a 1 MB file: throughput and the server's memory, against forms
//! without a file in the same run.
//!
//! `cargo bench --bench files` starts a throwaway PostgreSQL cluster with PostgreSQL's
//! durable defaults and a `hymical-forms serve` process on it (intake only: no worker, rate
//! limiting off, so every request is stored), with two endpoints: `plain` (no file
//! uploads) and `files` (file uploads with the default limits). The load:
//! `BENCH_CONCURRENCY` connections (8) posting as fast as they are answered, for
//! `BENCH_SECONDS` (5) per arm, the arms interleaved in each of `BENCH_ROUNDS` (3) rounds
//! (their order alternating):
//!
//! - `urlencoded`: the 5-field form of the intake benchmark to `plain`: today's path, the
//!   baseline;
//! - `multipart, endpoint without files`: the same 5 fields as multipart to `plain`
//!   (read whole, as before files);
//! - `multipart, no file`: the same to `files` (the streaming path, no file);
//! - `multipart + 1 MB file`: the same plus one 1 MB file (a PNG signature, then bytes) to
//!   `files`, stored in PostgreSQL;
//! - `… in S3`: the same against a second `serve` process with `FORMS_S3_*` pointing at
//!   moto's server on loopback (and `FORMS_HTTP_MAX_BUFFERED_BODY_BYTES` at 256 MiB: each
//!   S3 upload counts for 17 MiB of it) (when `moto_server` is installed, as `cargo xtask setup`
//!   does; otherwise the arm says it was not run).
//!
//! Each arm reports accepted/s, MB/s of file bytes, latency p50/p99, and the serve
//! process's resident memory: its sampled peak (every 20 ms) above its level before the
//! arm, and its high-water mark (VmHWM) at the end. Between arms the files' tables are
//! emptied, so the database does not grow across the run.
//!
//! The endpoints are made with the product's own function (`db::endpoints::insert`, what
//! `createEndpoint` calls). The smoke configuration (`cargo test --bench files`) runs 2
//! connections, 1 s per arm, 1 round; any run fails when an arm accepted nothing.

// Benchmarks stop at the first surprise; a panic is how they report it.
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hymical_forms::testing::config::Secret;
use hymical_forms::testing::db;

mod common;
use common::{require, setting, BenchCluster};

const BOUNDARY: &str = "----hymicalBenchBoundary";
const FILE_BYTES: usize = 1_000_000;
const FIELDS: [(&str, &str); 5] = [
    ("name", "Ada Lovelace"),
    ("email", "ada@example.com"),
    ("topic", "billing"),
    ("message", "Hello there, world"),
    ("consent", "yes"),
];

struct Serve {
    child: Child,
    port: u16,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

async fn serve(url: &Secret, extra: &[(String, String)]) -> Serve {
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_hymical-forms"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("FORMS_DATABASE_URL", url.expose())
        .env("FORMS_BIND", format!("127.0.0.1:{port}"))
        .env("FORMS_WORKER_ENABLED", "false")
        .env("FORMS_RATE_LIMIT_ENABLED", "false")
        .env("FORMS_AUTO_MIGRATE", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in extra {
        command.env(name, value);
    }
    let serve = Serve {
        child: command.spawn().expect("serve"),
        port,
    };
    common::wait_ready(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
    serve
}

/// VmRSS and VmHWM of `pid` in kB.
fn memory_kb(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn urlencoded() -> Vec<u8> {
    FIELDS
        .iter()
        .map(|(name, value)| format!("{name}={}", value.replace(' ', "+").replace('@', "%40")))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

fn multipart(file: bool) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in FIELDS {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    if file {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"photo.png\"\r\nContent-Type: image/png\r\n\r\n").as_bytes(),
        );
        let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        bytes.extend((bytes.len()..FILE_BYTES).map(|i| (i * 31 % 251) as u8));
        body.extend_from_slice(&bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

struct Arm {
    name: &'static str,
    path: &'static str,
    content_type: String,
    body: bytes::Bytes,
    file_bytes: usize,
}

struct Measured {
    accepted: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    peak_growth_mb: f64,
    high_water_mb: f64,
}

async fn run_arm(serve: &Serve, arm: &Arm, concurrency: usize, seconds: u64) -> Measured {
    let pid = serve.child.id();
    let (before, _) = memory_kb(pid);
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(Ordering::Relaxed) {
                peak = peak.max(memory_kb(pid).0);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        })
    };
    let url = format!("http://127.0.0.1:{}{}", serve.port, arm.path);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = reqwest::Client::new();
        let (url, content_type, body) = (url.clone(), arm.content_type.clone(), arm.body.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .header("content-type", &content_type)
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                let status = response.status();
                let _ = response.bytes().await;
                assert_eq!(status, 202, "the benchmark's requests are all accepted");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    let peak = sampler.await.unwrap();
    let (_, high_water) = memory_kb(pid);
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Measured {
        accepted: latencies.len() as u64,
        seconds: elapsed,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        peak_growth_mb: peak.saturating_sub(before) as f64 / 1024.0,
        high_water_mb: high_water as f64 / 1024.0,
    }
}

/// A moto S3 server with one bucket, when `moto_server` is installed.
fn moto_binary() -> Option<std::path::PathBuf> {
    let venv =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/moto-venv/bin/moto_server");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("moto_server"))
            .find(|candidate| candidate.is_file())
    })
}

async fn start_moto(binary: &std::path::Path) -> (Serve, Vec<(String, String)>) {
    let port = free_port();
    let child = Command::new(binary)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("moto_server");
    let moto = Serve { child, port };
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if client
            .put(format!("http://127.0.0.1:{port}/bench-files"))
            .send()
            .await
            .is_ok()
        {
            let vars = [
                // Each S3 upload counts for 17 MiB of the buffered-bodies budget: room for
                // the benchmark's connections (the default 64 MiB holds three).
                (
                    "FORMS_HTTP_MAX_BUFFERED_BODY_BYTES",
                    (256u64 << 20).to_string(),
                ),
                ("FORMS_S3_ENDPOINT", format!("http://127.0.0.1:{port}")),
                ("FORMS_S3_BUCKET", "bench-files".to_string()),
                ("FORMS_S3_ACCESS_KEY_ID", "bench".to_string()),
                ("FORMS_S3_SECRET_ACCESS_KEY", "bench".to_string()),
                ("FORMS_S3_PATH_STYLE", "true".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            return (moto, vars);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("moto_server did not start");
}

fn main() {
    common::announce("files");
    let concurrency = setting("BENCH_CONCURRENCY", 8, 2) as usize;
    let seconds = setting("BENCH_SECONDS", 5, 1);
    let rounds = setting("BENCH_ROUNDS", 3, 1);
    let runtime = common::runtime();
    let cluster = BenchCluster::start_with(&runtime, true);
    let url = cluster.url.clone();
    runtime.block_on(async {
        let mut conn = db::connect_one(&url).await.expect("connect");
        for (name, files) in [("plain", false), ("files", true)] {
            let id = hymical_forms::testing::model::ids::EndpointId::parse(name).unwrap();
            let mut row = db::models::EndpointRow::new(id, name.to_string(), chrono::Utc::now());
            row.file_uploads = files.then(|| {
                serde_json::to_value(
                    hymical_forms::testing::model::files::FileUploadSettings::default(),
                )
                .unwrap()
            });
            db::endpoints::insert(&mut conn, &row, None)
                .await
                .expect("endpoint");
        }
    });
    let multipart_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let arms = [
        Arm {
            name: "urlencoded (baseline)",
            path: "/f/plain",
            content_type: "application/x-www-form-urlencoded".into(),
            body: urlencoded().into(),
            file_bytes: 0,
        },
        Arm {
            name: "multipart, endpoint without files",
            path: "/f/plain",
            content_type: multipart_type.clone(),
            body: multipart(false).into(),
            file_bytes: 0,
        },
        Arm {
            name: "multipart, no file",
            path: "/f/files",
            content_type: multipart_type.clone(),
            body: multipart(false).into(),
            file_bytes: 0,
        },
        Arm {
            name: "multipart + 1 MB file, PostgreSQL",
            path: "/f/files",
            content_type: multipart_type.clone(),
            body: multipart(true).into(),
            file_bytes: FILE_BYTES,
        },
    ];
    let s3_arm = Arm {
        name: "multipart + 1 MB file, S3 (moto)",
        path: "/f/files",
        content_type: multipart_type,
        body: multipart(true).into(),
        file_bytes: FILE_BYTES,
    };
    runtime.block_on(async {
        let server = serve(&url, &[]).await;
        let moto = match moto_binary() {
            Some(binary) => Some(start_moto(&binary).await),
            None => {
                println!("S3 arm not run: moto_server is not installed (`cargo xtask setup` installs it)");
                None
            }
        };
        let s3_server = match &moto {
            Some((_, vars)) => Some(serve(&url, vars).await),
            None => None,
        };
        println!(
            "files benchmark: {concurrency} connections, {seconds} s per arm, {rounds} rounds, durable commits"
        );
        let mut totals: Vec<(String, Vec<Measured>)> = Vec::new();
        for round in 0..rounds {
            let mut order: Vec<(&Arm, &Serve)> = arms.iter().map(|arm| (arm, &server)).collect();
            if let Some(s3) = &s3_server {
                order.push((&s3_arm, s3));
            }
            if round % 2 == 1 {
                order.reverse();
            }
            for (arm, target) in order {
                let measured = run_arm(target, arm, concurrency, seconds).await;
                println!(
                    "round {round} {:<36} {:>8.1}/s  {:>6.1} MB/s  p50 {:>6.1} ms  p99 {:>6.1} ms  RSS peak +{:>5.1} MB  VmHWM {:>6.1} MB",
                    arm.name,
                    measured.accepted as f64 / measured.seconds,
                    (measured.accepted as f64 * arm.file_bytes as f64) / measured.seconds / 1e6,
                    measured.p50_ms,
                    measured.p99_ms,
                    measured.peak_growth_mb,
                    measured.high_water_mb,
                );
                match totals.iter_mut().find(|(name, _)| name == arm.name) {
                    Some((_, list)) => list.push(measured),
                    None => totals.push((arm.name.to_string(), vec![measured])),
                }
                empty_files(&url).await;
            }
        }
        let rate = |list: &[Measured]| {
            list.iter().map(|m| m.accepted as f64).sum::<f64>()
                / list.iter().map(|m| m.seconds).sum::<f64>()
        };
        for (name, list) in &totals {
            require(rate(list) > 0.0, &format!("files: forms accepted, {name}"));
        }
        let baseline = rate(&totals[0].1);
        println!("\nmeans over the rounds (× the urlencoded baseline of the same run):");
        for (name, list) in &totals {
            let peak = list.iter().map(|m| m.peak_growth_mb).fold(0.0, f64::max);
            let p99 = list.iter().map(|m| m.p99_ms).fold(0.0, f64::max);
            println!(
                "  {name:<36} {:>8.1}/s  {:>5.2}×  worst p99 {p99:.1} ms  worst RSS peak +{peak:.1} MB",
                rate(list),
                rate(list) / baseline
            );
        }
        drop(s3_server);
        drop(server);
        drop(moto);
    });
}

/// Empties the files' tables between arms, so the database stays small.
async fn empty_files(url: &Secret) {
    use diesel_async::RunQueryDsl;
    let mut conn = db::connect_one(url).await.expect("connect");
    diesel::sql_query("TRUNCATE submission_file_chunks, submission_files")
        .execute(&mut conn)
        .await
        .expect("truncate");
}
