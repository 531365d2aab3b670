//! Links the binary with an rpath to the directory of the libduckdb.so it was built against (`DUCKDB_LIB_DIR`,
//! set by build.sh), so that it runs without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if let Ok(dir) = std::env::var("DUCKDB_LIB_DIR") {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
}
