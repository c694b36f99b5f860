//! Pages of the binary in a real browser: headless Chromium driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, installed by `cargo xtask setup`), with every host
//! but 127.0.0.1 unresolvable, so a page that reached for the internet would break.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::harness::free_port;

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

/// Clicks `css` once it is there (up to 30 s).
pub async fn click(client: &Client, css: &str) {
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Types `text` into the field `css`, emptied first, once it is there (up to 30 s).
pub async fn type_into(client: &Client, css: &str, text: &str) {
    let element = client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    element.clear().await.unwrap();
    element.send_keys(text).await.unwrap();
}

/// Signs in to the console at `console` with `key` and waits for the overview.
pub async fn sign_in(client: &Client, console: &str, key: &str) {
    client.goto(console).await.unwrap();
    type_into(client, "#key", key).await;
    click(client, "#sign-in button").await;
    wait_for_text(client, "#view h1", "Overview").await;
}
