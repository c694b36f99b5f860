//! GraphiQL, served by the binary, in headless Chromium (support::browser).

use std::time::Duration;

use fantoccini::{Client, Locator};

use support::browser::{browser, loaded_resources, start_driver, wait_for_text};
use support::harness::TestApp;

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

/// GraphiQL works offline: the key asked for once and sent as `Authorization`, a query
/// answered, a subscription answered over /graphql/ws with the key in `connection_init`,
/// and every resource from this server.
#[tokio::test(flavor = "multi_thread")]
async fn graphiql_answers_a_query_and_a_subscription_offline() {
    let app = TestApp::start_without_rate_limit().await;
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
