//! `brain`: the RustingBrain REPL, script runner and notebook reports.

mod cell;
mod cli;
mod complete;
mod host;
mod ipynb;
mod kernel;
mod launch;
mod mime;
mod notebook;
mod repl;
mod runner;
mod script_args;
mod session;
mod stdio_capture;

use cli::Mode;
use session::Session;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match cli::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    match &cli.mode {
        Mode::Help { command } => {
            println!("{}", cli::usage_of(*command));
            return ExitCode::SUCCESS;
        }
        Mode::Version => {
            println!("brain {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Mode::KernelInstall { location, name } => {
            let spec = kernel::install::Spec {
                location: location.clone(),
                name: name.clone(),
                device: cli.device.clone(),
            };
            return finish(
                kernel::install::install(&spec)
                    .map(|dir| println!("installed the kernelspec `{name}` in {}", dir.display())),
            );
        }
        Mode::KernelUninstall { location, name } => {
            return finish(
                kernel::install::uninstall(location, name)
                    .map(|dir| println!("removed {}", dir.display())),
            );
        }
        Mode::NotebookConvert { input, output, to } => {
            return finish(convert_notebook(input, output, *to));
        }
        _ => {}
    }
    // A script's arguments are checked (or listed, for --help) before a device starts.
    if let Mode::Run { script } | Mode::Notebook { script, .. } | Mode::Launch { script, .. } =
        &cli.mode
    {
        match vet_script_args(script, &cli) {
            Ok(Some(help)) => {
                print!("{help}");
                return ExitCode::SUCCESS;
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // The launcher starts the ranks and watches them; it takes no device of its own.
    if let Mode::Launch { gpus, script } = &cli.mode {
        return launch::run(*gpus, script, &cli.script_args, cli.device.as_deref());
    }
    let (device, note) = match host::choose_device(cli.device.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Ctrl-C sets the engine's cancel flag: a running entry stops, the session stays.
    let _ = ctrlc::set_handler(rusting_brain::cancel::request);
    let output = host::Output::default();
    let engine = host::build_engine(&output, device, &cli.script_args);
    let mut session = Session::new(engine);
    session
        .scope
        .push("ARGS", host::args_array(&cli.script_args));
    match cli.mode {
        Mode::Repl => {
            say(&note);
            repl::Repl::new(session).run();
            ExitCode::SUCCESS
        }
        Mode::Run { script } => {
            say(&note);
            finish(runner::run(&mut session, &script))
        }
        Mode::Check { script } => finish(
            runner::check(&mut session, &script).map(|_| println!("{}: ok", script.display())),
        ),
        Mode::Notebook {
            script,
            output: report,
            keep_going,
        } => {
            say(&note);
            match notebook::run(&mut session, &output, &script, &report, keep_going) {
                Ok(true) => {
                    println!("wrote {}", report.display());
                    ExitCode::SUCCESS
                }
                Ok(false) => {
                    eprintln!("wrote {} (a cell failed)", report.display());
                    ExitCode::from(1)
                }
                Err(e) => finish(Err(e)),
            }
        }
        Mode::Kernel { connection_file } => finish(kernel::serve(&connection_file, session, &note)),
        Mode::NotebookRun {
            notebook,
            output: written,
            keep_going,
        } => {
            say(&note);
            match run_notebook(&mut session, &notebook, &written, keep_going) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => finish(Err(e)),
            }
        }
        Mode::Help { .. }
        | Mode::Version
        | Mode::Launch { .. }
        | Mode::KernelInstall { .. }
        | Mode::KernelUninstall { .. }
        | Mode::NotebookConvert { .. } => {
            unreachable!("handled above")
        }
    }
}

/// The script's help text when `--help` asked for it; an error for an argument it does not
/// declare (see `script_args`). A script that cannot be read or parsed passes here and fails
/// where it runs, with its usual report.
fn vet_script_args(script: &std::path::Path, cli: &cli::Cli) -> Result<Option<String>, String> {
    let Ok(src) = std::fs::read_to_string(script) else {
        return Ok(None);
    };
    // Parsing needs no bindings: a bare engine with the same limits and syntax reads the same
    // scripts.
    let mut engine = rhai::Engine::new();
    rusting_brain_rhai::set_language(&mut engine);
    if engine.compile(&src).is_err() {
        return Ok(None);
    }
    let declared = script_args::collect(&engine, script, &src)?;
    if cli.script_help {
        let command = match &cli.mode {
            Mode::Notebook { .. } => "notebook",
            Mode::Launch { .. } => "launch --gpus N",
            _ => "run",
        };
        return Ok(Some(script_args::help(command, script, &src, &declared)));
    }
    script_args::check(script, &cli.script_args, &declared)?;
    Ok(None)
}

/// `brain notebook x.rhai --to ipynb` (or an `.ipynb` `--to rhai`).
fn convert_notebook(
    input: &std::path::Path,
    output: &std::path::Path,
    to: cli::NotebookFormat,
) -> Result<(), String> {
    match to {
        cli::NotebookFormat::Ipynb => {
            let src = std::fs::read_to_string(input)
                .map_err(|e| format!("{}: cannot read: {e}", input.display()))?;
            ipynb::write(output, &ipynb::from_script(&src))?;
        }
        cli::NotebookFormat::Rhai => {
            let nb = ipynb::read(input)?;
            std::fs::write(output, ipynb::to_script(&nb))
                .map_err(|e| format!("{}: cannot write: {e}", output.display()))?;
        }
    }
    println!("wrote {}", output.display());
    Ok(())
}

/// `brain notebook run x.ipynb`: every code cell run in one session, its outputs stored.
fn run_notebook(
    session: &mut Session,
    notebook: &std::path::Path,
    output: &std::path::Path,
    keep_going: bool,
) -> Result<bool, String> {
    let mut nb = ipynb::read(notebook)?;
    runner::resolve_imports_beside(session, notebook);
    stdio_capture::start()?;
    cell::route_bindings_to_frontends();
    let name = notebook
        .file_name()
        .map_or("notebook".into(), |n| n.to_string_lossy().into_owned());
    let all_ok = ipynb::run(session, &mut nb, &name, keep_going);
    stdio_capture::stop();
    let all_ok = all_ok?;
    ipynb::write(output, &nb)?;
    if all_ok {
        println!("wrote {}", output.display());
    } else {
        eprintln!("wrote {} (a cell failed)", output.display());
    }
    Ok(all_ok)
}

fn finish(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// Writes `line` to stderr in one write: the ranks of `brain launch` share the terminal, and
/// `eprintln!` may write the text and its newline apart, so two ranks' lines ran together.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
