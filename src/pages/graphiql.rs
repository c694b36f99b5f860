//! GraphiQL for developers: the page a browser's `GET /graphql` gets, and its assets under
//! `/graphql/assets/` (`assets/graphiql/`: the upstream GraphiQL and React builds and a
//! small script of ours that asks for the key).

use axum::extract::Path;
use axum::response::Response;

use super::{assets, Asset, CSS, JAVASCRIPT};

/// Only this origin, for everything; fonts and icons come inline (`data:`) in the upstream
/// stylesheet, and the editor sets styles at run time.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; font-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const PAGE: &str = include_str!("../../assets/graphiql/index.html");

const ASSETS: &[Asset] = assets!["graphiql/";
    "graphiql-page.js" => JAVASCRIPT,
    "graphiql-page.css" => CSS,
    "graphiql.min.js" in "vendor/" => JAVASCRIPT,
    "graphiql.min.css" in "vendor/" => CSS,
    "react.production.min.js" in "vendor/" => JAVASCRIPT,
    "react-dom.production.min.js" in "vendor/" => JAVASCRIPT,
];

pub fn page() -> Response {
    super::page(PAGE, CONTENT_SECURITY_POLICY)
}

/// `GET /graphql/assets/{name}`.
pub async fn asset(Path(name): Path<String>) -> Response {
    super::asset(ASSETS, &name, CONTENT_SECURITY_POLICY)
}
