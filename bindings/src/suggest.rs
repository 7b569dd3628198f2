//! "Did you mean": the known name nearest to a mistyped one (`stpes` → `steps`), for the
//! errors about unknown options and script arguments.

/// The candidate nearest to `word` by edit distance (an adjacent swap counts as one edit), if
/// it is close enough to be a typo: at most one edit for names up to 4 characters, two beyond.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = if word.chars().count() <= 4 { 1 } else { 2 };
    candidates
        .into_iter()
        .map(|c| (distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
/// neighbours, each one edit.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_the_name_and_an_unrelated_word_finds_none() {
        let names = ["steps", "corpus", "lr", "weight_decay"];
        assert_eq!(did_you_mean("stpes", names), Some("steps"));
        assert_eq!(did_you_mean("corpsu", names), Some("corpus"));
        assert_eq!(did_you_mean("weight_deacy", names), Some("weight_decay"));
        assert_eq!(did_you_mean("lt", names), Some("lr"));
        assert_eq!(did_you_mean("batch", names), None);
        assert_eq!(did_you_mean("x", names), None);
    }
}
