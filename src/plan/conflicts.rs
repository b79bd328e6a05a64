//! Mutations that can undo each other, found when the rules compile rather
//! than per request: two rules that `set` the same location to different
//! literal values on a request both match undo each other on every pass, so
//! every such review fails with "did not converge".
//!
//! When neither rule has a condition (`when`, rule-set `when`, an object
//! selector, namespace, user or group lists), that is certain: an error.
//! When one has, they only might both apply: a warning, since conditions
//! that cannot both hold are a correct way to write it. Either way the
//! location must be written the same way (root, path text, the same
//! `forEach` paths around it), and the diagnostic names a request both
//! match. Locations reached by different paths are left to the per-request
//! check, which names the rules that keep changing the object.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::matcher::{Matcher, ResourceMatch};
use super::{CompiledRule, Edit, GuardedEdit, Source};
use crate::review::Operation;
use crate::rules::Scope;

/// The most pairs reported of each kind (certain, possible): beyond them the
/// rules need rework anyway, and a diagnostic each would only bury the first.
pub const MAX_CONFLICTS: usize = 20;

/// The most pairs of writes compared: a million rules writing one location
/// would otherwise be compared pairwise; past it the search stops.
pub const MAX_PAIR_CHECKS: usize = 1_000_000;

/// Two rules that set one location to different values on some request.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The rule compiled first (its index in the plan).
    pub first: usize,
    /// The rule compiled second.
    pub second: usize,
    /// The location, as written (`$.object.metadata.labels.team`, inside
    /// `forEach` paths when there are).
    pub location: String,
    /// The first rule's value.
    pub first_value: Value,
    /// The second rule's value.
    pub second_value: Value,
    /// A request both rules apply to, in words (`CREATE pods`).
    pub example: String,
    /// Neither rule has a condition: they never settle on that request.
    /// Otherwise they only might, when both conditions hold.
    pub certain: bool,
}

/// One `set` of a literal.
struct LiteralSet<'p> {
    rule: usize,
    value: &'p Value,
    /// Neither the rule nor the edit (or a `forEach` around it) has a
    /// condition.
    unconditional: bool,
}

/// Every pair of rules that set a location to different literals on some
/// request both match; each pair once, by its first location; at most
/// [`MAX_CONFLICTS`] pairs of each kind, found within [`MAX_PAIR_CHECKS`].
/// (Not inlined, so a profile of a compile shows its share; it runs once.)
#[inline(never)]
pub fn find(rules: &[CompiledRule]) -> Vec<Conflict> {
    let mut by_location: HashMap<String, Vec<LiteralSet<'_>>> = HashMap::new();
    for (index, rule) in rules.iter().enumerate() {
        let rule_unconditional = unconditional(rule);
        literal_sets(
            &rule.mutations,
            "",
            true,
            &mut |location, value, guarded| {
                by_location.entry(location).or_default().push(LiteralSet {
                    rule: index,
                    value,
                    unconditional: rule_unconditional && !guarded,
                });
            },
        );
    }
    let mut locations: Vec<_> = by_location.into_iter().collect();
    locations.sort_by(|a, b| a.0.cmp(&b.0));
    let mut found: Vec<Conflict> = Vec::new();
    let mut pairs: HashSet<(usize, usize)> = HashSet::new();
    let mut checks = 0usize;
    let mut counts = [0usize; 2]; // possible, certain
    'search: for (location, sets) in locations {
        for (i, first) in sets.iter().enumerate() {
            for second in &sets[i + 1..] {
                checks += 1;
                if checks > MAX_PAIR_CHECKS || counts.iter().all(|&n| n >= MAX_CONFLICTS) {
                    break 'search;
                }
                if first.rule == second.rule || first.value == second.value {
                    continue;
                }
                let pair = (first.rule.min(second.rule), first.rule.max(second.rule));
                if pairs.contains(&pair) {
                    continue;
                }
                let (Some(a), Some(b)) = (rules.get(pair.0), rules.get(pair.1)) else {
                    continue;
                };
                let Some(example) = common_request(&a.matcher, &b.matcher) else {
                    continue;
                };
                let certain = first.unconditional && second.unconditional;
                let count = &mut counts[usize::from(certain)];
                if *count >= MAX_CONFLICTS {
                    continue;
                }
                let (first_value, second_value) = if first.rule == pair.0 {
                    (first.value, second.value)
                } else {
                    (second.value, first.value)
                };
                pairs.insert(pair);
                *count += 1;
                found.push(Conflict {
                    first: pair.0,
                    second: pair.1,
                    location: location.clone(),
                    first_value: first_value.clone(),
                    second_value: second_value.clone(),
                    example,
                    certain,
                });
            }
        }
    }
    found.sort_by_key(|c| (c.second, c.first));
    found
}

