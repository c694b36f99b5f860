//! `FORMS_GRAPHQL_*`: what one GraphQL operation may cost, and the share of the database
//! pool the API may hold.

use super::reader::Reader;

#[derive(Debug, Clone)]
pub struct GraphqlConfig {
    pub max_depth: usize,
    pub max_complexity: usize,
    pub max_page_size: usize,
    /// Fields a document may select once its fragments are expanded.
    pub max_expanded_fields: usize,
    pub max_fragments: usize,
    /// Database calls one operation (or one subscription event) may make.
    pub max_database_calls: usize,
    /// Pooled connections GraphQL may hold at once, all operations together: the rest of
    /// the pool is kept for intake and the workers.
    pub database_connections: usize,
    /// Queries and mutations over HTTP being parsed, validated or run at once; more wait
    /// their turn. Parsing a large document is CPU work that no other limit bounds.
    pub concurrent_operations: usize,
}

pub(super) fn read(r: &mut Reader, pool_size: u32) -> GraphqlConfig {
    const NAME: &str = "FORMS_GRAPHQL_DATABASE_CONNECTIONS";
    // Half the pool by default; all of it only when the pool has one connection.
    let default_share = u64::from(pool_size / 2).max(1);
    let most = u64::from(pool_size.saturating_sub(1)).max(1);
    let config = GraphqlConfig {
        max_depth: r.integer("FORMS_GRAPHQL_MAX_DEPTH", 12, 1, 1_000) as usize,
        max_complexity: r.integer("FORMS_GRAPHQL_MAX_COMPLEXITY", 5_000, 1, 10_000_000) as usize,
        max_page_size: r.integer("FORMS_GRAPHQL_MAX_PAGE_SIZE", 100, 1, 100_000) as usize,
        max_expanded_fields: r.integer("FORMS_GRAPHQL_MAX_EXPANDED_FIELDS", 5_000, 1, 10_000_000)
            as usize,
        max_fragments: r.integer("FORMS_GRAPHQL_MAX_FRAGMENTS", 100, 1, 100_000) as usize,
        max_database_calls: r.integer("FORMS_GRAPHQL_MAX_DATABASE_CALLS", 50, 1, 100_000) as usize,
        database_connections: r.integer(NAME, default_share, 1, 10_000) as usize,
        concurrent_operations: r.integer(
            "FORMS_GRAPHQL_CONCURRENT_OPERATIONS",
            half_the_cores(),
            1,
            10_000,
        ) as usize,
    };
    if !r.failed(&[NAME, "FORMS_DATABASE_POOL_SIZE"]) && config.database_connections as u64 > most {
        r.fail(
            NAME,
            format!(
                "{} leaves none of the pool's {pool_size} connections to intake and the workers",
                config.database_connections
            ),
            "less than FORMS_DATABASE_POOL_SIZE (1 when the pool has one connection)",
        );
    }
    config
}

/// Half the CPUs this process may use, at least one: the default share of GraphQL's
/// operations, so that parsing and validating documents can never take every core from
/// intake and the workers.
fn half_the_cores() -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores as u64 / 2).max(1)
}
