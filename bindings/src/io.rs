//! The `io::` namespace: checkpoints of named tensors in (any format, by content) and out
//! (safetensors), and writers for the formats that
//! `data::` and `text::` read (text, NPY, IDX), so a script can make its own small inputs.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use crate::nn::map_to_tensors;
use rhai::{Dynamic, Engine, Map, Module};
use rusting_brain::Tensor;

/// Creates the folder `path` goes in.
fn create_parent(path: &str) -> rusting_brain::Result<()> {
    match std::path::Path::new(path).parent() {
        Some(parent) => {
            std::fs::create_dir_all(parent).map_err(|e| rusting_brain::Error::io(path, e))
        }
        None => Ok(()),
    }
}

/// Writes `bytes` to `path`, creating its folder first.
fn write_file(path: &str, bytes: &[u8]) -> rusting_brain::Result<()> {
    create_parent(path)?;
    std::fs::write(path, bytes).map_err(|e| rusting_brain::Error::io(path, e))
}

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("io"));
        api.func(
            "save",
            "io::save(tensors, path)",
            "Writes a map of named tensors (atomically, creating its folder): a PyTorch state dict for .pt, .pth and .bin (torch.load reads it), else safetensors.",
            "io::save(#{ weight: randn([2, 3]), bias: zeros([2]) }, \"model.safetensors\"); io::save(#{ w: ones([2]) }, \"model.pt\");",
            |m: Map, path: &str| {
                let t: Vec<(String, Tensor)> = map_to_tensors(&m, "io::save")?.into_iter().collect();
                guard(|| {
                    create_parent(path)?;
                    rusting_brain::io::any::save_by_extension(path, &t)
                })
            },
        );
        api.func(
            "load",
            "io::load(path) -> map",
            "Reads the named tensors of a checkpoint, whatever its format by its content: safetensors (or the model.safetensors.index.json of a sharded one), PyTorch .pt/.pth/.bin (zip or legacy; nested dicts and pickled modules give dotted names, other values are left out), GGUF (dequantized to f32), NPY, NPZ.",
            "io::save(#{ weight: randn([2, 3]) }, \"model.safetensors\"); let w = io::load(\"model.safetensors\");",
            |path: &str| {
                guard(|| rusting_brain::io::any::load_any(path)).map(|t| {
                    t.into_iter()
                        .map(|(k, v)| (k.into(), Dynamic::from(v)))
                        .collect::<Map>()
                })
            },
        );
        api.func(
            "inspect",
            "io::inspect(path) -> string",
            "A table of a checkpoint's tensors (any format io::load reads): name, shape, dtype and size, and the total. Safetensors (single or sharded) and GGUF are listed from their headers, without reading the data.",
            "io::save(#{ weight: randn([2, 3]) }, \"model.safetensors\"); print(io::inspect(\"model.safetensors\"));",
            |path: &str| guard(|| rusting_brain::io::any::inspect(path)),
        );
        register_writers(&mut api);
    }
    engine.register_static_module("io", module.into());
    // Python's name for it, which notebook users type first.
    crate::help::record_entry(
        "input",
        "input(prompt) -> string | ()",
        "The same as io::read_line: prints the prompt and reads one line (in a Jupyter notebook, from the input box the frontend shows); () at the end of the input.",
        "let name = input(\"your name? \"); if name != () { print(`hello ${name}`); }",
    );
    engine.register_fn("input", read_line);
}

thread_local! {
    /// Off while help examples run: a check must never wait on the terminal.
    static STDIN_OPEN: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Runs `f` with `io::read_line` at the end of its input at once.
pub fn without_stdin<R>(f: impl FnOnce() -> R) -> R {
    let before = STDIN_OPEN.with(|s| s.replace(false));
    let out = f();
    STDIN_OPEN.with(|s| s.set(before));
    out
}

/// Where lines come from when the host asks its user itself (the Jupyter kernel's stdin
/// channel): the prompt in, the line out, `None` at the end of the input, or an error that says
/// why no line can come.
pub type LineSource = std::sync::Arc<dyn Fn(&str) -> Result<Option<String>, String> + Send + Sync>;

static LINE_SOURCE: std::sync::Mutex<Option<LineSource>> = std::sync::Mutex::new(None);

/// Sends `io::read_line` to `source` (None: back to standard input).
pub fn set_line_source(source: Option<LineSource>) {
    *LINE_SOURCE.lock().unwrap_or_else(|e| e.into_inner()) = source;
}

/// `io::read_line(prompt)`: one line of standard input (or of the host's line source) without
/// its line end; () at the end of the input.
fn read_line(prompt: &str) -> RhaiResult<Dynamic> {
    use std::io::{BufRead, Write};
    if !STDIN_OPEN.with(|s| s.get()) {
        return Ok(Dynamic::UNIT);
    }
    let source = LINE_SOURCE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(source) = source {
        return match source(prompt) {
            Ok(Some(line)) => Ok(Dynamic::from(line)),
            Ok(None) => Ok(Dynamic::UNIT),
            Err(why) => Err(runtime_error(format!("io::read_line: {why}"))),
        };
    }
    print!("{prompt}");
    std::io::stdout()
        .flush()
        .map_err(|e| runtime_error(format!("io::read_line: stdout: {e}")))?;
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| runtime_error(format!("io::read_line: stdin: {e}")))?;
    if n == 0 {
        return Ok(Dynamic::UNIT);
    }
    let trimmed = line.trim_end_matches(['\n', '\r']);
    Ok(Dynamic::from(trimmed.to_string()))
}

fn register_writers(api: &mut Api) {
    api.func(
        "read_line",
        "io::read_line(prompt) -> string | ()",
        "Prints the prompt and reads one line of standard input (without its line end); () at the end of the input (Ctrl-D, or a closed pipe). For scripts run with `brain run` that talk with their user, as scripts/chat.rhai does.",
        "let line = io::read_line(\"you> \"); if line == () { print(\"(no more input)\"); } else { print(`you said ${line}`); }",
        read_line,
    );
    api.func(
        "write_text",
        "io::write_text(path, text)",
        "Writes a string as a UTF-8 text file (a CSV or a small corpus, say), creating its folder and replacing any file there.",
        "io::write_text(\"notes.txt\", \"hello world\\n\");",
        |path: &str, text: &str| guard(|| write_file(path, text.as_bytes())),
    );
    api.func(
        "save_npy",
        "io::save_npy(tensor, path)",
        "Writes a tensor as a NumPy .npy file (what data::npy and numpy.load read).",
        "io::save_npy(randn([4, 2]), \"x.npy\");",
        |t: Tensor, path: &str| {
            guard(|| write_file(path, &rusting_brain::data::npy::npy_bytes(&t)?))
        },
    );
    api.func(
        "save_idx",
        "io::save_idx(tensor, path)",
        "Writes a u8, f32 or f64 tensor as an MNIST-style IDX file (what data::idx reads).",
        "io::save_idx(zeros([2, 28, 28], #{ dtype: \"u8\" }), \"images.idx\");",
        |t: Tensor, path: &str| {
            guard(|| write_file(path, &rusting_brain::data::idx::idx_bytes(&t)?))
        },
    );
}
