//! What the unit tests of several modules build their input from.

use std::collections::BTreeMap;

/// A connector's settings from pairs.
pub(crate) fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
