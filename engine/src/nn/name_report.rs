//! What a load of named tensors found against what it expected, reported once: every missing,
//! unexpected and mis-shaped name in one error, so a user fixes a checkpoint in one pass
//! instead of one name per run. Module state dicts, the language model's parameters, PEFT
//! adapters, optimizer state and YOLO weights all report through it, in the same words.

use crate::{Error, Result};

/// Names listed per kind before the rest are only counted: a model of a hundred layers can
/// lack a thousand tensors.
const MAX_LISTED: usize = 24;

/// The problems of one load, collected as the loader finds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NameReport {
    missing: Vec<String>,
    unexpected: Vec<String>,
    misshaped: Vec<String>,
    other: Vec<String>,
}

impl NameReport {
    pub fn new() -> Self {
        Self::default()
    }

    /// The report of comparing `found` (names and shapes in the file) with `expected` (in the
    /// model): names only one side has, and names whose shapes differ.
    pub fn compare<'a>(
        expected: impl IntoIterator<Item = (&'a str, &'a [usize])>,
        found: impl IntoIterator<Item = (&'a str, &'a [usize])>,
    ) -> Self {
        let expected: std::collections::BTreeMap<&str, &[usize]> = expected.into_iter().collect();
        let found: std::collections::BTreeMap<&str, &[usize]> = found.into_iter().collect();
        let mut report = Self::new();
        for (name, shape) in &expected {
            match found.get(name) {
                None => report.missing(name),
                Some(got) if got != shape => report.misshaped(name, got, shape),
                Some(_) => {}
            }
        }
        for name in found.keys().filter(|n| !expected.contains_key(*n)) {
            report.unexpected(name);
        }
        report
    }

    /// `name` was expected and is not there.
    pub fn missing(&mut self, name: &str) {
        self.missing.push(name.to_string());
    }

    /// `name` is there and nothing expected it (the file was made for another config).
    pub fn unexpected(&mut self, name: &str) {
        self.unexpected.push(name.to_string());
    }

    /// `name` has shape `found` in the file where the model needs `expected`.
    pub fn misshaped(&mut self, name: &str, found: &[usize], expected: &[usize]) {
        self.misshaped.push(format!(
            "{name} is {found:?} in the file, {expected:?} in the model"
        ));
    }

    /// Any other problem with one entry (a dtype it cannot take, a failed copy).
    pub fn problem(&mut self, text: impl Into<String>) {
        self.other.push(text.into());
    }

    /// Forgets the missing and unexpected names (a non-strict load tolerates them; a
    /// mis-shaped entry is never tolerated).
    pub fn tolerate_missing_and_unexpected(&mut self) {
        self.missing.clear();
        self.unexpected.clear();
    }

    pub fn missing_names(&self) -> &[String] {
        &self.missing
    }

    pub fn unexpected_names(&self) -> &[String] {
        &self.unexpected
    }

    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.misshaped.is_empty()
            && self.other.is_empty()
    }

    /// Every problem in one line: `missing 2: a, b; unexpected 1: c; mis-shaped 1: d is [2]
    /// in the file, [3] in the model`; `None` when there is none.
    pub fn message(&self) -> Option<String> {
        let kinds = [
            ("missing", &self.missing, ", "),
            ("unexpected", &self.unexpected, ", "),
            ("mis-shaped", &self.misshaped, "; "),
        ];
        let mut parts: Vec<String> = kinds
            .into_iter()
            .filter(|(_, names, _)| !names.is_empty())
            .map(|(kind, names, sep)| format!("{kind} {}: {}", names.len(), listed(names, sep)))
            .collect();
        if !self.other.is_empty() {
            parts.push(listed(&self.other, "; "));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Ok when nothing is wrong; otherwise a `StateDict` error whose message starts with
    /// `what` (which load it was) and lists every problem.
    pub fn into_result(self, what: &str) -> Result<()> {
        match self.message() {
            None => Ok(()),
            Some(m) if what.is_empty() => Err(Error::StateDict(m)),
            Some(m) => Err(Error::StateDict(format!("{what}: {m}"))),
        }
    }
}

/// The first `MAX_LISTED` of `items` joined by `sep`, and a count of the rest.
fn listed(items: &[String], sep: &str) -> String {
    let mut text = items
        .iter()
        .take(MAX_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(sep);
    if items.len() > MAX_LISTED {
        text.push_str(&format!("{sep}and {} more", items.len() - MAX_LISTED));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_lists_each_kind_with_its_count() {
        let expected = [("a", &[2usize][..]), ("b", &[3][..]), ("c", &[4][..])];
        let found = [("a", &[2usize][..]), ("c", &[5][..]), ("z", &[1][..])];
        let report = NameReport::compare(expected, found);
        assert_eq!(
            report.message().unwrap(),
            "missing 1: b; unexpected 1: z; mis-shaped 1: c is [5] in the file, [4] in the model"
        );
        assert_eq!(report.missing_names(), ["b"]);
        assert_eq!(report.unexpected_names(), ["z"]);
    }

    #[test]
    fn a_clean_load_is_ok_and_a_problem_names_the_load() {
        assert!(
            NameReport::compare([("a", &[1usize][..])], [("a", &[1usize][..])])
                .into_result("weights")
                .is_ok()
        );
        let mut r = NameReport::new();
        r.problem("x: not a float");
        let e = r.into_result("optimizer state").unwrap_err().to_string();
        assert!(e.contains("optimizer state: x: not a float"), "{e}");
    }

    #[test]
    fn long_lists_are_cut_with_a_count() {
        let mut r = NameReport::new();
        for i in 0..30 {
            r.missing(&format!("w{i}"));
        }
        let m = r.message().unwrap();
        assert!(m.starts_with("missing 30: w0, w1"), "{m}");
        assert!(m.ends_with("w23, and 6 more"), "{m}");
    }

    #[test]
    fn tolerating_keeps_the_mis_shaped_entries() {
        let mut r = NameReport::compare(
            [("a", &[1usize][..]), ("b", &[1][..])],
            [("a", &[2usize][..])],
        );
        r.tolerate_missing_and_unexpected();
        assert_eq!(
            r.message().unwrap(),
            "mis-shaped 1: a is [2] in the file, [1] in the model"
        );
    }
}
