//! Mutations that can undo each other, found when the rules compile rather
//! than per request: writes that undo each other on a request both rules
//! match keep changing the object on every pass, so every such review fails
//! with "did not converge".
//!
//! Two writes undo each other when one `set`s a literal at a location and
//! the other writes something that value does not hold, at the same
//! location or below it: another `set` of a different value (two values of
//! `team`; a `set` of `labels` to `{team: a}` and one of `labels.team` to
//! `b`), or a `setIfAbsent`, `mergeIfAbsent` or `injectIfMissing` that adds
//! what the `set` takes away again (`tolerations` set to `[]` and a
//! toleration injected). The two writes may be in one rule.
//!
//! When neither write has a condition (the rule's `when`, rule-set `when`,
//! an object selector, namespace, user or group lists, a `when` on the edit
//! or a `forEach` around it), that is certain: an error. When one has, they
//! only might both apply: a warning, since conditions that cannot both hold
//! are a correct way to write it. Either way the locations must start from
//! the same root inside the same `forEach` paths, and the diagnostic names a
//! request both match. Locations reached by different roots, through
//! filters, or through wildcards below the `set` are left to the
//! per-request check, which names the rules that keep changing the object.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde_json::Value;

use super::matcher::{Matcher, ResourceMatch};
use super::path::Step;
use super::{CompiledRule, Edit, GuardedEdit, Source, WritePath};
use crate::review::Operation;
use crate::rules::Scope;

/// The most pairs reported of each kind (certain, possible): beyond them the
/// rules need rework anyway, and a diagnostic each would only bury the first.
pub const MAX_CONFLICTS: usize = 20;

/// The most pairs of writes compared: a million rules writing one location
/// would otherwise be compared pairwise; past it the search stops.
pub const MAX_PAIR_CHECKS: usize = 1_000_000;

/// Two writes, of two rules or of one, that undo each other on some request.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The rule compiled first (its index in the plan).
    pub first: usize,
    /// The rule compiled second; the same as `first` for two writes of one
    /// rule.
    pub second: usize,
    /// The first rule's write (of one rule: the one written first).
    pub first_write: Write,
    /// The second rule's write.
    pub second_write: Write,
    /// A request both rules apply to, in words (`CREATE pods`).
    pub example: String,
    /// Neither write has a condition: they never settle on that request.
    /// Otherwise they only might, when both conditions hold.
    pub certain: bool,
}

impl Conflict {
    /// Both writes `set` one location, as written, to different values.
    pub fn same_set(&self) -> bool {
        matches!(
            (&self.first_write.kind, &self.second_write.kind),
            (WriteKind::Set(_), WriteKind::Set(_))
        ) && self.first_write.location == self.second_write.location
    }
}

/// One write of a literal, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// The location, as written (`$.object.metadata.labels.team`, inside
    /// `forEach` paths when there are).
    pub location: String,
    /// Where it is in its rule: `mutate[1]`, `mutate[0].mutate[2]`.
    pub entry: String,
    /// What it writes.
    pub kind: WriteKind,
}

/// What a write does with its literal.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteKind {
    /// `set`: replaces what is there.
    Set(Value),
    /// `setIfAbsent`: writes where nothing is.
    SetIfAbsent(Value),
    /// `mergeIfAbsent`: adds the keys missing there.
    MergeIfAbsent(Value),
    /// `injectIfMissing`: appends unless an element has the same keys.
    InjectIfMissing(Value),
}

impl fmt::Display for Write {
    /// `sets $.a to "x"`, `injects {...} into $.b`: a phrase for a
    /// diagnostic.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let location = &self.location;
        match &self.kind {
            WriteKind::Set(value) => write!(f, "sets {location} to {value}"),
            WriteKind::SetIfAbsent(value) => {
                write!(f, "sets {location} to {value} where it is absent")
            }
            WriteKind::MergeIfAbsent(value) => write!(f, "merges {value} into {location}"),
            WriteKind::InjectIfMissing(value) => write!(f, "injects {value} into {location}"),
        }
    }
}

