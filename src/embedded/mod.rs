//! A private PostgreSQL cluster run from the machine's server binaries (used when
//! `FORMS_DATABASE_URL` is unset). The same code starts the throwaway cluster of the test harness.
//!
//! Layout under the data directory:
//! - `pgdata/`: the cluster, owned by the user PostgreSQL runs as;
//! - `superuser-password`: the generated password of the `hymical` role (mode 0600);
//! - `postgres.log`: the server's own log.
//!
//! The server is started through a small supervising shell whose standard input is a pipe
//! held by this process. However this process ends (return, panic, SIGKILL), the pipe
//! closes, the shell wakes up and asks PostgreSQL for a fast shutdown; nothing is left
//! running. The server gets its own process group, so a Ctrl-C in the terminal reaches only
//! this process, which can then finish recording in-flight work before the server stops.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use rand::RngCore;

use crate::config::Secret;

/// The role and database the embedded cluster is used through.
pub const ROLE: &str = "hymical";
pub const DATABASE: &str = "hymical";

const INSTALL_HINT: &str = "PostgreSQL's server binaries (initdb and postgres) were not found through `pg_config --bindir`, PATH or /usr/lib/postgresql/*/bin: install the PostgreSQL server (Debian/Ubuntu: `apt-get install postgresql`; Fedora: `dnf install postgresql-server`; macOS: `brew install postgresql`), or set FORMS_DATABASE_URL to use an existing server";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{INSTALL_HINT}")]
    BinariesMissing,
    #[error("running as root, the embedded PostgreSQL runs as the unprivileged user `postgres`, which does not exist on this machine: install the PostgreSQL server package (it creates the user) or set FORMS_DATABASE_URL")]
    NoUnprivilegedUser,
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Failed(String),
}

impl ClusterError {
    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
        let context = context.into();
        move |source| ClusterError::Io { context, source }
    }
}

/// Knobs that differ between a service's cluster and a test run's throwaway one.
#[derive(Debug, Clone, Default)]
pub struct ServerSettings {
    /// Extra `-c name=value` settings, for example durability off in tests.
    pub extra: Vec<(String, String)>,
    /// Delete the whole cluster directory once the server has stopped (test runs).
    pub remove_after_stop: bool,
    /// Listen on this port instead of a free one chosen at start (a test that stops the
    /// server and starts it again where its clients expect it).
    pub port: Option<u16>,
}

impl ServerSettings {
    /// For throwaway clusters: no fsync, many connections for parallel tests.
    #[cfg(any(test, feature = "testing"))]
    pub fn throwaway() -> Self {
        let extra = [
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("full_page_writes", "off"),
            ("max_connections", "400"),
        ];
        ServerSettings {
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            remove_after_stop: true,
            port: None,
        }
    }
}

/// The user the server runs as: ourselves, or `postgres` when we are root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
    switch: bool,
}

impl RunAs {
    fn detect() -> Result<RunAs, ClusterError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(RunAs {
                uid: nix::unistd::getuid().as_raw(),
                gid: nix::unistd::getgid().as_raw(),
                switch: false,
            });
        }
        let user = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .ok_or(ClusterError::NoUnprivilegedUser)?;
        Ok(RunAs {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            switch: true,
        })
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        if self.switch {
            command.uid(self.uid).gid(self.gid);
        }
        command
    }

    /// Whether this user may traverse every existing directory down to `path` (the parts
    /// that do not exist yet are created by us, reachable).
    fn can_reach(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        path.ancestors().all(|dir| {
            let Ok(meta) = fs::metadata(dir) else {
                return true;
            };
            let mode = meta.mode();
            if meta.uid() == self.uid {
                mode & 0o100 != 0
            } else if meta.gid() == self.gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            }
        })
    }

    fn give(&self, path: &Path) -> Result<(), ClusterError> {
        if self.switch {
            std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)).map_err(
                ClusterError::io(format!(
                    "cannot hand {} to the postgres user",
                    path.display()
                )),
            )?;
        }
        Ok(())
    }
}

