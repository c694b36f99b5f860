//! The `hymical-forms` command line: the subcommands, opening the database (the operator's
//! or the embedded cluster) and the start-up rules.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

use crate::app::App;
use crate::auth;
use crate::clock::{format_timestamp, Clock, SystemClock};
use crate::config::{Config, Secret};
use crate::db;
use crate::embedded;
use crate::model::state::KeyRole;
use crate::services::{Plan, Services};
use crate::{delivery, graphql, http, telemetry};

#[derive(Debug, Parser)]
#[command(
    name = "hymical-forms",
    version,
    about = "Form backend and signed-webhook deliverer on PostgreSQL"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP server and the delivery workers (the default).
    #[command(after_help = crate::config::variables_help())]
    Serve,
    /// Apply pending database migrations.
    Migrate {
        /// List applied and pending migrations instead of applying them.
        #[arg(long, conflicts_with = "adopt")]
        status: bool,
        /// Take over a database the earlier Python service (hymical-forms 0.2) left at
        /// its Alembic revision 0006, then apply the newer migrations.
        #[arg(long)]
        adopt: bool,
    },
    /// Manage management API keys.
    Keys {
        #[command(subcommand)]
        action: KeysCommand,
    },
    /// Delete old submissions that no delivery still needs.
    Retention {
        /// Only count what would be deleted.
        #[arg(long)]
        dry_run: bool,
        /// Age in days (default: FORMS_SUBMISSION_RETENTION_DAYS).
        #[arg(long)]
        older_than_days: Option<u32>,
        /// Age in days of submissions in the spam folder (default:
        /// FORMS_SPAM_RETENTION_DAYS; 0 keeps them).
        #[arg(long)]
        spam_older_than_days: Option<u32>,
        /// Submissions deleted per statement.
        #[arg(long, default_value_t = 1000)]
        batch_size: u32,
    },
    /// Print the GraphQL schema (SDL).
    Schema,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key; it is printed once and never shown again.
    Create {
        #[arg(long)]
        name: String,
        /// `admin`: everything. `read`: queries and subscriptions only (a dashboard's key;
        /// every mutation and export is refused with `insufficient_role`).
        #[arg(long, default_value = "admin", value_parser = key_role)]
        role: KeyRole,
        /// The one project it sees (`prj_…`); left out: every project.
        #[arg(long)]
        project: Option<String>,
    },
    /// List keys (never the key itself).
    List,
    /// Revoke a key by its id (`mk_…`); revoking twice is harmless.
    Revoke { key_id: String },
}

fn key_role(text: &str) -> Result<KeyRole, String> {
    KeyRole::parse(text).ok_or_else(|| format!("{text:?} is not a role: admin or read"))
}