/// True when nothing but operation and resource limits where the rule
/// applies.
fn unconditional(rule: &CompiledRule) -> bool {
    let m = &rule.matcher;
    rule.when.is_empty()
        && m.object_selector.is_none()
        && m.namespaces.is_empty()
        && m.exclude_namespaces.is_empty()
        && m.users.is_empty()
        && m.exclude_users.is_empty()
        && m.groups.is_empty()
        && m.exclude_groups.is_empty()
}

/// Calls `found` with the location and value of every `set` of a literal in
/// `edits`, inside the `forEach` paths of `within`, and whether a condition
/// guards it there (`unguarded`: none around it so far).
fn literal_sets<'p>(
    edits: &'p [GuardedEdit],
    within: &str,
    unguarded: bool,
    found: &mut impl FnMut(String, &'p Value, bool),
) {
    for guarded in edits {
        let unguarded = unguarded && guarded.when.is_empty();
        match &guarded.edit {
            Edit::Set {
                target,
                source: Source::Value(value),
            } => {
                // The prefix keeps the whole path as written.
                found(
                    format!("{within}{}", target.prefix.text()),
                    value,
                    !unguarded,
                );
            }
            Edit::ForEach { path, edits } => {
                let within = format!("{within}forEach {} → ", path.text());
                literal_sets(edits, &within, unguarded, found);
            }
            _ => {}
        }
    }
}

/// A request both matchers' operations and resources admit, in words.
fn common_request(a: &Matcher, b: &Matcher) -> Option<String> {
    let operation = [
        Operation::Create,
        Operation::Update,
        Operation::Delete,
        Operation::Connect,
    ]
    .into_iter()
    .find(|op| a.has_operation(*op) && b.has_operation(*op))?;
    a.resources.iter().find_map(|x| {
        b.resources
            .iter()
            .find_map(|y| common_resource(x, y))
            .map(|resource| format!("{operation} {resource}"))
    })
}

/// A group/resource both patterns match, in words.
fn common_resource(x: &ResourceMatch, y: &ResourceMatch) -> Option<String> {
    let scopes_meet = match (x.scope, y.scope) {
        (Scope::All, _) | (_, Scope::All) => true,
        (a, b) => a == b,
    };
    if !scopes_meet {
        return None;
    }
    let group = common(&x.groups, &y.groups)?;
    common(&x.versions, &y.versions)?;
    x.resources.iter().find_map(|(name, sub)| {
        y.resources.iter().find_map(|(other, other_sub)| {
            let name = meet(name, other)?;
            let sub = meet(sub, other_sub)?;
            let mut text = if group.is_empty() || group == "*" {
                name.to_owned()
            } else {
                format!("{group}/{name}")
            };
            if !sub.is_empty() && sub != "*" {
                text.push('/');
                text.push_str(sub);
            }
            Some(text)
        })
    })
}

/// A value both lists admit (`*` admits any).
fn common<'a>(x: &'a [String], y: &'a [String]) -> Option<&'a str> {
    x.iter().find_map(|a| y.iter().find_map(|b| meet(a, b)))
}