/// A cluster directory, initialised or not.
#[derive(Debug, Clone)]
pub struct Cluster {
    root: PathBuf,
    /// The directory asked for, when the server's user cannot reach it and the cluster
    /// lives under [`RELOCATION_BASE`] instead.
    relocated_from: Option<PathBuf>,
    bin_dir: PathBuf,
    run_as: RunAs,
}

/// Where a root-run cluster lives when `postgres` cannot reach the directory asked for
/// (a checkout under `/root`, mode 0700, say): one directory per requested path.
const RELOCATION_BASE: &str = "/var/lib/hymical-forms";

/// How to reach a running cluster.
#[derive(Debug, Clone)]
pub struct Connection {
    pub port: u16,
    pub password: Secret,
}

impl Connection {
    pub fn url(&self, database: &str) -> Secret {
        Secret::new(format!(
            "postgres://{ROLE}:{}@127.0.0.1:{}/{database}",
            self.password.expose(),
            self.port
        ))
    }
}

/// A server this process started. Dropping it (or exiting in any way) stops the server;
/// [`RunningServer::stop`] does so and waits for it.
#[derive(Debug)]
pub struct RunningServer {
    supervisor: Child,
    stdin: Option<ChildStdin>,
}

impl RunningServer {
    /// Asks for a fast shutdown and waits for the server to exit.
    pub fn stop(mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match self.supervisor.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = self.supervisor.kill();
        let _ = self.supervisor.wait();
    }
}

/// Whether `ensure_running` started the server or found one already running (for example
/// a `serve` in another terminal while `keys create` runs).
#[derive(Debug)]
pub enum Started {
    ByUs(RunningServer),
    AlreadyRunning,
}