/// One write of a literal, found in a rule.
struct Found<'p> {
    rule: usize,
    /// The location in the rule's `forEach` paths, root and steps (its
    /// text when it has a filter), and its ancestors': what pairs writes.
    keys: Vec<String>,
    /// The steps below the root, when they are all names, indices,
    /// wildcards and unions.
    steps: Option<Vec<Step>>,
    location: String,
    entry: String,
    kind: Kind<'p>,
    keys_of_element: &'p [String],
    /// Neither the rule nor the edit (or a `forEach` around it) has a
    /// condition.
    unconditional: bool,
}

#[derive(Clone, Copy)]
enum Kind<'p> {
    Set(&'p Value),
    SetIfAbsent(&'p Value),
    Merge(&'p Value),
    Inject(&'p Value),
}

impl Found<'_> {
    fn write(&self) -> Write {
        let kind = match self.kind {
            Kind::Set(value) => WriteKind::Set(value.clone()),
            Kind::SetIfAbsent(value) => WriteKind::SetIfAbsent(value.clone()),
            Kind::Merge(value) => WriteKind::MergeIfAbsent(value.clone()),
            Kind::Inject(value) => WriteKind::InjectIfMissing(value.clone()),
        };
        Write {
            location: self.location.clone(),
            entry: self.entry.clone(),
            kind,
        }
    }
}

/// Every pair of rules (or one rule with itself) whose writes undo each
/// other on some request both match; each pair once, by the first two
/// writes found; at most [`MAX_CONFLICTS`] pairs of each kind, found within
/// [`MAX_PAIR_CHECKS`]. (Not inlined, so a profile of a compile shows its
/// share; it runs once.)
#[inline(never)]
pub fn find(rules: &[CompiledRule]) -> Vec<Conflict> {
    let mut writes: Vec<Found<'_>> = Vec::new();
    for (index, rule) in rules.iter().enumerate() {
        let rule_unconditional = unconditional(rule);
        literal_writes(
            &rule.mutations,
            &Context {
                within: String::new(),
                entry: "mutate",
                unguarded: true,
            },
            &mut |mut found| {
                found.rule = index;
                found.unconditional &= rule_unconditional;
                writes.push(found);
            },
        );
    }
    // Writes by their location (the last key), in the order found.
    let mut at: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, write) in writes.iter().enumerate() {
        if let Some(key) = write.keys.last() {
            at.entry(key).or_default().push(i);
        }
    }
    let mut found: Vec<Conflict> = Vec::new();
    let mut pairs: HashSet<(usize, usize)> = HashSet::new();
    let mut checks = 0usize;
    let mut counts = [0usize; 2]; // possible, certain
    'search: for (j, second) in writes.iter().enumerate() {
        let Some((own, ancestors)) = second.keys.split_last() else {
            continue;
        };
        // Earlier writes of the same location, then every write above it.
        let same = at
            .get(own.as_str())
            .into_iter()
            .flatten()
            .take_while(|&&i| i < j);
        let above = ancestors
            .iter()
            .filter_map(|key| at.get(key.as_str()))
            .flatten();
        for &i in same.chain(above) {
            checks += 1;
            if checks > MAX_PAIR_CHECKS || counts.iter().all(|&n| n >= MAX_CONFLICTS) {
                break 'search;
            }
            let Some(first) = writes.get(i) else {
                continue;
            };
            if !undo(first, second) {
                continue;
            }
            // In plan order, and of one rule, in the order written.
            let (first, second) = if (first.rule, i) <= (second.rule, j) {
                (first, second)
            } else {
                (second, first)
            };
            let pair = (first.rule, second.rule);
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
            pairs.insert(pair);
            *count += 1;
            found.push(Conflict {
                first: pair.0,
                second: pair.1,
                first_write: first.write(),
                second_write: second.write(),
                example,
                certain,
            });
        }
    }
    found.sort_by_key(|c| (c.second, c.first));
    found
}

