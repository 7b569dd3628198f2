//! `brain notebook`: runs a script cell by cell (cells split at `// %%` lines) in one scope and
//! writes a Markdown report with each cell's code, printed output, time, error and plots.

use crate::host::Output;
use crate::session::{error_parts, render_error, Session};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, PartialEq)]
pub struct Cell {
    pub markdown: bool,
    pub source: String,
    /// The 1-based line where the cell's body starts in the script.
    pub first_line: usize,
}

/// Splits at lines that start with `// %%`; `// %% [markdown]` cells hold comment text.
pub fn split_cells(src: &str) -> Vec<Cell> {
    let mut cells = vec![Cell {
        markdown: false,
        source: String::new(),
        first_line: 1,
    }];
    for (i, line) in src.lines().enumerate() {
        if let Some(rest) = line.trim_start().strip_prefix("// %%") {
            cells.push(Cell {
                markdown: rest.trim().starts_with("[markdown]"),
                source: String::new(),
                first_line: i + 2,
            });
            continue;
        }
        let cell = cells.last_mut().expect("there is always a cell");
        cell.source.push_str(line);
        cell.source.push('\n');
    }
    cells.retain(|c| !c.source.trim().is_empty());
    cells
}

pub fn markdown_text(source: &str) -> String {
    source
        .lines()
        .map(|l| {
            l.trim_start()
                .strip_prefix("//")
                .map(|t| t.strip_prefix(' ').unwrap_or(t))
                .unwrap_or(l)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Copies a plot into the report's files folder and returns the path relative to the report.
fn embed_plot(
    plot: &Path,
    files_dir: &Path,
    report_dir: &Path,
    n: usize,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(files_dir)?;
    let name = format!(
        "{n:02}-{}",
        plot.file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("plot.png")
    );
    let dest = files_dir.join(name);
    std::fs::copy(plot, &dest)?;
    Ok(dest
        .strip_prefix(report_dir)
        .map(Path::to_path_buf)
        .unwrap_or(dest))
}

/// Runs every cell; returns whether all succeeded.
pub fn run(
    session: &mut Session,
    output: &Output,
    script: &Path,
    report: &Path,
    keep_going: bool,
) -> Result<bool, String> {
    // A Jupyter notebook's cells are read as the `// %%` script they convert to, so errors
    // name lines of that script.
    let src = match script.extension().and_then(|e| e.to_str()) {
        Some("ipynb") => crate::ipynb::to_script(&crate::ipynb::read(script)?),
        _ => std::fs::read_to_string(script)
            .map_err(|e| format!("{}: cannot read: {e}", script.display()))?,
    };
    crate::runner::resolve_imports_beside(session, script);
    let report_dir = report
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let stem = report
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("report");
    let files_dir = report_dir.join(format!("{stem}_files"));
    let mut md = format!("# {}\n\n", script.display());
    let mut all_ok = true;
    let mut plot_count = 0;
    rusting_brain_rhai::plot::drain_written_plots();
    for (k, cell) in split_cells(&src).iter().enumerate() {
        if cell.markdown {
            writeln!(md, "{}\n", markdown_text(&cell.source)).ok();
            continue;
        }
        writeln!(
            md,
            "## Cell {}\n\n```rhai\n{}\n```\n",
            k + 1,
            cell.source.trim_end()
        )
        .ok();
        output.start_capture();
        let started = Instant::now();
        let result = session.eval_complete(&cell.source);
        let seconds = started.elapsed().as_secs_f64();
        let mut printed = output.take_capture();
        let failed = match &result {
            Ok(v) if !v.is_unit() => {
                printed.push_str(&session.display(v));
                printed.push('\n');
                false
            }
            Ok(_) => false,
            Err(e) => {
                let (msg, mut pos) = error_parts(e);
                if let Some(line) = pos.line() {
                    pos = rhai::Position::new(
                        (line + cell.first_line - 1) as u16,
                        pos.position().unwrap_or(1) as u16,
                    );
                }
                writeln!(
                    md,
                    "**Error:**\n\n```\n{}\n```\n",
                    render_error(&script.display().to_string(), &src, pos, &msg)
                )
                .ok();
                true
            }
        };
        if !printed.is_empty() {
            writeln!(md, "```text\n{}```\n", printed).ok();
        }
        for plot in rusting_brain_rhai::plot::drain_written_plots() {
            plot_count += 1;
            match embed_plot(&plot, &files_dir, &report_dir, plot_count) {
                Ok(rel) => writeln!(md, "![{}]({})\n", plot.display(), rel.display()).ok(),
                Err(e) => writeln!(md, "(plot {} could not be copied: {e})\n", plot.display()).ok(),
            };
        }
        writeln!(md, "*{:.3} s*\n", seconds).ok();
        if failed {
            all_ok = false;
            if !keep_going {
                writeln!(
                    md,
                    "*Stopped after the failing cell (use --keep-going to run the rest).*\n"
                )
                .ok();
                break;
            }
        }
    }
    if !report_dir.as_os_str().is_empty() {
        std::fs::create_dir_all(&report_dir)
            .map_err(|e| format!("{}: {e}", report_dir.display()))?;
    }
    std::fs::write(report, md).map_err(|e| format!("{}: cannot write: {e}", report.display()))?;
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_split_at_percent_markers_and_markdown_cells_lose_their_comment_slashes() {
        let cells = split_cells("let a = 1;\n// %% [markdown]\n// # Title\n// %%\nprint(a);\n");
        assert_eq!(cells.len(), 3);
        assert!(cells[1].markdown);
        assert_eq!(markdown_text(&cells[1].source), "# Title");
        assert_eq!(cells[2].first_line, 5);
    }
}
