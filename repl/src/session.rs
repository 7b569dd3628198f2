//! One evaluation session: the engine, the scope that keeps variables between entries, and the
//! functions defined so far. The REPL, `brain run` and notebooks all evaluate through it.

use rhai::{Dynamic, Engine, EvalAltResult, ParseError, ParseErrorType, Position, Scope, AST};
use rusting_brain::Tensor;

pub struct Session {
    pub engine: Engine,
    pub scope: Scope<'static>,
    functions: AST,
    /// Entries that ran without error, in order (`:save` writes them as a script).
    pub accepted: Vec<String>,
}

/// A variable in the session's scope and its type, as `Dynamic::type_name` gives it (the Rust
/// path of a registered type) and as scripts name it (`Tensor`, `Model`, `i64`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: String,
    pub rust_type: String,
    pub script_type: String,
}

/// Why an entry did not produce a value.
pub enum EntryError {
    /// The source does not parse yet but may once more lines arrive.
    Incomplete,
    Parse(ParseError),
    Runtime(Box<EvalAltResult>),
}

impl Session {
    pub fn new(engine: Engine) -> Self {
        Session {
            engine,
            scope: Scope::new(),
            functions: AST::empty(),
            accepted: Vec::new(),
        }
    }

    pub fn reset(&mut self) {
        self.scope = Scope::new();
        self.functions = AST::empty();
        self.accepted.clear();
    }

    /// Compiles `src`. With `more_may_follow` (the REPL), an error at the very end of the input
    /// means "keep reading" rather than a parse error.
    pub fn compile(&self, src: &str, more_may_follow: bool) -> Result<AST, EntryError> {
        match self.engine.compile_with_scope(&self.scope, src) {
            Ok(ast) => Ok(ast),
            Err(e) if more_may_follow && is_incomplete(&e, src) => Err(EntryError::Incomplete),
            Err(e) => Err(EntryError::Parse(e)),
        }
    }

    /// Runs one REPL entry in the persistent scope; functions it defines stay for later entries.
    pub fn eval(&mut self, src: &str) -> Result<Dynamic, EntryError> {
        let ast = self.compile(src, true)?;
        self.run(src, ast)
    }

    /// Runs a whole script or notebook cell (nothing more will follow it).
    pub fn eval_complete(&mut self, src: &str) -> Result<Dynamic, EntryError> {
        let ast = self.compile(src, false)?;
        self.run(src, ast)
    }

    fn run(&mut self, src: &str, ast: AST) -> Result<Dynamic, EntryError> {
        let merged = self.functions.merge(&ast);
        rusting_brain::cancel::clear();
        let result = self
            .engine
            .eval_ast_with_scope::<Dynamic>(&mut self.scope, &merged);
        rusting_brain::cancel::clear();
        match result {
            Ok(v) => {
                self.functions = self.functions.merge(&ast.clone_functions_only());
                self.accepted.push(src.trim_end().to_string());
                Ok(v)
            }
            Err(e) => {
                // Functions defined by an entry that failed still parse fine; keep them.
                self.functions = self.functions.merge(&ast.clone_functions_only());
                Err(EntryError::Runtime(
                    rusting_brain_rhai::error::in_script_terms(&self.engine, e),
                ))
            }
        }
    }

    /// The accepted entries as a script (`:save`): each a statement that the next can follow.
    /// An entry typed without its `;` (`model.eval()`) gets one, after a line break when it
    /// ends in a comment.
    pub fn script(&self) -> String {
        let parses = |text: String| self.engine.compile(text).is_ok();
        let mut out = String::new();
        for entry in &self.accepted {
            // Followed by another statement (`0`), the entry must parse as it stands.
            let terminated = [String::new(), ";".into(), "\n;".into()]
                .into_iter()
                .find(|end| parses(format!("{entry}{end}\n0")))
                .unwrap_or_default();
            out.push_str(entry);
            out.push_str(&terminated);
            out.push('\n');
        }
        out
    }

    /// The names and short descriptions of the variables in scope.
    pub fn variables(&self) -> Vec<(String, String)> {
        self.scope
            .iter_raw()
            .map(|(name, _constant, value)| (name.to_string(), self.describe(value)))
            .collect()
    }

