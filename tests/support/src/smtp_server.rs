//! A real SMTP server on loopback for tests: tests/smtp-server/serve.py (aiosmtpd, Debian's
//! python3-aiosmtpd, installed by `cargo xtask setup`), started with its script flags, its
//! accepted messages read back from its spool. Shared by the integration and fault suites.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

/// Debian's interpreter, explicitly: a pyenv `python3` first on PATH does not see the
/// packages apt installs (python3-aiosmtpd).
const PYTHON: &str = "/usr/bin/python3";

/// A running serve.py, killed when dropped.
pub struct SmtpServer {
    child: Child,
    /// Kept open: the server's standard output stays a live pipe.
    _stdout: BufReader<ChildStdout>,
    port: u16,
    spool: tempfile::TempDir,
}

impl SmtpServer {
    pub fn start(args: &[&str]) -> SmtpServer {
        let spool = tempfile::tempdir().unwrap();
        let log_path = spool.path().join("server.log");
        let script = crate::harness::repo_root().join("tests/smtp-server/serve.py");
        let mut child = Command::new(PYTHON)
            .arg(script)
            .arg("--spool")
            .arg(spool.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "{PYTHON} cannot run ({error}): apt-get install python3-aiosmtpd \
                     (`cargo xtask setup` does)"
                )
            });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first_line = String::new();
        stdout.read_line(&mut first_line).unwrap();
        let Ok(port) = first_line.trim().parse() else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the SMTP server did not start; is aiosmtpd installed? apt-get install \
                 python3-aiosmtpd (`cargo xtask setup` does). Its output:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        };
        SmtpServer {
            child,
            _stdout: stdout,
            port,
            spool,
        }
    }

    /// The messages it accepted, in order: the summary serve.py wrote, with the raw bytes
    /// under "raw".
    pub fn messages(&self) -> Vec<Value> {
        let mut summaries: Vec<PathBuf> = std::fs::read_dir(self.spool.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        summaries.sort();
        summaries
            .iter()
            .map(|path| {
                let mut summary: Value =
                    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
                let raw = std::fs::read(path.with_extension("eml")).unwrap();
                summary["raw"] = Value::String(String::from_utf8(raw).unwrap());
                summary
            })
            .collect()
    }

    pub fn port(&self) -> String {
        self.port.to_string()
    }

    /// `FORMS_SMTP_*` for this server (plaintext: it is on loopback), a sender and a short
    /// timeout: what a server needs to send email.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FORMS_SMTP_HOST", "127.0.0.1".into()),
            ("FORMS_SMTP_PORT", self.port()),
            ("FORMS_SMTP_TLS", "none".into()),
            (
                "FORMS_SMTP_FROM",
                "Hymical Forms <forms@example.com>".into(),
            ),
            ("FORMS_SMTP_TIMEOUT_SECONDS", "3".into()),
        ]
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
