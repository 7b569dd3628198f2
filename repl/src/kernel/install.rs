//! `brain kernel install` and `uninstall`: the kernelspec that tells Jupyter how to start this
//! binary (`kernel.json`, and a logo), in one of Jupyter's data folders.

use serde_json::json;
use std::path::{Path, PathBuf};

/// Where a kernelspec goes, as `jupyter kernelspec install` names the places.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// The user's Jupyter data folder (`$JUPYTER_DATA_DIR`, else `~/.local/share/jupyter`).
    User,
    /// The active Python environment (`$VIRTUAL_ENV` or `$CONDA_PREFIX`)'s `share/jupyter`.
    SysPrefix,
    /// `PREFIX/share/jupyter`.
    Prefix(PathBuf),
}

pub struct Spec {
    pub location: Location,
    /// The kernel's folder name, `brain` unless asked otherwise.
    pub name: String,
    /// `--device` for the kernel's processes; `None` lets each choose (`auto`).
    pub device: Option<String>,
}

/// The folder that holds kernelspecs at `location`.
pub fn kernels_dir(location: &Location) -> Result<PathBuf, String> {
    let data = match location {
        Location::User => match std::env::var_os("JUPYTER_DATA_DIR") {
            Some(d) => PathBuf::from(d),
            None => {
                let home = std::env::var_os("HOME")
                    .ok_or("HOME is not set: give --prefix DIR or set JUPYTER_DATA_DIR")?;
                if cfg!(target_os = "macos") {
                    Path::new(&home).join("Library/Jupyter")
                } else {
                    match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
                        Some(xdg) => Path::new(&xdg).join("jupyter"),
                        None => Path::new(&home).join(".local/share/jupyter"),
                    }
                }
            }
        },
        Location::SysPrefix => {
            let prefix = std::env::var_os("VIRTUAL_ENV")
                .or_else(|| std::env::var_os("CONDA_PREFIX"))
                .ok_or("--sys-prefix needs an active Python environment (VIRTUAL_ENV or CONDA_PREFIX is not set); use --user or --prefix DIR")?;
            Path::new(&prefix).join("share/jupyter")
        }
        Location::Prefix(p) => p.join("share/jupyter"),
    };
    Ok(data.join("kernels"))
}

/// `kernel.json` for this binary.
pub fn kernel_json(exe: &Path, device: Option<&str>) -> serde_json::Value {
    let mut argv = vec![
        exe.display().to_string(),
        "kernel".into(),
        "-f".into(),
        "{connection_file}".into(),
    ];
    if let Some(d) = device {
        argv.extend(["--device".into(), d.to_string()]);
    }
    json!({
        "argv": argv,
        "display_name": "brain (Rhai)",
        "language": "rhai",
        // The control channel's interrupt_request stops a cell; SIGINT does too.
        "interrupt_mode": "message",
        "metadata": {"debugger": false}
    })
}

/// Writes the kernelspec; returns its folder.
pub fn install(spec: &Spec) -> Result<PathBuf, String> {
    if spec.name.is_empty()
        || !spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(format!(
            "kernel name `{}`: use letters, digits, `.`, `_` and `-`",
            spec.name
        ));
    }
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find this program's path: {e}"))?;
    let dir = kernels_dir(&spec.location)?.join(&spec.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(&kernel_json(&exe, spec.device.as_deref()))
        .expect("JSON values serialize");
    let file = dir.join("kernel.json");
    std::fs::write(&file, json + "\n").map_err(|e| format!("{}: {e}", file.display()))?;
    for size in [32, 64] {
        let path = dir.join(format!("logo-{size}x{size}.png"));
        write_logo(&path, size).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(dir)
}

/// Removes the kernelspec; returns the folder it removed.
pub fn uninstall(location: &Location, name: &str) -> Result<PathBuf, String> {
    let dir = kernels_dir(location)?.join(name);
    if !dir.join("kernel.json").is_file() {
        return Err(format!("no kernelspec `{name}` in {}", dir.display()));
    }
    std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The logo: a ring of eight nodes joined to a centre node on a dark disc, drawn here so the
/// kernel ships no image files.
fn write_logo(path: &Path, size: usize) -> rusting_brain::Result<()> {
    let s = size as f32;
    let (c, r_disc, r_ring) = (s / 2.0, s * 0.48, s * 0.30);
    let nodes: Vec<(f32, f32)> = (0..8)
        .map(|k| {
            let a = k as f32 * std::f32::consts::TAU / 8.0;
            (c + r_ring * a.cos(), c + r_ring * a.sin())
        })
        .chain([(c, c)])
        .collect();
    let dist_to_segment = |(px, py): (f32, f32), (ax, ay): (f32, f32), (bx, by): (f32, f32)| {
        let (dx, dy) = (bx - ax, by - ay);
        let t = (((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)).clamp(0.0, 1.0);
        ((px - ax - t * dx).powi(2) + (py - ay - t * dy).powi(2)).sqrt()
    };
    let mut pixels = Vec::with_capacity(size * size * 3);
    for y in 0..size {
        for x in 0..size {
            let p = (x as f32 + 0.5, y as f32 + 0.5);
            let from_centre = ((p.0 - c).powi(2) + (p.1 - c).powi(2)).sqrt();
            let near_node = nodes
                .iter()
                .any(|n| ((p.0 - n.0).powi(2) + (p.1 - n.1).powi(2)).sqrt() < s * 0.07);
            let on_edge = nodes[..8]
                .iter()
                .any(|n| dist_to_segment(p, *n, (c, c)) < s * 0.025);
            let rgb: [u8; 3] = if near_node {
                [255, 138, 61]
            } else if on_edge {
                [242, 196, 160]
            } else if from_centre <= r_disc {
                [38, 42, 56]
            } else {
                [255, 255, 255]
            };
            pixels.extend_from_slice(&rgb);
        }
    }
    let image = rusting_brain::Tensor::from_vec(pixels, &[size, size, 3])?;
    rusting_brain::vision::save_image(&image, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernelspec_starts_this_binary_with_the_connection_file() {
        let spec = kernel_json(Path::new("/opt/brain"), Some("cpu"));
        assert_eq!(
            spec["argv"],
            json!([
                "/opt/brain",
                "kernel",
                "-f",
                "{connection_file}",
                "--device",
                "cpu"
            ])
        );
        assert_eq!(spec["language"], "rhai");
        assert_eq!(spec["interrupt_mode"], "message");
    }

    #[test]
    fn a_prefix_install_writes_kernel_json_and_logos_and_uninstall_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec {
            location: Location::Prefix(dir.path().to_path_buf()),
            name: "brain-test".into(),
            device: None,
        };
        let at = install(&spec).unwrap();
        assert_eq!(at, dir.path().join("share/jupyter/kernels/brain-test"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(at.join("kernel.json")).unwrap())
                .unwrap();
        assert_eq!(json["argv"][1], "kernel");
        let logo = rusting_brain::vision::read_image(at.join("logo-64x64.png")).unwrap();
        assert_eq!(logo.dims(), &[64, 64, 3]);
        uninstall(&spec.location, "brain-test").unwrap();
        assert!(!at.exists());
        let err = uninstall(&spec.location, "brain-test").unwrap_err();
        assert!(err.contains("no kernelspec `brain-test`"), "{err}");
        let bad = Spec {
            name: "a/b".into(),
            ..spec
        };
        assert!(install(&bad).unwrap_err().contains("kernel name `a/b`"));
    }
}