    /// The variables in scope with their types, for completion.
    pub fn variable_types(&self) -> Vec<Variable> {
        self.scope
            .iter_raw()
            .map(|(name, _constant, value)| Variable {
                name: name.to_string(),
                rust_type: value.type_name().to_string(),
                script_type: self.type_name(value),
            })
            .collect()
    }

    /// A value's type as scripts name it: the name registered for it (`Model`, not
    /// `rusting_brain_rhai::nn::modules::Model`), or Rhai's own (`i64`, `string`, `array`).
    pub fn type_name(&self, v: &Dynamic) -> String {
        self.engine.map_type_name(v.type_name()).to_string()
    }

    /// A one-line description of a value for `:vars`: `Tensor [3, 4] f32`, `Model`,
    /// `Dataset(150 rows, ...)`, `i64 = 1`.
    pub fn describe(&self, v: &Dynamic) -> String {
        const WIDTH: usize = 80;
        if let Some(t) = v.read_lock::<Tensor>() {
            let device = match t.device() {
                rusting_brain::Device::Cpu => String::new(),
                d => format!(" {d}"),
            };
            return format!("Tensor {:?} {}{device}", t.shape(), t.dtype());
        }
        let ty = self.type_name(v);
        if crate::mime::is_registered_type(&self.engine, v) {
            // One-line texts that start with the type (`Dataset(150 rows, ...)`) say more than
            // the type; a model's tree does not fit on a line.
            return match crate::mime::registered_text(&self.engine, v) {
                Some(text) if !text.contains('\n') && text.starts_with(&ty) => {
                    shorten(&text, WIDTH)
                }
                _ => ty,
            };
        }
        format!("{ty} = {}", shorten(&v.to_string(), 60))
    }

    /// How the REPL and notebooks show a value (see `mime::plain_text`).
    pub fn display(&self, v: &Dynamic) -> String {
        crate::mime::plain_text(&self.engine, v)
    }
}

/// `text` cut to `width` characters, with `...` when cut.
fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let cut: String = text.chars().take(width).collect();
    format!("{cut}...")
}

fn is_incomplete(e: &ParseError, src: &str) -> bool {
    match &*e.0 {
        ParseErrorType::UnexpectedEOF => true,
        ParseErrorType::MissingToken(..) | ParseErrorType::BadInput(_) => at_end(e.1, src),
        _ => false,
    }
}

/// Whether an error sits past the last character of the input, where more lines could still
/// complete the entry (an error inside the text is a real error).
fn at_end(pos: Position, src: &str) -> bool {
    let Some(line) = pos.line() else { return true };
    let lines: Vec<&str> = src.trim_end().lines().collect();
    let last_len = lines.last().map_or(0, |l| l.trim_end().chars().count());
    line > lines.len() || (line == lines.len() && pos.position().is_none_or(|col| col > last_len))
}

/// An error with the source line and a caret under its position, as `brain run` prints it.
pub fn render_error(origin: &str, src: &str, pos: Position, message: &str) -> String {
    match (pos.line(), pos.position()) {
        (Some(line), col) => {
            let col = col.unwrap_or(1);
            let text = src.lines().nth(line - 1).unwrap_or("");
            format!(
                "{origin}:{line}:{col}: {message}\n    {text}\n    {}^",
                " ".repeat(col.saturating_sub(1))
            )
        }
        _ => format!("{origin}: {message}"),
    }
}

/// The message and position of an entry error.
pub fn error_parts(e: &EntryError) -> (String, Position) {
    match e {
        EntryError::Incomplete => (
            "the input ended in the middle of a statement".into(),
            Position::NONE,
        ),
        EntryError::Parse(p) => (p.0.to_string(), p.1),
        EntryError::Runtime(r) => (runtime_message(r), r.position()),
    }
}

/// Rhai's error text, without the position it appends (we print our own).
fn runtime_message(e: &EvalAltResult) -> String {
    let mut inner = e;
    // A function call error wraps the real one; show the innermost cause.
    while let EvalAltResult::ErrorInFunctionCall(_, _, cause, _) = inner {
        inner = cause;
    }
    match inner {
        EvalAltResult::ErrorRuntime(msg, _) => msg.to_string(),
        EvalAltResult::ErrorTerminated(_, _) => "interrupted".into(),
        other => {
            let text = other.to_string();
            match text.rfind(" (line ") {
                Some(i) => text[..i].to_string(),
                None => text,
            }
        }
    }
}
