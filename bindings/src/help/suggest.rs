//! What to tell a script whose call matched no function: the forms the name has, or the
//! registered name closest to a misspelt one.

use super::book::{lookup, names};

/// The signatures `name` is documented with (each overload once), when it has any.
pub fn forms_of(name: &str) -> Vec<String> {
    let mut forms: Vec<String> = Vec::new();
    for entry in lookup(name) {
        if !forms.contains(&entry.signature) {
            forms.push(entry.signature);
        }
    }
    forms
}

/// The registered name nearest `name` by edits, when it is near enough to be a typo: at most
/// one edit for short names, two from six characters on.
pub fn closest_name(name: &str) -> Option<String> {
    let limit = if name.chars().count() >= 6 { 2 } else { 1 };
    names()
        .into_iter()
        .map(|known| (edit_distance(name, &known), known))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, known)| known)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("linear", "linear"), 0);
        assert_eq!(edit_distance("lienar", "linear"), 2);
        assert_eq!(edit_distance("nn::linar", "nn::linear"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
