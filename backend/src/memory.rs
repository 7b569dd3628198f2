//! How much memory a new buffer may take, asked before it is allocated. Rust aborts the process
//! when an allocation fails, and a REPL session loses every variable with it, so a buffer whose
//! size comes from a script or a file is checked first: a request larger than what the host
//! can give is an `OutOfMemory` error naming the op, the shape and the bytes asked for.
//!
//! "What the host can give" is the least of: the kernel's estimate of memory available without
//! swapping plus free swap (`/proc/meminfo`), the room left under a cgroup v2 limit, and the
//! address space left under `RLIMIT_AS`/`RLIMIT_DATA`. Where none can be read (other systems),
//! nothing is refused and allocation behaves as before.

use crate::{DType, Device, Error, Result};

/// Requests below this are not checked against the system's free memory: reading
/// `/proc/meminfo` costs tens of microseconds, noise next to filling this many bytes.
pub const SYSTEM_CHECK_MIN_BYTES: usize = 64 << 20;
/// Requests below this are not checked at all (the rlimit check is a syscall and a small read).
pub const RLIMIT_CHECK_MIN_BYTES: usize = 1 << 20;

/// The bytes of `shape` in `dtype`, or an error naming the op when they overflow.
pub fn bytes_for(op: &'static str, shape: &[usize], dtype: DType) -> Result<usize> {
    shape
        .iter()
        .try_fold(dtype.size_in_bytes(), |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!("shape {shape:?} of {dtype} needs more bytes than a machine has"),
            )
        })
}

/// Checks that a host buffer of `shape` in `dtype` can be allocated, before it is.
pub fn check_host(op: &'static str, shape: &[usize], dtype: DType) -> Result<()> {
    let bytes = bytes_for(op, shape, dtype)?;
    check_host_bytes(op, shape, Some(dtype), bytes)
}

/// Like `check_host` for a byte count (a buffer that is not one tensor).
pub fn check_host_bytes(
    op: &'static str,
    shape: &[usize],
    dtype: Option<DType>,
    bytes: usize,
) -> Result<()> {
    if bytes < RLIMIT_CHECK_MIN_BYTES {
        return Ok(());
    }
    let mut available = rlimit_room();
    if bytes >= SYSTEM_CHECK_MIN_BYTES {
        available = min_some(available, system_available());
    }
    match available {
        Some(a) if bytes > a => Err(out_of_memory(op, shape, dtype, Device::Cpu, bytes, a)),
        _ => Ok(()),
    }
}

/// A `Vec` with room for `n` elements, or an `OutOfMemory` error instead of an abort: checked
/// against the host's free memory, then reserved fallibly.
pub fn try_vec<T>(op: &'static str, shape: &[usize], n: usize) -> Result<Vec<T>> {
    let bytes = n
        .checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid(op, format!("{n} elements overflow the address space")))?;
    check_host_bytes(op, shape, None, bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        let available = min_some(rlimit_room(), system_available()).unwrap_or(0);
        out_of_memory(op, shape, None, Device::Cpu, bytes, available)
    })?;
    Ok(v)
}

pub fn out_of_memory(
    op: &'static str,
    shape: &[usize],
    dtype: Option<DType>,
    device: Device,
    requested: usize,
    available: usize,
) -> Error {
    Error::OutOfMemory {
        op,
        shape: shape.to_vec(),
        dtype,
        device,
        requested,
        available,
    }
}

/// `1.5 GiB`, for messages; the exact count is printed beside it.
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn min_some(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The address space left under `RLIMIT_AS` and `RLIMIT_DATA` (whichever is set and lower);
/// `None` when neither is set.
#[cfg(target_os = "linux")]
fn rlimit_room() -> Option<usize> {
    let limit = [libc::RLIMIT_AS, libc::RLIMIT_DATA]
        .into_iter()
        .filter_map(|resource| {
            let mut r = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes one rlimit struct, which `r` is.
            let ok = unsafe { libc::getrlimit(resource, &mut r) } == 0;
            (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur as usize)
        })
        .min()?;
    // statm's first field is the virtual size in pages: what both limits are compared with.
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf takes a constant and reads nothing of ours.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    Some(limit.saturating_sub(pages.saturating_mul(page)))
}

#[cfg(not(target_os = "linux"))]
fn rlimit_room() -> Option<usize> {
    None
}

/// What the system can still give: `MemAvailable + SwapFree`, capped by a cgroup v2 limit.
fn system_available() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<usize> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        let kb: usize = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb.saturating_mul(1024))
    };
    let host = field("MemAvailable:")?.saturating_add(field("SwapFree:").unwrap_or(0));
    Some(match cgroup_room() {
        Some(room) => host.min(room),
        None => host,
    })
}

/// The room left under this process's cgroup v2 memory limit, when one is set.
fn cgroup_room() -> Option<usize> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max: usize = read("memory.max")?.trim().parse().ok()?; // "max" parses to None
    let current: usize = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_larger_than_the_machine_is_refused_with_op_shape_and_bytes() {
        let shape = [100_000, 100_000, 100_000];
        let e = check_host("zeros", &shape, DType::F32).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("zeros: out of memory"), "{msg}");
        assert!(msg.contains("[100000, 100000, 100000]"), "{msg}");
        assert!(msg.contains("4000000000000000 bytes"), "{msg}");
    }

    #[test]
    fn a_small_request_passes() {
        check_host("zeros", &[1000, 1000], DType::F32).unwrap();
        assert!(try_vec::<f32>("zeros", &[1000], 1000).unwrap().capacity() >= 1000);
    }

    #[test]
    fn an_overflowing_shape_is_an_error() {
        let e = bytes_for("zeros", &[usize::MAX, 2], DType::F32).unwrap_err();
        assert!(e.to_string().contains("zeros"), "{e}");
    }

    #[test]
    fn human_sizes_pick_a_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
