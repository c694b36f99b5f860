//! Pages of the binary in a real browser: headless Chromium driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, installed by `cargo xtask setup`), with every host
//! but 127.0.0.1 unresolvable, so a page that reached for the internet would break.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hymical_forms::testing::clock::SystemClock;
use serde_json::json;

use crate::harness::{free_port, TestApp};

fn find(candidates: &[&str]) -> Option<std::path::PathBuf> {
    candidates
        .iter()
        .map(std::path::PathBuf::from)
        .find(|path| path.is_file())
}

/// chromedriver on a free loopback port, killed when dropped.
pub struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn start_driver() -> Driver {
    let binary = find(&["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]).expect(
        "chromedriver is not installed: apt-get install chromium chromium-driver (`cargo xtask setup` does)",
    );
    let port = free_port();
    let child = Command::new(binary)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver { child, port };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return driver;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("chromedriver did not listen");
}

pub async fn browser(driver: &Driver) -> Client {
    let chromium = find(&["/usr/bin/chromium", "/usr/bin/chromium-browser"])
        .expect("chromium is not installed: apt-get install chromium (`cargo xtask setup` does)");
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
                // Nothing but loopback resolves: no page may need the internet.
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session")
}

/// Waits up to 30 s for the text of `css` to contain `wanted`; returns the text.
pub async fn wait_for_text(client: &Client, css: &str, wanted: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        if let Ok(element) = client.find(Locator::Css(css)).await {
            if let Ok(text) = element.text().await {
                if text.contains(wanted) {
                    return text;
                }
                last = text;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{css} never showed {wanted:?}; last: {last:?}");
}

/// Presses GraphiQL's run button once it has rendered.
async fn run_document(client: &Client) {
    client
        .wait()
        .for_element(Locator::Css(".graphiql-execute-button"))
        .await
        .expect("GraphiQL rendered")
        .click()
        .await
        .unwrap();
}

/// Every resource the page loaded, by URL (the page itself first).
pub async fn loaded_resources(client: &Client) -> Vec<String> {
    let value = client
        .execute(
            "return [location.href].concat(performance.getEntriesByType('resource').map(e => e.name));",
            vec![],
        )
        .await
        .expect("resource list");
    serde_json::from_value(value).expect("a list of URLs")
}

/// GraphiQL works offline: the key asked for once and sent as `Authorization`, a query
/// answered, a subscription answered over /graphql/ws with the key in `connection_init`,
/// and every resource from this server.
#[tokio::test(flavor = "multi_thread")]
async fn graphiql_answers_a_query_and_a_subscription_offline() {
    let app = TestApp::start_with(
        &[("FORMS_RATE_LIMIT_ENABLED", "false")],
        Arc::new(SystemClock),
    )
    .await;
    app.webhook_endpoint("browser", "https://example.com/hook")
        .await;
    let (_, key) = app.create_key("graphiql").await;
    let driver = start_driver().await;
    let client = browser(&driver).await;

    let encode = |query: &str| {
        percent_encoding::utf8_percent_encode(query, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    client
        .goto(&format!(
            "{}#query={}",
            app.url("/graphql"),
            encode("{ deliveryCounts { pending } }")
        ))
        .await
        .unwrap();
    let input = client
        .wait()
        .for_element(Locator::Css("#key"))
        .await
        .expect("the key prompt");
    input.send_keys(&key).await.unwrap();
    client
        .find(Locator::Css("#key-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    run_document(&client).await;
    wait_for_text(&client, ".result-window", "\"pending\": 0").await;

    // A subscription, in the same tab (the key is remembered for it).
    client
        .goto(&format!(
            "{}?tab=2#query={}",
            app.url("/graphql"),
            encode("subscription { deliveryStateChanged(endpointId: \"browser\") { kind state } }")
        ))
        .await
        .unwrap();
    // The key is remembered: GraphiQL renders without asking again.
    run_document(&client).await;
    // Give the subscription a moment to be registered, then submit a form.
    tokio::time::sleep(Duration::from_secs(1)).await;
    app.submit("browser", "email=a%40example.com").await;
    wait_for_text(&client, ".result-window", "CREATED").await;

    let origin = app.url("");
    // Fonts inlined in the stylesheet (`data:`) are no request at all.
    for url in loaded_resources(&client).await {
        if url.starts_with("data:") {
            continue;
        }
        assert!(url.starts_with(&origin), "{url} is not from {origin}");
    }
    client.close().await.unwrap();
}
