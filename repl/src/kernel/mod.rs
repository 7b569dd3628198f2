//! `brain kernel -f connection.json`: the REPL's session behind the Jupyter messaging protocol
//! (5.3), so JupyterLab, Notebook, VS Code and nbclient run `.ipynb` notebooks on brain.
//!
//! Two threads share the work. The socket thread runs the five channels on a small async
//! runtime: it answers heartbeats, serves the control channel at once (so an interrupt or a
//! shutdown is heard while a cell runs), publishes on iopub, and passes shell requests and
//! input replies on. The session thread (this one) owns the Rhai session and handles the shell
//! requests in order: runs cells, completes, inspects, answers history. A cell's output goes
//! to the frontend as it is made (see `cell` and `stdio_capture`).

mod connection;
mod executor;
mod frontend;
pub mod install;
mod replies;
mod sockets;
mod wire;

use crate::session::Session;
use std::path::Path;

pub use connection::Connection;

/// Serves the kernel until a shutdown request (or the frontend's death) ends the process.
pub fn serve(connection_file: &Path, session: Session, device_note: &str) -> Result<(), String> {
    let connection = Connection::read(connection_file)?;
    crate::stdio_capture::start()?;
    crate::cell::route_bindings_to_frontends();
    let channels = sockets::start(connection)?;
    crate::stdio_capture::log(&format!(
        "brain kernel {} listening ({device_note})",
        env!("CARGO_PKG_VERSION")
    ));
    executor::Executor::new(session, channels).run();
    Ok(())
}
