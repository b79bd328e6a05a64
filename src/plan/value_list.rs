//! Literal lists a test looks values up in (`in`, `notIn`, and the literal
//! operands of `containsAny` and `subsetOf`), indexed once when the plan is
//! compiled rather than at each evaluation.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;

use serde_json::Value;

use crate::eval::budget::walk_steps;

/// The most values a list may have for its strings to be compared in turn
/// rather than looked up in a hash set: hashing a handful of short strings
/// costs more than comparing them (a set of the bundled rules' thirteen
/// capabilities, built at each evaluation, cost 6,500 instructions a
/// `/validate` review), while a list of thousands compared in turn at each
/// of thousands of containers held a worker for half a minute.
pub const SCANNED_VALUES: usize = 16;

/// How a list of values is looked up in: its strings hashed when the list
/// is longer than [`SCANNED_VALUES`], and its other values with what
/// comparing one value with all of them may cost. `S` is how a hashed
/// string is kept: owned by a literal list ([`ValueList`]), borrowed from a
/// list a path selects, indexed again at each evaluation.
#[derive(Debug)]
pub struct ValueIndex<S> {
    /// The strings, when there are more than [`SCANNED_VALUES`] values.
    strings: Option<HashSet<S>>,
    /// The positions of the values other than strings, compared one by one.
    others: Vec<usize>,
    /// What comparing a value with every one of `others` may cost: a step
    /// per value within them (see [`walk_steps`]).
    others_steps: u64,
}

impl<'v, S: Hash + Eq + Borrow<str>> ValueIndex<S> {
    /// The index of `values`, keeping each hashed string as `keep` makes it.
    pub fn new(values: &'v [Value], keep: impl Fn(&'v str) -> S) -> ValueIndex<S> {
        let strings = (values.len() > SCANNED_VALUES)
            .then(|| values.iter().filter_map(Value::as_str).map(keep).collect());
        let mut others = Vec::new();
        let mut others_steps = 0_u64;
        for (i, value) in values.iter().enumerate() {
            if !value.is_string() {
                others.push(i);
                others_steps = others_steps.saturating_add(walk_steps(value, u64::MAX));
            }
        }
        ValueIndex {
            strings,
            others,
            others_steps,
        }
    }

    /// Whether `text` is one of the strings, when they are hashed; `None`
    /// when they are to be compared in turn.
    pub fn has_string(&self, text: &str) -> Option<bool> {
        self.strings.as_ref().map(|strings| strings.contains(text))
    }

    /// The values of `values` (the list indexed) that are not strings.
    pub fn others<'l>(&'l self, values: &'l [Value]) -> impl Iterator<Item = &'l Value> {
        self.others.iter().filter_map(|&i| values.get(i))
    }

    /// What comparing one value with every value of [`ValueIndex::others`]
    /// may cost, in steps.
    pub fn others_steps(&self) -> u64 {
        self.others_steps
    }
}

/// A literal list of values, indexed ([`ValueIndex`]) when the plan is
/// compiled.
#[derive(Debug)]
pub struct ValueList {
    /// The list itself (always a JSON array), as written.
    list: Value,
    index: ValueIndex<String>,
}

impl ValueList {
    /// `values` indexed for lookups.
    pub fn new(values: Vec<Value>) -> ValueList {
        let index = ValueIndex::new(&values, str::to_owned);
        ValueList {
            list: Value::Array(values),
            index,
        }
    }

    /// The values, in the order written.
    pub fn values(&self) -> &[Value] {
        self.list.as_array().map_or(&[], Vec::as_slice)
    }

    /// The list as one JSON value (an array).
    pub fn as_value(&self) -> &Value {
        &self.list
    }

    /// How the values are looked up in.
    pub fn index(&self) -> &ValueIndex<String> {
        &self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_hashed_only_past_the_scanned_length() {
        let list = |n: usize| {
            let mut values: Vec<Value> = (0..n - 1).map(|i| json!(format!("s{i}"))).collect();
            values.push(json!({"k": [1, 2]}));
            ValueList::new(values)
        };
        let few = list(SCANNED_VALUES);
        assert_eq!(few.index().has_string("s0"), None);
        let many = list(SCANNED_VALUES + 1);
        assert_eq!(many.index().has_string("s0"), Some(true));
        assert_eq!(many.index().has_string("s99"), Some(false));
        for list in [few, many] {
            let index = list.index();
            assert_eq!(
                index.others(list.values()).collect::<Vec<_>>(),
                [&json!({"k": [1, 2]})]
            );
            // The map, its list and the list's two numbers.
            assert_eq!(index.others_steps(), 4);
            assert!(list.as_value().is_array());
        }
        // A list indexed borrowing its strings decides alike.
        let values: Vec<Value> = (0..40).map(|i| json!(format!("b{i}"))).collect();
        let borrowed = ValueIndex::new(&values, |text| text);
        assert_eq!(borrowed.has_string("b39"), Some(true));
        assert_eq!(borrowed.others_steps(), 0);
    }
}
