//! Lookups of a label's values in a LabelSet, by binary search on its (name, value) order.
//! Shared by the `labels` module (set operations) and the `validate` module (checks of single-value
//! labels and prefixes), which both build on it; re-exported as `labels::values_of` and
//! `labels::value_of`.
//!
//! Lives on: no state (pure functions of a borrowed set).

use crate::LabelSet;

/// Index of the first label whose name is not less than `name`.
pub(crate) fn lower_bound(set: &LabelSet, name: &str) -> usize {
    set.labels.partition_point(|l| l.name.as_str() < name)
}

/// Values of label `name`, in set order.
pub fn values_of<'a>(set: &'a LabelSet, name: &str) -> impl Iterator<Item = &'a str> {
    let begin = lower_bound(set, name);
    let name = name.to_string();
    set.labels
        .get(begin..)
        .unwrap_or_default()
        .iter()
        .take_while(move |l| l.name == name)
        .map(|l| l.value.as_str())
}

/// The first value of label `name`, if the set has it.
pub fn value_of<'a>(set: &'a LabelSet, name: &str) -> Option<&'a str> {
    values_of(set, name).next()
}
