//! Every checked-in fuzz seed (fuzz/seed-corpus/TARGET/*, crashes found by `fuzz/run` among
//! them once fixed) through the same entry points the fuzz targets call: no panic, and no
//! client input answered with a server error.

#[test]
fn every_fuzz_seed_passes_its_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seed-corpus");
    let mut replayed = 0;
    for (target, run) in hymical_forms::testing::fuzzing::TARGETS {
        let dir = root.join(target);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|_| panic!("no seeds in {dir:?}"));
        for entry in entries {
            let path = entry.expect("seed").path();
            let data = std::fs::read(&path).expect("seed bytes");
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target} fails on {path:?}");
            replayed += 1;
        }
    }
    assert!(replayed >= hymical_forms::testing::fuzzing::TARGETS.len());
}
