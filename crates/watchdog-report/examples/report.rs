//! `cargo run -p watchdog-report --example report -- RECORDING OUT.html|OUT.svg`:
//! what `watchdog report` does, without the binary (used to make docs/report-example.*).

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: report RECORDING OUT.html|OUT.svg");
        return ExitCode::from(2);
    };
    match watchdog_report::write_report(Path::new(input), Path::new(output)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
