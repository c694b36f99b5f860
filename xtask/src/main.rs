//! `cargo xtask`: the project's tasks, written in Rust so that the README's commands are
//! cargo commands (the alias is in `.cargo/config.toml`).
//!
//! The test suite runs real programs that `cargo test` cannot build or install: a
//! PostgreSQL server, pg_auto_failover, iptables, PgBouncer, Chromium and its WebDriver,
//! libfaketime, Node.js and npm, Python 3 with venv, aiosmtpd, systemd-analyze.
//! `cargo xtask setup` looks for each of them and installs the Debian packages of the
//! missing ones in one `apt-get install` (as root; otherwise it prints the command to
//! run). Then it looks for moto's S3 server (PyPI, not a Debian package) and, when
//! missing, installs it with pip into a virtualenv under `target/` (tests/s3-server/).
//! `cargo xtask test [ARGS…]` does the same, then
//! `cargo test [ARGS…]` and, without ARGS, every benchmark in its smoke configuration
//! (`cargo test --bench '*'`: seconds each, failing when one produced no figures) and a
//! short coverage-guided fuzzing pass: the README's second command, and what CI runs.
//! Standard library only, so that it builds in seconds, before anything else.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};

const USAGE: &str = "\
usage: cargo xtask setup           install the programs the test suite needs (Debian packages)
       cargo xtask test [ARGS…]    setup, then `cargo test [ARGS…]`; without ARGS, then every
                                   benchmark in its smoke configuration (`cargo test --bench '*'`)
                                   and a 15-second coverage-guided fuzzing pass (`fuzz/run 15`)";

/// Seconds per fuzz target in the pass after the test suite (the long run is `fuzz/run`).
const FUZZ_SECONDS: &str = "15";

/// A program the test suite runs, and the Debian packages that provide it.
struct Need {
    name: &'static str,
    packages: &'static [&'static str],
    /// Where it is, if it is.
    find: fn() -> Option<String>,
}

const NEEDS: &[Need] = &[
    Need {
        name: "PostgreSQL server (initdb, postgres)",
        packages: &["postgresql"],
        find: postgres_server,
    },
    Need {
        name: "pg_auto_failover (pg_autoctl and its monitor extension, PostgreSQL 15)",
        packages: &["postgresql-15-auto-failover", "pg-auto-failover-cli"],
        find: pg_auto_failover,
    },
    Need {
        name: "iptables (the failover test cuts a node off on loopback)",
        packages: &["iptables"],
        find: iptables,
    },
    Need {
        name: "node",
        packages: &["nodejs"],
        find: node,
    },
    Need {
        name: "npm",
        packages: &["npm"],
        find: npm,
    },
    Need {
        name: "libfaketime",
        packages: &["faketime"],
        find: libfaketime,
    },
    Need {
        name: "pgbouncer",
        packages: &["pgbouncer"],
        find: pgbouncer,
    },
    Need {
        name: "python3",
        packages: &["python3"],
        find: python3,
    },
    Need {
        name: "python3 venv and ensurepip",
        packages: &["python3-venv"],
        find: python3_venv,
    },
    Need {
        name: "aiosmtpd, for Debian's /usr/bin/python3",
        packages: &["python3-aiosmtpd"],
        find: aiosmtpd,
    },
    Need {
        name: "chromium",
        packages: &["chromium"],
        find: chromium,
    },
    Need {
        name: "chromedriver",
        packages: &["chromium-driver"],
        find: chromedriver,
    },
    Need {
        name: "systemd-analyze",
        packages: &["systemd"],
        find: systemd_analyze,
    },
];

/// Why a task failed: a message of ours, or a command's exit code to pass on.
enum Failure {
    Message(String),
    Exit(u8),
}

fn main() -> ExitCode {
    let mut args = env::args_os().skip(1);
    let task = args.next();
    let rest: Vec<OsString> = args.collect();
    let result = match task.as_ref().and_then(|task| task.to_str()) {
        Some("setup") if rest.is_empty() => setup(),
        Some("test") => setup().and_then(|()| test(&rest)),
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Message(message)) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
        Err(Failure::Exit(code)) => ExitCode::from(code),
    }
}

/// Finds every program the test suite needs; installs the packages of the missing ones
/// when root, otherwise prints the command that would.
fn setup() -> Result<(), Failure> {
    debian_packages()?;
    moto_server()
}

