//! The migrations are embedded in the binary at compile time (`embed_migrations!` in
//! src/db/migrations.rs); this makes cargo rebuild the crate when one is added or changed.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
