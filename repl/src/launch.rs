//! `brain launch --gpus N script.rhai [args]`: one `brain run` of the script per GPU, each told
//! its rank, the world size and a rendezvous directory through its environment (see
//! `rusting_brain::dist`), as torchrun starts the ranks of a PyTorch DDP run.
//!
//! The launcher owns the ranks: when one fails or dies, it stops the others and exits non-zero
//! naming that rank, so no rank waits forever for a peer that is gone. On Linux the ranks are
//! also killed if the launcher itself dies.

use rusting_brain::dist::{DIR_VAR, RANK_VAR, WORLD_SIZE_VAR};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long ranks get to finish after Ctrl-C before they are killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

pub fn run(gpus: usize, script: &Path, script_args: &[String], device: Option<&str>) -> ExitCode {
    match launch(gpus, script, script_args, device) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("brain launch: {e}");
            ExitCode::from(1)
        }
    }
}

/// The `--device` each rank runs on: its own GPU, `cuda:RANK`, or the CPU for every rank
/// (several CPU ranks are for trying a script's distributed logic, not for speed).
fn rank_device(device: Option<&str>, rank: usize) -> Result<String, String> {
    match device.unwrap_or("auto") {
        "cpu" => Ok("cpu".into()),
        "cuda" => Ok(format!("cuda:{rank}")),
        "auto" if rusting_brain::Device::cuda_is_available() => Ok(format!("cuda:{rank}")),
        "auto" => Ok("cpu".into()),
        other => Err(format!(
            "--device {other}: each rank takes its own GPU (cuda:RANK); use --device cuda, \
             auto or cpu"
        )),
    }
}

fn launch(
    gpus: usize,
    script: &Path,
    script_args: &[String],
    device: Option<&str>,
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find brain itself: {e}"))?;
    let dir = Rendezvous::create()?;
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        // Ctrl-C reaches the ranks too (one process group): they stop their entry and exit.
        let flag = interrupted.clone();
        let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    }
    let mut ranks: Vec<Option<Child>> = Vec::with_capacity(gpus);
    for rank in 0..gpus {
        let spawned = rank_device(device, rank).and_then(|device| {
            spawn_rank(&exe, script, script_args, &device, rank, gpus, &dir.path)
        });
        match spawned {
            Ok(child) => ranks.push(Some(child)),
            Err(e) => {
                stop(&mut ranks);
                return Err(format!("rank {rank}: {e}"));
            }
        }
    }
    let mut interrupted_at = None;
    loop {
        let mut running = 0;
        for rank in 0..gpus {
            let Some(child) = ranks[rank].as_mut() else {
                continue;
            };
            let failure = match child.try_wait() {
                Ok(None) => {
                    running += 1;
                    continue;
                }
                Ok(Some(status)) if status.success() => {
                    ranks[rank] = None;
                    continue;
                }
                Ok(Some(status)) => format!("rank {rank} {}", describe(status)),
                Err(e) => format!("cannot watch rank {rank}: {e}"),
            };
            ranks[rank] = None;
            let stopped = stop(&mut ranks);
            return Err(format!("{failure}{}", stopped_note(&stopped)));
        }
        if running == 0 {
            return Ok(());
        }
        if interrupted.load(Ordering::SeqCst) {
            let at = *interrupted_at.get_or_insert_with(Instant::now);
            if at.elapsed() > INTERRUPT_GRACE {
                let stopped = stop(&mut ranks);
                return Err(format!("interrupted{}", stopped_note(&stopped)));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_rank(
    exe: &Path,
    script: &Path,
    script_args: &[String],
    device: &str,
    rank: usize,
    world_size: usize,
    dir: &Path,
) -> Result<Child, String> {
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg(script)
        .args(script_args)
        .args(["--device", device])
        .env(RANK_VAR, rank.to_string())
        .env(WORLD_SIZE_VAR, world_size.to_string())
        .env(DIR_VAR, dir)
        // NVLink multicast (NVLS) can take every GPU of a shared host out of service; it stays
        // off whatever the caller's environment says.
        .env("NCCL_NVLS_ENABLE", "0");
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGKILL this child
        // when the launcher's thread that spawned it exits.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))
}

/// Kills every rank still running and waits for it; returns their ranks.
fn stop(ranks: &mut [Option<Child>]) -> Vec<usize> {
    let mut stopped = Vec::new();
    for (rank, slot) in ranks.iter_mut().enumerate() {
        if let Some(mut child) = slot.take() {
            if let Ok(None) = child.try_wait() {
                stopped.push(rank);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    stopped
}

fn stopped_note(stopped: &[usize]) -> String {
    if stopped.is_empty() {
        String::new()
    } else {
        format!("; stopped ranks {stopped:?}")
    }
}

fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("failed (exit code {code})"),
        None => format!("failed ({status})"),
    }
}

/// The directory the ranks meet in, removed when the launcher is done.
struct Rendezvous {
    path: PathBuf,
}

impl Rendezvous {
    fn create() -> Result<Rendezvous, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("brain-launch-{}-{nanos:09}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create the rendezvous {}: {e}", path.display()))?;
        Ok(Rendezvous { path })
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_gets_its_own_gpu_or_every_rank_the_cpu() {
        assert_eq!(rank_device(Some("cuda"), 1).unwrap(), "cuda:1");
        assert_eq!(rank_device(Some("cpu"), 3).unwrap(), "cpu");
        let e = rank_device(Some("cuda:1"), 0).unwrap_err();
        assert!(e.contains("--device cuda:1"), "{e}");
    }
}
