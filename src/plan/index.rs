//! The rule index: (operation, API group, resource, subresource) → rules, so
//! evaluation visits only rules that can match and its cost stays flat as the
//! number of rules grows.

use std::collections::HashMap;

use super::matcher::Matcher;
use crate::review::Operation;

#[derive(Debug, Default)]
struct OperationIndex {
    /// `group \0 resource \0 subresource` → rule indices, ascending.
    exact: HashMap<String, Vec<u32>>,
    /// Rules with a wildcard in group, resource or subresource, ascending.
    wildcard: Vec<u32>,
}

/// Rules by operation and resource.
#[derive(Debug, Default)]
pub struct Index {
    operations: [OperationIndex; 4],
}

fn key(group: &str, resource: &str, sub: &str) -> String {
    let mut key = String::with_capacity(group.len() + resource.len() + sub.len() + 2);
    key.push_str(group);
    key.push('\0');
    key.push_str(resource);
    key.push('\0');
    key.push_str(sub);
    key
}

fn push_once(list: &mut Vec<u32>, rule: u32) {
    if list.last() != Some(&rule) {
        list.push(rule);
    }
}

impl Index {
    /// Adds rule number `rule`; rules must be added in ascending order.
    pub fn add(&mut self, rule: u32, matcher: &Matcher) {
        for operation in Operation::ALL {
            if !matcher.has_operation(operation) {
                continue;
            }
            let index = &mut self.operations[operation.index()];
            for resource in &matcher.resources {
                for group in &resource.groups {
                    for (name, sub) in &resource.resources {
                        if group == "*" || name == "*" || sub == "*" {
                            push_once(&mut index.wildcard, rule);
                        } else {
                            push_once(index.exact.entry(key(group, name, sub)).or_default(), rule);
                        }
                    }
                }
            }
        }
    }

    /// Whether a rule names this resource itself (not through a wildcard),
    /// for any operation.
    pub fn names(&self, group: &str, resource: &str, sub: &str) -> bool {
        let key = key(group, resource, sub);
        self.operations
            .iter()
            .any(|index| index.exact.contains_key(&key))
    }

    /// Rules that may match, ascending; the caller still checks each matcher
    /// (versions, scope, wildcard patterns).
    pub fn lookup(&self, operation: Operation, group: &str, resource: &str, sub: &str) -> Vec<u32> {
        let index = &self.operations[operation.index()];
        let exact = index
            .exact
            .get(&key(group, resource, sub))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let wildcard = index.wildcard.as_slice();
        // Merge two ascending lists without duplicates.
        let mut merged = Vec::with_capacity(exact.len() + wildcard.len());
        let (mut i, mut j) = (0, 0);
        while i < exact.len() || j < wildcard.len() {
            let next = match (exact.get(i), wildcard.get(j)) {
                (Some(a), Some(b)) if a == b => {
                    i += 1;
                    j += 1;
                    *a
                }
                (Some(a), Some(b)) if a < b => {
                    i += 1;
                    *a
                }
                (Some(_), Some(b)) | (None, Some(b)) => {
                    j += 1;
                    *b
                }
                (Some(a), None) => {
                    i += 1;
                    *a
                }
                (None, None) => break,
            };
            push_once(&mut merged, next);
        }
        merged
    }
}
