//! Command-line parsing for `brain`: the mode, the device, and the script's own arguments.

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
    Notebook {
        script: PathBuf,
        output: PathBuf,
        keep_going: bool,
    },
    Help,
    Version,
}

#[derive(Debug, PartialEq)]
pub struct Cli {
    pub mode: Mode,
    /// `--device` as given; `None` picks the GPU when one is usable, else the CPU.
    pub device: Option<String>,
    /// Arguments after the script name, handed to the script as `ARGS`.
    pub script_args: Vec<String>,
}

pub const USAGE: &str = "usage:
  brain                                  start the REPL
  brain run FILE.rhai [ARGS...]          run a script (ARGS are visible to it as ARGS)
  brain notebook FILE.rhai -o REPORT.md  run a script cell by cell (cells split at `// %%`) into a Markdown report
           [--keep-going]                continue after a failing cell
  brain check FILE.rhai                  parse a script without running it
options:
  --device cpu|cuda|cuda:N               where tensors live (default: the GPU when usable, else the CPU)
  -h, --help | -V, --version";

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
                    .ok_or("--device needs a value: cpu, cuda or cuda:N")?
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
        Some("-h" | "--help" | "help") => Mode::Help,
        Some("-V" | "--version") => Mode::Version,
        Some("run") => Mode::Run {
            script: it.next().ok_or("brain run needs a script file")?.into(),
        },
        Some("check") => Mode::Check {
            script: it.next().ok_or("brain check needs a script file")?.into(),
        },
        Some("notebook") => {
            let mut script = None;
            let mut output = None;
            let mut keep_going = false;
            while let Some(a) = it.next() {
                match a.as_str() {
                    "-o" | "--output" => {
                        output = Some(PathBuf::from(it.next().ok_or("-o needs a file name")?))
                    }
                    "--keep-going" => keep_going = true,
                    _ if script.is_none() => script = Some(PathBuf::from(a)),
                    other => {
                        return Err(format!("unexpected argument `{other}` for brain notebook"))
                    }
                }
            }
            let script = script.ok_or("brain notebook needs a script file")?;
            let output = output.unwrap_or_else(|| script.with_extension("md"));
            Mode::Notebook {
                script,
                output,
                keep_going,
            }
        }
        Some(other) => return Err(format!("unknown command `{other}`")),
    };
    Ok(Cli {
        mode,
        device,
        script_args: it.collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn unknown_commands_and_missing_values_are_errors() {
        assert!(parse(&args("frobnicate")).is_err());
        assert!(parse(&args("run")).is_err());
        assert!(parse(&args("--device")).is_err());
    }
}
