//! What a notebook cell writes to standard output and error, whoever writes it (`print`, a
//! table the engine prints, a panic message), becomes the cell's `stream` outputs: file
//! descriptors 1 and 2 are pointed at pipes whose reader threads hand each chunk to the running
//! cell's frontend. Text written while no cell runs goes to the original descriptors (the
//! kernel's log).
//!
//! The pipes run beside the cell, so [`sync`] is the ordering point: it writes a marker into
//! each pipe and waits until its reader has passed it, so all that was printed before is out
//! before the cell's plots, result or error.

use std::sync::OnceLock;

static CAPTURE: OnceLock<imp::Capture> = OnceLock::new();

/// Starts capturing (once per process).
pub fn start() -> Result<(), String> {
    if CAPTURE.get().is_some() {
        return Ok(());
    }
    let capture = imp::Capture::start()?;
    let _ = CAPTURE.set(capture);
    Ok(())
}

/// Waits until everything written so far has reached the frontend (no-op when not capturing).
pub fn sync() {
    if let Some(c) = CAPTURE.get() {
        c.sync();
    }
}

/// Ends the capture: what was written is forwarded, and the descriptors are the original ones
/// again (for the last words of `brain notebook run`).
pub fn stop() {
    if let Some(c) = CAPTURE.get() {
        c.sync();
        c.restore();
    }
}

/// Writes to the kernel's log (the original standard error), past the capture.
pub fn log(line: &str) {
    match CAPTURE.get() {
        Some(c) => c.log(line),
        None => eprintln!("{line}"),
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use crate::cell::{emit, CellOutput};
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, RawFd};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    const MARKER: &[u8] = b"\x00brain-sync:";

    pub struct Capture {
        streams: [Arc<Stream>; 2],
    }

    struct Stream {
        name: &'static str,
        fd: RawFd,
        /// The descriptor as it was before the capture, for text outside any cell.
        original: Mutex<File>,
        /// Markers written and markers the reader has passed.
        sent: Mutex<u64>,
        passed: (Mutex<u64>, Condvar),
    }

    impl Capture {
        pub fn start() -> Result<Capture, String> {
            let streams = [open(1, "stdout")?, open(2, "stderr")?];
            Ok(Capture { streams })
        }

        pub fn sync(&self) {
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            for s in &self.streams {
                s.sync();
            }
        }

        pub fn restore(&self) {
            for s in &self.streams {
                let original = s.original.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: both descriptors belong to this process; dup2 points fd at the
                // original again (the pipe's reader then sees no more writes).
                unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&*original), s.fd) };
            }
        }

        pub fn log(&self, line: &str) {
            let mut f = self.streams[1]
                .original
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(f, "{line}");
        }
    }

    fn open(fd: RawFd, name: &'static str) -> Result<Arc<Stream>, String> {
        let mut ends = [0 as RawFd; 2];
        // SAFETY: pipe writes two new descriptors into `ends`; dup/dup2 take descriptors this
        // process owns. Each is wrapped in one File that owns it.
        let (reader, original) = unsafe {
            if libc::pipe(ends.as_mut_ptr()) != 0 {
                return Err(format!("{name}: pipe: {}", std::io::Error::last_os_error()));
            }
            let original = libc::dup(fd);
            if original < 0 || libc::dup2(ends[1], fd) < 0 {
                return Err(format!("{name}: dup: {}", std::io::Error::last_os_error()));
            }
            libc::close(ends[1]);
            (File::from_raw_fd(ends[0]), File::from_raw_fd(original))
        };
        let stream = Arc::new(Stream {
            name,
            fd,
            original: Mutex::new(original),
            sent: Mutex::new(0),
            passed: (Mutex::new(0), Condvar::new()),
        });
        let s = stream.clone();
        std::thread::Builder::new()
            .name(format!("brain-{name}"))
            .spawn(move || s.read_all(reader))
            .map_err(|e| format!("{name}: reader thread: {e}"))?;
        Ok(stream)
    }

    impl Stream {
        fn sync(&self) {
            let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
            *sent += 1;
            let mark = [MARKER, sent.to_string().as_bytes(), b"\x00"].concat();
            // SAFETY: writes the marker's bytes to this process's own descriptor.
            let written = unsafe { libc::write(self.fd, mark.as_ptr().cast(), mark.len()) };
            if written != mark.len() as isize {
                return;
            }
            let (lock, cv) = &self.passed;
            let passed = lock.lock().unwrap_or_else(|e| e.into_inner());
            // The reader only forwards text, so this returns at once; the bound keeps a stuck
            // frontend from hanging the cell.
            let _ = cv.wait_timeout_while(passed, Duration::from_secs(2), |p| *p < *sent);
        }

        fn read_all(&self, mut reader: File) {
            let mut pending: Vec<u8> = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                self.forward(&mut pending);
            }
        }

        /// Sends the text in `pending` up to any incomplete marker or UTF-8 sequence, and
        /// counts the markers passed.
        fn forward(&self, pending: &mut Vec<u8>) {
            let mut text = Vec::new();
            let mut rest: &[u8] = pending;
            let mut markers = 0;
            loop {
                match find(rest, b"\x00") {
                    None => {
                        text.extend_from_slice(rest);
                        rest = &[];
                        break;
                    }
                    Some(i) => {
                        text.extend_from_slice(&rest[..i]);
                        let tail = &rest[i..];
                        if tail.len() < MARKER.len() && MARKER.starts_with(tail) {
                            rest = tail; // a marker that has not fully arrived
                            break;
                        }
                        if !tail.starts_with(MARKER) {
                            text.push(0);
                            rest = &tail[1..];
                            continue;
                        }
                        match find(&tail[MARKER.len()..], b"\x00") {
                            Some(end) => {
                                markers += 1;
                                rest = &tail[MARKER.len() + end + 1..];
                            }
                            None => {
                                rest = tail;
                                break;
                            }
                        }
                    }
                }
            }
            // Keep an incomplete UTF-8 sequence at the end for the next read.
            let valid = match std::str::from_utf8(&text) {
                Ok(_) => text.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => text.len(),
            };
            let carry: Vec<u8> = text[valid..].iter().chain(rest).copied().collect();
            self.send(&String::from_utf8_lossy(&text[..valid]));
            *pending = carry;
            if markers > 0 {
                let (lock, cv) = &self.passed;
                *lock.lock().unwrap_or_else(|e| e.into_inner()) += markers;
                cv.notify_all();
            }
        }

        fn send(&self, text: &str) {
            if text.is_empty() {
                return;
            }
            let output = CellOutput::Stream {
                name: self.name,
                text: text.to_string(),
            };
            if !emit(output) {
                let mut f = self.original.lock().unwrap_or_else(|e| e.into_inner());
                let _ = f.write_all(text.as_bytes());
            }
        }
    }

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        haystack.windows(needle.len()).position(|w| w == needle)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    /// Elsewhere a cell's printed text stays on the process's own output (the kernel's log).
    pub struct Capture;

    impl Capture {
        pub fn start() -> Result<Capture, String> {
            Err("capturing standard output is implemented for Linux only".into())
        }
        pub fn sync(&self) {}
        pub fn restore(&self) {}
        pub fn log(&self, line: &str) {
            eprintln!("{line}");
        }
    }
}
