//! Command-line parsing for `brain`: the mode, the device, and the script's own arguments.

use crate::kernel::install::Location;
use std::path::PathBuf;

#[derive(Debug, PartialEq)]
pub enum Mode {
    Repl,
    Run {
        script: PathBuf,
    },
    Check {
        script: PathBuf,
    },
    /// One `brain run` of the script per GPU (`--gpus N`), as ranks of a data-parallel run.
    Launch {
        gpus: usize,
        script: PathBuf,
    },
    Notebook {
        script: PathBuf,
        output: PathBuf,
        keep_going: bool,
    },
    /// `brain notebook x.rhai --to ipynb`: a notebook from a script, or a script from one.
    NotebookConvert {
        input: PathBuf,
        output: PathBuf,
        to: NotebookFormat,
    },
    /// `brain notebook run x.ipynb`: runs the notebook's cells and stores their outputs.
    NotebookRun {
        notebook: PathBuf,
        output: PathBuf,
        keep_going: bool,
    },
    /// `brain kernel -f connection.json`: the Jupyter kernel.
    Kernel {
        connection_file: PathBuf,
    },
    KernelInstall {
        location: Location,
        name: String,
    },
    KernelUninstall {
        location: Location,
        name: String,
    },
    /// The usage text: all of it, or one command's (`brain launch --help`).
    Help {
        command: Option<&'static str>,
    },
    Version,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NotebookFormat {
    Ipynb,
    Rhai,
}

#[derive(Debug, PartialEq)]
pub struct Cli {
    pub mode: Mode,
    /// `--device` as given; `None` is `auto`: the GPU when one is usable, else the CPU.
    pub device: Option<String>,
    /// Arguments after the script name, handed to the script as `ARGS`.
    pub script_args: Vec<String>,
    /// `--help` (or `-h`) after a script: list the script's arguments instead of running it.
    pub script_help: bool,
}

pub const USAGE: &str = "usage:
  brain                                  start the REPL
  brain run FILE.rhai [name=value ...]   run a script with its arguments (also visible to it as ARGS)
  brain run FILE.rhai --help             list the script's arguments and their defaults
  brain notebook FILE.rhai -o REPORT.md  run a script cell by cell (cells split at `// %%`) into a Markdown report
           [--keep-going] [name=value ...]  continue after a failing cell; the script's arguments
  brain notebook FILE.rhai --to ipynb [-o OUT.ipynb]   the script as a Jupyter notebook (and
  brain notebook FILE.ipynb --to rhai [-o OUT.rhai]    a notebook's code as a `// %%` script)
  brain notebook run FILE.ipynb [-o OUT.ipynb] [--keep-going] [name=value ...]
                                         run a notebook's cells and store their outputs in it
  brain kernel install [--user|--sys-prefix|--prefix DIR] [--name NAME] [--device D]
                                         register brain as a Jupyter kernel (kernelspec `brain`)
  brain kernel uninstall [--user|--sys-prefix|--prefix DIR] [--name NAME]
  brain kernel -f CONNECTION.json        serve a Jupyter kernel (Jupyter starts this itself)
  brain check FILE.rhai                  parse a script without running it
  brain launch --gpus N FILE.rhai [name=value ...]
                                         run the script once per GPU as the ranks of one
                                         data-parallel run (dist::rank() tells each its own)
options:
  --device auto|cpu|cuda|cuda:N          where tensors live; auto (the default): the GPU when usable,
                                         else the CPU; an explicit cuda that is not usable is an error
  -h, --help | -V, --version";

/// The usage lines of one command (`launch`), with the options that apply to every command.
pub fn usage_of(command: Option<&str>) -> String {
    let Some(command) = command else {
        return USAGE.to_string();
    };
    let mut out = String::from("usage:\n");
    let mut inside = false;
    for line in USAGE.lines().skip(1) {
        if line == "options:" {
            inside = true;
        } else if let Some(rest) = line.strip_prefix("  brain") {
            inside = rest.split_whitespace().next() == Some(command);
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.trim_end().to_string()
}

pub fn parse(args: &[String]) -> Result<Cli, String> {
    let mut device = None;
    let mut rest: Vec<String> = Vec::new();
    let mut i = 0;
    // `--device` may stand anywhere; everything else keeps its order.
    while i < args.len() {
        let a = &args[i];
        if a == "--device" {
            device = Some(
                args.get(i + 1)
                    .ok_or("--device needs a value: auto, cpu, cuda or cuda:N")?
                    .clone(),
            );
            i += 2;
            continue;
        }
        if let Some(v) = a.strip_prefix("--device=") {
            device = Some(v.to_string());
        } else {
            rest.push(a.clone());
        }
        i += 1;
    }
    let mut it = rest.into_iter();
    let mode = match it.next().as_deref() {
        None => Mode::Repl,
        Some("-h" | "--help" | "help") => Mode::Help { command: None },
        Some("-V" | "--version") => Mode::Version,
        Some("run") => Mode::Run {
            script: it.next().ok_or("brain run needs a script file")?.into(),
        },
        Some("check") => Mode::Check {
            script: it.next().ok_or("brain check needs a script file")?.into(),
        },
        Some("launch") => {
            let mut gpus = None;
            let mut script = None;
            // `--gpus` comes before the script; after it, everything is the script's.
            while let Some(a) = it.next() {
                if a == "--help" || a == "-h" {
                    return Ok(with_script_args(
                        Mode::Help {
                            command: Some("launch"),
                        },
                        device,
                        Vec::new(),
                    ));
                }
                let value = if a == "--gpus" {
                    Some(it.next().ok_or("--gpus needs a number")?)
                } else {
                    a.strip_prefix("--gpus=").map(String::from)
                };
                match value {
                    Some(v) => {
                        gpus = Some(
                            v.parse::<usize>()
                                .ok()
                                .filter(|&n| n >= 1)
                                .ok_or(format!("--gpus {v}: expected a number of 1 or more"))?,
                        )
                    }
                    None => {
                        script = Some(PathBuf::from(a));
                        break;
                    }
                }
            }
            let mode = Mode::Launch {
                gpus: gpus.ok_or("brain launch needs --gpus N before the script")?,
                script: script.ok_or("brain launch needs a script file")?,
            };
            return Ok(with_script_args(mode, device, it.collect()));
        }
        Some("kernel") => return parse_kernel(it.collect(), device),
        Some("notebook") => {
            let mut script = None;
            let mut output = None;
            let mut keep_going = false;
            let mut to = None;
            let mut run = false;
            // The notebook's own options may stand anywhere; the rest is the script's.
            let mut script_args = Vec::new();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "-h" | "--help" if script.is_none() => {
                        return Ok(with_script_args(
                            Mode::Help {
                                command: Some("notebook"),
                            },
                            device,
                            Vec::new(),
                        ));
                    }
                    "-o" | "--output" => {
                        output = Some(PathBuf::from(it.next().ok_or("-o needs a file name")?))
                    }
                    "--keep-going" => keep_going = true,
                    "--to" => {
                        to = Some(match it.next().as_deref() {
                            Some("ipynb") => NotebookFormat::Ipynb,
                            Some("rhai") => NotebookFormat::Rhai,
                            Some(other) => {
                                return Err(format!("--to {other}: use --to ipynb or --to rhai"))
                            }
                            None => return Err("--to needs ipynb or rhai".into()),
                        })
                    }
                    "run" if script.is_none() && !run => run = true,
                    _ if script.is_none() => script = Some(PathBuf::from(a)),
                    _ => script_args.push(a),
                }
            }
            let script = script.ok_or("brain notebook needs a script file")?;
            if run {
                let mode = Mode::NotebookRun {
                    output: output.unwrap_or_else(|| script.clone()),
                    notebook: script,
                    keep_going,
                };
                return Ok(with_script_args(mode, device, script_args));
            }
            if let Some(to) = to {
                let ext = match to {
                    NotebookFormat::Ipynb => "ipynb",
                    NotebookFormat::Rhai => "rhai",
                };
                if script.extension().is_some_and(|e| e == ext) && output.is_none() {
                    return Err(format!(
                        "{} is already .{ext}: give -o for the converted file",
                        script.display()
                    ));
                }
                let mode = Mode::NotebookConvert {
                    output: output.unwrap_or_else(|| script.with_extension(ext)),
                    input: script,
                    to,
                };
                return Ok(with_script_args(mode, device, script_args));
            }
            let output = output.unwrap_or_else(|| script.with_extension("md"));
            let mode = Mode::Notebook {
                script,
                output,
                keep_going,
            };
            return Ok(with_script_args(mode, device, script_args));
        }
        Some(other) => return Err(format!("unknown command `{other}`")),
    };
    Ok(with_script_args(mode, device, it.collect()))
}

/// `brain kernel -f FILE`, `brain kernel install ...` and `brain kernel uninstall ...`.
fn parse_kernel(args: Vec<String>, device: Option<String>) -> Result<Cli, String> {
    let mut it = args.into_iter().peekable();
    let action = match it.peek().map(String::as_str) {
        Some("install") | Some("uninstall") => it.next(),
        _ => None,
    };
    let (mut location, mut name, mut connection_file) = (Location::User, "brain".to_string(), None);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                return Ok(with_script_args(
                    Mode::Help {
                        command: Some("kernel"),
                    },
                    device,
                    Vec::new(),
                ))
            }
            "-f" | "--connection-file" => {
                connection_file = Some(PathBuf::from(
                    it.next().ok_or("-f needs the connection file")?,
                ))
            }
            "--user" => location = Location::User,
            "--sys-prefix" => location = Location::SysPrefix,
            "--prefix" => {
                location = Location::Prefix(it.next().ok_or("--prefix needs a folder")?.into())
            }
            "--name" => name = it.next().ok_or("--name needs a kernel name")?,
            other => {
                if let Some(f) = other.strip_prefix("--connection-file=") {
                    connection_file = Some(f.into());
                } else {
                    return Err(format!("brain kernel: unknown option `{other}`"));
                }
            }
        }
    }
    let mode = match action.as_deref() {
        Some("install") => Mode::KernelInstall { location, name },
        Some("uninstall") => Mode::KernelUninstall { location, name },
        _ => Mode::Kernel {
            connection_file: connection_file
                .ok_or("brain kernel needs -f CONNECTION.json (Jupyter passes it), or install")?,
        },
    };
    Ok(with_script_args(mode, device, Vec::new()))
}

