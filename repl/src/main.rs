//! The `brain` REPL and script runner (filled in by the Rhai host issue).

fn main() {
    println!("brain {}", env!("CARGO_PKG_VERSION"));
}
