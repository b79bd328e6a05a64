//! Literal lists a test looks values up in (`in`, `notIn`, and the literal
//! operands of `containsAny` and `subsetOf`), indexed once when the plan is
//! compiled rather than at each evaluation.

use std::collections::HashSet;

use serde_json::Value;

use crate::eval::budget::walk_steps;

/// The most values a list may have for its strings to be compared in turn
/// rather than looked up in a hash set: hashing a handful of short strings
/// costs more than comparing them (a set of the bundled rules' thirteen
/// capabilities, built at each evaluation, cost 6,500 instructions a
/// `/validate` review), while a list of thousands compared in turn at each
/// of thousands of containers held a worker for half a minute.
pub const SCANNED_VALUES: usize = 16;

/// A literal list of values, with its strings hashed when it is longer
/// than [`SCANNED_VALUES`].
#[derive(Debug)]
pub struct ValueList {
    /// The list itself (always a JSON array), as written.
    list: Value,
    /// Its strings, when there are more than [`SCANNED_VALUES`] values.
    strings: Option<HashSet<String>>,
    /// Its values other than strings, compared one by one.
    others: Vec<usize>,
    /// What comparing a value with every one of `others` may cost: a step
    /// per value within them (see [`walk_steps`]).
    others_steps: u64,
}

impl ValueList {
    /// `values` indexed for lookups.
    pub fn new(values: Vec<Value>) -> ValueList {
        let strings = (values.len() > SCANNED_VALUES).then(|| {
            values
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        });
        let others: Vec<usize> = values
            .iter()
            .enumerate()
            .filter(|(_, value)| !value.is_string())
            .map(|(i, _)| i)
            .collect();
        let others_steps = others.iter().fold(0_u64, |steps, &i| {
            steps.saturating_add(walk_steps(&values[i], u64::MAX))
        });
        ValueList {
            list: Value::Array(values),
            strings,
            others,
            others_steps,
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

    /// The strings, hashed, when the list is longer than
    /// [`SCANNED_VALUES`]; `None` when they are to be compared in turn.
    pub fn hashed_strings(&self) -> Option<&HashSet<String>> {
        self.strings.as_ref()
    }

    /// The values that are not strings.
    pub fn others(&self) -> impl Iterator<Item = &Value> {
        let values = self.values();
        self.others.iter().filter_map(|&i| values.get(i))
    }

    /// What comparing one value with every value of [`ValueList::others`]
    /// may cost, in steps.
    pub fn others_steps(&self) -> u64 {
        self.others_steps
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
        assert!(few.hashed_strings().is_none());
        let many = list(SCANNED_VALUES + 1);
        let strings = many.hashed_strings().expect("hashed");
        assert_eq!(strings.len(), SCANNED_VALUES);
        assert!(strings.contains("s0"));
        for list in [few, many] {
            assert_eq!(list.others().collect::<Vec<_>>(), [&json!({"k": [1, 2]})]);
            // The map, its list and the list's two numbers.
            assert_eq!(list.others_steps(), 4);
            assert!(list.as_value().is_array());
        }
    }
}