/// The Debian packages of [`NEEDS`].
fn debian_packages() -> Result<(), Failure> {
    println!("xtask: the programs the test suite needs");
    let packages = missing_packages();
    if packages.is_empty() {
        println!("xtask: nothing to install");
        return Ok(());
    }
    let list = packages.join(" ");
    if !is_root() {
        return Err(Failure::Message(format!(
            "missing Debian packages: {list}\n\
             run as root, `cargo xtask setup` installs them; otherwise install them with\n\
             \n    sudo apt-get install -y --no-install-recommends {list}\n\n\
             (after `sudo apt-get update` if apt cannot find them), then run this again"
        )));
    }
    println!("xtask: installing {list}");
    apt_get(&["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(packages.iter().map(String::as_str));
    apt_get(&install)?;
    println!("xtask: after installing");
    let still = missing_packages();
    if still.is_empty() {
        println!("xtask: installed {list}");
        Ok(())
    } else {
        Err(Failure::Message(format!(
            "still missing after `apt-get install {list}`: the packages {} did not provide \
             what the test suite needs (see the lines above)",
            still.join(" ")
        )))
    }
}

/// Prints a line per program, found or missing; returns the packages of the missing ones,
/// each once, in order.
fn missing_packages() -> Vec<String> {
    let mut packages: Vec<String> = Vec::new();
    for need in NEEDS {
        match (need.find)() {
            Some(place) => println!("  found    {}: {place}", need.name),
            None => {
                println!(
                    "  MISSING  {} (Debian: {})",
                    need.name,
                    need.packages.join(" ")
                );
                for package in need.packages {
                    if !packages.iter().any(|p| p == package) {
                        packages.push((*package).to_string());
                    }
                }
            }
        }
    }
    packages
}

fn apt_get(args: &[&str]) -> Result<(), Failure> {
    println!("xtask: apt-get {}", args.join(" "));
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| {
            Failure::Message(format!(
                "apt-get could not run ({e}): install the packages above with this \
                 system's package manager"
            ))
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::Message(format!(
            "apt-get {} failed ({})",
            args.join(" "),
            describe(status)
        )))
    }
}

/// `cargo test ARGS`, with the cargo that runs this task; without ARGS, then the short
/// fuzzing pass.
fn test(args: &[OsString]) -> Result<(), Failure> {
    let root = workspace_root();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let shown: Vec<_> = args.iter().map(|arg| arg.to_string_lossy()).collect();
    println!("xtask: cargo test {}", shown.join(" "));
    run(Command::new(&cargo)
        .arg("test")
        .args(args)
        .current_dir(&root))?;
    if args.is_empty() {
        // Every benchmark (benches/*.rs) in its smoke configuration: seconds each, so that
        // one whose set-up no longer matches the product fails here rather than printing
        // empty figures months later (docs/BENCHMARKS.md). `cargo test` runs a
        // `harness = false` benchmark's `main` without `--bench`, which selects the smoke
        // configuration; BENCH_SMOKE=1 says so explicitly.
        println!("xtask: BENCH_SMOKE=1 cargo test --no-fail-fast --bench '*'");
        run(Command::new(&cargo)
            .args(["test", "--no-fail-fast", "--bench", "*"])
            .env("BENCH_SMOKE", "1")
            .current_dir(&root))?;
        // The long run is `fuzz/run` alone (docs/RELIABILITY.md).
        println!("xtask: fuzz/run {FUZZ_SECONDS}");
        run(Command::new(root.join("fuzz/run"))
            .arg(FUZZ_SECONDS)
            .current_dir(&root))?;
    }
    Ok(())
}

/// Where `cargo xtask setup` installs moto's S3 server when none is found, and where the
/// tests look for it first (tests/s3-server/README.md).
fn moto_venv() -> PathBuf {
    workspace_root().join("target/moto-venv")
}

/// moto's S3 server, for the file-upload tests: found in the virtualenv or on PATH, or
/// installed with pip (pinned in tests/s3-server/requirements.txt) into the virtualenv,
/// which needs only python3 with venv (a Debian package of [`NEEDS`], installed first).
fn moto_server() -> Result<(), Failure> {
    let in_venv = moto_venv().join("bin/moto_server");
    if is_executable(&in_venv) {
        println!(
            "  found    moto_server (PyPI moto[server]): {}",
            in_venv.display()
        );
        return Ok(());
    }
    if let Some(path) = on_path("moto_server") {
        println!(
            "  found    moto_server (PyPI moto[server]): {}",
            path.display()
        );
        return Ok(());
    }
    println!(
        "  MISSING  moto_server (PyPI moto[server]): installing into {}",
        moto_venv().display()
    );
    run(Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(moto_venv()))?;
    run(Command::new(moto_venv().join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(workspace_root().join("tests/s3-server/requirements.txt")))?;
    if is_executable(&in_venv) {
        println!("xtask: installed moto_server");
        Ok(())
    } else {
        Err(Failure::Message(format!(
            "pip installed moto[server] but {} is not there",
            in_venv.display()
        )))
    }
}

/// Runs a command with this process's stdio, without the variables `cargo run` gave this
/// process; a failure passes its exit code on.
fn run(command: &mut Command) -> Result<(), Failure> {
    let program = command.get_program().to_string_lossy().into_owned();
    let status = without_package_vars(command)
        .status()
        .map_err(|e| Failure::Message(format!("{program} could not run: {e}")))?;
    if status.success() {
        return Ok(());
    }
    eprintln!("xtask: {program} failed ({})", describe(status));
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    };
    Err(Failure::Exit(if code == 0 { 1 } else { code }))
}

/// `cargo run` hands this process the variables of its package (`CARGO_PKG_NAME=xtask`,
/// `CARGO_MANIFEST_DIR`, …). A cargo started with them would rebuild what watches them
/// (ring's build script, the crate itself), and the next plain `cargo test` all over again.
fn without_package_vars(command: &mut Command) -> &mut Command {
    for (key, _) in env::vars_os() {
        let name = key.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                name.as_ref(),
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            command.env_remove(&key);
        }
    }
    command
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// The repository's root: the directory above this package's.
fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

/// The effective user is root (`id -u`: no libc binding in a std-only package).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success() && output.stdout.trim_ascii() == b"0")
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// `command -v`: the first executable of that name in a PATH directory.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn found(path: &Path) -> Option<String> {
    Some(path.display().to_string())
}

