//! Per-reader counts of how the cases ended, and the table `docs/baseline.md` keeps.

use super::child::Outcome;

#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub cases: usize,
    pub refused: usize,
    pub loaded: usize,
    pub aborts: usize,
    pub panics: usize,
    pub runaways: usize,
    /// A description of each failing case (at most a few are kept).
    pub failures: Vec<String>,
}

const KEPT_FAILURES: usize = 8;

impl Tally {
    pub fn add(&mut self, outcome: &Outcome, case: &str) {
        self.cases += 1;
        let failure = match outcome {
            Outcome::Loaded => {
                self.loaded += 1;
                None
            }
            Outcome::Refused => {
                self.refused += 1;
                None
            }
            Outcome::Panic(m) => {
                self.panics += 1;
                Some(format!("panic: {m}"))
            }
            Outcome::Abort(m) => {
                self.aborts += 1;
                Some(format!("abort: {m}"))
            }
            Outcome::Runaway(m) => {
                self.runaways += 1;
                Some(format!("runaway: {m}"))
            }
        };
        if let Some(f) = failure {
            if self.failures.len() < KEPT_FAILURES {
                self.failures.push(format!("{case}: {f}"));
            }
        }
    }

    pub fn failed(&self) -> usize {
        self.aborts + self.panics + self.runaways
    }
}

/// The Markdown table of every reader's counts, with a total row.
pub fn table(rows: &[(&str, Tally)]) -> String {
    let mut out = String::from(
        "| reader | cases | clean errors | harmless loads | aborts | panics | runaways |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut total = Tally::default();
    for (name, t) in rows {
        out.push_str(&row(name, t));
        total.cases += t.cases;
        total.refused += t.refused;
        total.loaded += t.loaded;
        total.aborts += t.aborts;
        total.panics += t.panics;
        total.runaways += t.runaways;
    }
    out.push_str(&row("**all**", &total));
    out
}

fn row(name: &str, t: &Tally) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} |\n",
        t.cases, t.refused, t.loaded, t.aborts, t.panics, t.runaways
    )
}
