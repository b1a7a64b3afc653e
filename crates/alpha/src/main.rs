//! `alpha`: train, resume, score and predict learning systems; plan and build them; prepare
//! corpora; serve the dashboard. Every failure is a message and a nonzero exit, never a panic
//! trace.

mod commands;
mod embedded;
mod environment;
mod memory;
mod validate;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Checked here rather than by `std::env::args`, which panics on a non-UTF-8 argument.
    let args = match validate::utf8_args(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let cli = match embedded::read_own() {
        Some(payload) => {
            let args = commands::built_args(&payload, &args);
            alpha_cuda::backend::use_carried_ptx(payload.ptx);
            alpha_run::session::use_embedded_plans(payload.plans);
            commands::Cli::parse_from(args)
        }
        None => commands::Cli::parse_from(args),
    };
    if let Err(e) = environment::apply() {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // `alpha … | head`: the reader has what it wanted.
        Err(e) if e.is::<commands::StdoutClosed>() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
