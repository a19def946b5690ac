//! The `ralph` binary: everything lives in the library; this only exits with its code.

fn main() {
    std::process::exit(ralph::main());
}
