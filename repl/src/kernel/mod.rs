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
    exit_with_the_frontend();
    crate::stdio_capture::log(&format!(
        "brain kernel {} listening ({device_note})",
        env!("CARGO_PKG_VERSION")
    ));
    executor::Executor::new(session, channels).run();
    Ok(())
}

/// A kernel whose frontend died without asking it to shut down (a killed Jupyter server) would
/// run on with nobody to talk to. jupyter_client names itself in `JPY_PARENT_PID`; while that
/// process lives the kernel does, checked every second, as ipykernel's parent poller does.
fn exit_with_the_frontend() {
    #[cfg(target_os = "linux")]
    if let Some(pid) = std::env::var("JPY_PARENT_PID")
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
        .filter(|&p| p > 1)
    {
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
            let gone = unsafe { libc::kill(pid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                crate::stdio_capture::log("brain kernel: the frontend's process ended; exiting");
                std::process::exit(0);
            }
        });
    }
}
