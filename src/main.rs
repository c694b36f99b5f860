fn main() -> std::process::ExitCode {
    hymical_forms::main()
}