impl Cluster {
    /// Locates the binaries and the user to run as; touches nothing on disk.
    pub fn new(root: &Path) -> Result<Cluster, ClusterError> {
        let root = std::path::absolute(root).map_err(ClusterError::io(format!(
            "cannot resolve {}",
            root.display()
        )))?;
        let run_as = RunAs::detect()?;
        let (root, relocated_from) = if run_as.switch && !run_as.can_reach(&root) {
            (relocation_for(&root), Some(root))
        } else {
            (root, None)
        };
        Ok(Cluster {
            root,
            relocated_from,
            bin_dir: find_bin_dir()?,
            run_as,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory asked for, if the cluster had to live elsewhere (see [`Cluster::new`]).
    pub fn relocated_from(&self) -> Option<&Path> {
        self.relocated_from.as_deref()
    }

    #[cfg(any(test, feature = "testing"))]
    /// Gives the cluster directory itself to the server's user, so the supervisor can
    /// remove it after the server stops (see `ServerSettings::remove_after_stop`).
    pub fn hand_root_to_server_user(&self) -> Result<(), ClusterError> {
        fs::create_dir_all(&self.root).map_err(ClusterError::io(format!(
            "cannot create {}",
            self.root.display()
        )))?;
        self.run_as.give(&self.root)
    }

    #[cfg(any(test, feature = "testing"))]
    /// A streaming standby of this cluster's running server (reached through `primary`)
    /// in `root`, made by `pg_basebackup` as the server's user, with the same superuser
    /// password; started with [`Cluster::ensure_running`] like any cluster (the read
    /// replica tests).
    pub fn standby_at(&self, primary: &Connection, root: &Path) -> Result<Cluster, ClusterError> {
        let standby = Cluster {
            root: std::path::absolute(root).map_err(ClusterError::io(format!(
                "cannot resolve {}",
                root.display()
            )))?,
            relocated_from: None,
            bin_dir: self.bin_dir.clone(),
            run_as: self.run_as,
        };
        standby.hand_root_to_server_user()?;
        fs::set_permissions(&standby.root, fs::Permissions::from_mode(0o755)).map_err(
            ClusterError::io(format!(
                "cannot set permissions on {}",
                standby.root.display()
            )),
        )?;
        write_private(&standby.password_file(), primary.password.expose())?;
        let output = self
            .run_as
            .command(self.bin_dir.join("pg_basebackup"))
            .arg("--pgdata")
            .arg(standby.pgdata())
            // standby.signal and primary_conninfo (with the password given here).
            .args([
                "--write-recovery-conf",
                "--wal-method=stream",
                "--checkpoint=fast",
            ])
            .arg("--dbname")
            .arg(format!(
                "host=127.0.0.1 port={} user={ROLE} password={}",
                primary.port,
                primary.password.expose()
            ))
            .current_dir(&standby.root)
            .output()
            .map_err(ClusterError::io("cannot run pg_basebackup"))?;
        if !output.status.success() {
            return Err(ClusterError::Failed(format!(
                "pg_basebackup failed ({}): {}",
                output.status,
                last_lines(&String::from_utf8_lossy(&output.stderr), 5)
            )));
        }
        Ok(standby)
    }

    fn pgdata(&self) -> PathBuf {
        self.root.join("pgdata")
    }

    fn password_file(&self) -> PathBuf {
        self.root.join("superuser-password")
    }

    pub fn is_initialized(&self) -> bool {
        self.pgdata().join("PG_VERSION").is_file()
    }

    /// Creates the cluster with `initdb` unless it exists. Returns whether it was created.
    pub fn initialize(&self) -> Result<bool, ClusterError> {
        if self.is_initialized() {
            return Ok(false);
        }
        fs::create_dir_all(&self.root).map_err(ClusterError::io(format!(
            "cannot create {}",
            self.root.display()
        )))?;
        // The server's user must be able to reach pgdata through this directory (and,
        // relocated, through the base it lives in, whatever the umask made of it).
        if self.relocated_from.is_some() {
            fs::set_permissions(RELOCATION_BASE, fs::Permissions::from_mode(0o755)).map_err(
                ClusterError::io(format!("cannot set permissions on {RELOCATION_BASE}")),
            )?;
        }
        fs::set_permissions(&self.root, fs::Permissions::from_mode(0o755)).map_err(
            ClusterError::io(format!("cannot set permissions on {}", self.root.display())),
        )?;
        // initdb writes into a directory of its own that becomes `pgdata` only once it
        // succeeded: a first start that fails or is killed leaves no half-made cluster, and
        // the next start begins again from nothing.
        let pgdata = self.pgdata();
        let partial = self.root.join("pgdata.partial");
        if partial.exists() {
            fs::remove_dir_all(&partial).map_err(ClusterError::io(format!(
                "cannot remove {} (left by an interrupted first start)",
                partial.display()
            )))?;
        }
        if pgdata.exists() {
            return Err(ClusterError::Failed(format!(
                "{} exists but holds no initialised cluster: move it away and start again",
                pgdata.display()
            )));
        }
        fs::create_dir(&partial).map_err(ClusterError::io(format!(
            "cannot create {}",
            partial.display()
        )))?;
        fs::set_permissions(&partial, fs::Permissions::from_mode(0o700))
            .map_err(ClusterError::io("cannot restrict pgdata"))?;
        let initialized = self.run_initdb(&partial);
        let renamed = initialized.and_then(|()| {
            fs::rename(&partial, &pgdata).map_err(ClusterError::io(format!(
                "cannot move the new cluster to {}",
                pgdata.display()
            )))
        });
        if let Err(error) = renamed {
            let _ = fs::remove_dir_all(&partial);
            let _ = fs::remove_file(self.password_file());
            return Err(error);
        }
        Ok(true)
    }

    /// initdb into `target` (an empty directory), as the server's user.
    fn run_initdb(&self, target: &Path) -> Result<(), ClusterError> {
        self.run_as.give(target)?;
        let password = generate_password();
        write_private(&self.password_file(), password.expose())?;
        // initdb reads the password from a file the server's user can read; it lives only
        // for the duration of initdb.
        let pwfile = self.root.join(".initdb-password");
        write_private(&pwfile, password.expose())?;
        self.run_as.give(&pwfile)?;
        let output = self
            .run_as
            .command(self.bin_dir.join("initdb"))
            .arg("--pgdata")
            .arg(target)
            .args([
                "--username",
                ROLE,
                "--auth",
                "scram-sha-256",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .current_dir(&self.root)
            .output();
        let _ = fs::remove_file(&pwfile);
        let output = output.map_err(ClusterError::io("cannot run initdb"))?;
        if !output.status.success() {
            return Err(ClusterError::Failed(format!(
                "initdb failed ({}): {}",
                output.status,
                last_lines(&String::from_utf8_lossy(&output.stderr), 5)
            )));
        }
        Ok(())
    }

    fn password(&self) -> Result<Secret, ClusterError> {
        let password = fs::read_to_string(self.password_file()).map_err(ClusterError::io(
            format!("cannot read {}", self.password_file().display()),
        ))?;
        Ok(Secret::new(password.trim().to_string()))
    }

    /// The port of a server already running on this cluster, if one is.
    fn running_port(&self) -> Option<u16> {
        let contents = fs::read_to_string(self.pgdata().join("postmaster.pid")).ok()?;
        let lines: Vec<&str> = contents.lines().collect();
        let pid: i32 = lines.first()?.trim().parse().ok()?;
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        let ready = lines.get(7).map(|s| s.trim() == "ready").unwrap_or(false);
        if alive && ready {
            lines.get(3)?.trim().parse().ok()
        } else {
            None
        }
    }

    /// Starts the server unless one is running on this cluster already, and waits until it
    /// accepts connections.
    pub fn ensure_running(
        &self,
        settings: &ServerSettings,
    ) -> Result<(Started, Connection), ClusterError> {
        let password = self.password()?;
        if let Some(port) = self.running_port() {
            return Ok((Started::AlreadyRunning, Connection { port, password }));
        }
        let port = match settings.port {
            Some(port) => port,
            None => free_port()?,
        };
        let log_path = self.root.join("postgres.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(ClusterError::io(format!(
                "cannot open {}",
                log_path.display()
            )))?;
        let log_err = log
            .try_clone()
            .map_err(ClusterError::io("cannot duplicate the log handle"))?;
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);

        // The supervisor: run the server, wait for our end of the pipe to close, then ask
        // for a fast shutdown (SIGINT) and wait for it to finish.
        const SUPERVISOR: &str = r#""$@" &
server=$!
trap '' INT TERM HUP
while IFS= read -r _line; do :; done
kill -INT "$server" 2>/dev/null
wait "$server"
if [ -n "$HYMICAL_REMOVE_AFTER_STOP" ]; then rm -rf -- "$HYMICAL_REMOVE_AFTER_STOP"; fi"#;
        let mut command = self.run_as.command("/bin/sh");
        command
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("hymical-postgres-supervisor")
            .arg(self.bin_dir.join("postgres"))
            .arg("-D")
            .arg(self.pgdata())
            .arg("-p")
            .arg(port.to_string())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ]);
        for (name, value) in &settings.extra {
            command.arg("-c").arg(format!("{name}={value}"));
        }
        if settings.remove_after_stop {
            command.env("HYMICAL_REMOVE_AFTER_STOP", &self.root);
        }
        command
            .current_dir(&self.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .process_group(0);
        let mut supervisor = command
            .spawn()
            .map_err(ClusterError::io("cannot start the PostgreSQL server"))?;
        let stdin = supervisor.stdin.take();
        let server = RunningServer { supervisor, stdin };

        let deadline = Instant::now() + Duration::from_secs(60);
        let mut server = server;
        loop {
            if self.running_port() == Some(port) {
                return Ok((Started::ByUs(server), Connection { port, password }));
            }
            if let Ok(Some(status)) = server.supervisor.try_wait() {
                return Err(ClusterError::Failed(format!(
                    "the PostgreSQL server exited during start-up ({status}); its log {} ends with: {}",
                    log_path.display(),
                    log_tail(&log_path, log_start)
                )));
            }
            if Instant::now() > deadline {
                server.stop();
                return Err(ClusterError::Failed(format!(
                    "the PostgreSQL server did not become ready within 60 seconds; see {}",
                    log_path.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// The directory under [`RELOCATION_BASE`] for a requested data directory: its last part
/// (for a reader) and a digest of the whole path (so two checkouts never share a cluster).
fn relocation_for(requested: &Path) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(requested.as_os_str().as_encoded_bytes());
    let name: String = requested
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .collect();
    Path::new(RELOCATION_BASE).join(format!("{name}-{}", &hex::encode(digest)[..16]))
}

/// Finds a directory holding both `initdb` and `postgres`.
pub fn find_bin_dir() -> Result<PathBuf, ClusterError> {
    find_bin_dir_in(
        std::env::var_os("PATH").as_deref(),
        Path::new("/usr/lib/postgresql"),
    )
}

/// [`find_bin_dir`] with the places to look given, so the search can be tested.
pub fn find_bin_dir_in(
    path: Option<&std::ffi::OsStr>,
    versions_root: &Path,
) -> Result<PathBuf, ClusterError> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let pg_config = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("pg_config"))
        .find(|candidate| candidate.is_file());
    if let Some(output) =
        pg_config.and_then(|pg_config| Command::new(pg_config).arg("--bindir").output().ok())
    {
        if output.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
            if has_server(&dir) {
                return Ok(dir);
            }
        }
    }
    if let Some(path) = path {
        for dir in std::env::split_paths(path) {
            if has_server(&dir) {
                return Ok(dir);
            }
        }
    }
    // Debian and Ubuntu keep the server outside PATH; prefer the newest version.
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(versions_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_server(dir))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .ok_or(ClusterError::BinariesMissing)
}

fn generate_password() -> Secret {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    Secret::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn write_private(path: &Path, contents: &str) -> Result<(), ClusterError> {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(ClusterError::io(format!("cannot write {}", path.display())))?;
    file.write_all(contents.as_bytes())
        .map_err(ClusterError::io(format!("cannot write {}", path.display())))
}

fn free_port() -> Result<u16, ClusterError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(ClusterError::io("cannot find a free port for PostgreSQL"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(ClusterError::io("cannot find a free port for PostgreSQL"))
}

fn log_tail(path: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        use std::io::Seek;
        let _ = file.seek(std::io::SeekFrom::Start(from));
        let _ = file.read_to_string(&mut text);
    }
    last_lines(&text, 5)
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(count)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_say_what_to_install() {
        let empty = tempfile::tempdir().expect("tempdir");
        let error = find_bin_dir_in(Some(empty.path().as_os_str()), empty.path())
            .expect_err("nothing to find");
        assert!(matches!(error, ClusterError::BinariesMissing));
        let message = error.to_string();
        assert!(message.contains("apt-get install postgresql"), "{message}");
        assert!(message.contains("FORMS_DATABASE_URL"), "{message}");
    }

    #[test]
    fn versioned_directories_are_searched_newest_first() {
        let root = tempfile::tempdir().expect("tempdir");
        for version in ["13", "16", "notaversion"] {
            let bin = root.path().join(version).join("bin");
            fs::create_dir_all(&bin).unwrap();
            fs::write(bin.join("initdb"), "").unwrap();
            fs::write(bin.join("postgres"), "").unwrap();
        }
        let empty = tempfile::tempdir().expect("tempdir");
        let found = find_bin_dir_in(Some(empty.path().as_os_str()), root.path()).unwrap();
        assert_eq!(found, root.path().join("16").join("bin"));
    }

    #[test]
    fn path_is_searched_before_versioned_directories() {
        let on_path = tempfile::tempdir().expect("tempdir");
        fs::write(on_path.path().join("initdb"), "").unwrap();
        fs::write(on_path.path().join("postgres"), "").unwrap();
        let empty = tempfile::tempdir().expect("tempdir");
        let found = find_bin_dir_in(Some(on_path.path().as_os_str()), empty.path()).unwrap();
        assert_eq!(found, on_path.path());
    }
}
