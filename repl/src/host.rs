//! Builds the script engine for a mode: the bindings, the script's ARGS, the device choice, and
//! where printed output and engine messages go.

use rhai::{Array, Dynamic, Engine};
use rusting_brain::Device;
use std::sync::{Arc, Mutex};

/// Printed text goes to stdout, or into a buffer when a notebook captures a cell.
#[derive(Clone, Default)]
pub struct Output {
    capture: Arc<Mutex<Option<String>>>,
}

impl Output {
    pub fn write_line(&self, text: &str) {
        let mut cap = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        match cap.as_mut() {
            Some(buf) => {
                buf.push_str(text);
                buf.push('\n');
            }
            None => println!("{text}"),
        }
    }

    pub fn start_capture(&self) {
        *self.capture.lock().unwrap_or_else(|e| e.into_inner()) = Some(String::new());
    }

    pub fn take_capture(&self) -> String {
        self.capture
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default()
    }
}

const ON_THE_CPU: &str =
    "(--device cpu runs on the CPU; --device auto, the default, takes the GPU when there is one)";

/// Resolves `--device`. `auto` (the default) takes the GPU when it is usable, else the CPU. A
/// GPU asked for by name that cannot be used is an error with the probe's reason: a run the
/// user meant for the GPU never goes quietly to the CPU. An unknown device name is an error.
pub fn choose_device(requested: Option<&str>) -> Result<(Device, String), String> {
    match requested {
        None | Some("auto") => match Device::cuda_count() {
            Ok(count) if count > 0 => Ok((Device::Cuda(0), "device: cuda:0".into())),
            _ => Ok((Device::Cpu, "device: cpu (no usable GPU)".into())),
        },
        Some(name) => {
            let d = Device::parse(name)
                .ok_or_else(|| format!("unknown device `{name}`: use auto, cpu, cuda or cuda:N"))?;
            match d {
                Device::Cpu => Ok((d, "device: cpu".into())),
                Device::Cuda(n) => match Device::cuda_count() {
                    Ok(count) if n < count => Ok((d, format!("device: {d}"))),
                    Ok(count) => Err(format!(
                        "device {d} is not usable: there are {count} CUDA device(s)\n{ON_THE_CPU}"
                    )),
                    Err(why) => Err(format!("device {d} is not usable: {why}\n{ON_THE_CPU}")),
                },
            }
        }
    }
}

/// `name=value`, `--name value` or `--name=value` from the script's arguments.
fn lookup_arg(args: &[String], name: &str) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let a = a.trim_start_matches("--");
        if let Some((k, v)) = a.split_once('=') {
            if k == name {
                return Some(v.to_string());
            }
        } else if a == name {
            return it.next().cloned();
        }
    }
    None
}

/// Converts an argument string to the type of the default. A default of `()` (no default)
/// takes the value's own type: an integer, a number, true/false, else a string.
fn typed_arg(
    name: &str,
    text: &str,
    default: &Dynamic,
) -> Result<Dynamic, Box<rhai::EvalAltResult>> {
    let bad = |kind: &str| {
        rusting_brain_rhai::error::runtime_error(format!("argument {name}={text}: expected {kind}"))
    };
    if default.is_int() {
        text.parse::<rhai::INT>()
            .map(Dynamic::from_int)
            .map_err(|_| bad("an integer"))
    } else if default.is_float() {
        text.parse::<rhai::FLOAT>()
            .map(Dynamic::from_float)
            .map_err(|_| bad("a number"))
    } else if default.is_bool() {
        text.parse::<bool>()
            .map(Dynamic::from_bool)
            .map_err(|_| bad("true or false"))
    } else if default.is_unit() {
        Ok(text
            .parse::<rhai::INT>()
            .map(Dynamic::from_int)
            .or_else(|_| text.parse::<rhai::FLOAT>().map(Dynamic::from_float))
            .or_else(|_| text.parse::<bool>().map(Dynamic::from_bool))
            .unwrap_or_else(|_| Dynamic::from(text.to_string())))
    } else {
        Ok(Dynamic::from(text.to_string()))
    }
}

