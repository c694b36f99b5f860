//! What the benchmarks share: a throwaway PostgreSQL cluster, pgbench, CPU accounting.

#![allow(dead_code)] // each benchmark uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

use hymical_forms::config::Secret;
use hymical_forms::db::{self, cluster};

pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A migrated database on a throwaway cluster, deleted when the benchmark exits.
pub struct BenchCluster {
    pub url: Secret,
    pub root: PathBuf,
    pub bin_dir: PathBuf,
    _server: Option<cluster::RunningServer>,
}

impl BenchCluster {
    pub fn start(runtime: &tokio::runtime::Runtime) -> BenchCluster {
        let root =
            std::env::temp_dir().join(format!("hymical-bench-{}", uuid::Uuid::new_v4().simple()));
        let cluster = cluster::Cluster::new(&root).expect("PostgreSQL server binaries");
        cluster.hand_root_to_server_user().expect("cluster dir");
        cluster.initialize().expect("initdb");
        // Durable storage is not what is compared (both sides would wait on the same
        // fsync); with synchronous_commit off the ratio shows the cost of our own code.
        let settings = cluster::ServerSettings {
            extra: vec![
                ("synchronous_commit".into(), "off".into()),
                ("max_connections".into(), "300".into()),
            ],
            remove_after_stop: true,
        };
        let (started, connection) = cluster.ensure_running(&settings).expect("start PostgreSQL");
        let server = match started {
            cluster::Started::ByUs(server) => Some(server),
            cluster::Started::AlreadyRunning => None,
        };
        let url = connection.url(cluster::DATABASE);
        runtime.block_on(async {
            db::create_database_if_missing(&connection.url("postgres"), cluster::DATABASE)
                .await
                .expect("database");
            db::migrations::run_pending(&url).await.expect("migrate");
        });
        BenchCluster {
            url,
            root,
            bin_dir: cluster::find_bin_dir().expect("bin dir"),
            _server: server,
        }
    }

    /// Writes a pgbench script readable by the server's user.
    pub fn script(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root.join(name);
        std::fs::write(&path, text).expect("script");
        let _ =
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644));
        path
    }

    /// Runs pgbench with `args` (plus `-n -M prepared -j 2`) and returns its tps.
    pub fn pgbench(&self, script: &Path, args: &[String]) -> f64 {
        let output = Command::new(self.bin_dir.join("pgbench"))
            .args(["-n", "-M", "prepared", "-j", "2"])
            .args(args)
            .arg("-f")
            .arg(script)
            .arg(self.url.expose())
            .output()
            .expect("run pgbench");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
            .lines()
            .find(|line| line.starts_with("tps = "))
            .and_then(|line| line.trim_start_matches("tps = ").split_whitespace().next())
            .and_then(|tps| tps.parse().ok())
            .expect("pgbench tps line")
    }
}

/// (CPU seconds of this process, busy CPU seconds of the whole machine).
pub fn cpu_seconds() -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let own = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = own
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let own_ticks: f64 = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    let all = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<f64> = all
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let busy: f64 = cpu
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    (own_ticks / ticks, busy / ticks)
}