/// Exit status for a configuration that failed validation.
const EXIT_CONFIG: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve);
    if let Command::Schema = command {
        print!("{}", graphql::sdl());
        return ExitCode::SUCCESS;
    }
    if let Err(error) = dotenvy::dotenv() {
        if !error.not_found() {
            eprintln!("error: cannot read .env: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    }
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(errors) => {
            eprint!("{errors}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Command::Serve = command {
        if let Err(errors) = config.check_serve() {
            eprint!("{errors}");
            return ExitCode::from(EXIT_CONFIG);
        }
    }
    // Traces only when a collector is named: otherwise no exporter, no thread, no layer.
    let traces = match config.otlp_endpoint {
        Some(_) => {
            match telemetry::traces::start() {
                Ok(exporting) => Some(exporting),
                Err(error) => {
                    eprintln!("error: OTEL_EXPORTER_OTLP_ENDPOINT: cannot set up the trace exporter: {error}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            }
        }
        None => None,
    };
    telemetry::init(config.log_format, traces.as_ref());
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    for unknown in Config::unknown_variables(std::env::vars().map(|(name, _)| name)) {
        tracing::warn!(variable = %unknown, "unknown FORMS_ variable ignored");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let status = match runtime.block_on(run(command, config)) {
        Ok(()) => ExitCode::SUCCESS,
        // Once, through the log (standard error), so a JSON log stays one object a line.
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    };
    // Every service has stopped: the spans still buffered (the last attempts') are
    // exported before the process ends, outside the runtime (the exporter blocks).
    drop(runtime);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    status
}

async fn run(command: Command, config: Config) -> anyhow::Result<()> {
    let config_days = config.submission_retention_days;
    let config_spam_days = config.spam.spam_retention_days;
    if let Command::Retention {
        older_than_days, ..
    } = &command
    {
        if older_than_days.unwrap_or(config_days) == 0 {
            bail!("retention needs an age: pass --older-than-days D or set FORMS_SUBMISSION_RETENTION_DAYS (both are unset or 0)");
        }
    }
    let database = Database::open(&config, &command).await?;
    let result = match command {
        Command::Serve => serve(config, &database).await,
        Command::Migrate { status, adopt } => migrate(&database, status, adopt).await,
        Command::Keys { action } => keys(action, &database).await,
        Command::Retention {
            dry_run,
            older_than_days,
            spam_older_than_days,
            batch_size,
        } => {
            let days = older_than_days.unwrap_or(config_days);
            let spam_days = spam_older_than_days.unwrap_or(config_spam_days);
            retention_command(&config, days, spam_days, batch_size, dry_run, &database).await
        }
        Command::Schema => Ok(()),
    };
    database.close().await;
    result
}

/// The database a command works on: the operator's, or the embedded cluster.
struct Database {
    url: Secret,
    embedded: bool,
    server: Option<embedded::RunningServer>,
}

impl Database {
    async fn open(config: &Config, command: &Command) -> anyhow::Result<Database> {
        match &config.database.url {
            Some(url) => {
                let database = Database {
                    url: url.clone(),
                    embedded: false,
                    server: None,
                };
                if !matches!(command, Command::Migrate { .. }) {
                    let auto_migrate =
                        config.database.auto_migrate && matches!(command, Command::Serve);
                    database.check_migrations(auto_migrate).await?;
                }
                Ok(database)
            }
            None => Database::open_embedded(config).await,
        }
    }

    async fn open_embedded(config: &Config) -> anyhow::Result<Database> {
        let data_dir = config.database.data_dir.clone();
        let (started, connection) = tokio::task::spawn_blocking(move || {
            let cluster = embedded::Cluster::new(&data_dir)?;
            if let Some(requested) = cluster.relocated_from() {
                tracing::info!(
                    requested = %requested.display(),
                    data_dir = %cluster.root().display(),
                    "the postgres user cannot reach the data directory asked for (a parent directory is private); the embedded cluster lives in data_dir instead"
                );
            }
            if cluster.initialize()? {
                tracing::info!(data_dir = %cluster.root().display(), "created the embedded PostgreSQL cluster");
            }
            cluster.ensure_running(&embedded::ServerSettings::default())
        })
        .await
        .context("the embedded PostgreSQL start-up task failed")?
        .context("embedded PostgreSQL")?;
        let server = match started {
            embedded::Started::ByUs(server) => {
                tracing::info!(
                    port = connection.port,
                    "started the embedded PostgreSQL server"
                );
                Some(server)
            }
            embedded::Started::AlreadyRunning => {
                tracing::info!(
                    port = connection.port,
                    "using the embedded PostgreSQL server already running"
                );
                None
            }
        };
        let database = Database {
            url: connection.url(embedded::DATABASE),
            embedded: true,
            server,
        };
        db::create_database_if_missing(&connection.url("postgres"), embedded::DATABASE)
            .await
            .context("cannot create the embedded database")?;
        // The embedded cluster is ours to keep current.
        let applied = db::migrations::run_pending(&database.url).await?;
        if !applied.is_empty() {
            tracing::info!(
                count = applied.len(),
                "applied migrations to the embedded database"
            );
        }
        Ok(database)
    }

    async fn check_migrations(&self, auto_migrate: bool) -> anyhow::Result<()> {
        let pending = db::migrations::pending(&self.url).await?;
        if pending.is_empty() {
            return Ok(());
        }
        if auto_migrate {
            let applied = db::migrations::run_pending(&self.url).await?;
            tracing::info!(
                count = applied.len(),
                "FORMS_AUTO_MIGRATE applied pending migrations"
            );
            return Ok(());
        }
        bail!(
            "the database has {} pending migration(s) ({}): run `hymical-forms migrate` first, or set FORMS_AUTO_MIGRATE=true",
            pending.len(),
            pending.join(", ")
        )
    }

    /// A one-connection pool for an administrative command, with generous timeouts.
    async fn admin_db(&self) -> anyhow::Result<db::Db> {
        let settings = db::ConnectionSettings::admin(&self.url)?;
        Ok(db::Db::connect(settings, 1, db::ADMIN_CALL_TIMEOUT).await?)
    }

    /// Stops the embedded server if this process started it.
    async fn close(self) {
        if let Some(server) = self.server {
            let _ = tokio::task::spawn_blocking(move || server.stop()).await;
            tracing::info!("stopped the embedded PostgreSQL server");
        }
    }
}

async fn serve(config: Config, database: &Database) -> anyhow::Result<()> {
    let settings = db::ConnectionSettings::new(&database.url, &config.database)?;
    let pool = db::Db::connect(
        settings.clone(),
        config.database.pool_size,
        config.database.call_timeout(),
    )
    .await
    .context("cannot open the database pool")?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    if database.embedded {
        create_first_key(&pool, clock.now()).await?;
    }
    let replica = config
        .database
        .read
        .as_ref()
        .map(|read| crate::replica::Replica::open(read, &config.database))
        .transpose()
        .context("cannot set up the read replica's connections")?;
    let app = App::with_replica(config, settings, pool, replica, clock);
    let config = &app.config;
    let http = if config.api_enabled {
        let listener = listen("FORMS_BIND", config.http.bind, "listening").await?;
        let mut limits = http::server::Limits::from_config(config);
        limits.max_connections = http::server::fit_connections(
            limits.max_connections,
            http::server::descriptor_reserve(config),
        );
        Some((listener, limits))
    } else {
        None
    };
    let metrics = match config.metrics.bind {
        Some(bind) => {
            let listener = listen("FORMS_METRICS_BIND", bind, "serving /metrics").await?;
            Some((listener, http::server::Limits::from_config(config)))
        }
        None => {
            if !config.api_enabled {
                tracing::info!("no /metrics: the API is off and FORMS_METRICS_BIND is unset");
            }
            None
        }
    };
    let workers = if config.worker.enabled {
        Some(delivery::Senders {
            webhook: delivery::client::WebhookClient::new(
                &config.webhook,
                Arc::new(crate::outbound::SystemResolver),
            )
            .context("cannot build the webhook HTTP client")?,
            mail: config
                .smtp
                .as_ref()
                .map(delivery::email::Mailer::new)
                .transpose()
                .context("cannot set up sending email (FORMS_SMTP_*)")?,
        })
    } else {
        None
    };
    let plan = Plan {
        http,
        metrics,
        workers,
        sweeper: config.api_enabled && config.rate_limit.enabled,
        // Always: an endpoint may keep its submissions for days of its own.
        retention: true,
        pruning: config.worker.enabled,
    };
    let services = Services::start(&app, plan);
    // Everything stops on SIGTERM or SIGINT; the workers finish and record their requests
    // in flight before `wait` returns.
    let stop = services.stop_token();
    tokio::spawn(async move {
        http::shutdown_signal().await;
        stop.cancel();
    });
    services.wait().await;
    tracing::info!("stopped");
    Ok(())
}

/// Binds the address `variable` names and logs where it listens (the port, if it was 0).
async fn listen(
    variable: &str,
    bind: std::net::SocketAddr,
    what: &'static str,
) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {variable}={bind}"))?;
    let local = listener
        .local_addr()
        .with_context(|| format!("cannot read the address bound for {variable}"))?;
    tracing::info!(address = %local, "{what}");
    Ok(listener)
}

/// On an embedded cluster that has never had a key, makes one and prints it once, so a
/// newcomer can call the API at once. Revoked keys count: revoking every key does not
/// make a new one appear.
async fn create_first_key(db: &db::Db, now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
    if db.run(async |conn| db::keys::count(conn).await).await? > 0 {
        return Ok(());
    }
    let new = auth::generate("first key (embedded start)", KeyRole::Admin, now);
    db.run(async |conn| db::keys::insert(conn, &new.row).await)
        .await?;
    // Printed to standard output, never logged: this is the one time the key is shown.
    println!(
        "\nManagement API key created. It is shown only this once; store it now.\n  id:  {}\n  key: {}\n",
        new.row.id,
        new.key.expose()
    );
    Ok(())
}

async fn retention_command(
    config: &Config,
    days: u32,
    spam_days: u32,
    batch_size: u32,
    dry_run: bool,
    database: &Database,
) -> anyhow::Result<()> {
    let Some(retention) = crate::upkeep::retention::retention(SystemClock.now(), days, spam_days)
    else {
        bail!("--older-than-days {days} (or --spam-older-than-days {spam_days}) is over 1000000: give a smaller number of days");
    };
    let db = database.admin_db().await?;
    let count = crate::upkeep::retention::apply(&db, retention, batch_size, dry_run).await?;
    let verb = if dry_run { "would delete" } else { "deleted" };
    let days_of = |days: u32| match days {
        0 => "kept".to_string(),
        days => format!("{days} days"),
    };
    println!(
        "{verb} {count} submission(s) past their endpoint's retention or else {} (in the spam folder: {}) with no delivery or a delivered one",
        days_of(days),
        days_of(spam_days)
    );
    if !dry_run {
        // The deleted submissions' files, bytes and objects: detached by the delete.
        let files =
            crate::files::Files::new(config.files.clone(), db.clone(), Arc::new(SystemClock));
        let removed = files.sweep().await?;
        if removed > 0 {
            println!("removed {removed} uploaded file(s) no submission holds");
        }
    }
    Ok(())
}

async fn migrate(database: &Database, status: bool, adopt: bool) -> anyhow::Result<()> {
    if adopt {
        let applied = db::migrations::adopt(&database.url).await?;
        println!(
            "adopted the earlier service's database (Alembic revision {}) as this product's baseline",
            db::migrations::ADOPTABLE_REVISION
        );
        for version in applied {
            println!("applied  {version}");
        }
        return Ok(());
    }
    if status {
        for migration in db::migrations::status(&database.url).await? {
            let state = if migration.applied {
                "applied"
            } else {
                "pending"
            };
            println!("{state:8} {}", migration.name);
        }
        return Ok(());
    }
    let applied = db::migrations::run_pending(&database.url).await?;
    if applied.is_empty() {
        println!("no pending migrations");
    }
    for version in applied {
        println!("applied  {version}");
    }
    Ok(())
}

/// A key changed from the command line, with its audit entry in the same transaction (the
/// key `cli`, "command line": no management key made the change).
async fn by_command_line<T: Send>(
    conn: &mut diesel_async::AsyncPgConnection,
    now: chrono::DateTime<chrono::Utc>,
    operation: &str,
    key: &crate::model::ids::KeyId,
    project: Option<crate::model::ids::ProjectId>,
    arguments: serde_json::Value,
    change: impl for<'c> db::ConnectionWork<'c, T> + Send,
) -> Result<T, db::DbError> {
    use diesel_async::AsyncConnection;
    let record = db::audit::AuditRecord {
        at: now,
        key_id: "cli".into(),
        key_name: "command line".into(),
        project_id: project,
        operation: operation.into(),
        targets: vec![Some(key.to_string())],
        changes: arguments,
        address_digest: None,
    };
    conn.transaction::<_, db::DbError, _>(async |conn| {
        let done = change(conn).await?;
        db::audit::insert(conn, &record).await?;
        Ok(done)
    })
    .await
}

async fn keys(action: KeysCommand, database: &Database) -> anyhow::Result<()> {
    let mut connection = db::connect_one(&database.url).await?;
    let now = SystemClock.now();
    match action {
        KeysCommand::Create {
            name,
            role,
            project,
        } => {
            let Ok(name) = crate::model::endpoint::name(&name) else {
                bail!("--name must be 1 to 200 characters");
            };
            let mut new = auth::generate(&name, role, now);
            if let Some(project) = &project {
                let Some(id) = crate::model::ids::ProjectId::parse(project) else {
                    bail!("--project: no project has the id {project:?}");
                };
                if db::projects::find_live(&mut connection, &id)
                    .await?
                    .is_none()
                {
                    bail!("--project: no project has the id {project:?}");
                }
                new.row.project_id = Some(id);
            }
            let row = new.row.clone();
            let arguments =
                serde_json::json!({ "name": name, "role": role.as_str(), "project": project });
            by_command_line(
                &mut connection,
                now,
                "keys create",
                &row.id,
                row.project_id.clone(),
                arguments,
                async |conn| db::keys::insert(conn, &row).await,
            )
            .await?;
            println!("id:  {}", new.row.id);
            println!("key: {}", new.key.expose());
            println!("role: {role}");
            match &new.row.project_id {
                Some(project) => println!("project: {project}"),
                None => println!("project: every project"),
            }
            println!(
                "The key is shown only this once; the database keeps only its SHA-256 digest."
            );
        }
        KeysCommand::List => {
            println!(
                "{:35}  {:24}  {:5}  {:36}  {:17}  {:27}  {:27}  STATUS",
                "ID", "NAME", "ROLE", "PROJECT", "PREFIX", "CREATED", "LAST USED"
            );
            for key in db::keys::list(&mut connection).await? {
                let status = match (key.revoked_at, key.expires_at) {
                    (Some(at), _) => format!("revoked {}", format_timestamp(at)),
                    (None, Some(at)) if at <= now => format!("expired {}", format_timestamp(at)),
                    (None, _) => "active".to_string(),
                };
                let project = key
                    .project_id
                    .as_ref()
                    .map_or_else(|| "every project".to_string(), ToString::to_string);
                println!(
                    "{:35}  {:24}  {:5}  {:36}  {:17}  {:27}  {:27}  {status}",
                    key.id,
                    key.name,
                    key.role.as_str(),
                    project,
                    key.display_prefix,
                    format_timestamp(key.created_at),
                    key.last_used_at
                        .map(format_timestamp)
                        .unwrap_or_else(|| "never".into()),
                );
            }
        }
        KeysCommand::Revoke { key_id } => {
            let Some(id) = crate::model::ids::KeyId::parse(&key_id) else {
                bail!("no management key has the id {key_id:?}");
            };
            let current = db::keys::find(&mut connection, &id).await?;
            let revoked = match current {
                Some(key) if key.revoked_at.is_none() => {
                    let arguments = serde_json::json!({ "id": key_id });
                    by_command_line(
                        &mut connection,
                        now,
                        "keys revoke",
                        &id,
                        key.project_id.clone(),
                        arguments,
                        async |conn| db::keys::revoke(conn, &id, now).await,
                    )
                    .await?
                }
                other => other,
            };
            match revoked {
                None => bail!("no management key has the id {key_id:?}"),
                Some(key) => {
                    let at = key.revoked_at.map(format_timestamp).unwrap_or_default();
                    if key.revoked_at == Some(now) {
                        println!("revoked {} at {at}", key.id);
                    } else {
                        println!("{} was already revoked at {at}", key.id);
                    }
                }
            }
        }
    }
    Ok(())
}