/// Whether two writes, `a` at or above `b` or the other way round, keep
/// undoing each other: one `set`s a value that does not hold what the other
/// writes.
fn undo(a: &Found<'_>, b: &Found<'_>) -> bool {
    let (Some(a_steps), Some(b_steps)) = (&a.steps, &b.steps) else {
        // Written through a filter: the same text only.
        return match (a.kind, b.kind) {
            (Kind::Set(x), Kind::Set(y)) => x != y,
            (Kind::Set(x), _) => !holds(x, b),
            (_, Kind::Set(y)) => !holds(y, a),
            _ => false,
        };
    };
    let (above, below, below_steps) = if a_steps.len() <= b_steps.len() {
        (a, b, b_steps)
    } else {
        (b, a, a_steps)
    };
    let depth = a_steps.len().min(b_steps.len());
    let Kind::Set(value) = above.kind else {
        // Only a `set` replaces what is below it; at one location, the
        // other may be the `set`.
        return match below.kind {
            Kind::Set(other) if a_steps.len() == b_steps.len() => !holds(other, above),
            _ => false,
        };
    };
    let Some(rest) = below_steps.get(depth..) else {
        return false;
    };
    let mut here = Some(value);
    for step in rest {
        let Some(node) = here.filter(|node| !node.is_null()) else {
            // Missing: the write below puts it back.
            return true;
        };
        here = match (step, node) {
            (Step::Key(key), Value::Object(map)) => map.get(&**key),
            (Step::Index(index), Value::Array(list)) => match usize::try_from(*index)
                .ok()
                .and_then(|index| list.get(index))
            {
                Some(element) => Some(element),
                // Elements are never created: the write below does nothing.
                None => return false,
            },
            // Through a scalar, or through a wildcard: not followed.
            _ => return false,
        };
    }
    match here {
        Some(existing) => !holds(existing, below),
        None => true,
    }
}

/// Whether `existing`, written by a `set`, already holds what `write` would
/// write there, so that it writes nothing.
fn holds(existing: &Value, write: &Found<'_>) -> bool {
    match write.kind {
        Kind::Set(value) => existing == value,
        Kind::SetIfAbsent(_) => !existing.is_null(),
        Kind::Merge(value) => merged(existing, value),
        Kind::Inject(value) => match existing {
            Value::Array(list) => list.iter().any(|element| {
                write
                    .keys_of_element
                    .iter()
                    .all(|key| element.get(key).is_some() && element.get(key) == value.get(key))
            }),
            Value::Null => false,
            // Not a list: nothing is injected.
            _ => true,
        },
    }
}

/// Whether `mergeIfAbsent` of `value` into `existing` changes nothing.
fn merged(existing: &Value, value: &Value) -> bool {
    match (existing, value) {
        (Value::Null, _) => false,
        (Value::Object(target), Value::Object(source)) => source.iter().all(|(key, incoming)| {
            target
                .get(key)
                .is_some_and(|present| !present.is_null() && merged_below(present, incoming))
        }),
        // Not a map, or nothing to merge: left as it is.
        _ => true,
    }
}

/// [`merged`] one level down: a present value that is not a map wins.
fn merged_below(present: &Value, incoming: &Value) -> bool {
    match (present, incoming) {
        (Value::Object(_), Value::Object(_)) => merged(present, incoming),
        _ => true,
    }
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

/// Where edits are: inside which `forEach` paths, at which entry of the
/// rule, and whether a condition guards them there (`unguarded`: none
/// around them so far).
struct Context<'c> {
    within: String,
    entry: &'c str,
    unguarded: bool,
}

