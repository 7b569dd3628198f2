//! The interactive REPL: multi-line entries (decided by compiling), auto-printed values,
//! `:commands`, history, completion, and Ctrl-C that stops a running entry but keeps the session.
//! When stdin is not a terminal it reads entries the same way, so sessions can be tested.

use crate::complete::BrainHelper;
use crate::session::{error_parts, render_error, EntryError, Session, Variable};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{CompletionType, Config, Editor};
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub struct Repl {
    session: Session,
    timing: bool,
    variables: Arc<Mutex<Vec<Variable>>>,
}

/// What the loop should do after an entry.
enum Flow {
    Continue,
    Quit,
}

fn history_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BRAIN_HISTORY") {
        return Some(PathBuf::from(p));
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("brain").join("history"))
}

impl Repl {
    pub fn new(session: Session) -> Self {
        Repl {
            session,
            timing: false,
            variables: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn run(mut self) {
        if std::io::stdin().is_terminal() {
            self.interactive();
        } else {
            self.piped();
        }
    }

    fn interactive(&mut self) {
        // List mode shows every candidate at once rather than cycling through them.
        let config = Config::builder()
            .completion_type(CompletionType::List)
            .build();
        let mut editor: Editor<BrainHelper, DefaultHistory> = match Editor::with_config(config) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("cannot start the line editor ({e}); reading plain lines");
                return self.piped();
            }
        };
        editor.set_helper(Some(BrainHelper {
            variables: self.variables.clone(),
        }));
        let history = history_path();
        if let Some(h) = &history {
            let _ = editor.load_history(h);
        }
        println!("brain {}: RustingBrain REPL. :help for commands, help() for functions, Ctrl-D to exit.", env!("CARGO_PKG_VERSION"));
        let mut pending = String::new();
        loop {
            let prompt = if pending.is_empty() { ">> " } else { ".. " };
            match editor.readline(prompt) {
                Ok(line) => {
                    pending.push_str(&line);
                    pending.push('\n');
                    if let Some(flow) = self.feed(&pending) {
                        let entry = pending.trim_end().to_string();
                        if !entry.is_empty() {
                            let _ = editor.add_history_entry(entry.as_str());
                        }
                        pending.clear();
                        if let Flow::Quit = flow {
                            break;
                        }
                    }
                }
                Err(ReadlineError::Interrupted) => {
                    // Ctrl-C at the prompt drops the pending entry.
                    pending.clear();
                }
                Err(ReadlineError::Eof) => break,
                Err(e) => {
                    eprintln!("input error: {e}");
                    break;
                }
            }
        }
        if let Some(h) = &history {
            if let Some(dir) = h.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(h);
        }
    }

    fn piped(&mut self) {
        let stdin = std::io::stdin();
        let mut pending = String::new();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            pending.push_str(&line);
            pending.push('\n');
            if let Some(flow) = self.feed(&pending) {
                pending.clear();
                if let Flow::Quit = flow {
                    return;
                }
            }
        }
        if !pending.trim().is_empty() {
            eprintln!("error: the input ended in the middle of an entry:\n{pending}");
        }
    }

    /// Handles the pending text; `None` means the entry is incomplete and needs more lines.
    fn feed(&mut self, pending: &str) -> Option<Flow> {
        let src = pending.trim();
        if src.is_empty() {
            return Some(Flow::Continue);
        }
        if src.starts_with(':') && !src.contains('\n') {
            return Some(self.command(src));
        }
        let started = Instant::now();
        let result = self.session.eval(pending);
        if let Err(EntryError::Incomplete) = result {
            return None;
        }
        match result {
            Ok(v) if !v.is_unit() => println!("{}", self.session.display(&v)),
            Ok(_) => {}
            Err(e) => {
                let (msg, pos) = error_parts(&e);
                match pos.line() {
                    Some(_) => eprintln!(
                        "{}",
                        render_error("<repl>", pending, pos, &msg).replacen(
                            "<repl>:",
                            "error at ",
                            1
                        )
                    ),
                    None => eprintln!("error: {msg}"),
                }
            }
        }
        if self.timing {
            println!("({:.3} s)", started.elapsed().as_secs_f64());
        }
        *self.variables.lock().unwrap_or_else(|e| e.into_inner()) = self.session.variable_types();
        Some(Flow::Continue)
    }

    fn command(&mut self, line: &str) -> Flow {
        let (cmd, arg) = line
            .split_once(char::is_whitespace)
            .map(|(c, a)| (c, a.trim()))
            .unwrap_or((line, ""));
        match cmd {
            ":quit" | ":q" | ":exit" => return Flow::Quit,
            ":help" if arg.is_empty() => println!("{}", COMMAND_HELP),
            ":help" => println!("{}", rusting_brain_rhai::help::render(arg)),
            ":time" => {
                self.timing = !self.timing;
                println!("timing {}", if self.timing { "on" } else { "off" });
            }
            ":vars" => {
                let vars = self.session.variables();
                if vars.is_empty() {
                    println!("(no variables)");
                }
                for (name, what) in vars {
                    println!("{name}: {what}");
                }
            }
            ":reset" => {
                self.session.reset();
                println!("session reset");
            }
            ":load" if !arg.is_empty() => match std::fs::read_to_string(arg) {
                Ok(src) => {
                    if let Err(e) = self.session.eval_complete(&src) {
                        let (msg, pos) = error_parts(&e);
                        eprintln!("{}", render_error(arg, &src, pos, &msg));
                    }
                }
                Err(e) => eprintln!("error: cannot read {arg}: {e}"),
            },
            ":save" if !arg.is_empty() => match std::fs::write(arg, self.session.script()) {
                Ok(()) => println!("saved {} entries to {arg}", self.session.accepted.len()),
                Err(e) => eprintln!("error: cannot write {arg}: {e}"),
            },
            ":load" | ":save" => eprintln!("error: {cmd} needs a file name"),
            other => eprintln!("error: unknown command {other}; :help lists the commands"),
        }
        Flow::Continue
    }
}

const COMMAND_HELP: &str = "commands:
  :help [name]   this list, or help for a function (same as help(\"name\"))
  :load FILE     run a script file in this session
  :time          toggle timing of each entry
  :vars          list the variables in scope
  :reset         forget all variables and functions
  :save FILE     write the entries that ran as a script
  :quit          leave (or Ctrl-D)
Ctrl-C stops a running entry and keeps the session.";