/// A directory with both `initdb` and `postgres`, looked for as the service does: through
/// `pg_config --bindir`, then PATH, then Debian's /usr/lib/postgresql/*/bin.
fn postgres_server() -> Option<String> {
    let has_server =
        |dir: &Path| is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"));
    if let Some(pg_config) = on_path("pg_config") {
        if let Ok(output) = Command::new(pg_config)
            .arg("--bindir")
            .stderr(Stdio::null())
            .output()
        {
            let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
            if output.status.success() && has_server(&dir) {
                return found(&dir);
            }
        }
    }
    if let Some(dir) = env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .find(|dir| has_server(dir))
    {
        return found(&dir);
    }
    let mut dirs: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|dir| has_server(dir))
        .collect();
    dirs.sort();
    dirs.last().and_then(|dir| found(dir))
}

fn node() -> Option<String> {
    on_path("node").as_deref().and_then(found)
}

fn npm() -> Option<String> {
    on_path("npm").as_deref().and_then(found)
}

/// The preload library, under /usr/lib/MULTIARCH/faketime/ or /usr/lib/faketime/.
fn libfaketime() -> Option<String> {
    let mut dirs: Vec<PathBuf> = fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("faketime"))
        .collect();
    dirs.sort();
    dirs.push(PathBuf::from("/usr/lib/faketime"));
    dirs.iter()
        .map(|dir| dir.join("libfaketime.so.1"))
        .find(|library| library.is_file())
        .as_deref()
        .and_then(found)
}

/// Debian installs it in /usr/sbin, which a user's PATH may lack.
fn pgbouncer() -> Option<String> {
    on_path("pgbouncer")
        .or_else(|| Some(PathBuf::from("/usr/sbin/pgbouncer")).filter(|p| is_executable(p)))
        .as_deref()
        .and_then(found)
}

/// The failover test (tests/faults/failover.rs) runs a pg_auto_failover formation: the
/// `pg_autoctl` program and the monitor's extension for the PostgreSQL 15 it runs.
fn pg_auto_failover() -> Option<String> {
    let extension = Path::new("/usr/share/postgresql/15/extension/pgautofailover.control");
    let program = on_path("pg_autoctl")?;
    extension.exists().then(|| program.display().to_string())
}

/// tests/faults/failover.rs drops a node's packets with it. Debian installs it in
/// /usr/sbin, which a user's PATH may lack.
fn iptables() -> Option<String> {
    on_path("iptables")
        .or_else(|| Some(PathBuf::from("/usr/sbin/iptables")).filter(|p| is_executable(p)))
        .as_deref()
        .and_then(found)
}

fn python3() -> Option<String> {
    on_path("python3").as_deref().and_then(found)
}

/// The test suite makes a venv (with pip, through ensurepip) for the Python verifier.
fn python3_venv() -> Option<String> {
    let ok = Command::new("python3")
        .args(["-c", "import ensurepip, venv"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    ok.then(|| "python3 -c 'import ensurepip, venv'".to_string())
}

/// tests/integration/email.rs sends mail to an aiosmtpd server (tests/smtp-server/serve.py).
/// Checked, and run by the tests, with /usr/bin/python3, the interpreter apt installs
/// packages for: a pyenv or virtualenv `python3` earlier on PATH does not see Debian's
/// dist-packages, so `python3 -c 'import aiosmtpd'` would call it missing after every
/// install.
fn aiosmtpd() -> Option<String> {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import aiosmtpd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    ok.then(|| "/usr/bin/python3 -c 'import aiosmtpd'".to_string())
}

fn chromium() -> Option<String> {
    on_path("chromium").as_deref().and_then(found)
}

fn chromedriver() -> Option<String> {
    let path = Path::new("/usr/bin/chromedriver");
    if is_executable(path) {
        found(path)
    } else {
        None
    }
}

/// tests/integration/operations.rs verifies the example systemd unit with it.
fn systemd_analyze() -> Option<String> {
    on_path("systemd-analyze").as_deref().and_then(found)
}