pub fn build_engine(output: &Output, device: Device, script_args: &[String]) -> Engine {
    rusting_brain_rhai::tensor::set_default_device(device);
    let mut engine = rusting_brain_rhai::new_engine();
    let out = output.clone();
    engine.on_print(move |s| out.write_line(s));
    let out = output.clone();
    engine.on_debug(move |s, _, _| out.write_line(s));
    let out = output.clone();
    // Warnings belong to the session's output (and a notebook's report); notices about the
    // machine (a device started, a kernel file compiled) go to stderr beside `device: ...`.
    rusting_brain::messages::set_sink(Some(Arc::new(move |level, text| {
        if level == rusting_brain::messages::Level::Warning {
            out.write_line(&format!("warning: {text}"));
        } else {
            eprintln!("{text}");
        }
    })));
    let args: Arc<Vec<String>> = Arc::new(script_args.to_vec());
    let a = args.clone();
    let read_arg = move |name: &str, default: Dynamic| match lookup_arg(&a, name) {
        Some(text) => typed_arg(name, &text, &default),
        None => Ok(default),
    };
    let read = read_arg.clone();
    engine.register_fn("arg", read);
    // The third argument is the line `brain run script.rhai --help` shows (see script_args).
    engine.register_fn("arg", move |name: &str, default: Dynamic, _doc: &str| {
        read_arg(name, default)
    });
    rusting_brain_rhai::help::record_entry(
        "arg",
        "arg(name, default[, doc]) -> value",
        "A script argument given as name=value or --name value, converted to the default's type (a default of () keeps the value's own type). Declares the argument: `brain run` refuses names no arg() call reads, and --help lists them with their defaults and docs. The name must be a string literal.",
        "let steps = arg(\"steps\", 200, \"training steps\");",
    );
    let out = output.clone();
    engine.register_fn(
        "display",
        move |ctx: rhai::NativeCallContext, value: Dynamic| {
            if let Some(text) = crate::cell::display(ctx.engine(), &value) {
                out.write_line(&text);
            }
        },
    );
    rusting_brain_rhai::help::record_entry(
        "display",
        "display(value)",
        "Shows a value as a notebook output now, not only at the end of the cell: tensors and metric maps as tables, a model as its tree, the path of a PNG file as the image. Outside a notebook it prints the value.",
        "display(#{ loss: 0.25, accuracy: 0.9 });",
    );
    engine.register_fn("device", move || device.to_string());
    // The REPL's stand-in; `brain run` replaces it with the script's folder.
    engine.register_fn("script_dir", || ".".to_string());
    rusting_brain_rhai::help::record_entry(
        "script_dir",
        "script_dir() -> string",
        "The folder of the running script (\".\" in the REPL), for files that travel with it.",
        "let docs = script_dir() + \"/../docs\";",
    );
    let list: Array = args.iter().map(|s| Dynamic::from(s.clone())).collect();
    engine.register_fn("script_args", move || list.clone());
    engine
}

/// The scope variable every script sees.
pub fn args_array(script_args: &[String]) -> Array {
    script_args
        .iter()
        .map(|s| Dynamic::from(s.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_arguments_are_found_in_every_spelling() {
        let args: Vec<String> = ["steps=5", "--lr", "0.1", "--out=x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(lookup_arg(&args, "steps").as_deref(), Some("5"));
        assert_eq!(lookup_arg(&args, "lr").as_deref(), Some("0.1"));
        assert_eq!(lookup_arg(&args, "out").as_deref(), Some("x"));
        assert_eq!(lookup_arg(&args, "missing"), None);
    }

    /// The bindings' help is checked in their own tests; these are the entries the host adds.
    #[test]
    fn the_hosts_help_examples_run_and_signatures_match_their_functions() {
        use rusting_brain_rhai::help::{self, check};
        let engine = || build_engine(&Output::default(), Device::Cpu, &[]);
        let reference = engine();
        let entries: Vec<help::HelpEntry> = help::entries()
            .into_iter()
            .filter(|e| ["arg", "script_dir", "display"].contains(&e.name.as_str()))
            .collect();
        assert_eq!(entries.len(), 3, "{entries:?}");
        let mut problems = check::check_signatures(&entries, &reference);
        problems.extend(check::run_examples(&entries, engine));
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn an_explicit_gpu_that_is_not_usable_is_an_error_and_auto_never_is() {
        let err = choose_device(Some("cuda:9")).unwrap_err();
        assert!(err.contains("device cuda:9 is not usable"), "{err}");
        assert!(choose_device(Some("tpu")).is_err());
        assert_eq!(choose_device(Some("cpu")).unwrap().0, Device::Cpu);
        assert!(choose_device(Some("auto")).is_ok());
        assert!(choose_device(None).is_ok());
    }
}
