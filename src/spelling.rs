//! The nearest known name to a misspelt one, for errors that name it:
//! configuration keys, environment variables, the router's options.

/// The candidate within a small edit distance of `word`, if one is.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|c| (distance(word, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance over chars, a swap of two neighbours counting as one
/// edit (optimal string alignment): `kafak` is one edit from `kafka`.
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
    fn the_nearest_key_is_within_a_few_edits() {
        let keys = ["dbname", "user", "host", "port"];
        assert_eq!(nearest("dbnme", &keys), Some("dbname"));
        assert_eq!(nearest("usr", &keys), Some("user"));
        assert_eq!(nearest("bootstrap", &keys), None);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("kafak", "kafka"), 1);
    }
}
