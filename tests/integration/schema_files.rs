//! Checked-in generated files stay equal to what they are generated from.

use diesel::sql_types::{Bool, Nullable, Text};
use diesel_async::RunQueryDsl;

use support::harness::TestDb;

#[test]
fn schema_graphql_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql");
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    let generated = hymical_forms::testing::graphql::sdl();
    assert!(
        checked_in == generated,
        "schema.graphql differs from the code's schema: run `cargo run -- schema > schema.graphql`"
    );
}

/// One column as `src/db/schema.rs` declares it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
struct Column {
    table: String,
    column: String,
    sql_type: String,
    nullable: bool,
    max_length: Option<i32>,
}

/// Reads the `diesel::table!` blocks of the generated schema file.
fn declared_columns() -> Vec<Column> {
    let source = include_str!("../../src/db/schema.rs");
    let mut columns = Vec::new();
    let mut table: Option<String> = None;
    let mut max_length = None;
    for line in source.lines().map(str::trim) {
        if let Some(rest) = line.strip_suffix('{') {
            if rest.contains('(') && !rest.starts_with("diesel::") {
                table = rest.split_whitespace().next().map(str::to_string);
            }
            continue;
        }
        if line == "}" {
            table = None;
            continue;
        }
        if let Some(length) = line
            .strip_prefix("#[max_length = ")
            .and_then(|l| l.strip_suffix(']'))
        {
            max_length = length.parse().ok();
            continue;
        }
        let (Some(table), Some((name, ty))) = (&table, line.split_once(" -> ")) else {
            continue;
        };
        let ty = ty.trim_end_matches(',');
        let (nullable, ty) = match ty
            .strip_prefix("Nullable<")
            .and_then(|t| t.strip_suffix('>'))
        {
            Some(inner) => (true, inner),
            None => (false, ty),
        };
        let sql_type = match ty {
            "Varchar" => "character varying",
            "Int4" => "integer",
            "Int8" => "bigint",
            "Int2" => "smallint",
            "Bool" => "boolean",
            "Timestamptz" => "timestamp with time zone",
            "Json" => "json",
            "Jsonb" => "jsonb",
            "Text" => "text",
            "Float4" => "real",
            "Bytea" => "bytea",
            "Array<Text>"
            | "Array<Nullable<Text>>"
            | "Array<Varchar>"
            | "Array<Nullable<Varchar>>" => "ARRAY",
            other => panic!("schema.rs type {other} has no mapping in this test"),
        };
        columns.push(Column {
            table: table.clone(),
            column: name.to_string(),
            sql_type: sql_type.to_string(),
            nullable,
            max_length: max_length.take(),
        });
    }
    columns.sort();
    columns
}

#[derive(diesel::QueryableByName)]
struct DbColumn {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    column_name: String,
    #[diesel(sql_type = Text)]
    data_type: String,
    #[diesel(sql_type = Bool)]
    nullable: bool,
    #[diesel(sql_type = Nullable<diesel::sql_types::Integer>)]
    max_length: Option<i32>,
}

#[tokio::test(flavor = "multi_thread")]
async fn db_schema_matches_database() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let rows: Vec<DbColumn> = diesel::sql_query(
        "SELECT table_name::text, column_name::text, data_type::text,
                (is_nullable = 'YES') AS nullable, character_maximum_length::int AS max_length
         FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name NOT LIKE '\\_\\_%'
           -- A partition has its parent's columns: schema.rs declares the parent.
           AND table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)",
    )
    .load(&mut conn)
    .await
    .unwrap();
    let mut actual: Vec<Column> = rows
        .into_iter()
        .map(|r| Column {
            table: r.table_name,
            column: r.column_name,
            sql_type: r.data_type,
            nullable: r.nullable,
            max_length: r.max_length,
        })
        .collect();
    actual.sort();
    let declared = declared_columns();
    assert!(!declared.is_empty());
    let missing: Vec<_> = actual.iter().filter(|c| !declared.contains(c)).collect();
    let stale: Vec<_> = declared.iter().filter(|c| !actual.contains(c)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "src/db/schema.rs is out of date (regenerate with `diesel print-schema`):\n  not in schema.rs: {missing:?}\n  not in the database: {stale:?}"
    );
}