/// Calls `found` with every write of a literal in `edits` (its `rule` not
/// yet set).
fn literal_writes<'p>(
    edits: &'p [GuardedEdit],
    cx: &Context<'_>,
    found: &mut impl FnMut(Found<'p>),
) {
    for (i, guarded) in edits.iter().enumerate() {
        let unguarded = cx.unguarded && guarded.when.is_empty();
        let entry = format!("{}[{i}]", cx.entry);
        let (target, kind, keys_of_element): (&WritePath, Kind<'p>, &'p [String]) =
            match &guarded.edit {
                Edit::Set {
                    target,
                    source: Source::Value(value),
                } => (target, Kind::Set(value), &[]),
                Edit::SetIfAbsent {
                    target,
                    source: Source::Value(value),
                } => (target, Kind::SetIfAbsent(value), &[]),
                Edit::MergeIfAbsent { target, value } => (target, Kind::Merge(value), &[]),
                Edit::InjectIfMissing {
                    target,
                    keys,
                    value,
                } => (target, Kind::Inject(value), keys),
                Edit::ForEach { path, edits } => {
                    let nested = format!("{entry}.mutate");
                    let inner = Context {
                        within: format!("{}forEach {} → ", cx.within, path.text()),
                        entry: &nested,
                        unguarded,
                    };
                    literal_writes(edits, &inner, found);
                    continue;
                }
                Edit::Set { .. } | Edit::SetIfAbsent { .. } => continue,
            };
        let root = target.prefix.root();
        let steps: Option<Vec<Step>> = target.prefix.simple_steps().map(|prefix| {
            prefix
                .iter()
                .cloned()
                .chain(target.tail.iter().map(Step::from))
                .collect()
        });
        // The prefix keeps the whole path as written.
        let text = target.prefix.text();
        let keys = match &steps {
            Some(steps) => (0..=steps.len())
                .filter_map(|depth| steps.get(..depth))
                .map(|steps| format!("{}\u{1f}{root:?}\u{1f}{steps:?}", cx.within))
                .collect(),
            None => vec![format!("{}\u{1f}text\u{1f}{text}", cx.within)],
        };
        found(Found {
            rule: 0,
            keys,
            steps,
            location: format!("{}{text}", cx.within),
            entry,
            kind,
            keys_of_element,
            unconditional: unguarded,
        });
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
    fn two_sets_of_one_rule_conflict() {
        let (_, diagnostics) = conflicts(
            "    - name: team
      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: a}
        - set: {path: $.object.metadata.labels.team, value: b}
",
        );
        assert_eq!(
            diagnostics,
            ["t.yaml:11:11: spec.rules[0].mutate[1]: rule \"team\" sets \
              $.object.metadata.labels.team to \"a\" (at mutate[0]) and sets \
              $.object.metadata.labels.team to \"b\" (at mutate[1]), both on every request \
              they match (for example CREATE pods): the mutations never settle, and every such \
              review would fail (make one of them setIfAbsent, give them conditions that cannot \
              both hold, or remove one)"]
        );
    }

    #[test]
    fn a_set_of_a_parent_conflicts_with_what_its_value_does_not_hold() {
        let (_, diagnostics) = conflicts(
            "    - name: labels
      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.metadata.labels, value: {team: a}}
    - name: team
      match: {resources: [pods]}
      mutate:
        - set: {path: $.object.metadata.labels.team, value: b}
",
        );
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert!(
            diagnostics[0].starts_with(
                "t.yaml:13:7: spec.rules[1].mutate: rule \"team\" sets \
                 $.object.metadata.labels.team to \"b\" and rule \"labels\" of rule set \"t\" \
                 sets $.object.metadata.labels to {\"team\":\"a\"}, both on every request"
            ),
            "{diagnostics:?}"
        );
        let (_, diagnostics) = conflicts(
            "    - name: tolerations
      match: {resources: [pods]}
      mutate:
        - set: {path: $.podSpec.tolerations, value: []}
    - name: inject
      match: {resources: [pods]}
      mutate:
        - injectIfMissing:
            path: $.podSpec.tolerations
            key: key
            value: {key: dedicated, operator: Exists}
",
        );
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert!(
            diagnostics[0].contains(
                "rule \"inject\" injects {\"key\":\"dedicated\",\"operator\":\"Exists\"} into \
                 $.podSpec.tolerations and rule \"tolerations\" of rule set \"t\" sets \
                 $.podSpec.tolerations to []"
            ) && diagnostics[0].contains("(make the value set hold what the other write adds"),
            "{diagnostics:?}"
        );
    }

    /// Each pair of writes: whether compiling reports them, and (under a
    /// namespace list, so that they compile) whether the mutations of a
    /// pod then never settle. The two must agree.
    #[test]
    fn what_compiling_reports_is_what_never_settles() {
        let cases = [
            // One rule, two values.
            (
                "set: {path: $.object.metadata.labels.team, value: a}",
                "set: {path: $.object.metadata.labels.team, value: b}",
                true,
            ),
            // A parent and a child that disagree, or that agree.
            (
                "set: {path: $.object.metadata.labels, value: {team: a}}",
                "set: {path: $.object.metadata.labels.team, value: b}",
                true,
            ),
            (
                "set: {path: $.object.metadata.labels, value: {team: b}}",
                "set: {path: $.object.metadata.labels.team, value: b}",
                false,
            ),
            // What a set takes away again, or already holds.
            (
                "set: {path: $.object.metadata.labels, value: {team: a}}",
                "setIfAbsent: {path: $.object.metadata.labels.tier, value: web}",
                true,
            ),
            (
                "set: {path: $.object.metadata.labels, value: {team: a}}",
                "setIfAbsent: {path: $.object.metadata.labels.team, value: b}",
                false,
            ),
            (
                "set: {path: $.object.metadata, value: {labels: {team: a}}}",
                "mergeIfAbsent: {path: $.object.metadata, value: {labels: {tier: web}}}",
                true,
            ),
            (
                "set: {path: $.object.metadata, value: {labels: {team: a}, name: n}}",
                "mergeIfAbsent: {path: $.object.metadata, value: {labels: {team: b}}}",
                false,
            ),
            (
                "set: {path: $.podSpec.tolerations, value: []}",
                "injectIfMissing: {path: $.podSpec.tolerations, key: key, value: {key: d}}",
                true,
            ),
            (
                "set: {path: $.podSpec.tolerations, value: [{key: d, effect: x}]}",
                "injectIfMissing: {path: $.podSpec.tolerations, key: key, value: {key: d}}",
                false,
            ),
        ];
        let request = crate::review::decode(
            &std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/admission-reviews/create-pod.json"
            ))
            .unwrap(),
        )
        .unwrap()
        .request;
        for (first, second, never_settle) in cases {
            for one_rule in [true, false] {
                let rules = if one_rule {
                    format!(
                        "    - name: r
      match: {{resources: [pods], namespaces: ['*']}}
      mutate:
        - {first}
        - {second}
"
                    )
                } else {
                    format!(
                        "    - name: r
      match: {{resources: [pods], namespaces: ['*']}}
      mutate:
        - {first}
    - name: s
      match: {{resources: [pods]}}
      mutate:
        - {second}
"
                    )
                };
                let (found, diagnostics) = conflicts(&rules);
                assert!(diagnostics.is_empty(), "{rules}{diagnostics:?}");
                assert_eq!(found.len(), usize::from(never_settle), "{rules}{found:?}");
                assert!(found.iter().all(|c| !c.certain));
                let plan = compile(&load_str("t.yaml", &test_rule_set(&rules))).unwrap();
                let outcome = crate::eval::select(
                    &plan,
                    &request,
                    crate::eval::Ask::new(crate::plan::Mode::Mutate),
                )
                .evaluate(&request);
                assert_eq!(
                    matches!(outcome, Err(crate::eval::EvalError::NotConverged { .. })),
                    never_settle,
                    "{rules}"
                );
            }
        }
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