/// Takes `--help` out of a script's arguments: it asks for the script's argument list.
fn with_script_args(mode: Mode, device: Option<String>, mut script_args: Vec<String>) -> Cli {
    let before = script_args.len();
    script_args.retain(|a| a != "--help" && a != "-h");
    Cli {
        mode,
        device,
        script_help: script_args.len() != before,
        script_args,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_takes_gpus_then_the_script_and_its_arguments() {
        let cli = parse(&args("launch --gpus 2 train.rhai size=base --device cuda")).unwrap();
        assert_eq!(
            cli.mode,
            Mode::Launch {
                gpus: 2,
                script: "train.rhai".into()
            }
        );
        assert_eq!(cli.device.as_deref(), Some("cuda"));
        assert_eq!(cli.script_args, vec!["size=base"]);
        assert!(parse(&args("launch train.rhai"))
            .unwrap_err()
            .contains("--gpus N"));
        assert!(parse(&args("launch --gpus=0 t.rhai"))
            .unwrap_err()
            .contains("--gpus 0"));
        assert!(parse(&args("launch --gpus two t.rhai"))
            .unwrap_err()
            .contains("--gpus two"));
    }

    #[test]
    fn help_before_the_script_asks_for_the_commands_own_usage() {
        for (line, command) in [
            ("launch --help", "launch"),
            ("launch --gpus 2 -h", "launch"),
            ("notebook --help", "notebook"),
        ] {
            let cli = parse(&args(line)).unwrap();
            assert_eq!(
                cli.mode,
                Mode::Help {
                    command: Some(command)
                },
                "{line}"
            );
        }
        let launch = usage_of(Some("launch"));
        assert!(
            launch.contains("brain launch --gpus N") && launch.contains("--device"),
            "{launch}"
        );
        assert!(!launch.contains("brain run"), "{launch}");
        // After the script, --help lists the script's own arguments.
        assert!(
            parse(&args("launch --gpus 2 t.rhai --help"))
                .unwrap()
                .script_help
        );
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn device_may_follow_the_script_and_the_rest_goes_to_the_script() {
        let cli = parse(&args("run train.rhai --device cuda steps=5")).unwrap();
        assert_eq!(
            cli.mode,
            Mode::Run {
                script: "train.rhai".into()
            }
        );
        assert_eq!(cli.device.as_deref(), Some("cuda"));
        assert_eq!(cli.script_args, vec!["steps=5"]);
    }

    #[test]
    fn notebook_takes_an_output_and_keep_going() {
        let cli = parse(&args("notebook a.rhai -o out/r.md --keep-going")).unwrap();
        assert_eq!(
            cli.mode,
            Mode::Notebook {
                script: "a.rhai".into(),
                output: "out/r.md".into(),
                keep_going: true
            }
        );
    }

    #[test]
    fn a_notebook_takes_script_arguments_around_its_own_options() {
        let cli = parse(&args("notebook a.rhai path=x.csv -o r.md steps=3")).unwrap();
        assert_eq!(
            cli.mode,
            Mode::Notebook {
                script: "a.rhai".into(),
                output: "r.md".into(),
                keep_going: false
            }
        );
        assert_eq!(cli.script_args, vec!["path=x.csv", "steps=3"]);
    }

    #[test]
    fn help_after_a_script_asks_for_its_arguments() {
        let cli = parse(&args("run train.rhai --help")).unwrap();
        assert!(cli.script_help);
        assert!(cli.script_args.is_empty());
        assert_eq!(
            parse(&args("--help")).unwrap().mode,
            Mode::Help { command: None }
        );
    }

    #[test]
    fn kernel_serves_a_connection_file_or_installs_where_asked() {
        let cli = parse(&args("kernel -f /tmp/k.json --device cpu")).unwrap();
        assert_eq!(
            cli.mode,
            Mode::Kernel {
                connection_file: "/tmp/k.json".into()
            }
        );
        assert_eq!(cli.device.as_deref(), Some("cpu"));
        assert_eq!(
            parse(&args("kernel install --prefix /opt/env --name b2"))
                .unwrap()
                .mode,
            Mode::KernelInstall {
                location: Location::Prefix("/opt/env".into()),
                name: "b2".into()
            }
        );
        assert_eq!(
            parse(&args("kernel uninstall --sys-prefix")).unwrap().mode,
            Mode::KernelUninstall {
                location: Location::SysPrefix,
                name: "brain".into()
            }
        );
        assert!(parse(&args("kernel"))
            .unwrap_err()
            .contains("-f CONNECTION.json"));
        assert!(parse(&args("kernel install --usr"))
            .unwrap_err()
            .contains("`--usr`"));
    }

    #[test]
    fn notebooks_convert_with_to_and_run_in_place() {
        assert_eq!(
            parse(&args("notebook a.rhai --to ipynb")).unwrap().mode,
            Mode::NotebookConvert {
                input: "a.rhai".into(),
                output: "a.ipynb".into(),
                to: NotebookFormat::Ipynb
            }
        );
        assert_eq!(
            parse(&args("notebook run a.ipynb steps=2 --keep-going")).unwrap(),
            Cli {
                mode: Mode::NotebookRun {
                    notebook: "a.ipynb".into(),
                    output: "a.ipynb".into(),
                    keep_going: true
                },
                device: None,
                script_args: vec!["steps=2".into()],
                script_help: false
            }
        );
        assert!(parse(&args("notebook a.ipynb --to ipynb"))
            .unwrap_err()
            .contains("-o"));
        assert!(parse(&args("notebook a.rhai --to pdf"))
            .unwrap_err()
            .contains("--to pdf"));
    }

    #[test]
    fn unknown_commands_and_missing_values_are_errors() {
        assert!(parse(&args("frobnicate")).is_err());
        assert!(parse(&args("run")).is_err());
        assert!(parse(&args("--device")).is_err());
    }
}