/// What two patterns (`*` or a name) both admit.
fn meet<'a>(a: &'a str, b: &'a str) -> Option<&'a str> {
    match (a, b) {
        ("*", other) | (other, "*") => Some(other),
        (a, b) if a == b => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{compile, test_rule_set};
    use crate::rules::load_str;

    /// The conflicts among `rules`, and the diagnostics compiling reports.
    fn conflicts(rules: &str) -> (Vec<Conflict>, Vec<String>) {
        let loaded = load_str("t.yaml", &test_rule_set(rules));
        match compile(&loaded) {
            Ok(plan) => (find(plan.rules()), Vec::new()),
            Err(diagnostics) => {
                let messages = diagnostics.0.iter().map(ToString::to_string).collect();
                (Vec::new(), messages)
            }
        }
    }

    const TEAM_A: &str = "    - name: team-a
      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: a}
";

    #[test]
    fn two_unconditional_sets_of_different_values_conflict() {
        let found = conflicts(&format!(
            "{TEAM_A}    - name: team-b
      match: {{resources: [pods, deployments], operations: [CREATE]}}
      mutate:
        - set: {{path: $.object.metadata.labels.team, value: b}}
"
        ));
        let (_, diagnostics) = found;
        assert_eq!(
            diagnostics,
            ["t.yaml:13:7: spec.rules[1].mutate: rule \"team-b\" sets \
              $.object.metadata.labels.team to \"b\" and rule \"team-a\" of rule set \"t\" \
              sets it to \"a\", both on every request they match (for example CREATE \
              pods): the mutations never settle, and every such review would fail (make one \
              of them setIfAbsent, give them conditions that cannot both hold, or remove one)"]
        );
    }

    #[test]
    fn sets_inside_the_same_for_each_conflict_per_element() {
        let per_container = |name: &str, value: &str| {
            format!(
                "    - name: {name}
      match: {{resources: [pods]}}
      mutate:
        - forEach: $.podSpec.containers[*]
          mutate:
            - set: {{path: $.imagePullPolicy, value: {value}}}
"
            )
        };
        let (_, diagnostics) = conflicts(&format!(
            "{}{}",
            per_container("always", "Always"),
            per_container("never", "Never")
        ));
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert!(
            diagnostics[0].contains("forEach $.podSpec.containers[*] → $.imagePullPolicy"),
            "{diagnostics:?}"
        );
        // Different forEach paths are not known to reach the same elements.
        let (found, diagnostics) = conflicts(&format!(
            "{}{}",
            per_container("always", "Always"),
            per_container("never", "Never").replace("containers", "initContainers")
        ));
        assert_eq!((found.len(), diagnostics.len()), (0, 0));
    }

    #[test]
    fn thousands_of_rules_writing_one_location_get_a_bounded_report() {
        let rules: String = (0..3000)
            .map(|i| {
                format!(
                    "    - name: r{i}
      match: {{resources: [pods]}}
      mutate:
        - set: {{path: $.object.metadata.labels.team, value: v{i}}}
"
                )
            })
            .collect();
        let (found, diagnostics) = conflicts(&rules);
        assert!(found.is_empty());
        assert_eq!(diagnostics.len(), MAX_CONFLICTS, "{}", diagnostics.len());
        // Each pair once: no rule is the second of two reported pairs with
        // the same first.
        let unique: HashSet<&String> = diagnostics.iter().collect();
        assert_eq!(unique.len(), diagnostics.len());
    }

    #[test]
    fn what_never_meets_is_not_reported() {
        for other in [
            // The same value.
            "      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: a}
",
            // Another resource.
            "      match: {resources: [deployments]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: b}
",
            // Another operation.
            "      match: {resources: [pods], operations: [CONNECT]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: b}
",
            // Only where absent.
            "      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: b}
",
        ] {
            let rules = format!("{TEAM_A}    - name: other\n{other}");
            let (found, diagnostics) = conflicts(&rules);
            assert_eq!((found, diagnostics), (vec![], vec![]), "{rules}");
        }
    }

    #[test]
    fn what_may_meet_is_a_warning() {
        for other in [
            // A condition on the edit.
            "      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: b}
          when:
            - {path: $.object.metadata.labels.tier, equals: web}
",
            // A namespace list.
            "      match: {resources: [pods], namespaces: [web]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: b}
",
        ] {
            let rules = format!("{TEAM_A}    - name: other\n{other}");
            let (found, diagnostics) = conflicts(&rules);
            assert!(diagnostics.is_empty(), "{diagnostics:?}");
            assert_eq!(found.len(), 1, "{rules}");
            assert!(!found[0].certain);
            let plan = compile(&load_str("t.yaml", &test_rule_set(&rules))).unwrap();
            let warnings: Vec<String> = plan.warnings().iter().map(ToString::to_string).collect();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(
                warnings[0].contains("warning: spec.rules[1].mutate: rule \"other\" sets")
                    && warnings[0].contains("under conditions"),
                "{warnings:?}"
            );
        }
    }
}
