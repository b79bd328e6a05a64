//! Rules → [`Plan`]: every leaf value checked and compiled, every problem of
//! every file collected as a [`Diagnostic`] with its position.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use serde_json::Value;

use super::conflicts;
use super::fields::{Fields, Kind, Missing, NodeId, Scalar, Walk, nearest, render};
use super::index::Index;
use super::matcher::{Glob, LabelMatcher, Matcher, ResourceMatch};
use super::path::{JsonPath, PathError, PathScope, Reach, Root, Step};
use super::patterns::{
    MAX_ONE_REGEX_BYTES, MAX_REGEX_BYTES, MAX_REGEX_PATTERN_BYTES, Pattern, RegexRefusal, Regexes,
};
use super::template::Template;
use super::{
    CelCheck, Comparison, CompiledRule, Conditions, DenyCheck, Edit, GuardedEdit, ListOperand,
    MatchConditionOf, Operand, Plan, Predicate, QuantityOperand, RequestFields, RequestMember,
    RuleSetId, RuleSetInfo, Source, Test, ValueList, WritePath, pod_spec_location,
};
use crate::cel::{Compared, Variable};
use crate::patch::Token;
use crate::quantity::Quantity;
use crate::review::Operation;
use crate::rules::{
    Condition, DenyEntry, Diagnostics, FailurePolicy, LabelSelector, Loaded, LoadedRuleSet, Match,
    MatchCondition, MutationEntry, OperationPattern, Operator, Rule, SelectorOperator, SetMutation,
    Severity,
};

/// Names a `forEach` may not bind with `as`: CEL's variables (a binding
/// would hide them), the API server's policy variables, and CEL's reserved
/// words. Names starting with `kadmit_` are kadmit's own, in the CEL it
/// writes for in-tree policies.
const RESERVED_NAMES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "element",
    "params",
    "namespaceObject",
    "authorizer",
    "variables",
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Compiles loaded rule sets into a plan, or returns every problem found in
/// loading and compiling (errors, and the warnings found with them).
///
/// Paths are checked against the fields of the built-in kinds the rules
/// match; the plan's [`Plan::warnings`] name those no matched kind has.
pub fn compile(loaded: &Loaded) -> Result<Plan, Diagnostics> {
    compile_with(loaded, None)
}

/// [`compile`], checking paths against the kinds of `fields` too (custom
/// resources, from `kadmit check --openapi`), which take precedence over the
/// built-in kinds of the same group and resource.
pub fn compile_with(loaded: &Loaded, fields: Option<&Fields>) -> Result<Plan, Diagnostics> {
    let mut diagnostics = loaded.diagnostics.clone();
    let mut plan = Plan::default();
    let mut regexes = Regexes::default();
    let mut seen_sets: HashMap<String, (Arc<str>, usize)> = HashMap::new();
    let mut includes = IncludeWalk::new(loaded);
    // Each file's hash, made once however many rule sets it holds.
    let mut file_hashes: HashMap<&str, String> = HashMap::new();
    // Where each compiled rule is written: its rule set and `spec.rules[i]`.
    let mut origins: Vec<(usize, String, &Rule)> = Vec::new();
    for (index, loaded_set) in loaded.rule_sets.iter().enumerate() {
        let set = &loaded_set.rule_set;
        let name = set.metadata.name.as_str();
        let mut cx = SetCompiler {
            source: loaded_set,
            diagnostics: &mut diagnostics,
            regexes: &mut regexes,
            fields,
            shapes: Vec::new(),
            operations: [true; 4],
        };
        if let Err(hint) = check_dns_label(name) {
            cx.error(
                "metadata.name",
                format!("invalid rule set name {name:?}"),
                Some(hint),
            );
        }
        let line = loaded_set.positions.locate("metadata.name").line;
        if let Some((file, first_line)) = seen_sets.get(name) {
            cx.error(
                "metadata.name",
                format!("duplicate rule set name {name:?}"),
                Some(format!("also defined at {file}:{first_line}")),
            );
            continue;
        }
        seen_sets.insert(name.to_owned(), (loaded_set.file.clone(), line));
        if let Some(timeout) = set.spec.timeout_seconds
            && !(1..=30).contains(&timeout)
        {
            cx.error(
                "spec.timeoutSeconds",
                format!("timeoutSeconds {timeout} is out of range"),
                Some("the API server allows 1 to 30 seconds".to_owned()),
            );
        }
        let id = RuleSetId(u32::try_from(plan.rule_sets.len()).unwrap_or(u32::MAX));
        let set_name: Arc<str> = Arc::from(name);
        // The set's own guards, compiled once here for their diagnostics;
        // each rule gets its own copy below.
        cx.match_conditions(&set.spec.match_conditions);
        if let Some(selector) = &set.spec.namespace_selector {
            cx.selector("spec.namespaceSelector", selector);
        }
        let first_rule = plan.rules.len();
        let own_guard = Guard::of(loaded_set);
        let included = cx.includes(loaded, index, &mut includes);
        let mut rule_names: HashMap<&str, usize> = HashMap::new();
        let mut included_names: HashMap<&str, &str> = HashMap::new();
        let mut rule_count = 0;
        for other in &included {
            let Some(source) = loaded.rule_sets.get(other.set) else {
                continue;
            };
            let other_name = source.rule_set.metadata.name.as_str();
            // This set's guards, those of the sets the include passed
            // through (outermost first), then the included set's own.
            let mut chain = vec![own_guard];
            chain.extend(
                other
                    .through
                    .iter()
                    .filter_map(|&i| loaded.rule_sets.get(i))
                    .map(Guard::of),
            );
            chain.push(Guard::of(source));
            let guards = cx.guards(&chain);
            let group = plan.new_guard_group();
            for rule in &source.rule_set.spec.rules {
                if let Some(first) = included_names.insert(rule.name.as_str(), other_name) {
                    cx.error(
                        "spec.include",
                        format!(
                            "rule {:?} of included rule set {other_name:?} is also in {first:?}",
                            rule.name
                        ),
                        Some(
                            "rule names must stay unique in the including set: rename one"
                                .to_owned(),
                        ),
                    );
                    continue;
                }
                // Problems of the included rules are reported where they are
                // written, when their own set compiles.
                let mut quiet = Diagnostics::default();
                let mut other_cx = SetCompiler {
                    source,
                    diagnostics: &mut quiet,
                    regexes: cx.regexes,
                    fields,
                    shapes: Vec::new(),
                    operations: [true; 4],
                };
                if let Some(compiled) =
                    other_cx.rule("spec.rules[0]", rule, id, &set_name, (&guards, group))
                {
                    plan.rules.push(compiled);
                    origins.push((index, "spec.include".to_owned(), rule));
                    rule_count += 1;
                }
            }
        }
        let own_guards = cx.guards(&[own_guard]);
        let own_group = plan.new_guard_group();
        for (position, rule) in set.spec.rules.iter().enumerate() {
            let i = loaded_set
                .rule_indices
                .get(position)
                .copied()
                .unwrap_or(position);
            let at = format!("spec.rules[{i}]");
            if let Some(first) = rule_names.insert(rule.name.as_str(), i) {
                cx.error(
                    &format!("{at}.name"),
                    format!("duplicate rule name {:?} in rule set {name:?}", rule.name),
                    Some(format!("spec.rules[{first}] has the same name")),
                );
            }
            if let Some(other) = included_names.get(rule.name.as_str()) {
                cx.error(
                    &format!("{at}.name"),
                    format!(
                        "rule {:?} is also in the included rule set {other:?}",
                        rule.name
                    ),
                    Some("an included rule cannot be replaced: rename this one".to_owned()),
                );
            }
            if let Some(compiled) = cx.rule(&at, rule, id, &set_name, (&own_guards, own_group)) {
                plan.rules.push(compiled);
                origins.push((index, at, rule));
                rule_count += 1;
            }
        }
        // The set's `when` guards its own rules and the included ones: its
        // paths are checked against the kinds of all of them (when every
        // one compiled, so none is left out).
        let written: usize = included
            .iter()
            .filter_map(|other| loaded.rule_sets.get(other.set))
            .map(|source| source.rule_set.spec.rules.len())
            .sum::<usize>()
            + set.spec.rules.len();
        let guarded = plan.rules.get(first_rule..).unwrap_or_default();
        if guarded.len() == written {
            cx.shapes = cx.shapes_of_all(guarded);
            cx.operations = guarded.iter().fold([false; 4], |all, rule| {
                std::array::from_fn(|i| all[i] || rule.matcher.operations[i])
            });
        }
        cx.predicates("spec.when", &set.spec.when, &Bindings::new());
        cx.shapes.clear();
        cx.operations = [true; 4];
        let file_hash = file_hashes
            .entry(&loaded_set.file)
            .or_insert_with(|| {
                loaded
                    .files
                    .iter()
                    .find(|file| file.name.as_str() == &*loaded_set.file)
                    .map(|file| file.content_hash())
                    .unwrap_or_default()
            })
            .clone();
        plan.rule_sets.push(RuleSetInfo {
            name: set_name,
            file: loaded_set.file.clone(),
            file_hash,
            rule_count,
            failure_policy: set.spec.failure_policy,
            timeout_seconds: set.spec.timeout_seconds,
            namespace_selector: set.spec.namespace_selector.clone(),
            match_conditions: set.spec.match_conditions.clone(),
        });
    }
    for conflict in conflicts::find(&plan.rules) {
        if let Some(diagnostic) = settle_diagnostic(&conflict, &plan.rules, &origins, loaded) {
            diagnostics.push(diagnostic);
        }
    }
    // Loading and compiling find problems in two sweeps; report them in file order.
    diagnostics
        .0
        .sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    if diagnostics.has_errors() {
        return Err(diagnostics);
    }
    plan.warnings = diagnostics;
    let mut validating = Index::default();
    let mut mutating = Index::default();
    for (i, rule) in plan.rules.iter().enumerate() {
        let number = u32::try_from(i).unwrap_or(u32::MAX);
        if !rule.deny.is_empty() {
            validating.add(number, &rule.matcher);
        }
        if !rule.mutations.is_empty() {
            mutating.add(number, &rule.matcher);
        }
    }
    plan.validating = validating;
    plan.mutating = mutating;
    plan.number_shared_selections();
    plan.projections = plan.projections_where(|_| true);
    if plan.rule_sets.len() > 1 {
        plan.set_projections = (0..plan.rule_sets.len())
            .map(|i| {
                let id = RuleSetId(u32::try_from(i).unwrap_or(u32::MAX));
                plan.projections_where(|rule| rule.rule_set == id)
            })
            .collect();
    }
    plan.request_fields = plan
        .rules
        .iter()
        .map(CompiledRule::request_fields)
        .fold(RequestFields::default(), |all, rule| {
            RequestFields(all.0 | rule.0)
        });
    Ok(plan)
}

/// The diagnostic of two writes that undo each other, at the second rule
/// (of one rule: at the second write): an error when they never settle, a
/// warning when they only might. None for a pair an include repeats: the
/// rule's own diagnostic is where it is written.
fn settle_diagnostic(
    conflict: &conflicts::Conflict,
    rules: &[CompiledRule],
    origins: &[(usize, String, &Rule)],
    loaded: &Loaded,
) -> Option<crate::rules::Diagnostic> {
    let first = rules.get(conflict.first)?;
    let second = rules.get(conflict.second)?;
    let (set, at, written) = origins.get(conflict.second)?;
    let (_, _, first_written) = origins.get(conflict.first)?;
    let one_rule = conflict.first == conflict.second;
    // An included rule's own writes are reported where it is written, and a
    // rule is not compared with its own copy in an including set.
    if (one_rule && at == "spec.include") || (!one_rule && std::ptr::eq(*written, *first_written)) {
        return None;
    }
    let source = loaded.rule_sets.get(*set)?;
    let (a, b) = (&conflict.first_write, &conflict.second_write);
    let sets = if one_rule {
        format!(
            "rule {:?} {a} (at {}) and {b} (at {})",
            second.name, a.entry, b.entry
        )
    } else if conflict.same_set() {
        let (conflicts::WriteKind::Set(first_value), conflicts::WriteKind::Set(second_value)) =
            (&a.kind, &b.kind)
        else {
            return None;
        };
        format!(
            "rule {:?} sets {} to {second_value} and rule {:?} of rule set {:?} sets it to \
             {first_value}",
            second.name, b.location, first.name, first.rule_set_name,
        )
    } else {
        format!(
            "rule {:?} {b} and rule {:?} of rule set {:?} {a}",
            second.name, first.name, first.rule_set_name,
        )
    };
    let adds = ![&a.kind, &b.kind]
        .iter()
        .all(|kind| matches!(kind, conflicts::WriteKind::Set(_)));
    let (message, hint) = if conflict.certain {
        (
            format!(
                "{sets}, both on every request they match (for example {}): the mutations \
                 never settle, and every such review would fail",
                conflict.example
            ),
            if adds {
                "make the value set hold what the other write adds, give them conditions \
                 that cannot both hold, or remove one"
            } else {
                "make one of them setIfAbsent, give them conditions that cannot both hold, or \
                 remove one"
            },
        )
    } else {
        (
            format!(
                "{sets}, under conditions, on requests they both match (for example {}): \
                 when both apply the mutations never settle and the review fails",
                conflict.example
            ),
            if adds {
                "make sure their conditions cannot both hold, or make the value set hold what \
                 the other write adds"
            } else {
                "make sure their conditions cannot both hold, or make one of them setIfAbsent"
            },
        )
    };
    let place = if one_rule {
        format!("{at}.{}", b.entry)
    } else {
        format!("{at}.mutate")
    };
    let mut diagnostic = source.diagnostic(&place, message, Some(hint.to_owned()));
    if !conflict.certain {
        diagnostic.severity = Severity::Warning;
    }
    Some(diagnostic)
}

fn check_dns_label(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err("use lowercase letters, digits and '-', at most 63 characters: the name appears in URLs, webhook names and metrics".to_owned())
    }
}

/// Compiles the rules of one rule set, collecting every diagnostic.
struct SetCompiler<'a> {
    source: &'a LoadedRuleSet,
    diagnostics: &'a mut Diagnostics,
    regexes: &'a mut Regexes,
    /// Kinds beyond the built-in ones, from OpenAPI documents.
    fields: Option<&'a Fields>,
    /// The kinds the rule being compiled matches, when all are known.
    shapes: Vec<Shape<'a>>,
    /// The operations the rule being compiled matches, by
    /// [`Operation::index`] (all when not known).
    operations: [bool; 4],
}

/// One kind a rule matches, for checking its paths: where its object and
/// pod spec start, and the types of the elements of each enclosing
/// `forEach` (`None` where the walk could not tell).
struct Shape<'a> {
    fields: &'a Fields,
    kind: &'a Kind,
    pod_spec: Option<NodeId>,
    elements: Vec<Option<Vec<NodeId>>>,
}

/// The few values a field can hold on a request a rule matches
/// ([`SetCompiler::known_values`]).
struct KnownValues {
    /// How the API server spells every value the field can take
    /// (operations), or nothing when that is not a closed set (kinds).
    spelled: Vec<&'static str>,
    /// The values it holds on the requests the rule matches.
    held: Vec<String>,
    /// What those are, for messages.
    what: String,
}

/// Where a path starts in one matched kind.
enum Start {
    /// At these types.
    At(Vec<NodeId>),
    /// Nowhere: the kind has no such document (`$.podSpec` of a Service),
    /// so it neither confirms nor refutes the path.
    Absent,
    /// Somewhere the check cannot follow (`$.request`, an unknown element).
    Unknown,
}

impl Shape<'_> {
    fn start(&self, root: Root) -> Start {
        let known = |types: Option<&Option<Vec<NodeId>>>| match types {
            Some(Some(types)) => Start::At(types.clone()),
            _ => Start::Unknown,
        };
        match root {
            Root::Object | Root::OldObject => Start::At(vec![self.fields.root(self.kind)]),
            Root::PodSpec | Root::OldPodSpec => self
                .pod_spec
                .map_or(Start::Absent, |id| Start::At(vec![id])),
            Root::Request => Start::Unknown,
            Root::Element => known(self.elements.last()),
            Root::Binding(depth) => known(self.elements.get(depth)),
        }
    }
}

/// `$.object`, `$.podSpec`, ... : how a document is written in a path.
fn root_name(root: Root) -> &'static str {
    match root {
        Root::Object => "$.object",
        Root::OldObject => "$.oldObject",
        Root::Request => "$.request",
        Root::PodSpec => "$.podSpec",
        Root::OldPodSpec => "$.oldPodSpec",
        Root::Element | Root::Binding(_) => "$",
    }
}

/// A document that is null on every operation a rule matches.
struct RootAbsence<'o> {
    root: Root,
    operations: &'o [Operation],
}

impl<'o> RootAbsence<'o> {
    /// The operations on which the API server sends no `root`: no object on
    /// DELETE (the object being deleted is the old one); no old object on
    /// CREATE and CONNECT; and on CONNECT the object is the connection's
    /// options (`PodExecOptions`), which hold no pod spec.
    fn absent_on(root: Root) -> &'static [Operation] {
        match root {
            Root::Object => &[Operation::Delete],
            Root::PodSpec => &[Operation::Delete, Operation::Connect],
            Root::OldObject | Root::OldPodSpec => &[Operation::Create, Operation::Connect],
            Root::Request | Root::Element | Root::Binding(_) => &[],
        }
    }

    /// `Some` when `root` is absent on every one of `operations` (and there
    /// is at least one).
    fn on(root: Root, operations: &'o [Operation]) -> Option<Self> {
        let absent = Self::absent_on(root);
        (!operations.is_empty() && operations.iter().all(|op| absent.contains(op)))
            .then_some(RootAbsence { root, operations })
    }

    /// The warning for `text`, a path from the document, and its hint.
    fn explain(&self, text: &str) -> (String, String) {
        let name = root_name(self.root);
        let names: Vec<&str> = self.operations.iter().map(|op| op.as_str()).collect();
        let matched = match names.as_slice() {
            [one] => format!("{one}, the only operation matched here"),
            _ => format!("{}, the only operations matched here", names.join(" and ")),
        };
        let message = format!("{name} is null on {matched}, so the path never selects anything");
        let delete = self.operations.contains(&Operation::Delete);
        let create = self.operations.contains(&Operation::Create);
        let (instead, other) = match self.root {
            Root::Object => (
                "on DELETE the object being deleted is $.oldObject",
                Some("$.oldObject"),
            ),
            Root::PodSpec if delete => (
                "on DELETE the pod spec of the object being deleted is $.oldPodSpec",
                Some("$.oldPodSpec"),
            ),
            Root::OldObject if create => (
                "on CREATE there is no old object, and the object being created is $.object",
                Some("$.object"),
            ),
            Root::OldPodSpec if create => (
                "on CREATE there is no old object, and the pod spec being created is $.podSpec",
                Some("$.podSpec"),
            ),
            Root::PodSpec => (
                "on CONNECT $.object holds the connection's options (PodExecOptions, ...), \
                 which have no pod spec: read them from $.object",
                None,
            ),
            _ => (
                "on CONNECT there is no old object: $.object holds the connection's options \
                 (PodExecOptions, ...)",
                None,
            ),
        };
        let hint = match other.and_then(|other| replace_root(text, name, other)) {
            Some(fixed) => format!("{instead}: write {fixed}"),
            None => instead.to_owned(),
        };
        (message, hint)
    }
}

/// `text` with its document `from` (`$.object`) written as `to`
/// (`$.oldObject`); `None` when it does not start that way.
fn replace_root(text: &str, from: &str, to: &str) -> Option<String> {
    let (dollars, rest) = match text.strip_prefix("$$") {
        Some(rest) => ("$", rest),
        None => ("", text.strip_prefix('$')?),
    };
    let from = from.strip_prefix('$')?;
    let after = rest.strip_prefix(from)?;
    if after
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    Some(format!("{dollars}{to}{after}"))
}

/// The subresources whose object is the resource's own kind.
const SAME_KIND_SUBRESOURCES: &[&str] = &["", "status", "ephemeralcontainers"];

/// The API server's limit on `matchConditions` per webhook.
const MAX_MATCH_CONDITIONS: usize = 64;

/// Whether `name` is a Kubernetes qualified name without a prefix.
fn is_qualified_name(name: &str) -> bool {
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && alphanumeric(name.chars().next())
        && alphanumeric(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// What a label value must be, for messages.
const LABEL_VALUE_RULE: &str = "is no label value: at most 63 letters, digits, '-', '_' and '.', \
     beginning and ending with a letter or digit, or empty";

/// Whether `value` is a label value the API server accepts.
fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_qualified_name(value)
}

/// Why `key` is no label key the API server accepts (an optional prefix,
/// a DNS subdomain of at most 253 bytes, and `/`, then a qualified name);
/// `None` when it is one.
fn label_key_problem(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        };
        if prefix.len() > 253 || !prefix.split('.').all(label) {
            return Some(
                "has a prefix that is no DNS subdomain (lower-case letters, digits, '-' and '.', \
                 at most 253 bytes)",
            );
        }
    }
    if !is_qualified_name(name) {
        return Some(
            "is no qualified name: at most 63 letters, digits, '-', '_' and '.' after an \
             optional DNS-subdomain prefix and '/', beginning and ending with a letter or digit",
        );
    }
    None
}

/// The guards of a rule set (its `matchConditions` and `when`), which every
/// rule it applies (its own and the ones it includes) inherits.
#[derive(Clone, Copy)]
struct Guard<'a> {
    source: &'a LoadedRuleSet,
}

impl<'a> Guard<'a> {
    fn of(source: &'a LoadedRuleSet) -> Self {
        Guard { source }
    }
}

/// The names bound by enclosing `forEach` entries (`None` where one bound
/// none); its length is the nesting depth.
type Bindings = Vec<Option<String>>;

/// Why a condition tests nothing: where (below the condition), what, how
/// to fix it, and whether it is an error or only a warning (it can be
/// meant, as a way of writing "is a string").
struct Vacuous {
    key: String,
    message: String,
    hint: String,
    error: bool,
}

impl Vacuous {
    /// An empty list: the condition never holds (`in`, `startsWith`,
    /// `containsAny`, `any`) or always (`notIn`, `notStartsWith`, `all`);
    /// either way it tests nothing, and is an error.
    fn empty_list(key: &str, never: bool) -> Self {
        let (holds, fix) = if never {
            ("never holds", "the rule can never fire this way")
        } else {
            ("always holds", "it checks nothing")
        };
        Vacuous {
            key: key.to_owned(),
            message: format!("{key} with an empty list {holds}"),
            hint: format!("{fix}: list what it should test, or remove it"),
            error: true,
        }
    }
}

/// A condition that tests nothing: an empty list; a negative test of the
/// empty pattern or prefix, which every string has, so it never holds (an
/// error); a positive one, which then holds for every string (a warning).
fn vacuous(condition: &Condition) -> Option<Vacuous> {
    let empty_prefix = |prefixes: &[String]| prefixes.iter().position(String::is_empty);
    match condition {
        Condition::Any(list) if list.is_empty() => Some(Vacuous::empty_list("any", true)),
        Condition::All(list) if list.is_empty() => Some(Vacuous::empty_list("all", false)),
        Condition::Test { operator, .. } => match operator {
            Operator::In(list) if list.is_empty() => Some(Vacuous::empty_list("in", true)),
            Operator::NotIn(list) if list.is_empty() => Some(Vacuous::empty_list("notIn", false)),
            Operator::StartsWith(list) if list.is_empty() => {
                Some(Vacuous::empty_list("startsWith", true))
            }
            Operator::NotStartsWith(list) if list.is_empty() => {
                Some(Vacuous::empty_list("notStartsWith", false))
            }
            Operator::ContainsAny(Value::Array(list)) if list.is_empty() => {
                Some(Vacuous::empty_list("containsAny", true))
            }
            Operator::NotMatches(pattern) if pattern.is_empty() => Some(Vacuous {
                key: "notMatches".to_owned(),
                message: "notMatches \"\" never holds: the empty pattern matches every string"
                    .to_owned(),
                hint: "the rule can never fire this way: write the pattern the value must not \
                       match, or remove the condition"
                    .to_owned(),
                error: true,
            }),
            Operator::NotStartsWith(list) => empty_prefix(list).map(|i| Vacuous {
                key: format!("notStartsWith[{i}]"),
                message: "notStartsWith \"\" never holds: every string starts with the empty \
                          prefix"
                    .to_owned(),
                hint: "the rule can never fire this way: remove the empty prefix".to_owned(),
                error: true,
            }),
            Operator::Matches(pattern) if pattern.is_empty() => Some(Vacuous {
                key: "matches".to_owned(),
                message: "matches \"\" holds for every string: the empty pattern matches \
                          anywhere"
                    .to_owned(),
                hint: "write the pattern to look for; to test for a value, use exists: true"
                    .to_owned(),
                error: false,
            }),
            Operator::StartsWith(list) => empty_prefix(list).map(|i| Vacuous {
                key: format!("startsWith[{i}]"),
                message: "startsWith \"\" holds for every string: every string starts with \
                          the empty prefix"
                    .to_owned(),
                hint: "remove the empty prefix; to test for a value, use exists: true".to_owned(),
                error: false,
            }),
            _ => None,
        },
        _ => None,
    }
}

fn scope(bindings: &Bindings) -> PathScope<'_> {
    PathScope {
        in_for_each: !bindings.is_empty(),
        bindings,
    }
}

impl<'a> SetCompiler<'a> {
    fn error(&mut self, path: &str, message: impl Into<String>, hint: Option<String>) {
        let diagnostic = self.source.diagnostic(path, message, hint);
        self.diagnostics.push(diagnostic);
    }

    fn warning(&mut self, path: &str, message: impl Into<String>, hint: Option<String>) {
        let mut diagnostic = self.source.diagnostic(path, message, hint);
        diagnostic.severity = Severity::Warning;
        self.diagnostics.push(diagnostic);
    }

    /// Errors so far (warnings do not keep a rule out of the plan).
    fn errors(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// The kinds `matcher` matches, or none when one of its resources is
    /// not a kind with known fields (`*`, a custom resource without its
    /// schema, a subresource with an object of its own): a path meant for
    /// that one must not be called wrong.
    fn shapes_of(&self, matcher: &Matcher) -> Vec<Shape<'a>> {
        let mut shapes: Vec<Shape<'a>> = Vec::new();
        for rule in &matcher.resources {
            for group in &rule.groups {
                for (resource, subresource) in &rule.resources {
                    if group.contains('*')
                        || resource.contains('*')
                        || !SAME_KIND_SUBRESOURCES.contains(&subresource.as_str())
                    {
                        return Vec::new();
                    }
                    let wanted = |kind: &&Kind| {
                        rule.versions
                            .iter()
                            .any(|version| version == "*" || *version == kind.version)
                    };
                    let catalogs = self.fields.into_iter().chain([Fields::built_in()]);
                    let Some((fields, kinds)) = catalogs
                        .map(|fields| {
                            let kinds: Vec<&'a Kind> = fields
                                .kinds_of(group, resource)
                                .into_iter()
                                .filter(wanted)
                                .collect();
                            (fields, kinds)
                        })
                        .find(|(_, kinds)| !kinds.is_empty())
                    else {
                        return Vec::new();
                    };
                    for kind in kinds {
                        if shapes.iter().any(|shape| std::ptr::eq(shape.kind, kind)) {
                            continue;
                        }
                        let pod_spec = pod_spec_location(&kind.kind).and_then(|tokens| {
                            let steps: Vec<Step> = tokens
                                .iter()
                                .filter_map(|token| match token {
                                    Token::Key(key) => Some(Step::Key(key.clone())),
                                    Token::Index(_) => None,
                                })
                                .collect();
                            match fields.walk(&[fields.root(kind)], &steps) {
                                Walk::Reached(types) if types.len() == 1 => types.first().copied(),
                                _ => None,
                            }
                        });
                        shapes.push(Shape {
                            fields,
                            kind,
                            pod_spec,
                            elements: Vec::new(),
                        });
                    }
                }
            }
        }
        shapes
    }

    /// The kinds any of `rules` matches, for the guards they share; none
    /// when one of them matches a kind without known fields.
    fn shapes_of_all(&self, rules: &[CompiledRule]) -> Vec<Shape<'a>> {
        let mut all: Vec<Shape<'a>> = Vec::new();
        for rule in rules {
            let shapes = self.shapes_of(&rule.matcher);
            if shapes.is_empty() {
                return Vec::new();
            }
            for shape in shapes {
                if !all.iter().any(|known| std::ptr::eq(known.kind, shape.kind)) {
                    all.push(shape);
                }
            }
        }
        all
    }

    /// Where `path` leads in each matched kind: `None` for a kind where the
    /// walk cannot tell, or the path selects nothing.
    fn reach(&self, path: &JsonPath) -> Vec<Option<Vec<NodeId>>> {
        let (steps, whole) = path.leading_steps();
        self.shapes
            .iter()
            .map(|shape| match shape.start(path.root()) {
                Start::At(types) if whole => match shape.fields.walk(&types, &steps) {
                    Walk::Reached(types) => Some(types),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// Enters a `forEach` over `path`: its elements are `$` from here
    /// (with `entries`, `{key, value}` entries of maps, which are not
    /// checked).
    fn enter(&mut self, path: &JsonPath, entries: bool) {
        let reached = if entries {
            vec![None; self.shapes.len()]
        } else {
            self.reach(path)
        };
        for (shape, types) in self.shapes.iter_mut().zip(reached) {
            shape.elements.push(types);
        }
    }

    /// Leaves the innermost `forEach`.
    fn leave(&mut self) {
        for shape in &mut self.shapes {
            shape.elements.pop();
        }
    }

    /// The JSON types of the scalars `path` selects, when the schema of
    /// every matched kind that has the path's field gives one (with those
    /// kinds' labels); `None` where any kind cannot tell.
    fn scalar_types(&self, path: &JsonPath) -> Option<(Vec<Scalar>, Vec<String>)> {
        let (steps, whole) = path.leading_steps();
        if !whole {
            return None;
        }
        if path.root() == Root::Request {
            let member = request_member_type(&key_names(&steps)?)?;
            return Some((vec![member], vec!["every admission request".to_owned()]));
        }
        let mut scalars = Vec::new();
        let mut kinds = Vec::new();
        for shape in &self.shapes {
            match shape.start(path.root()) {
                Start::Absent => {}
                Start::Unknown => return None,
                Start::At(types) => match shape.fields.walk(&types, &steps) {
                    Walk::Reached(types) => {
                        scalars.extend(shape.fields.scalars(&types)?);
                        kinds.push(shape.kind.label());
                    }
                    // No value there to compare: the other kinds decide.
                    Walk::Missing(_) => {}
                    Walk::Unknown => return None,
                },
            }
        }
        scalars.sort_unstable();
        scalars.dedup();
        (!kinds.is_empty()).then_some((scalars, kinds))
    }

    /// Warns of literals an `equals`, `notEquals`, `in` or `notIn` can
    /// never find at `path` because the field is of another JSON type in
    /// every matched kind (`equals: "true"` or `equals: yes`, a string, on
    /// a boolean): the condition never holds, or always, whatever arrives.
    fn check_literal_types(
        &mut self,
        at: &str,
        text: &str,
        path: &JsonPath,
        operator: &Operator,
        written: Written,
    ) {
        let (values, listed) = match operator {
            Operator::Equals(value) | Operator::NotEquals(value) => {
                // A path operand, or a misspelt one ([`Self::operand`]
                // warns of that).
                if let Some(map) = value.as_object()
                    && map.len() == 1
                    && map
                        .keys()
                        .any(|key| key == "path" || nearest(key, ["path"].into_iter()).is_some())
                {
                    return;
                }
                (std::slice::from_ref(value), false)
            }
            Operator::In(list) | Operator::NotIn(list) => (list.as_slice(), true),
            _ => return,
        };
        let mismatched: Vec<(usize, &Value, &'static str)> = values
            .iter()
            .enumerate()
            .filter_map(|(i, value)| Some((i, value, Scalar::of(value)?)))
            .collect();
        if mismatched.is_empty() {
            return;
        }
        let Some((scalars, kinds)) = self.scalar_types(path) else {
            return;
        };
        let field_type = scalars
            .iter()
            .map(|scalar| scalar.name())
            .collect::<Vec<_>>()
            .join(" or ");
        let kinds = kinds.join(", ");
        let kinds = match path.root() {
            Root::PodSpec | Root::OldPodSpec => format!("the pod spec of {kinds}"),
            Root::Element | Root::Binding(_) => format!("the forEach elements in {kinds}"),
            _ => kinds,
        };
        let never: Vec<&(usize, &Value, &'static str)> = mismatched
            .iter()
            .filter(|(_, _, literal)| !scalars.iter().any(|scalar| scalar.name() == *literal))
            .collect();
        let all_never = never.len() == values.len();
        for &&(i, value, literal) in never.iter().take(MAX_TYPE_WARNINGS) {
            let (place, outcome) =
                written.place_and_outcome(at, operator, listed.then_some(i), all_never);
            let shown = crate::excerpt::printable(&value.to_string(), 60);
            let field = crate::excerpt::printable(text, 120);
            let hint = literal_type_hint(value, &scalars, written);
            self.warning(
                &place,
                format!("{shown} is {literal}, and {field} is {field_type} in {kinds}: {outcome}"),
                Some(hint),
            );
        }
    }

    /// The values `path` can hold, when they are few and known: the
    /// operations the rule matches for `$.request.operation`, the kinds of
    /// the resources it matches for `$.request.kind.kind` and an object's
    /// `kind` (when every one is known); with what they are, for messages.
    fn known_values(&self, path: &JsonPath) -> Option<KnownValues> {
        let steps = path.simple_steps()?;
        let names = key_names(steps)?;
        match (path.root(), names.as_slice()) {
            (Root::Request, ["operation"]) => {
                let matched: Vec<&'static str> = Operation::ALL
                    .into_iter()
                    .filter(|operation| self.operations[operation.index()])
                    .map(Operation::as_str)
                    .collect();
                let all = Operation::ALL.map(Operation::as_str).to_vec();
                let what = if matched.len() == all.len() {
                    "the API server sends one of CREATE, UPDATE, DELETE and CONNECT, in upper case"
                        .to_owned()
                } else {
                    format!(
                        "the API server sends one of CREATE, UPDATE, DELETE and CONNECT, in upper \
                         case, and the rule matches only {}",
                        matched.join(" and ")
                    )
                };
                Some(KnownValues {
                    spelled: all,
                    held: matched.into_iter().map(str::to_owned).collect(),
                    what,
                })
            }
            (Root::Request, ["kind", "kind"]) | (Root::Object | Root::OldObject, ["kind"]) => {
                if self.shapes.is_empty() {
                    return None;
                }
                let mut kinds: Vec<String> = self
                    .shapes
                    .iter()
                    .map(|shape| shape.kind.kind.clone())
                    .collect();
                kinds.sort();
                kinds.dedup();
                let what = format!("the kinds the rule matches are {}", kinds.join(", "));
                Some(KnownValues {
                    spelled: Vec::new(),
                    held: kinds,
                    what,
                })
            }
            _ => None,
        }
    }

    /// Warns of string literals an `equals`, `notEquals`, `in` or `notIn`
    /// compares a field of few known values with ([`Self::known_values`])
    /// that it never holds on a request the rule matches: `{path:
    /// $.request.operation, equals: create}` (the API server writes
    /// CREATE), `DELETE` in a rule matching CREATE and UPDATE, a kind
    /// written `pod`.
    fn check_literal_values(
        &mut self,
        at: &str,
        text: &str,
        path: &JsonPath,
        operator: &Operator,
        written: Written,
    ) {
        let (values, listed) = match operator {
            Operator::Equals(value) | Operator::NotEquals(value) => {
                (std::slice::from_ref(value), false)
            }
            Operator::In(list) | Operator::NotIn(list) => (list.as_slice(), true),
            _ => return,
        };
        if !values.iter().any(Value::is_string) {
            return;
        }
        let Some(KnownValues {
            spelled,
            held,
            what,
        }) = self.known_values(path)
        else {
            return;
        };
        let never: Vec<(usize, &str)> = values
            .iter()
            .enumerate()
            .filter_map(|(i, value)| Some((i, value.as_str()?)))
            .filter(|(_, value)| !held.iter().any(|held| held == value))
            .collect();
        let all_never = never.len() == values.len();
        for &(i, value) in never.iter().take(MAX_TYPE_WARNINGS) {
            let (place, outcome) =
                written.place_and_outcome(at, operator, listed.then_some(i), all_never);
            let shown = crate::excerpt::printable(value, 60);
            let field = crate::excerpt::printable(text, 120);
            let upper = value.to_ascii_uppercase();
            let quote = |text: &str| match written {
                Written::Rule => text.to_owned(),
                Written::Cel => format!("'{text}'"),
            };
            let hint = if spelled.contains(&upper.as_str()) && held.contains(&upper) {
                format!("write {}", quote(&upper))
            } else if spelled.contains(&value) {
                format!("add {value} to match.operations, or leave it out here")
            } else if let Some(kind) = held.iter().find(|kind| kind.eq_ignore_ascii_case(value)) {
                format!("write {}", quote(kind))
            } else {
                "compare with one of those values, or match what it names".to_owned()
            };
            self.warning(
                &place,
                format!("{field} is never {shown:?} here: {what}, so {outcome}"),
                Some(hint),
            );
        }
    }

    /// Warns when every kind the rule matches lacks a member `path` names:
    /// the path selects nothing, whatever arrives.
    fn check_fields(&mut self, at: &str, path: &JsonPath) {
        if self.shapes.is_empty() {
            return;
        }
        let (steps, _) = path.leading_steps();
        let mut misses: Vec<(&Kind, Missing)> = Vec::new();
        for shape in &self.shapes {
            match shape.start(path.root()) {
                Start::At(types) => match shape.fields.walk(&types, &steps) {
                    Walk::Missing(missing) => misses.push((shape.kind, missing)),
                    Walk::Reached(_) | Walk::Unknown => return,
                },
                Start::Absent => {}
                Start::Unknown => return,
            }
        }
        let Some((_, first)) = misses.first() else {
            return;
        };
        let first = first.clone();
        // Each kind lacking another member (a union `['template',
        // 'jobTemplate']` over Deployments and CronJobs) is no mistake:
        // only a member no kind has is.
        if misses
            .iter()
            .any(|(_, missing)| missing.field != first.field)
        {
            return;
        }
        let kinds: Vec<String> = misses
            .iter()
            .filter(|(_, missing)| *missing == first)
            .map(|(kind, _)| kind.label())
            .collect();
        let kinds = kinds.join(", ");
        let of = match path.root() {
            Root::PodSpec | Root::OldPodSpec => format!("the pod spec of {kinds}"),
            Root::Element | Root::Binding(_) => format!("the forEach elements in {kinds}"),
            _ => kinds,
        };
        let Missing {
            field,
            suggestion,
            after_list,
        } = first;
        let message = if after_list {
            format!("`{field}` names a member of a list in {of}, so it selects nothing")
        } else {
            format!("`{field}` is not a field of {of}")
        };
        let pod_template = matches!(path.root(), Root::Object | Root::OldObject)
            && [
                "spec.template",
                "spec.jobTemplate",
                "template",
                "spec.containers",
            ]
            .iter()
            .any(|prefix| field == *prefix || field.starts_with(&format!("{prefix}.")));
        let hint = match suggestion {
            Some(suggestion) => Some(format!("did you mean `{suggestion}`?")),
            None if after_list => Some("select elements first, with [*] or an index".to_owned()),
            None if pod_template => Some(
                "$.podSpec is the pod spec of whatever kind arrives: Pods, workloads and PodTemplates alike"
                    .to_owned(),
            ),
            None => None,
        };
        self.warning(at, message, hint);
    }

    /// Warns when the document `path` starts from is null on every request
    /// the rule matches: `$.object` on DELETE, `$.oldObject` on CREATE, a
    /// pod spec of a kind without one. A test of absence (`absent: true`,
    /// `exists: false`) on it always holds, and is warned just the same.
    /// True when it warned.
    fn check_root(&mut self, at: &str, path: &JsonPath) -> bool {
        let root = path.root();
        let matched: Vec<Operation> = Operation::ALL
            .into_iter()
            .filter(|operation| self.operations[operation.index()])
            .collect();
        let (message, hint) = if let Some(absence) = RootAbsence::on(root, &matched) {
            absence.explain(path.text())
        } else if matches!(root, Root::PodSpec | Root::OldPodSpec)
            && !self.shapes.is_empty()
            && self
                .shapes
                .iter()
                .all(|shape| pod_spec_location(&shape.kind.kind).is_none())
        {
            let kinds: Vec<String> = self.shapes.iter().map(|shape| shape.kind.label()).collect();
            let (kinds, have) = match kinds.as_slice() {
                [one] => (one.clone(), "has"),
                _ => (kinds.join(", "), "have"),
            };
            let name = root_name(root);
            (
                format!(
                    "{kinds} {have} no pod spec, so {name} is null for every kind matched \
                     here and the path never selects anything"
                ),
                format!(
                    "{name} is the pod spec of Pods, PodTemplates and workloads (Deployments, \
                     StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs, \
                     CronJobs): read the fields of {kinds} from {}, or match a kind with a \
                     pod spec",
                    if root == Root::PodSpec {
                        "$.object"
                    } else {
                        "$.oldObject"
                    }
                ),
            )
        } else {
            return false;
        };
        self.warning(at, message, Some(hint));
        true
    }

    /// Warns for each query from `$` inside a filter of `path` that starts
    /// with a document's name (`$.object.metadata.name`) which the
    /// document the path starts from has no field of: inside a filter, `$`
    /// is that document, not the review. Without known kinds, a document's
    /// name is enough.
    fn check_filter_roots(&mut self, at: &str, path: &JsonPath) {
        let root = path.root();
        for steps in path.filter_root_queries() {
            let Some(Step::Key(name)) = steps.first() else {
                continue;
            };
            let Some(named) = Root::from_name(name) else {
                continue;
            };
            let is_a_field = self.shapes.iter().any(|shape| match shape.start(root) {
                Start::At(types) => {
                    !matches!(shape.fields.walk(&types, &steps[..1]), Walk::Missing(_))
                }
                Start::Absent | Start::Unknown => false,
            });
            if is_a_field {
                continue;
            }
            let written = format!("$.{}", render(&steps, None));
            let rest = steps
                .get(1..)
                .map(|rest| render(rest, None))
                .unwrap_or_default();
            let fixed = match rest.as_str() {
                "" => "$".to_owned(),
                rest if rest.starts_with('[') => format!("${rest}"),
                rest => format!("$.{rest}"),
            };
            let (document, reads) = match root {
                Root::Element => (
                    "the forEach element".to_owned(),
                    format!("`{}` of the element", render(&steps, None)),
                ),
                Root::Binding(_) => (
                    "the bound element".to_owned(),
                    format!("`{}` of the element", render(&steps, None)),
                ),
                document => {
                    let document = root_name(document).to_owned();
                    let reads = format!("{document}.{}", render(&steps, None));
                    (document, reads)
                }
            };
            let hint = if named == root {
                format!("write `{fixed}`: the filter's $ is already {document}")
            } else {
                let other = match root {
                    Root::Element | Root::Binding(_) => format!("${}", root_name(named)),
                    _ => root_name(named).to_owned(),
                };
                format!(
                    "a filter reads only {document} ($) and the value it tests (@): compare \
                     with {other} in a condition, e.g. equals: {{path: ...}}, or in a cel: \
                     condition"
                )
            };
            self.warning(
                at,
                format!(
                    "`{written}` in a filter reads {reads}: inside a filter, $ is the document \
                     the path starts from ({document}), not the review"
                ),
                Some(hint),
            );
        }
    }

    /// Warns when a `$.request` path names a member the request document
    /// does not have (`userinfo`, `userInfo.name`, `kind.name`), or steps
    /// below one that holds a single value.
    fn check_request(&mut self, at: &str, path: &JsonPath) {
        if path.root() != Root::Request {
            return;
        }
        let (steps, _) = path.leading_steps();
        let keys = |step: Option<&Step>| -> Vec<Arc<str>> {
            match step {
                Some(Step::Key(key)) => vec![key.clone()],
                Some(Step::Union(union)) => union
                    .iter()
                    .filter_map(|step| match step {
                        Step::Key(key) => Some(key.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            }
        };
        for first in keys(steps.first()) {
            let Some(member) = RequestFields::member(&first) else {
                let hint = if Root::from_name(&first).is_some() {
                    format!(
                        "{} is a document of its own, not a member of $.request: write `$.{}`",
                        root_name(Root::from_name(&first).unwrap_or(Root::Object)),
                        render(
                            &[
                                &[Step::Key(first.clone())],
                                steps.get(1..).unwrap_or_default()
                            ]
                            .concat(),
                            None
                        )
                    )
                } else {
                    match nearest(&first, RequestFields::NAMES.into_iter()) {
                        Some(name) => format!("did you mean `{name}`?"),
                        None => format!("its members are {}", RequestFields::NAMES.join(", ")),
                    }
                };
                self.warning(
                    at,
                    format!(
                        "`{}` is not a member of $.request, so the path never selects anything",
                        render(&[], Some(&first))
                    ),
                    Some(hint),
                );
                continue;
            };
            let Some(second) = steps.get(1) else {
                continue;
            };
            match member {
                RequestMember::Fields(fields) => {
                    for key in keys(Some(second)) {
                        if fields.contains(&&*key) {
                            continue;
                        }
                        let hint = match nearest(&key, fields.iter().copied()) {
                            Some(name) => format!(
                                "did you mean `{}`?",
                                render(&[Step::Key(first.clone())], Some(name))
                            ),
                            None => format!("{first} has {}", fields.join(", ")),
                        };
                        self.warning(
                            at,
                            format!(
                                "`{}` is not a member of $.request, so the path never selects \
                                 anything",
                                render(&[Step::Key(first.clone())], Some(&key))
                            ),
                            Some(hint),
                        );
                    }
                }
                RequestMember::Scalar(what) => self.warning(
                    at,
                    format!(
                        "$.request.{first} is {what}, so `{}` below it selects nothing",
                        render(&[Step::Key(first.clone()), second.clone()], None)
                    ),
                    Some(format!("end the path at $.request.{first}")),
                ),
                RequestMember::Open => {}
            }
        }
    }

    fn path(&mut self, at: &str, text: &str, bindings: &Bindings) -> Option<JsonPath> {
        self.checked_path(at, text, bindings, true)
    }

    /// Compiles a path and checks it: its document (unless `roots` is
    /// false, for what a CEL expression reads), its fields, its filters'
    /// queries from `$` and, in `$.request`, its members.
    fn checked_path(
        &mut self,
        at: &str,
        text: &str,
        bindings: &Bindings,
        roots: bool,
    ) -> Option<JsonPath> {
        match JsonPath::compile(text, scope(bindings)) {
            Ok(path) => {
                if roots && self.check_root(at, &path) {
                    return Some(path);
                }
                self.check_fields(at, &path);
                self.check_request(at, &path);
                self.check_filter_roots(at, &path);
                Some(path)
            }
            Err(PathError { message, hint }) => {
                self.error(at, message, hint);
                None
            }
        }
    }

    fn regex(&mut self, at: &str, pattern: &str) -> Option<Pattern> {
        match self.regexes.compile(pattern) {
            Ok(regex) => Some(regex),
            Err(refusal) => {
                self.regex_refused(at, pattern, refusal);
                None
            }
        }
    }

    /// Reports why `pattern` (a regex, or a glob made into one) did not
    /// compile.
    fn regex_refused(&mut self, at: &str, pattern: &str, refusal: RegexRefusal) {
        match refusal {
            RegexRefusal::TooBig { total: false } => {
                self.error(
                    at,
                    format!(
                        "pattern {:?} compiles to more than {} KiB",
                        crate::excerpt::cut(pattern, crate::excerpt::MAX_FIELD_BYTES),
                        MAX_ONE_REGEX_BYTES >> 10
                    ),
                    Some("bounded repetitions of Unicode classes are large (\\w{100} is about 6 MB): repeat less, or use an ASCII class such as [a-zA-Z0-9_]".to_owned()),
                );
            }
            RegexRefusal::TooLong => {
                self.error(
                    at,
                    format!(
                        "pattern {:?} is {} bytes, more than {MAX_REGEX_PATTERN_BYTES}",
                        crate::excerpt::cut(pattern, crate::excerpt::MAX_FIELD_BYTES),
                        pattern.len()
                    ),
                    Some(
                        "split it over several rules or conditions, or match a shorter pattern"
                            .to_owned(),
                    ),
                );
            }
            RegexRefusal::TooBig { total: true } => {
                self.error(
                    at,
                    format!(
                        "the regexes of the rules directory take more than {} MiB compiled, with their match caches",
                        MAX_REGEX_BYTES >> 20
                    ),
                    Some(
                        "use fewer or simpler patterns (identical patterns are compiled once)"
                            .to_owned(),
                    ),
                );
            }
            RegexRefusal::Invalid(why) => {
                self.error(
                    at,
                    format!("invalid regex {pattern:?}: {why}"),
                    Some("regexes use Rust regex syntax and match anywhere in the string; anchor with ^ and $".to_owned()),
                );
            }
        }
    }

    fn rule(
        &mut self,
        at: &str,
        rule: &Rule,
        id: RuleSetId,
        set: &Arc<str>,
        (guards, guard_group): (&Arc<[Predicate]>, usize),
    ) -> Option<CompiledRule> {
        let errors_before = self.errors();
        if let Err(hint) = check_dns_label(&rule.name) {
            self.error(
                &format!("{at}.name"),
                format!("invalid rule name {:?}", rule.name),
                Some(hint),
            );
        }
        if rule.deny.is_empty() && rule.mutate.is_empty() {
            self.error(
                &format!("{at}.name"),
                format!("rule {:?} has neither deny nor mutate", rule.name),
                Some(
                    "add deny entries to check requests, or mutate entries to change objects"
                        .to_owned(),
                ),
            );
        }
        if let Some(code) = rule.code
            && !(400..=599).contains(&code)
        {
            self.error(
                &format!("{at}.code"),
                format!("status code {code} is not an error code"),
                Some("use a code from 400 to 599; the default is 403".to_owned()),
            );
        }
        let matcher = self.matcher(&format!("{at}.match"), &rule.match_);
        self.shapes = matcher
            .as_ref()
            .map(|matcher| self.shapes_of(matcher))
            .unwrap_or_default();
        self.operations = matcher
            .as_ref()
            .map_or([true; 4], |matcher| matcher.operations);
        let no_bindings = Bindings::new();
        let when = Conditions::new(
            guards.clone(),
            self.predicates(&format!("{at}.when"), &rule.when, &no_bindings),
        );
        let deny = self.deny_entries(&format!("{at}.deny"), &rule.deny, &mut Bindings::new());
        let mutations = self.mutations(
            &format!("{at}.mutate"),
            &rule.mutate,
            &no_bindings,
            &Reach::Nowhere,
        );
        self.shapes.clear();
        self.operations = [true; 4];
        if self.errors() > errors_before {
            return None;
        }
        Some(CompiledRule {
            rule_set: id,
            rule_set_name: set.clone(),
            name: Arc::from(rule.name.as_str()),
            matcher: matcher?,
            when,
            guard_group,
            deny,
            mutations,
            action: rule.action,
            code: rule.code.unwrap_or(403),
        })
    }

    /// Set-level guards (`matchConditions`, then `when`), compiled once for
    /// all the rules of a guard group, each where it is written; their
    /// problems were reported once, where their set compiled.
    fn guards(&mut self, guards: &[Guard<'_>]) -> Arc<[Predicate]> {
        let mut quiet = Diagnostics::default();
        let mut predicates = Vec::new();
        // A failing match condition skips the rules only when every set
        // the rules are reached through says Ignore: the webhook entry
        // called is the including set's, and under its Fail the API server
        // rejects what kadmit cannot decide.
        let fail = guards
            .iter()
            .any(|guard| guard.source.rule_set.spec.failure_policy != Some(FailurePolicy::Ignore));
        for (set, guard) in guards.iter().enumerate() {
            let mut cx = SetCompiler {
                source: guard.source,
                diagnostics: &mut quiet,
                regexes: self.regexes,
                fields: self.fields,
                shapes: Vec::new(),
                operations: [true; 4],
            };
            let spec = &guard.source.rule_set.spec;
            let of = MatchConditionOf { set, fail };
            for (i, condition) in spec.match_conditions.iter().enumerate() {
                let at = format!("spec.matchConditions[{i}].expression");
                predicates.extend(cx.cel(&at, &condition.expression, &Bindings::new()).map(
                    |mut predicate| {
                        if let Predicate::Cel(check) = &mut predicate {
                            check.match_condition = Some(of);
                        }
                        predicate
                    },
                ));
            }
            predicates.extend(cx.predicates("spec.when", &spec.when, &Bindings::new()));
        }
        predicates.into()
    }

    /// Checks a set's `matchConditions` as the API server would (count,
    /// names) and compiles each for its diagnostics.
    fn match_conditions(&mut self, conditions: &[MatchCondition]) {
        if conditions.len() > MAX_MATCH_CONDITIONS {
            self.error(
                "spec.matchConditions",
                format!(
                    "{} match conditions, over the API server's limit of {MAX_MATCH_CONDITIONS}",
                    conditions.len()
                ),
                Some("combine conditions with && in one expression".to_owned()),
            );
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, condition) in conditions.iter().enumerate() {
            let at = format!("spec.matchConditions[{i}]");
            if !is_qualified_name(&condition.name) {
                self.error(
                    &format!("{at}.name"),
                    format!(
                        "match condition name {:?} is not a qualified name",
                        condition.name
                    ),
                    Some(
                        "use at most 63 letters, digits, '-', '_' and '.', starting and \
                         ending with a letter or digit"
                            .to_owned(),
                    ),
                );
            }
            if let Some(first) = names.insert(&condition.name, i) {
                self.error(
                    &format!("{at}.name"),
                    format!("duplicate match condition name {:?}", condition.name),
                    Some(format!("spec.matchConditions[{first}] has the same name")),
                );
            }
            let at = format!("{at}.expression");
            let Some(Predicate::Cel(check)) =
                self.cel(&at, &condition.expression, &Bindings::new())
            else {
                continue;
            };
            // The API server runs them, on Go's RE2: a pattern it reads
            // otherwise (or refuses) sends kadmit other requests than the
            // guard kadmit checks them with lets through.
            for pattern in check.expression.literal_patterns() {
                if let Err(crate::in_tree::expression::Untranslatable(reason)) =
                    crate::in_tree::expression::re2_pattern(pattern)
                {
                    self.warning(
                        &at,
                        format!(
                            "{reason} (the API server evaluates match conditions itself, so it \
                             would send kadmit other requests than this condition selects)"
                        ),
                        None,
                    );
                }
            }
        }
    }

    /// The rule sets `spec.include` of the set at `index` names, directly
    /// or through other includes, each once, in the order their rules
    /// apply (an included set's own includes first). Unknown names, cycles,
    /// nesting beyond [`MAX_INCLUDE_DEPTH`] and more than
    /// [`MAX_INCLUDED_RULES`] included rules in the whole plan are errors.
    fn includes(
        &mut self,
        loaded: &Loaded,
        index: usize,
        walk: &mut IncludeWalk<'_>,
    ) -> Vec<Included> {
        let set = &self.source.rule_set;
        if set.spec.include.is_empty() {
            return Vec::new();
        }
        let mut order = Vec::new();
        let mut placed = vec![None; loaded.rule_sets.len()];
        // (field, message, hint) of every problem found on the way.
        let mut problems: Vec<(String, String, Option<String>)> = Vec::new();
        for (i, name) in set.spec.include.iter().enumerate() {
            let at = format!("spec.include[{i}]");
            let mut trail = vec![index];
            let mut visit = Visit {
                trail: &mut trail,
                order: &mut order,
                placed: &mut placed,
                at: &at,
                problems: &mut problems,
            };
            if visit_include(loaded, name, walk, &mut visit).is_break() {
                break;
            }
        }
        for (at, message, hint) in problems {
            self.error(&at, message, hint);
        }
        if walk.visits > MAX_INCLUDE_VISITS {
            self.error(
                "spec.include",
                format!(
                    "the includes of the rules directory take more than {MAX_INCLUDE_VISITS} steps to resolve"
                ),
                Some("include the sets you need directly, from fewer sets".to_owned()),
            );
            return Vec::new();
        }
        let total = &mut walk.included_rules;
        let count: usize = order
            .iter()
            .filter_map(|included: &Included| loaded.rule_sets.get(included.set))
            .map(|source| source.rule_set.spec.rules.len())
            .sum();
        *total = total.saturating_add(count);
        if *total > MAX_INCLUDED_RULES {
            self.error(
                "spec.include",
                format!("more than {MAX_INCLUDED_RULES} included rules in the rules directory"),
                Some("every include compiles the included rules again; include fewer or smaller rule sets".to_owned()),
            );
            return Vec::new();
        }
        order
    }

    fn globs(&mut self, at: &str, globs: &[String]) -> Vec<Glob> {
        let mut out = Vec::new();
        for (i, glob) in globs.iter().enumerate() {
            let regexes = &mut *self.regexes;
            match Glob::compile_with(glob, |pattern| regexes.compile(pattern)) {
                Some(Ok(compiled)) => out.push(compiled),
                Some(Err(refusal)) => self.regex_refused(&format!("{at}[{i}]"), glob, refusal),
                None => self.error(
                    &format!("{at}[{i}]"),
                    "empty pattern",
                    Some("use * to match everything".to_owned()),
                ),
            }
        }
        out
    }

    fn matcher(&mut self, at: &str, spec: &Match) -> Option<Matcher> {
        let mut operations = [false; 4];
        match &spec.operations {
            None => {
                operations[Operation::Create.index()] = true;
                operations[Operation::Update.index()] = true;
            }
            Some(list) if list.is_empty() => {
                self.error(
                    &format!("{at}.operations"),
                    "operations is empty",
                    Some("omit it for [CREATE, UPDATE], or use [\"*\"]".to_owned()),
                );
            }
            Some(list) => {
                for pattern in list {
                    match pattern {
                        OperationPattern::Create => operations[Operation::Create.index()] = true,
                        OperationPattern::Update => operations[Operation::Update.index()] = true,
                        OperationPattern::Delete => operations[Operation::Delete.index()] = true,
                        OperationPattern::Connect => operations[Operation::Connect.index()] = true,
                        OperationPattern::All => operations = [true; 4],
                    }
                }
            }
        }
        if spec.resources.is_empty() {
            self.error(
                &format!("{at}.resources"),
                "resources is empty",
                Some("list resources such as pods or deployments.apps, or \"*\"".to_owned()),
            );
        }
        let mut resources = Vec::new();
        for (i, pattern) in spec.resources.iter().enumerate() {
            match pattern.normalize() {
                Ok(rule) => resources.push(ResourceMatch {
                    groups: rule.api_groups,
                    versions: rule.api_versions,
                    resources: rule
                        .resources
                        .iter()
                        .map(|r| match r.split_once('/') {
                            Some((name, sub)) => (name.to_owned(), sub.to_owned()),
                            None => (r.clone(), String::new()),
                        })
                        .collect(),
                    scope: rule.scope,
                }),
                Err(error) => {
                    self.error(&format!("{at}.resources[{i}]"), error.message, error.hint)
                }
            }
        }
        self.check_resource_operations(at, &resources, operations);
        let object_selector = spec
            .object_selector
            .as_ref()
            .map(|selector| self.selector(&format!("{at}.objectSelector"), selector));
        let matcher = Matcher {
            operations,
            resources,
            namespaces: self.globs(&format!("{at}.namespaces"), &spec.namespaces),
            exclude_namespaces: self
                .globs(&format!("{at}.excludeNamespaces"), &spec.exclude_namespaces),
            users: self.globs(&format!("{at}.users"), &spec.users),
            exclude_users: self.globs(&format!("{at}.excludeUsers"), &spec.exclude_users),
            groups: self.globs(&format!("{at}.groups"), &spec.groups),
            exclude_groups: self.globs(&format!("{at}.excludeGroups"), &spec.exclude_groups),
            object_selector,
        };
        self.check_excluded_namespaces(at, &matcher);
        Some(matcher)
    }

    /// Warns when the rule names `kube-system` among the namespaces it
    /// matches: every webhook entry kadmit generates excludes it (as it
    /// does kadmit's own namespace), so the API server never sends kadmit
    /// a request there. A rule matching every namespace is not named: it
    /// is meant for the others.
    fn check_excluded_namespaces(&mut self, at: &str, matcher: &Matcher) {
        let system = crate::webhook::SYSTEM_NAMESPACE;
        if matcher.names_namespace(system) {
            self.warning(
                &format!("{at}.namespaces"),
                format!(
                    "the rule matches namespace {system}, which every webhook entry kadmit \
                     generates excludes: the API server never sends kadmit its requests there \
                     (kadmit test and the in-tree policies do judge them)"
                ),
                Some(format!(
                    "leave {system} out, or register a webhook entry of your own for it"
                )),
            );
        }
    }

    /// Warns of each resource the API server never calls the rule for with
    /// any of its `operations`: `pods/exec` is sent on CONNECT only,
    /// `pods/status` and `*/scale` on UPDATE, `pods/log` never, and CONNECT
    /// only on subresources.
    fn check_resource_operations(
        &mut self,
        at: &str,
        resources: &[ResourceMatch],
        operations: [bool; 4],
    ) {
        let matched: Vec<Operation> = Operation::ALL
            .into_iter()
            .filter(|operation| operations[operation.index()])
            .collect();
        if matched.is_empty() {
            return;
        }
        let names = |list: &[Operation]| {
            list.iter()
                .map(|operation| operation.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (i, pattern) in resources.iter().enumerate() {
            for (name, sub) in &pattern.resources {
                let (shown, sent): (String, &[Operation]) = match sub.as_str() {
                    "*" => continue,
                    // `*` is every resource, none of its subresources.
                    "" => (
                        name.clone(),
                        &[Operation::Create, Operation::Update, Operation::Delete],
                    ),
                    sub => match crate::rules::resource::subresource_operations(sub) {
                        Some(sent) => (format!("{name}/{sub}"), sent),
                        None => continue,
                    },
                };
                if matched.iter().any(|operation| sent.contains(operation)) {
                    continue;
                }
                let (message, hint) = if sent.is_empty() {
                    (
                        format!(
                            "{shown} is never sent to admission webhooks (reading logs is not admitted)"
                        ),
                        format!("remove {shown}"),
                    )
                } else {
                    (
                        format!(
                            "{shown} is sent to admission webhooks on {} only, and the rule matches {}: \
                             it is never called for {shown}",
                            names(sent),
                            names(&matched)
                        ),
                        format!("add {} to match.operations, or remove {shown}", names(sent)),
                    )
                };
                self.warning(&format!("{at}.resources[{i}]"), message, Some(hint));
            }
        }
    }

    fn selector(&mut self, at: &str, selector: &LabelSelector) -> LabelMatcher {
        // The API server refuses a webhook configuration whose selector it
        // does not accept, and keeps the one it had: the rules would go on
        // being called (or not) by the old one.
        let refused = "the API server refuses a selector with it, and with it the whole webhook \
                       configuration";
        for (key, value) in &selector.match_labels {
            if let Some(problem) = label_key_problem(key) {
                self.error(
                    &format!("{at}.matchLabels"),
                    format!("label key {key:?} {problem}"),
                    Some(refused.to_owned()),
                );
            }
            if !is_label_value(value) {
                self.error(
                    &format!("{at}.matchLabels"),
                    format!("{value:?}, the value of {key:?}, {LABEL_VALUE_RULE}"),
                    Some(refused.to_owned()),
                );
            }
        }
        for (i, requirement) in selector.match_expressions.iter().enumerate() {
            if let Some(problem) = label_key_problem(&requirement.key) {
                self.error(
                    &format!("{at}.matchExpressions[{i}].key"),
                    format!("label key {:?} {problem}", requirement.key),
                    Some(refused.to_owned()),
                );
            }
            for value in requirement.values.iter().filter(|v| !is_label_value(v)) {
                self.error(
                    &format!("{at}.matchExpressions[{i}].values"),
                    format!("{value:?} {LABEL_VALUE_RULE}"),
                    Some(refused.to_owned()),
                );
            }
            let needs_values = matches!(
                requirement.operator,
                SelectorOperator::In | SelectorOperator::NotIn
            );
            if needs_values && requirement.values.is_empty() {
                self.error(
                    &format!("{at}.matchExpressions[{i}].values"),
                    format!("{:?} needs values", requirement.operator),
                    None,
                );
            }
            if !needs_values && !requirement.values.is_empty() {
                self.error(
                    &format!("{at}.matchExpressions[{i}].values"),
                    format!("{:?} takes no values", requirement.operator),
                    None,
                );
            }
        }
        LabelMatcher::new(selector.clone())
    }

    fn predicates(
        &mut self,
        at: &str,
        conditions: &[Condition],
        bindings: &Bindings,
    ) -> Vec<Predicate> {
        conditions
            .iter()
            .enumerate()
            .filter_map(|(i, condition)| self.predicate(&format!("{at}[{i}]"), condition, bindings))
            .collect()
    }

    fn predicate(&mut self, at: &str, c: &Condition, bindings: &Bindings) -> Option<Predicate> {
        if let Some(Vacuous {
            key,
            message,
            hint,
            error,
        }) = vacuous(c)
        {
            let at = format!("{at}.{key}");
            if error {
                self.error(&at, message, Some(hint));
                return None;
            }
            self.warning(&at, message, Some(hint));
        }
        match c {
            Condition::Any(list) => Some(Predicate::Any(self.predicates(
                &format!("{at}.any"),
                list,
                bindings,
            ))),
            Condition::All(list) => Some(Predicate::All(self.predicates(
                &format!("{at}.all"),
                list,
                bindings,
            ))),
            Condition::Not(inner) => {
                let inner = self.predicate(&format!("{at}.not"), inner, bindings)?;
                Some(Predicate::Not(Box::new(inner)))
            }
            Condition::Cel(source) => self.cel(&format!("{at}.cel"), source, bindings),
            Condition::Test {
                path,
                image,
                operator,
            } => {
                let text = path;
                let path = self.path(&format!("{at}.path"), path, bindings);
                let test = self.test(&format!("{at}.{}", operator.key()), operator, bindings);
                let (path, test) = (path?, test?);
                if image.is_none() {
                    self.check_literal_types(at, text, &path, operator, Written::Rule);
                    self.check_literal_values(at, text, &path, operator, Written::Rule);
                }
                if image.is_some()
                    && matches!(
                        test,
                        Test::Compare(..)
                            | Test::Contains(_)
                            | Test::ContainsAny(_)
                            | Test::SubsetOf(_)
                    )
                {
                    self.error(
                        &format!("{at}.image"),
                        format!("image cannot be used with {}", operator.key()),
                        Some(
                            "compare image parts with equals, in, matches or startsWith".to_owned(),
                        ),
                    );
                    return None;
                }
                Some(Predicate::Test {
                    path,
                    image: *image,
                    test,
                })
            }
        }
    }

    /// A `cel:` condition.
    fn cel(&mut self, at: &str, source: &str, bindings: &Bindings) -> Option<Predicate> {
        self.cel_check(at, source, bindings).map(Predicate::Cel)
    }

    /// A CEL expression, with where it was written and what it reads.
    fn cel_check(&mut self, at: &str, source: &str, bindings: &Bindings) -> Option<CelCheck> {
        let mut expression = match crate::cel::Expression::compile(source, bindings) {
            Ok(expression) => expression,
            Err(error) => {
                self.error(at, format!("CEL: {}", error.message), error.hint);
                return None;
            }
        };
        // Bounded and charged as the rule file's own patterns are, and
        // given to the expression, so that no review compiles them again.
        let mut compiled = HashMap::new();
        let mut patterns_compile = true;
        for pattern in expression.literal_patterns() {
            match self.regex(at, pattern) {
                Some(regex) => {
                    compiled.insert(pattern.clone(), regex);
                }
                None => patterns_compile = false,
            }
        }
        if !patterns_compile {
            return None;
        }
        expression.use_literal_patterns(compiled);
        let mut reads = Vec::new();
        // Inside a `forEach`, `$` is the element: the review's documents
        // are under `$$`.
        let review = if bindings.is_empty() { "$" } else { "$$" };
        for variable in expression.variables() {
            let text = match variable {
                Variable::Object => format!("{review}.object"),
                Variable::OldObject => format!("{review}.oldObject"),
                Variable::Request => format!("{review}.request"),
                Variable::Element => "$".to_owned(),
                Variable::Binding(depth) => match bindings.get(depth) {
                    Some(Some(name)) => format!("${name}"),
                    _ => continue,
                },
            };
            reads.push(self.checked_path(at, &text, bindings, false)?);
        }
        self.check_cel_selections(at, &expression, bindings);
        let place = self.source.diagnostic(at, "", None);
        Some(CelCheck {
            expression,
            at: Arc::from(format!("{}:{}:{}", place.file, place.line, place.column)),
            reads,
            match_condition: None,
        })
    }

    /// Checks the fields a CEL expression selects as a path condition's
    /// are: a field no matched kind has, and literals compared with a
    /// field (`==`, `!=`, `in`) of another type or outside its few known
    /// values. Warnings only, at the expression.
    fn check_cel_selections(
        &mut self,
        at: &str,
        expression: &crate::cel::Expression,
        bindings: &Bindings,
    ) {
        let before = self.diagnostics.len();
        for selection in expression.selections() {
            // Repeats are dropped below; past this many an expression has
            // said enough.
            if self.diagnostics.len() - before >= 2 * MAX_CEL_WARNINGS {
                break;
            }
            if !self.all_lists(&selection.loops, bindings) {
                continue;
            }
            let Ok(path) = JsonPath::compile(&in_scope(&selection.path, bindings), scope(bindings))
            else {
                continue;
            };
            let shown = cel_field(&selection.path);
            self.check_fields(at, &path);
            for compared in selection.compared {
                let operator = match compared {
                    Compared::Equals(value) => Operator::Equals(value),
                    Compared::NotEquals(value) => Operator::NotEquals(value),
                    Compared::In(values) => Operator::In(values),
                };
                self.check_literal_types(at, &shown, &path, &operator, Written::Cel);
                self.check_literal_values(at, &shown, &path, &operator, Written::Cel);
            }
        }
        // Two selections through one missing field (`has(x.a)`, `x.a.b`)
        // find it twice: say it once.
        self.diagnostics.dedup_from(before);
        self.diagnostics.truncate(before + MAX_CEL_WARNINGS);
    }

    /// Whether each of `ranges` (paths CEL comprehensions loop over) is a
    /// list in every matched kind that has it: a loop over a map runs over
    /// its keys, which the fields below it do not describe.
    fn all_lists(&self, ranges: &[String], bindings: &Bindings) -> bool {
        ranges.iter().all(|range| {
            let Ok(path) = JsonPath::compile(&in_scope(range, bindings), scope(bindings)) else {
                return false;
            };
            let (steps, whole) = path.leading_steps();
            whole
                && !self.shapes.is_empty()
                && self
                    .shapes
                    .iter()
                    .all(|shape| match shape.start(path.root()) {
                        Start::Absent => true,
                        Start::Unknown => false,
                        Start::At(types) => match shape.fields.walk(&types, &steps) {
                            Walk::Reached(types) => shape.fields.all_lists(&types),
                            Walk::Missing(_) => true,
                            Walk::Unknown => false,
                        },
                    })
        })
    }

    /// An operator compiled (`None` when it failed), reported at `at`.
    fn test(&mut self, at: &str, operator: &Operator, bindings: &Bindings) -> Option<Test> {
        let compare = |comparison: Comparison, cx: &mut Self, value: &Value| {
            cx.quantity_operand(at, value, bindings)
                .map(|q| Test::Compare(comparison, q))
        };
        match operator {
            Operator::Exists(true) | Operator::Absent(false) => Some(Test::Exists),
            Operator::Exists(false) | Operator::Absent(true) => Some(Test::Absent),
            Operator::Equals(value) => self.operand(at, value, bindings).map(Test::Equals),
            Operator::NotEquals(value) => self.operand(at, value, bindings).map(Test::NotEquals),
            Operator::In(list) => Some(Test::In(ValueList::new(list.clone()))),
            Operator::NotIn(list) => Some(Test::NotIn(ValueList::new(list.clone()))),
            Operator::Matches(pattern) => self.regex(at, pattern).map(Test::Matches),
            Operator::NotMatches(pattern) => self.regex(at, pattern).map(Test::NotMatches),
            Operator::StartsWith(prefixes) => Some(Test::StartsWith(prefixes.clone())),
            Operator::NotStartsWith(prefixes) => Some(Test::NotStartsWith(prefixes.clone())),
            Operator::GreaterThan(value) => compare(Comparison::Greater, self, value),
            Operator::GreaterOrEqual(value) => compare(Comparison::GreaterOrEqual, self, value),
            Operator::LessThan(value) => compare(Comparison::Less, self, value),
            Operator::LessOrEqual(value) => compare(Comparison::LessOrEqual, self, value),
            Operator::Contains(value) => self.operand(at, value, bindings).map(Test::Contains),
            Operator::ContainsAny(value) => self
                .list_operand(at, value, bindings)
                .map(Test::ContainsAny),
            Operator::SubsetOf(value) => self.list_operand(at, value, bindings).map(Test::SubsetOf),
        }
    }

    /// `{path: ...}` (a map with the single key `path`) is a path operand;
    /// anything else is a literal.
    fn operand(&mut self, at: &str, value: &Value, bindings: &Bindings) -> Option<Operand> {
        if let Some(map) = value.as_object()
            && map.len() == 1
            && let Some((key, _)) = map.iter().next()
            && key != "path"
            && nearest(key, ["path"].into_iter()).is_some()
        {
            let place = if key.chars().all(|c| c.is_ascii_alphanumeric()) {
                format!("{at}.{key}")
            } else {
                at.to_owned()
            };
            self.warning(
                &place,
                format!(
                    "`{{{key}: ...}}` is compared as a literal map, not as the value at a path"
                ),
                Some("did you mean `path`?".to_owned()),
            );
        }
        if let Some(map) = value.as_object()
            && map.len() == 1
            && let Some(path) = map.get("path")
        {
            let Some(text) = path.as_str() else {
                self.error(&format!("{at}.path"), "path must be a string", None);
                return None;
            };
            return self
                .path(&format!("{at}.path"), text, bindings)
                .map(Operand::Path);
        }
        Some(Operand::Value(value.clone()))
    }

    fn list_operand(
        &mut self,
        at: &str,
        value: &Value,
        bindings: &Bindings,
    ) -> Option<ListOperand> {
        match self.operand(at, value, bindings)? {
            Operand::Value(Value::Array(values)) => Some(ListOperand::List(ValueList::new(values))),
            Operand::Value(_) => {
                self.error(at, "expected a list of values or {path: ...}", None);
                None
            }
            Operand::Path(path) => Some(ListOperand::Path(path)),
        }
    }

    fn quantity_operand(
        &mut self,
        at: &str,
        value: &Value,
        bindings: &Bindings,
    ) -> Option<QuantityOperand> {
        let literal = match self.operand(at, value, bindings)? {
            Operand::Path(path) => return Some(QuantityOperand::Path(path)),
            Operand::Value(literal) => literal,
        };
        match Quantity::from_json(&literal) {
            Some(quantity) => Some(QuantityOperand::Value(quantity)),
            None => {
                self.error(
                    at,
                    format!("{literal} is not a number or quantity"),
                    Some("write a number or a Kubernetes quantity such as 500m, 2, 1Gi".to_owned()),
                );
                None
            }
        }
    }

    fn deny_entries(
        &mut self,
        at: &str,
        entries: &[DenyEntry],
        bindings: &mut Bindings,
    ) -> Vec<DenyCheck> {
        let mut checks = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let entry_at = format!("{at}[{i}]");
            if let Some(check) = self.deny_entry(&entry_at, entry, bindings) {
                checks.push(check);
            }
        }
        checks
    }

    fn deny_entry(
        &mut self,
        at: &str,
        entry: &DenyEntry,
        bindings: &mut Bindings,
    ) -> Option<DenyCheck> {
        if let Some(for_each) = &entry.for_each {
            if entry.condition.is_some()
                || entry.message.is_some()
                || entry.message_expression.is_some()
            {
                self.error(
                    at,
                    "a forEach entry holds only forEach, as and deny",
                    Some("put conditions and messages in the nested deny entries".to_owned()),
                );
                return None;
            }
            let path = self.path(&format!("{at}.forEach"), for_each, bindings)?;
            if let Some(name) = &entry.as_
                && (name.is_empty()
                    || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    || name.starts_with(|c: char| c.is_ascii_digit()))
            {
                self.error(
                    &format!("{at}.as"),
                    format!("invalid binding name {name:?}"),
                    Some("use letters, digits and _, not starting with a digit".to_owned()),
                );
                return None;
            }
            if let Some(name) = &entry.as_
                && (RESERVED_NAMES.contains(&name.as_str()) || name.starts_with("kadmit_"))
            {
                self.error(
                    &format!("{at}.as"),
                    format!(
                        "binding name {name:?} is taken: CEL and the API server's policies \
                         use it, or kadmit names its own variables so (kadmit_...)"
                    ),
                    Some(format!(
                        "name the element for what it is, e.g. as: container (not {name})"
                    )),
                );
                return None;
            }
            if let Some(name) = &entry.as_
                && bindings.iter().flatten().any(|outer| outer == name)
            {
                // Paths would read the outer element by the name, CEL the
                // inner one.
                self.error(
                    &format!("{at}.as"),
                    format!("binding name {name:?} is already bound by an enclosing forEach"),
                    Some("give each nested forEach a name of its own".to_owned()),
                );
                return None;
            }
            let Some(nested) = &entry.deny else {
                self.error(at, "forEach needs deny entries", None);
                return None;
            };
            if nested.is_empty() {
                self.error(
                    &format!("{at}.deny"),
                    "forEach with an empty deny list checks nothing",
                    Some(
                        "the rule can never fire this way: list the checks for each element, \
                         or remove the entry"
                            .to_owned(),
                    ),
                );
                return None;
            }
            bindings.push(entry.as_.clone());
            self.enter(&path, entry.entries.unwrap_or(false));
            let checks = self.deny_entries(&format!("{at}.deny"), nested, bindings);
            self.leave();
            bindings.pop();
            return Some(DenyCheck::ForEach {
                path,
                checks,
                entries: entry.entries.unwrap_or(false),
                // Numbered once the plan holds every rule.
                shared: None,
            });
        }
        let message_expression = entry
            .message_expression
            .as_ref()
            .map(|source| self.cel_check(&format!("{at}.messageExpression"), source, bindings));
        let fallback;
        let message = match (&entry.message, &message_expression) {
            (Some(message), _) => Some(message),
            (None, Some(_)) => {
                fallback = "denied by a rule whose messageExpression yielded no string".to_owned();
                Some(&fallback)
            }
            (None, None) => None,
        };
        let Some(message) = message else {
            self.error(
                at,
                "deny entry has no message",
                Some(
                    "say what is wrong, e.g. message: \"container {{ $.name }} is privileged\""
                        .to_owned(),
                ),
            );
            return None;
        };
        let message = match Template::compile(message, scope(bindings)) {
            Ok(template) => Some(template),
            Err(PathError { message, hint }) => {
                self.error(&format!("{at}.message"), message, hint);
                None
            }
        };
        // Compiled even when the message failed, so both problems are reported.
        let predicate = match &entry.condition {
            Some(condition) => Some(self.predicate(at, condition, bindings)?),
            None => None,
        };
        Some(DenyCheck::Entry {
            predicate,
            message: message?,
            message_expression: message_expression.flatten().map(Box::new),
        })
    }

    fn write_path(&mut self, at: &str, text: &str, bindings: &Bindings) -> Option<WritePath> {
        let path = self.path(at, text, bindings)?;
        if !path.root().is_writable() {
            self.error(
                at,
                format!("mutation writes outside the object: {text}"),
                Some(
                    "mutations may only write under $.object or $.podSpec (or the forEach element)"
                        .to_owned(),
                ),
            );
            return None;
        }
        let (prefix, tail) = path.split_for_write();
        if tail.is_empty() && prefix.is_singular() {
            self.error(
                at,
                format!("{text} is the whole document"),
                Some("write a field inside it, e.g. $.object.metadata.labels.team".to_owned()),
            );
            return None;
        }
        Some(WritePath { prefix, tail })
    }

    /// Refuses a copy whose value can hold its own target (`valueFrom` at or
    /// above the written path): every pass would copy the object into
    /// itself again, doubling it, until the process runs out of memory.
    fn check_copy_into_itself(
        &mut self,
        at: &str,
        target: &WritePath,
        source: &Source,
        element: &Reach,
    ) -> Option<()> {
        let Source::Path(from) = source else {
            return Some(());
        };
        let written = target.prefix.reach(element).extended(&target.tail);
        if from.reach(element).may_contain(&written) {
            self.error(
                &format!("{at}.valueFrom.path"),
                format!(
                    "{} can contain the written location {}: the copy would hold itself and grow with every pass",
                    from.text(),
                    target.prefix.text()
                ),
                Some("copy a field that is not at or above the written path".to_owned()),
            );
            return None;
        }
        Some(())
    }

    fn source(&mut self, at: &str, set: &SetMutation, bindings: &Bindings) -> Option<Source> {
        match (&set.value, &set.value_from) {
            (Some(value), None) => Some(Source::Value(value.clone())),
            (None, Some(from)) => self
                .path(&format!("{at}.valueFrom.path"), &from.path, bindings)
                .map(Source::Path),
            _ => {
                self.error(at, "give exactly one of value and valueFrom", None);
                None
            }
        }
    }

    fn mutations(
        &mut self,
        at: &str,
        entries: &[MutationEntry],
        bindings: &Bindings,
        element: &Reach,
    ) -> Vec<GuardedEdit> {
        let mut edits = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if let Some(edit) = self.mutation(&format!("{at}[{i}]"), entry, bindings, element) {
                edits.push(edit);
            }
        }
        edits
    }

    fn mutation(
        &mut self,
        at: &str,
        entry: &MutationEntry,
        bindings: &Bindings,
        element: &Reach,
    ) -> Option<GuardedEdit> {
        let when = self.predicates(&format!("{at}.when"), &entry.when, bindings);
        let kinds: Vec<&str> = [
            ("setIfAbsent", entry.set_if_absent.is_some()),
            ("mergeIfAbsent", entry.merge_if_absent.is_some()),
            ("injectIfMissing", entry.inject_if_missing.is_some()),
            ("set", entry.set.is_some()),
            ("forEach", entry.for_each.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        if kinds.len() != 1 {
            let message = if kinds.is_empty() {
                "mutation entry has no mutation".to_owned()
            } else {
                format!("mutation entry has several mutations: {}", kinds.join(", "))
            };
            self.error(at, message, Some("give one of setIfAbsent, mergeIfAbsent, injectIfMissing, set, forEach per entry".to_owned()));
            return None;
        }
        if entry.mutate.is_some() && entry.for_each.is_none() {
            self.error(&format!("{at}.mutate"), "mutate needs forEach", None);
            return None;
        }
        let edit = if let Some(set) = &entry.set_if_absent {
            let target = self.write_path(&format!("{at}.setIfAbsent.path"), &set.path, bindings);
            let source = self.source(&format!("{at}.setIfAbsent"), set, bindings);
            let (target, source) = (target?, source?);
            self.check_copy_into_itself(&format!("{at}.setIfAbsent"), &target, &source, element)?;
            Edit::SetIfAbsent { target, source }
        } else if let Some(set) = &entry.set {
            let target = self.write_path(&format!("{at}.set.path"), &set.path, bindings);
            let source = self.source(&format!("{at}.set"), set, bindings);
            let (target, source) = (target?, source?);
            self.check_copy_into_itself(&format!("{at}.set"), &target, &source, element)?;
            Edit::Set { target, source }
        } else if let Some(merge) = &entry.merge_if_absent {
            let target =
                self.write_path(&format!("{at}.mergeIfAbsent.path"), &merge.path, bindings);
            if !merge.value.is_object() {
                self.error(
                    &format!("{at}.mergeIfAbsent.value"),
                    "mergeIfAbsent merges a map",
                    Some("use setIfAbsent for a single value".to_owned()),
                );
                return None;
            }
            Edit::MergeIfAbsent {
                target: target?,
                value: merge.value.clone(),
            }
        } else if let Some(inject) = &entry.inject_if_missing {
            let target = self.write_path(
                &format!("{at}.injectIfMissing.path"),
                &inject.path,
                bindings,
            );
            let keys = inject.key.fields();
            if keys.is_empty() || keys.iter().any(String::is_empty) {
                self.error(
                    &format!("{at}.injectIfMissing.key"),
                    "key is empty",
                    Some("name the field that identifies elements, e.g. name".to_owned()),
                );
                return None;
            }
            for key in &keys {
                if inject.value.get(key).is_none() {
                    self.error(&format!("{at}.injectIfMissing.value"), format!("value has no key field {key:?}"), Some("the injected element must carry its key so the injection is idempotent".to_owned()));
                    return None;
                }
            }
            Edit::InjectIfMissing {
                target: target?,
                keys,
                value: inject.value.clone(),
            }
        } else {
            let for_each = entry.for_each.as_deref().unwrap_or_default();
            let path = self.path(&format!("{at}.forEach"), for_each, bindings)?;
            if !path.root().is_writable() {
                self.error(
                    &format!("{at}.forEach"),
                    format!("forEach in mutate iterates outside the object: {for_each}"),
                    Some("iterate under $.object or $.podSpec".to_owned()),
                );
                return None;
            }
            let Some(nested) = &entry.mutate else {
                self.error(at, "forEach needs mutate entries", None);
                return None;
            };
            if nested.is_empty() {
                self.error(
                    &format!("{at}.mutate"),
                    "forEach with an empty mutate list changes nothing",
                    Some("list the mutations for each element, or remove the entry".to_owned()),
                );
                return None;
            }
            let mut inner = bindings.clone();
            inner.push(None);
            let reach = path.reach(element);
            self.enter(&path, false);
            let edits = self.mutations(&format!("{at}.mutate"), nested, &inner, &reach);
            self.leave();
            Edit::ForEach { path, edits }
        };
        Some(GuardedEdit { when, edit })
    }
}

/// How deep `spec.include` may nest: a set including a set including ...
pub const MAX_INCLUDE_DEPTH: usize = 8;

/// How many rules all includes of a rules directory may add together: each
/// include compiles the included rules again, so a directory of sets that
/// each include every other would otherwise grow quadratically.
pub const MAX_INCLUDED_RULES: usize = 10_000;

/// How many include entries resolving every set's includes may visit in a
/// whole rules directory, every set counted again for each set that
/// includes it.
pub const MAX_INCLUDE_VISITS: usize = 100_000;

/// The most rule set names a diagnostic lists.
const MAX_NAMES_SHOWN: usize = 20;

/// What resolving includes shares across the rule sets of one directory.
struct IncludeWalk<'l> {
    /// Each rule set's index by name (the first, if a name repeats).
    by_name: HashMap<&'l str, usize>,
    /// Rules added by includes so far ([`MAX_INCLUDED_RULES`]).
    included_rules: usize,
    /// Include entries visited so far ([`MAX_INCLUDE_VISITS`]).
    visits: usize,
}

impl<'l> IncludeWalk<'l> {
    fn new(loaded: &'l Loaded) -> Self {
        let mut by_name = HashMap::new();
        for (index, set) in loaded.rule_sets.iter().enumerate() {
            by_name
                .entry(set.rule_set.metadata.name.as_str())
                .or_insert(index);
        }
        IncludeWalk {
            by_name,
            included_rules: 0,
            visits: 0,
        }
    }
}

/// A rule set an including set applies, and the guarded sets its include
/// passes through on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Included {
    /// The included set's index in the directory.
    pub set: usize,
    /// The sets between the including set and this one, outermost first,
    /// that guard their rules (a `when` or `matchConditions`): the rules of
    /// a set included through them apply only where those guards hold, as
    /// in the sets they are written for.
    pub through: Vec<usize>,
}

/// One including set's walk: `trail` holds the sets being included, from
/// the including set down, to find cycles; `order` the sets found, each
/// once (`placed` holds each one's position there); problems are reported
/// at `at`, the entry of the including set that led to them.
struct Visit<'v> {
    trail: &'v mut Vec<usize>,
    order: &'v mut Vec<Included>,
    placed: &'v mut [Option<usize>],
    at: &'v str,
    problems: &'v mut Vec<(String, String, Option<String>)>,
}

/// Whether a rule set guards its rules: a `when` or `matchConditions`.
fn guards_its_rules(set: &LoadedRuleSet) -> bool {
    let spec = &set.rule_set.spec;
    !spec.when.is_empty() || !spec.match_conditions.is_empty()
}

/// Whether every set of `inner` is in `outer`.
fn is_subset(inner: &[usize], outer: &[usize]) -> bool {
    inner.iter().all(|set| outer.contains(set))
}

/// A path of [`crate::cel::Expression::selections`] as a rule's path in
/// the scope of `bindings`: inside a `forEach`, from `$$` where it starts
/// at one of the review's documents (`$.object`), since `$` is the element.
fn in_scope(path: &str, bindings: &Bindings) -> String {
    match path.strip_prefix("$.") {
        Some(rest) if !bindings.is_empty() => format!("$$.{rest}"),
        _ => path.to_owned(),
    }
}

/// A path of [`crate::cel::Expression::selections`] as the CEL that
/// selects it reads: `object.spec['hostNetwork']` as `object.spec.hostNetwork`.
fn cel_field(path: &str) -> String {
    let (start, rest) = match path.strip_prefix("$.") {
        Some(rest) => {
            let end = rest.find('[').unwrap_or(rest.len());
            (rest[..end].to_owned(), &rest[end..])
        }
        None => {
            let end = path.find('[').unwrap_or(path.len());
            let name = path[..end].trim_start_matches('$');
            (
                if name.is_empty() { "element" } else { name }.to_owned(),
                &path[end..],
            )
        }
    };
    let mut out = start;
    let mut rest = rest;
    while let Some(after) = rest.strip_prefix("['") {
        let Some(end) = after.find("']") else {
            return path.to_owned();
        };
        out.push('.');
        out.push_str(&after[..end]);
        rest = &after[end + 2..];
        while let Some(index) = rest.strip_prefix('[')
            && !index.starts_with('\'')
        {
            let Some(end) = index.find(']') else {
                return path.to_owned();
            };
            let inner = &index[..end];
            out.push_str(if inner == "*" { "[*]" } else { "" });
            if inner != "*" {
                out.push('[');
                out.push_str(inner);
                out.push(']');
            }
            rest = &index[end + 1..];
        }
    }
    if rest.is_empty() {
        out
    } else {
        path.to_owned()
    }
}

/// How many warnings [`SetCompiler::check_cel_selections`] gives one CEL
/// expression (of up to [`crate::cel::MAX_NODES`] nodes, each a field it
/// may select).
const MAX_CEL_WARNINGS: usize = 10;

/// How many literals of one condition [`SetCompiler::check_literal_types`]
/// warns of: a long `in` list of the wrong type says so in a few lines.
const MAX_TYPE_WARNINGS: usize = 5;

/// Where a literal a check warns of is written: in a rule file's
/// condition (`equals: yes`), or in a CEL expression (`x == 'yes'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Rule,
    Cel,
}

impl Written {
    /// Where to report a literal of `operator` (the `index`th of a list),
    /// and what the condition then does, `every` literal of it being one
    /// that never matches.
    fn place_and_outcome(
        self,
        at: &str,
        operator: &Operator,
        index: Option<usize>,
        every: bool,
    ) -> (String, &'static str) {
        if self == Written::Cel {
            let outcome = match operator {
                Operator::NotEquals(_) => "the `!=` is true wherever the field is set",
                Operator::In(_) if !every => "this entry of the `in` never matches",
                Operator::In(_) => "the `in` is never true",
                _ => "the comparison is never true",
            };
            return (at.to_owned(), outcome);
        }
        let key = operator.key();
        let place = match index {
            Some(i) => format!("{at}.{key}[{i}]"),
            None => format!("{at}.{key}"),
        };
        let outcome = match operator {
            Operator::Equals(_) => "the condition never holds",
            Operator::NotEquals(_) => "the condition holds wherever the field is set",
            Operator::In(_) if every => "the condition never holds",
            Operator::NotIn(_) if every => "the condition holds wherever the field is set",
            _ => "this entry never matches",
        };
        (place, outcome)
    }
}

/// How to write `value` as a field of one of `scalars` holds it, in a
/// rule file's condition or in CEL.
fn literal_type_hint(value: &Value, scalars: &[Scalar], written: Written) -> String {
    let text = value.as_str().map(str::trim);
    let why = match written {
        Written::Rule => {
            ": rule files are YAML 1.2, where yes, on, no, off and quoted values are strings"
        }
        Written::Cel => "",
    };
    if scalars.contains(&Scalar::Boolean)
        && let Some(text) = text
    {
        let word = text.to_ascii_lowercase();
        if ["yes", "y", "on", "true"].contains(&word.as_str()) {
            return format!("write true, unquoted{why}");
        }
        if ["no", "n", "off", "false"].contains(&word.as_str()) {
            return format!("write false, unquoted{why}");
        }
    }
    if scalars.contains(&Scalar::Number)
        && let Some(text) = text
        && text.parse::<f64>().is_ok_and(f64::is_finite)
    {
        // `0400`: an octal file mode, which YAML 1.2 reads as a string.
        if written == Written::Rule
            && let Some(digits) = text.strip_prefix('0')
            && !digits.is_empty()
            && let Ok(decimal) = u32::from_str_radix(digits, 8)
        {
            return format!(
                "write the number in decimal ({decimal}) or as 0o{digits}: YAML 1.2 reads \
                 {text} as a string"
            );
        }
        return format!("write {text} unquoted, as a number");
    }
    if scalars.contains(&Scalar::String) && matches!(value, Value::Bool(_) | Value::Number(_)) {
        let read = match value {
            Value::Bool(_) => "the boolean",
            _ => "the number",
        };
        return match written {
            Written::Rule => format!(
                "quote the value as the object holds it: unquoted, YAML reads it as {read} {value}"
            ),
            Written::Cel => {
                format!("write it as a string, quoted as the object holds it ('{value}'?)")
            }
        };
    }
    if scalars == [Scalar::List] {
        return match written {
            Written::Rule => "to test whether the list holds the value, write contains".to_owned(),
            Written::Cel => {
                "to test whether the list holds the value, write `value in list`".to_owned()
            }
        };
    }
    if scalars == [Scalar::Map] {
        return "compare one of its members".to_owned();
    }
    "compare with a value of the field's type".to_owned()
}

/// The names `steps` select, when every one is a key.
fn key_names(steps: &[Step]) -> Option<Vec<&str>> {
    steps
        .iter()
        .map(|step| match step {
            Step::Key(key) => Some(&**key),
            _ => None,
        })
        .collect()
}

/// The JSON type of the member of the `request` document `names` lead to,
/// as kube-apiserver sends it; `None` where it is not one type (`options`
/// may be absent, `userInfo.extra`'s values vary) or past what is declared.
fn request_member_type(names: &[&str]) -> Option<Scalar> {
    Some(match names {
        ["uid" | "subResource" | "requestSubResource" | "name" | "namespace" | "operation"]
        | ["kind" | "requestKind", "group" | "version" | "kind"]
        | [
            "resource" | "requestResource",
            "group" | "version" | "resource",
        ]
        | ["userInfo", "username" | "uid"] => Scalar::String,
        ["kind" | "requestKind" | "resource" | "requestResource" | "userInfo"]
        | ["userInfo", "extra"] => Scalar::Map,
        ["userInfo", "groups"] => Scalar::List,
        ["dryRun"] => Scalar::Boolean,
        _ => return None,
    })
}

/// Adds the set `name` and, first, the sets it includes to the visit's
/// order, each once; breaks once the directory's walk is over
/// [`MAX_INCLUDE_VISITS`].
fn visit_include(
    loaded: &Loaded,
    name: &str,
    walk: &mut IncludeWalk<'_>,
    visit: &mut Visit<'_>,
) -> ControlFlow<()> {
    walk.visits += 1;
    if walk.visits > MAX_INCLUDE_VISITS {
        return ControlFlow::Break(());
    }
    let Visit {
        trail,
        order,
        placed,
        at,
        problems,
    } = visit;
    let names = |trail: &[usize]| -> Vec<String> {
        trail
            .iter()
            .filter_map(|&i| loaded.rule_sets.get(i))
            .map(|s| s.rule_set.metadata.name.clone())
            .collect()
    };
    let Some(&index) = walk.by_name.get(name) else {
        // An unknown name further down is reported where it is written.
        if trail.len() > 1 {
            return ControlFlow::Continue(());
        }
        let mut known: Vec<&str> = walk.by_name.keys().copied().collect();
        known.sort_unstable();
        let shown = known.len().min(MAX_NAMES_SHOWN);
        let mut hint = format!("rule sets here: {}", known[..shown].join(", "));
        if known.len() > shown {
            hint.push_str(&format!(" and {} more", known.len() - shown));
        }
        problems.push((
            at.to_string(),
            format!("included rule set {name:?} is not in the rules directory"),
            Some(hint),
        ));
        return ControlFlow::Continue(());
    };
    if trail.contains(&index) {
        let mut cycle = names(trail);
        cycle.push(name.to_owned());
        problems.push((
            at.to_string(),
            format!("include cycle: {}", cycle.join(" -> ")),
            Some("a rule set cannot include itself, directly or through others".to_owned()),
        ));
        return ControlFlow::Continue(());
    }
    if trail.len() > MAX_INCLUDE_DEPTH {
        let mut chain = names(trail);
        chain.push(name.to_owned());
        problems.push((
            at.to_string(),
            format!(
                "includes nest more than {MAX_INCLUDE_DEPTH} deep: {}",
                chain.join(" -> ")
            ),
            Some("include the sets you need directly".to_owned()),
        ));
        return ControlFlow::Continue(());
    }
    // The guarded sets this path passes through (the trail without the
    // including set).
    let through: Vec<usize> = trail
        .iter()
        .skip(1)
        .copied()
        .filter(|&i| loaded.rule_sets.get(i).is_some_and(guards_its_rules))
        .collect();
    let Some(&slot) = placed.get(index) else {
        return ControlFlow::Continue(());
    };
    if let Some(position) = slot {
        let Some(earlier) = order.get_mut(position) else {
            return ControlFlow::Continue(());
        };
        if is_subset(&earlier.through, &through) {
            // Guarded at least as much as the path already found: the
            // rules apply wherever that path lets them, nothing changes.
            return ControlFlow::Continue(());
        }
        if !is_subset(&through, &earlier.through) {
            // Each path lets the rules apply where the other does not,
            // and each rule is applied once, under one set of guards.
            let guarded = |sets: &[usize]| match names(sets).as_slice() {
                [] => "no guard".to_owned(),
                names => format!("the guards of {}", names.join(", ")),
            };
            problems.push((
                at.to_string(),
                format!(
                    "rule set {name:?} is included twice, once under {} and once under {}",
                    guarded(&earlier.through),
                    guarded(&through)
                ),
                Some(format!(
                    "include {name:?} directly, or give the sets it is included through the same `when` and `matchConditions`"
                )),
            ));
            return ControlFlow::Continue(());
        }
        // Fewer guards on this path: the rules apply wherever either
        // path lets them, which is where this one does; the sets it
        // includes are walked again to loosen theirs alike.
        earlier.through = through.clone();
    }
    trail.push(index);
    if let Some(set) = loaded.rule_sets.get(index) {
        for inner in &set.rule_set.spec.include {
            visit_include(loaded, inner, walk, visit)?;
        }
    }
    visit.trail.pop();
    if let Some(slot) = visit.placed.get_mut(index)
        && slot.is_none()
    {
        *slot = Some(visit.order.len());
        visit.order.push(Included {
            set: index,
            through,
        });
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::load_str;

    fn diagnostics(rules: &str) -> Vec<String> {
        match compile(&load_str("t.yaml", &crate::plan::test_rule_set(rules))) {
            Ok(_) => Vec::new(),
            Err(diagnostics) => diagnostics.iter().map(|d| d.to_string()).collect(),
        }
    }

    /// The rule list of one rule `r` on pods with these mutations.
    fn mutating(mutations: &str) -> Vec<String> {
        diagnostics(&format!(
            "    - name: r\n      match: {{resources: [pods, deployments]}}\n      mutate:\n{mutations}"
        ))
    }

    /// Errors and warnings alike, of a whole rule set file.
    fn problems(text: &str) -> Vec<String> {
        match compile(&load_str("t.yaml", text)) {
            Ok(plan) => plan.warnings().iter().map(|d| d.to_string()).collect(),
            Err(diagnostics) => diagnostics.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn a_literal_of_another_type_than_the_field_is_a_warning() {
        let warnings = |condition: &str| {
            problems(&crate::plan::test_rule_set(&format!(
                "    - name: r
      match: {{resources: [pods, deployments]}}
      deny:
        - {condition}
"
            )))
        };
        let one = |condition: &str| -> String {
            let found = warnings(condition);
            assert_eq!(found.len(), 1, "{condition}: {found:#?}");
            found[0].clone()
        };
        // YAML 1.2 reads yes as a string: the rule never fires.
        let found = one("{path: $.podSpec.hostNetwork, equals: yes, message: m}");
        assert!(
            found.contains(
                "deny[0].equals: \"yes\" is a string, and $.podSpec.hostNetwork is a boolean in \
                 the pod spec of"
            ) && found.contains("the condition never holds")
                && found.contains("write true, unquoted"),
            "{found}"
        );
        let found = one("{path: $.object.spec.replicas, notEquals: '3', message: m}");
        assert!(
            found.contains("is a number")
                && found.contains("the condition holds wherever the field is set")
                && found.contains("write 3 unquoted"),
            "{found}"
        );
        let found = one("{path: $.object.metadata.labels.tier, equals: 1.2, message: m}");
        assert!(
            found.contains("1.2 is a number")
                && found.contains("is a string")
                && found.contains("YAML reads it as the number 1.2"),
            "{found}"
        );
        // In a list, each entry of the wrong type is named; the condition
        // as a whole only when every entry is.
        let found = one("{path: $.podSpec.hostPID, in: [true, 'off'], message: m}");
        assert!(
            found.contains("in[1]:")
                && found.contains("this entry never matches")
                && found.contains("write false, unquoted"),
            "{found}"
        );
        let found = one("{path: $.podSpec.hostPID, notIn: ['on'], message: m}");
        assert!(
            found.contains("the condition holds wherever the field is set"),
            "{found}"
        );
        // An octal file mode, a string in YAML 1.2.
        let found =
            one("{path: '$.podSpec.volumes[*].secret.defaultMode', equals: 0400, message: m}");
        assert!(
            found.contains("write the number in decimal (256) or as 0o400"),
            "{found}"
        );
        // Elements of a forEach are typed as the list's items.
        let found = warnings(
            "{forEach: '$.podSpec.containers[*]', deny: [{path: $.securityContext.privileged, equals: 'true', message: m}]}",
        );
        assert!(
            found.iter().any(|w| w.contains("is a boolean")),
            "{found:#?}"
        );
        // A long list of the wrong type says so in a few lines.
        let many: Vec<String> = (0..20).map(|i| format!("'{i}'")).collect();
        let found = warnings(&format!(
            "{{path: $.podSpec.securityContext.runAsUser, in: [{}], message: m}}",
            many.join(", ")
        ));
        assert_eq!(found.len(), MAX_TYPE_WARNINGS, "{found:#?}");
        // Nothing to say: the right type, null (a field of any type can
        // be null), a path operand, a field without one type (an
        // int-or-string port), an image part, the request's right type.
        for fine in [
            "{path: $.podSpec.hostNetwork, equals: true, message: m}",
            "{path: $.object.metadata.creationTimestamp, equals: null, message: m}",
            "{path: $.podSpec.hostNetwork, equals: {path: $.podSpec.hostPID}, message: m}",
            "{path: '$.podSpec.containers[*].livenessProbe.httpGet.port', equals: '8080', message: m}",
            "{path: '$.podSpec.containers[*].image', image: registry, equals: docker.io, message: m}",
            "{path: $.request.dryRun, equals: true, message: m}",
            "{path: $.object.metadata.labels.on, in: [yes, 'no'], message: m}",
        ] {
            assert_eq!(warnings(fine), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn an_operation_or_kind_the_rule_never_sees_is_a_warning() {
        let warnings = |matched: &str, condition: &str| {
            problems(&crate::plan::test_rule_set(&format!(
                "    - name: r
      match: {{{matched}}}
      deny:
        - {condition}
"
            )))
        };
        let pods = "resources: [pods]";
        let found = warnings(
            pods,
            "{path: $.request.operation, equals: create, message: m}",
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("$.request.operation is never \"create\" here")
                && found[0].contains("the condition never holds (write CREATE)"),
            "{found:#?}"
        );
        // DELETE is an operation, but not one this rule matches.
        let found = warnings(
            pods,
            "{path: $.request.operation, notIn: [DELETE], message: m}",
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("the rule matches only CREATE and UPDATE")
                && found[0].contains("the condition holds wherever the field is set")
                && found[0].contains("add DELETE to match.operations"),
            "{found:#?}"
        );
        let found = warnings(
            "resources: [pods, deployments]",
            "{path: $.object.kind, in: [Pod, deployment], message: m}",
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("in[1]: $.object.kind is never \"deployment\" here")
                && found[0].contains("the kinds the rule matches are Deployment, Pod")
                && found[0].contains("(write Deployment)"),
            "{found:#?}"
        );
        for (matched, fine) in [
            (
                pods,
                "{path: $.request.operation, in: [CREATE, UPDATE], message: m}",
            ),
            (
                "resources: [pods], operations: ['*']",
                "{path: $.request.operation, equals: CONNECT, message: m}",
            ),
            (
                "resources: [pods/exec, pods/attach], operations: [CONNECT]",
                "{path: $.request.kind.kind, equals: PodExecOptions, message: m}",
            ),
            (
                "resources: ['*']",
                "{path: $.request.kind.kind, equals: anything, message: m}",
            ),
            (pods, "{path: $.request.name, equals: create, message: m}"),
        ] {
            assert_eq!(warnings(matched, fine), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn cel_fields_and_literals_are_checked_as_paths_are() {
        let warnings = |condition: &str| {
            problems(&crate::plan::test_rule_set(&format!(
                "    - name: r
      match: {{resources: [pods]}}
      deny:
        - {{cel: \"{condition}\", message: m}}
"
            )))
        };
        let one = |condition: &str, wanted: &[&str]| {
            let found = warnings(condition);
            assert_eq!(found.len(), 1, "{condition}: {found:#?}");
            for part in wanted {
                assert!(found[0].contains(part), "{condition}: {}", found[0]);
            }
        };
        one(
            "has(object.spec.hostNetwrk) && object.spec.hostNetwrk",
            &[
                "deny[0].cel: `spec.hostNetwrk` is not a field of Pod (v1)",
                "spec.hostNetwork",
            ],
        );
        one(
            "object.spec.containers.exists(c, c.image == 1)",
            &[
                "1 is a number, and object.spec.containers[*].image is a string in Pod (v1)",
                "the comparison is never true",
                "write it as a string",
            ],
        );
        one(
            "object.spec.hostNetwork != 'true'",
            &[
                "is a boolean",
                "the `!=` is true wherever the field is set",
                "write true, unquoted",
            ],
        );
        one(
            "object.metadata.labels['tier'] in ['web', 2]",
            &[
                "2 is a number, and object.metadata.labels.tier is a string",
                "this entry of the `in` never matches",
            ],
        );
        one(
            "object.spec.securityContext.runAsUser in ['0']",
            &["the `in` is never true"],
        );
        // Lists and maps, of the object and of the request, equal no
        // scalar.
        one(
            "request.kind == 'Pod'",
            &[
                "\"Pod\" is a string, and request.kind is a map in every admission request",
                "compare one of its members",
            ],
        );
        one(
            "request.userInfo.groups == 'system:masters'",
            &["request.userInfo.groups is a list", "`value in list`"],
        );
        one(
            "request.dryRun == 'true'",
            &["request.dryRun is a boolean", "write true, unquoted"],
        );
        one(
            "object.metadata.labels == 'x'",
            &["object.metadata.labels is a map in Pod (v1)"],
        );
        for fine in [
            "'system:masters' in request.userInfo.groups",
            "request.kind.kind == 'Pod' && request.dryRun == true",
            "object.metadata.labels == {'app': 'web'}",
        ] {
            assert_eq!(warnings(fine), Vec::<String>::new(), "{fine}");
        }
        // One missing field read twice is said once.
        one(
            "has(object.metadata.lables) && object.metadata.lables['team'] == 'a'",
            &["`metadata.lables` is not a field"],
        );
        one(
            "request.operation == 'create'",
            &["request.operation is never \"create\"", "(write 'CREATE')"],
        );
        one(
            "object.kind == 'pod' || object.spec.containers.all(c, c.name != '')",
            &["object.kind is never \"pod\"", "(write 'Pod')"],
        );
        for fine in [
            "object.spec.hostNetwork == true",
            "has(object.spec.hostNetwork) && object.metadata.labels.app == 'web'",
            "object.spec.containers.all(c, c.securityContext.privileged != true)",
            "object.metadata.labels.exists(k, k == 'a')",
            "request.operation in ['CREATE', 'UPDATE'] && request.kind.kind == 'Pod'",
            "object.spec.containers.map(c, c.name).exists(n, n == 'x')",
            "'%s'.format([object.metadata.name]) == 'a'",
            "object.metadata.creationTimestamp == null",
            "request.userInfo.username == 'admin'",
            // has() is a boolean whatever the field holds.
            "has(object.spec.priority) == false",
            "has(object.spec.hostNetwork) != true",
            // A loop over a map runs over its keys, strings.
            "object.spec.overhead.all(k, k in ['cpu', 'memory'])",
            "object.metadata.annotations.exists(k, k == 'a')",
        ] {
            assert_eq!(warnings(fine), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn a_cel_expression_gives_a_bounded_number_of_warnings() {
        let fields: Vec<String> = (0..40)
            .map(|i| format!("object.spec.nosuch{i} == 'x'"))
            .collect();
        let found = problems(&crate::plan::test_rule_set(&format!(
            "    - name: r
      match: {{resources: [pods]}}
      deny:
        - {{cel: \"{}\", message: m}}
",
            fields.join(" || ")
        )));
        assert_eq!(found.len(), MAX_CEL_WARNINGS, "{found:#?}");
        assert!(found.iter().all(|w| w.contains("is not a field of Pod")));
    }

    #[test]
    fn a_union_whose_members_each_some_kind_has_is_no_mistake() {
        let rule = |resources: &str, path: &str| {
            problems(&crate::plan::test_rule_set(&format!(
                "    - name: r
      match: {{resources: [{resources}]}}
      deny:
        - {{path: \"{path}\", absent: true, message: m}}
"
            )))
        };
        let either = "$.object.spec['template','jobTemplate'].metadata.labels.team";
        assert_eq!(rule("deployments, cronjobs", either), Vec::<String>::new());
        // A member no kind has is still named.
        let found = rule(
            "deployments, cronjobs",
            "$.object.spec['templat','tmpl'].metadata",
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("is not a field of"), "{found:#?}");
    }

    #[test]
    fn a_condition_that_tests_nothing_is_reported_where_it_is_written() {
        let rule = |condition: &str| {
            crate::plan::test_rule_set(&format!(
                "    - name: r
      match: {{resources: [pods]}}
      when:
        - {condition}
      deny: [{{message: x}}]
"
            ))
        };
        for (condition, expected) in [
            (
                "{path: $.object.metadata.finalizers, containsAny: []}",
                "t.yaml:10:48: spec.rules[0].when[0].containsAny: containsAny with an empty list never holds",
            ),
            (
                "{path: $.object.metadata.name, notMatches: \"\"}",
                "t.yaml:10:42: spec.rules[0].when[0].notMatches: notMatches \"\" never holds",
            ),
            (
                "{path: $.object.metadata.name, notStartsWith: [a, \"\"]}",
                "t.yaml:10:61: spec.rules[0].when[0].notStartsWith[1]: notStartsWith \"\" never holds",
            ),
            (
                "{path: $.object.metadata.name, matches: \"\"}",
                "t.yaml:10:42: warning: spec.rules[0].when[0].matches: matches \"\" holds for every string",
            ),
            (
                "{path: $.object.metadata.name, startsWith: [\"\"]}",
                "t.yaml:10:55: warning: spec.rules[0].when[0].startsWith[0]: startsWith \"\" holds for every string",
            ),
        ] {
            let found = problems(&rule(condition));
            assert!(
                found.len() == 1 && found[0].starts_with(expected),
                "{condition}: {found:?}"
            );
        }
        // What tests something is not reported.
        for condition in [
            "{path: $.object.metadata.finalizers, containsAny: [a]}",
            "{path: $.object.metadata.finalizers, containsAny: {path: $.object.metadata.name}}",
            "{path: $.object.metadata.name, notMatches: x}",
            "{path: $.object.metadata.name, notStartsWith: [a]}",
        ] {
            assert_eq!(
                problems(&rule(condition)),
                Vec::<String>::new(),
                "{condition}"
            );
        }
    }

    #[test]
    fn a_for_each_with_nothing_inside_is_refused() {
        let found = diagnostics(
            "    - name: r
      match: {resources: [pods]}
      deny:
        - forEach: $.podSpec.containers[*]
          deny: []
",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(
                "t.yaml:11:11: spec.rules[0].deny[0].deny: forEach with an empty deny list checks nothing"
            ),
            "{found:?}"
        );
        let found = mutating(
            "        - forEach: $.podSpec.containers[*]
          mutate: []
",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("spec.rules[0].mutate[0].mutate: forEach with an empty mutate list"),
            "{found:?}"
        );
    }

    #[test]
    fn an_operand_map_with_a_key_like_path_is_a_warning() {
        // A field that can be a map, so that a literal map is no mistake.
        let rule = |operand: &str| {
            crate::plan::test_rule_set(&format!(
                "    - name: r
      match: {{resources: [pods]}}
      deny:
        - {{path: $.podSpec.nodeSelector, equals: {operand}, message: m}}
"
            ))
        };
        for typo in ["paht", "pth", "Path", "paths"] {
            let found = problems(&rule(&format!("{{{typo}: $.object.spec.hostNetwork}}")));
            assert_eq!(found.len(), 1, "{typo}: {found:?}");
            assert!(
                found[0].contains(&format!(
                    "warning: spec.rules[0].deny[0].equals.{typo}: `{{{typo}: ...}}` is compared \
                     as a literal map, not as the value at a path (did you mean `path`?)"
                )),
                "{typo}: {found:?}"
            );
        }
        for fine in [
            "{path: $.object.spec.hostNetwork}",
            "{name: web}",
            "{team: a, paht: b}",
        ] {
            assert_eq!(problems(&rule(fine)), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn rule_set_guards_are_checked_against_the_kinds_they_guard() {
        let set = |when: &str, resources: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {{name: t}}
spec:
  when:
    - {when}
  rules:
    - name: a
      match: {{resources: [pods]}}
      deny: [{{message: x}}]
    - name: b
      match: {{resources: [{resources}]}}
      deny: [{{message: x}}]
"
            )
        };
        let found = problems(&set(
            "{path: $.object.spec.hostnetwork, equals: true}",
            "pods",
        ));
        assert_eq!(
            found,
            [
                "t.yaml:6:8: warning: spec.when[0].path: `spec.hostnetwork` is not a field of \
              Pod (v1) (did you mean `spec.hostNetwork`?)"
            ]
        );
        // Right for one kind a guarded rule matches: fine.
        let found = problems(&set(
            "{path: $.object.spec.type, equals: NodePort}",
            "services",
        ));
        assert_eq!(found, Vec::<String>::new());
        // A guarded rule on a kind without known fields: not checked.
        let found = problems(&set(
            "{path: $.object.spec.hostnetwork, equals: true}",
            "\"*\"",
        ));
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn a_document_is_absent_when_every_matched_operation_lacks_it() {
        use Operation::{Connect, Create, Delete, Update};
        for (root, operations, absent) in [
            (Root::Object, &[Delete][..], true),
            (Root::Object, &[Create, Delete][..], false),
            (Root::Object, &[Connect][..], false),
            (Root::PodSpec, &[Delete, Connect][..], true),
            (Root::PodSpec, &[Update, Delete][..], false),
            (Root::OldObject, &[Create, Connect][..], true),
            (Root::OldObject, &[Delete][..], false),
            (Root::OldPodSpec, &[Create][..], true),
            (Root::OldPodSpec, &[Create, Update][..], false),
            (Root::Request, &[Delete][..], false),
            (Root::Element, &[Create][..], false),
            (Root::Object, &[][..], false),
        ] {
            assert_eq!(
                RootAbsence::on(root, operations).is_some(),
                absent,
                "{root:?} on {operations:?}"
            );
        }
    }

    #[test]
    fn the_hint_rewrites_the_document_a_path_starts_from() {
        for (text, from, to, expected) in [
            (
                "$.object.a",
                "$.object",
                "$.oldObject",
                Some("$.oldObject.a"),
            ),
            ("$.object", "$.object", "$.oldObject", Some("$.oldObject")),
            (
                "$$.podSpec.x[*]",
                "$.podSpec",
                "$.oldPodSpec",
                Some("$$.oldPodSpec.x[*]"),
            ),
            (
                "$.oldObject['a']",
                "$.oldObject",
                "$.object",
                Some("$.object['a']"),
            ),
            // Not written the plain way: no rewrite rather than a wrong one.
            ("$['object'].a", "$.object", "$.oldObject", None),
            ("$.objects.a", "$.object", "$.oldObject", None),
        ] {
            assert_eq!(replace_root(text, from, to).as_deref(), expected, "{text}");
        }
    }

    #[test]
    fn a_set_guard_is_checked_against_the_operations_of_every_rule_it_guards() {
        let set = |operations: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {{name: t}}
spec:
  when:
    - {{path: $.object.metadata.labels.team, exists: true}}
  rules:
    - name: a
      match: {{operations: [DELETE], resources: [pods]}}
      deny: [{{message: x}}]
    - name: b
      match: {{operations: [{operations}], resources: [pods]}}
      deny: [{{message: x}}]
"
            )
        };
        let found = problems(&set("DELETE"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .starts_with("t.yaml:6:8: warning: spec.when[0].path: $.object is null on DELETE"),
            "{found:?}"
        );
        // One guarded rule sees objects: fine.
        assert_eq!(problems(&set("CREATE")), Vec::<String>::new());
    }

    #[test]
    fn what_cel_reads_is_not_held_to_the_operations() {
        let found = problems(&crate::plan::test_rule_set(
            "    - name: r
      match: {operations: [DELETE], resources: [pods]}
      deny:
        - cel: \"object == null && oldObject.metadata.name != ''\"
          message: m
",
        ));
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn a_copy_that_can_hold_its_own_target_is_refused() {
        let growing = [
            // The object, a parent of the target, the target itself.
            "        - set: {path: $.object.metadata.annotations.copy, valueFrom: {path: $.object}}\n",
            "        - setIfAbsent: {path: $.object.metadata.annotations.copy, valueFrom: {path: $.object.metadata}}\n",
            "        - set: {path: $.object.metadata.annotations.copy, valueFrom: {path: $.object.metadata.annotations.copy}}\n",
            // Through the pod spec, whose place depends on the kind.
            "        - set: {path: $.object.spec.template.spec.x, valueFrom: {path: $.podSpec}}\n",
            "        - set: {path: $.podSpec.x, valueFrom: {path: $.object.spec}}\n",
            // Wildcards and unions that can meet the target.
            "        - set: {path: $.object.metadata.annotations.copy, valueFrom: {path: \"$.object.*\"}}\n",
            "        - set: {path: $.object.spec.a, valueFrom: {path: \"$.object['metadata','spec']\"}}\n",
            // Inside forEach, the element holds what is written under it.
            "        - forEach: \"$.podSpec.containers[*]\"\n          mutate:\n            - set: {path: $.env, valueFrom: {path: $}}\n",
            "        - forEach: \"$.podSpec.containers[*]\"\n          mutate:\n            - set: {path: $.env, valueFrom: {path: $$.object.spec}}\n",
        ];
        for mutation in growing {
            let found = mutating(mutation);
            assert!(
                found
                    .iter()
                    .any(|d| d.contains("can contain the written location")
                        && d.contains("valueFrom.path")
                        && d.contains("copy a field that is not at or above the written path")),
                "{mutation}: {found:?}"
            );
        }
    }

    #[test]
    fn a_copy_from_beside_its_target_compiles() {
        let fine = [
            "        - setIfAbsent: {path: $.object.metadata.annotations.copy, valueFrom: {path: $.object.metadata.labels.app}}\n",
            "        - set: {path: $.object.metadata.annotations.copy, valueFrom: {path: $.oldObject}}\n",
            "        - set: {path: $.object.metadata.annotations.copy, valueFrom: {path: $.request.userInfo.username}}\n",
            "        - forEach: \"$.podSpec.containers[*]\"\n          mutate:\n            - setIfAbsent: {path: $.resources.limits.cpu, valueFrom: {path: $.resources.requests.cpu}}\n",
        ];
        for mutation in fine {
            assert_eq!(mutating(mutation), Vec::<String>::new(), "{mutation}");
        }
    }

    #[test]
    fn a_binding_may_not_take_a_name_cel_or_kadmit_uses() {
        let rule = |name: &str| {
            format!(
                "    - name: r
      match: {{resources: [pods]}}
      deny:
        - forEach: \"$.object.spec.containers[*]\"
          as: {name}
          deny:
            - cel: \"has(element.name)\"
              message: x
"
            )
        };
        for taken in [
            "element",
            "object",
            "request",
            "params",
            "in",
            "kadmit_e1",
            "kadmit_v2",
        ] {
            let found = diagnostics(&rule(taken));
            assert!(
                found.len() == 1 && found[0].contains("is taken"),
                "{taken}: {found:?}"
            );
        }
        for fine in ["container", "elements", "kadmit", "objects"] {
            assert_eq!(diagnostics(&rule(fine)), Vec::<String>::new(), "{fine}");
        }
    }

    #[test]
    fn a_nested_binding_may_not_repeat_an_enclosing_name() {
        let rule = |inner: &str| {
            format!(
                "    - name: r
      match: {{resources: [pods]}}
      deny:
        - forEach: \"$.object.spec.containers[*]\"
          as: c
          deny:
            - forEach: \"$.env[*]\"
              as: {inner}
              deny:
                - cel: \"c.name == 'x'\"
                  message: x
"
            )
        };
        let found = diagnostics(&rule("c"));
        assert!(
            found.len() == 1
                && found[0].contains("deny[0].deny[0].as: binding name \"c\" is already bound by an enclosing forEach"),
            "{found:?}"
        );
        assert_eq!(diagnostics(&rule("variable")), Vec::<String>::new());
    }

    #[test]
    fn a_condition_on_an_empty_list_is_refused() {
        let rule = |condition: &str| {
            format!(
                "    - name: r
      match: {{resources: [pods]}}
      when: [{condition}]
      deny: [{{message: x}}]
"
            )
        };
        for (condition, key, holds) in [
            ("{path: $.object.kind, in: []}", "in", "never holds"),
            ("{path: $.object.kind, notIn: []}", "notIn", "always holds"),
            (
                "{path: $.object.kind, startsWith: []}",
                "startsWith",
                "never holds",
            ),
            (
                "{path: $.object.kind, notStartsWith: []}",
                "notStartsWith",
                "always holds",
            ),
            ("{any: []}", "any", "never holds"),
            ("{all: []}", "all", "always holds"),
            ("{not: {any: []}}", "any", "never holds"),
        ] {
            let found = diagnostics(&rule(condition));
            assert!(
                found.len() == 1
                    && found[0].contains(&format!(".{key}: {key} with an empty list {holds}")),
                "{condition}: {found:?}"
            );
        }
        assert_eq!(
            diagnostics(&rule("{path: $.object.kind, in: [Pod]}")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_path_with_two_descendant_segments_is_refused() {
        let found = diagnostics(
            "    - name: r
      match: {resources: [pods]}
      deny:
        - path: $.object..*..*
          exists: true
          message: x
",
        );
        assert!(
            found
                .iter()
                .any(|d| d.contains("more than one descendant segment")),
            "{found:?}"
        );
    }

    #[test]
    fn reports_every_problem_with_its_position() {
        let found = diagnostics(
            "    - name: a
      match: {resources: [pod]}
      deny:
        - path: $.object.metadata.name
          matches: '(['
          message: bad
        - path: object.spec
          exists: true
          message: x
    - name: b
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.request.name, value: x}
    - name: c
      match: {resources: [pods]}
",
        );
        assert_eq!(found.len(), 5, "{found:#?}");
        assert!(
            found[0].starts_with(
                "t.yaml:8:27: spec.rules[0].match.resources[0]: unknown resource \"pod\""
            ),
            "{}",
            found[0]
        );
        assert!(
            found[1]
                .starts_with("t.yaml:11:11: spec.rules[0].deny[0].matches: invalid regex \"([\""),
            "{}",
            found[1]
        );
        assert!(found[2].starts_with("t.yaml:13:11: spec.rules[0].deny[1].path: path \"object.spec\" does not start with $"), "{}", found[2]);
        assert!(found[3].starts_with("t.yaml:19:25: spec.rules[1].mutate[0].setIfAbsent.path: mutation writes outside the object"), "{}", found[3]);
        assert!(
            found[4].contains("spec.rules[2].name: rule \"c\" has neither deny nor mutate"),
            "{}",
            found[4]
        );
    }

    #[test]
    fn rejects_several_operators_and_missing_messages() {
        let found = diagnostics(
            "    - name: a
      match: {resources: [pods]}
      deny:
        - path: $.object.a
          equals: 1
          matches: x
          message: m
    - name: b
      match: {resources: [pods]}
      deny:
        - path: $.object.a
          exists: true
",
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0].contains("condition has several operators: equals, matches"),
            "{}",
            found[0]
        );
        assert!(
            found[1].contains("deny entry has no message"),
            "{}",
            found[1]
        );
    }

    #[test]
    fn rejects_duplicate_names_and_unbound_variables() {
        let text =
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: t\nspec:\n  rules:
    - name: a
      match: {resources: [pods]}
      deny:
        - forEach: $.podSpec.containers[*]
          deny:
            - path: $c.name
              exists: true
              message: m
    - name: a
      match: {resources: [pods]}
      deny: [{message: m}]
";
        let doubled = format!("{text}---\n{text}");
        let found: Vec<String> = match compile(&load_str("t.yaml", &doubled)) {
            Ok(_) => panic!("should fail"),
            Err(d) => d.iter().map(|d| d.to_string()).collect(),
        };
        assert!(
            found.iter().any(|d| d.contains("$c is not bound")),
            "{found:#?}"
        );
        assert!(
            found
                .iter()
                .any(|d| d.contains("duplicate rule name \"a\"")),
            "{found:#?}"
        );
        assert!(
            found
                .iter()
                .any(|d| d.contains("duplicate rule set name \"t\"")
                    && d.contains("also defined at t.yaml:4")),
            "{found:#?}"
        );
    }

    /// A rule set document named `name` including `include`, with `rules`
    /// rules denying every pod.
    fn set_text(name: &str, include: &[String], rules: usize) -> String {
        let rules: String = (0..rules)
            .map(|i| format!("    - {{name: r{i}-{name}, match: {{resources: [pods]}}, deny: [{{message: m}}]}}\n"))
            .collect();
        format!(
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\nspec:\n  include: [{}]\n  rules:\n{rules}",
            include.join(", ")
        )
    }

    fn directory(sets: &[String]) -> Vec<String> {
        match compile(&load_str("d.yaml", &sets.join("---\n"))) {
            Ok(_) => Vec::new(),
            Err(diagnostics) => diagnostics.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn includes_nest_at_most_eight_deep() {
        // s0 includes s1, ..., s(n-1) includes nothing.
        let chain = |n: usize| -> Vec<String> {
            (0..n)
                .map(|i| {
                    let include: Vec<String> = if i + 1 < n {
                        vec![format!("s{}", i + 1)]
                    } else {
                        Vec::new()
                    };
                    set_text(&format!("s{i}"), &include, 1)
                })
                .collect()
        };
        assert_eq!(
            directory(&chain(MAX_INCLUDE_DEPTH + 1)),
            Vec::<String>::new()
        );
        let found = directory(&chain(MAX_INCLUDE_DEPTH + 2));
        assert!(
            found
                .iter()
                .any(|d| d.contains("spec.include[0]: includes nest more than 8 deep: s0 -> s1")),
            "{found:#?}"
        );
    }

    /// A rule set of one denying rule, including `include`, guarded by a
    /// `when` when `guarded`.
    fn guarded_set(name: &str, include: &[&str], guarded: bool) -> String {
        let when = if guarded {
            format!("  when: [{{path: $.request.namespace, notEquals: not-{name}}}]\n")
        } else {
            String::new()
        };
        format!(
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\nspec:\n  include: [{}]\n{when}  rules:\n    - {{name: {name}-rule, match: {{resources: [pods]}}, deny: [{{message: {name}}}]}}\n",
            include.join(", ")
        )
    }

    /// What the plan of `sets` applies as rule set `top`: each included
    /// set's index with the guarded sets its include passes through.
    fn includes_of(sets: &[String], top: &str) -> (Vec<(String, Vec<String>)>, Vec<String>) {
        let loaded = load_str("d.yaml", &sets.join("---\n"));
        let index = loaded
            .rule_sets
            .iter()
            .position(|s| s.rule_set.metadata.name == top)
            .unwrap();
        let mut diagnostics = Diagnostics::default();
        let mut regexes = Regexes::default();
        let mut cx = SetCompiler {
            source: &loaded.rule_sets[index],
            diagnostics: &mut diagnostics,
            regexes: &mut regexes,
            fields: None,
            shapes: Vec::new(),
            operations: [true; 4],
        };
        let mut walk = IncludeWalk::new(&loaded);
        let name = |i: usize| loaded.rule_sets[i].rule_set.metadata.name.clone();
        let found = cx
            .includes(&loaded, index, &mut walk)
            .into_iter()
            .map(|included| {
                (
                    name(included.set),
                    included.through.into_iter().map(name).collect(),
                )
            })
            .collect();
        (found, diagnostics.iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn includes_carry_the_guards_of_the_sets_they_pass_through() {
        let owned = |pairs: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
            pairs
                .iter()
                .map(|(set, through)| {
                    (
                        set.to_string(),
                        through.iter().map(|s| s.to_string()).collect(),
                    )
                })
                .collect()
        };
        // top -> middle (guarded) -> base; an unguarded set in between
        // adds no guard.
        let chain = [
            guarded_set("top", &["middle"], false),
            guarded_set("middle", &["plain"], true),
            guarded_set("plain", &["base"], false),
            guarded_set("base", &[], true),
        ];
        let (found, problems) = includes_of(&chain, "top");
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(
            found,
            owned(&[
                ("base", &["middle"]),
                ("plain", &["middle"]),
                ("middle", &[])
            ])
        );

        // A diamond whose second path passes through fewer guards: the
        // rules apply wherever either path lets them, and so do the rules
        // of the sets below.
        let looser = [
            guarded_set("top", &["guarded", "base"], false),
            guarded_set("guarded", &["base"], true),
            guarded_set("base", &["below"], false),
            guarded_set("below", &[], false),
        ];
        let (found, problems) = includes_of(&looser, "top");
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(
            found,
            owned(&[("below", &[]), ("base", &[]), ("guarded", &[])])
        );

        // A second path through more guards changes nothing.
        let tighter = [
            guarded_set("top", &["base", "guarded"], false),
            guarded_set("guarded", &["base"], true),
            guarded_set("base", &[], false),
        ];
        let (found, problems) = includes_of(&tighter, "top");
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(found, owned(&[("base", &[]), ("guarded", &[])]));

        // Two paths through different guards: either choice would apply
        // the rules where the set they are written for would not.
        let crossed = [
            guarded_set("top", &["left", "right"], false),
            guarded_set("left", &["base"], true),
            guarded_set("right", &["base"], true),
            guarded_set("base", &[], false),
        ];
        let found = directory(&crossed);
        assert!(
            found.iter().any(|d| d.contains(
                "spec.include[1]: rule set \"base\" is included twice, once under the guards of left and once under the guards of right"
            )),
            "{found:#?}"
        );
    }

    #[test]
    fn included_rules_are_bounded_over_the_directory() {
        // Each include compiles the big set's rules again: 60 x 200 rules
        // would be 12,000 compiled copies.
        let mut sets = vec![set_text("big", &[], 200)];
        for i in 0..60 {
            sets.push(set_text(&format!("user{i}"), &["big".to_owned()], 1));
        }
        let found = directory(&sets);
        assert!(
            found.iter().any(|d| d.contains(&format!(
                "more than {MAX_INCLUDED_RULES} included rules in the rules directory"
            ))),
            "{found:#?}"
        );
        // Fewer users stay under the bound and compile.
        sets.truncate(40);
        assert_eq!(directory(&sets), Vec::<String>::new());
    }

    #[test]
    fn resolving_includes_is_bounded_over_the_directory() {
        // 300 sets include a hub that includes 400 empty sets: no rule is
        // included, but each user walks the hub's 400 entries again.
        let empty = |name: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\nspec:\n  rules: []\n"
            )
        };
        let leaves: Vec<String> = (0..400).map(|i| format!("e{i}")).collect();
        let mut sets: Vec<String> = leaves.iter().map(|name| empty(name)).collect();
        sets.push(set_text("hub", &leaves, 1));
        for i in 0..300 {
            sets.push(set_text(&format!("u{i}"), &["hub".to_owned()], 1));
        }
        let found = directory(&sets);
        assert!(
            found.iter().any(|d| d.contains(&format!(
                "the includes of the rules directory take more than {MAX_INCLUDE_VISITS} steps"
            ))),
            "{:#?}",
            &found[..found.len().min(5)]
        );
        // Fewer users stay under the bound and compile.
        sets.truncate(400 + 1 + 200);
        assert_eq!(directory(&sets), Vec::<String>::new());
    }

    #[test]
    fn an_unknown_include_lists_a_bounded_number_of_names() {
        let mut sets: Vec<String> = (0..100)
            .map(|i| set_text(&format!("s{i:03}"), &[], 1))
            .collect();
        sets.push(set_text("user", &["nowhere".to_owned()], 1));
        let found = directory(&sets);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("included rule set \"nowhere\" is not in the rules directory"),
            "{}",
            found[0]
        );
        assert!(
            found[0].contains("rule sets here: s000, s001,"),
            "{}",
            found[0]
        );
        assert!(found[0].contains("s019 and 81 more"), "{}", found[0]);
    }

    #[test]
    fn the_rules_of_a_guard_group_share_one_copy_of_their_guards() {
        // A long literal in the set's `when` would otherwise be copied into
        // each of its rules: 6,500 rules under a 500 KB list took gigabytes.
        let long = "k".repeat(100_000);
        let guarded = |name: &str, include: &str| {
            let rules: String = (0..50)
                .map(|i| format!("    - {{name: r{i}-{name}, match: {{resources: [pods]}}, deny: [{{message: m}}]}}\n"))
                .collect();
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {name}}}\nspec:\n  include: [{include}]\n  when: [{{path: $.object.kind, in: [{long}]}}]\n  rules:\n{rules}"
            )
        };
        let text = [guarded("base", ""), guarded("top", "base")].join("---\n");
        let plan = compile(&load_str("d.yaml", &text)).expect("compiles");
        let rules = plan.rules();
        assert_eq!(rules.len(), 150);
        for rule in rules {
            let first = rules
                .iter()
                .find(|other| other.guard_group == rule.guard_group)
                .expect("its own group");
            assert!(rule.when.shares_guards_with(&first.when), "{}", rule.name);
            assert!(!rule.when.guards().is_empty());
        }
        let groups: std::collections::BTreeSet<usize> =
            rules.iter().map(|rule| rule.guard_group).collect();
        assert_eq!(groups.len(), 3, "base, top, and base's rules in top");
        let (a, b) = (&rules[0], &rules[rules.len() - 1]);
        assert!(a.guard_group != b.guard_group && !a.when.shares_guards_with(&b.when));
    }

    #[test]
    fn regexes_are_bounded_each_and_together() {
        let rule = |patterns: &[String]| {
            let entries: String = patterns
                .iter()
                .map(|p| format!("        - {{path: $.object.kind, matches: '{p}', message: m}}\n"))
                .collect();
            format!("    - name: r\n      match: {{resources: [pods]}}\n      deny:\n{entries}")
        };
        // Ten bytes of pattern, about 6 MB compiled.
        let found = diagnostics(&rule(&[r"\w{100}".to_owned()]));
        assert!(
            found.len() == 1
                && found[0].contains(r#"pattern "\\w{100}" compiles to more than 256 KiB"#),
            "{found:?}"
        );
        // Each of these is charged 256 KiB and as much for its match
        // cache: 64 fit in 32 MiB.
        let large: Vec<String> = (0..140).map(|i| format!(r"\w{{5}}x{i}")).collect();
        let found = diagnostics(&rule(&large));
        assert!(
            !found.is_empty()
                && found.iter().all(|d| d
                    .contains("the regexes of the rules directory take more than 32 MiB compiled")),
            "{found:?}"
        );
        assert!(found.len() <= 140 - 60, "{}", found.len());
        // Patterns that fail at the largest size are charged it: past 64
        // of them the rest are refused without compiling.
        let failing: Vec<String> = (0..140).map(|i| format!("a{{20000}}x{i}")).collect();
        let found = diagnostics(&rule(&failing));
        let each = found
            .iter()
            .filter(|d| d.contains("compiles to more than 256 KiB"))
            .count();
        let together = found
            .iter()
            .filter(|d| d.contains("the regexes of the rules directory take more than 32 MiB"))
            .count();
        assert_eq!((each, together), (64, 76), "{found:?}");
        // A glob is a regex too: 4,000 `?` would compile to megabytes.
        let found = diagnostics(&format!(
            "    - name: r\n      match: {{resources: [pods], namespaces: ['a{}']}}\n      deny: [{{message: m}}]\n",
            "?".repeat(4_000)
        ));
        assert!(
            found.len() == 1
                && found[0].contains(".match.namespaces[0]: pattern \"a???")
                && found[0].contains("compiles to more than 256 KiB"),
            "{found:?}"
        );
        // A pattern is compiled only up to 4 KiB of text: the regex crate
        // takes time in its length before its size bound applies.
        let long = format!("^{}$", "a?".repeat(2_100));
        let found = diagnostics(&rule(&[long]));
        assert!(
            found.len() == 1 && found[0].contains("is 4202 bytes, more than 4096"),
            "{found:?}"
        );
        let found = diagnostics(&format!(
            "    - name: r\n      match: {{resources: [pods], namespaces: ['a{}']}}\n      deny: [{{message: m}}]\n",
            "?".repeat(30_000)
        ));
        assert!(
            found.len() == 1 && found[0].contains("more than 4096"),
            "{found:?}"
        );
        // Small patterns are charged little: a thousand fit.
        let small: Vec<String> = (0..1_000).map(|i| format!("^team-{i}-[a-z]+$")).collect();
        assert_eq!(diagnostics(&rule(&small)), Vec::<String>::new());
    }

    #[test]
    fn cel_literal_patterns_compile_with_the_rules() {
        let rule = |cel: &str| {
            diagnostics(&format!(
                "    - name: r\n      match: {{resources: [pods]}}\n      deny:\n        - {{cel: {cel:?}, message: m}}\n"
            ))
        };
        // A literal pattern that can never compile fails the rule file,
        // instead of every review the rule matches.
        let found = rule(r"object.metadata.name.matches('\\w{100}')");
        assert!(
            found.len() == 1
                && found[0].contains(r#"pattern "\\w{100}" compiles to more than 256 KiB"#),
            "{found:?}"
        );
        let found = rule("matches(object.metadata.name, '(unclosed')");
        assert!(
            found.len() == 1 && found[0].contains("deny[0].cel") && found[0].contains("(unclosed"),
            "{found:?}"
        );
        // Usable literals, and patterns read from the object, compile.
        assert_eq!(
            rule("object.metadata.name.matches('^web-[0-9]+$')"),
            Vec::<String>::new()
        );
        assert_eq!(
            rule("object.metadata.name.matches(object.metadata.labels.pattern)"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_diamond_includes_each_set_once() {
        let sets = [
            set_text("top", &["left".to_owned(), "right".to_owned()], 1),
            set_text("left", &["root".to_owned()], 1),
            set_text("right", &["root".to_owned()], 1),
            set_text("root", &[], 1),
        ];
        let plan = compile(&load_str("d.yaml", &sets.join("---\n"))).unwrap();
        let top: Vec<&str> = plan
            .rules()
            .iter()
            .filter(|rule| &*rule.rule_set_name == "top")
            .map(|rule| &*rule.name)
            .collect();
        assert_eq!(top, ["r0-root", "r0-left", "r0-right", "r0-top"]);
    }

    #[test]
    fn match_conditions_are_bounded_as_the_api_server_bounds_them() {
        let set = |count: usize| {
            let conditions: String = (0..count)
                .map(|i| format!("    - {{name: c{i}, expression: \"true\"}}\n"))
                .collect();
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  \
                 matchConditions:\n{conditions}  rules:\n    - name: r\n      match: {{resources: [pods]}}\n      \
                 deny: [{{message: m}}]\n"
            )
        };
        let at_bound = compile(&load_str("t.yaml", &set(MAX_MATCH_CONDITIONS)));
        assert!(at_bound.is_ok(), "{:?}", at_bound.err());
        let over = compile(&load_str("t.yaml", &set(MAX_MATCH_CONDITIONS + 1)))
            .expect_err("over the bound")
            .to_string();
        assert!(
            over.contains("65 match conditions, over the API server's limit of 64"),
            "{over}"
        );
    }

    #[test]
    fn match_condition_patterns_the_api_server_reads_otherwise_are_warned_about() {
        let set = |pattern: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  \
                 matchConditions:\n    - {{name: c, expression: \"request.namespace.matches('{pattern}')\"}}\n  \
                 rules:\n    - name: r\n      match: {{resources: [pods]}}\n      deny: [{{message: m}}]\n"
            )
        };
        let plan = compile(&load_str("t.yaml", &set(r"\\\\<prod"))).expect("a warning only");
        let warnings = plan.warnings().to_string();
        assert!(
            warnings.contains("spec.matchConditions[0].expression: pattern")
                && warnings.contains("reads otherwise"),
            "{warnings}"
        );
        let plan = compile(&load_str("t.yaml", &set("^prod-"))).expect("compiles");
        assert!(plan.warnings().is_empty(), "{}", plan.warnings());
    }

    #[test]
    fn resources_never_sent_with_the_rules_operations_are_warned_about() {
        let warnings = |resources: &str, operations: &str| {
            let rule = format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  rules:\n    - name: r\n      match: {{resources: {resources}{operations}}}\n      deny: [{{message: m}}]\n"
            );
            compile(&load_str("t.yaml", &rule))
                .expect("warnings only")
                .warnings()
                .to_string()
        };
        for (resources, operations, found) in [
            (
                "[pods/exec]",
                "",
                "pods/exec is sent to admission webhooks on CONNECT only, and the rule matches CREATE, UPDATE",
            ),
            (
                "[pods/log]",
                ", operations: ['*']",
                "pods/log is never sent",
            ),
            (
                "[pods/eviction]",
                ", operations: [UPDATE]",
                "on CREATE only",
            ),
            (
                "[deployments/scale]",
                ", operations: [CREATE]",
                "on UPDATE only",
            ),
            ("['*/status']", ", operations: [CREATE]", "*/status is sent"),
            (
                "[pods]",
                ", operations: [CONNECT]",
                "pods is sent to admission webhooks on CREATE, UPDATE, DELETE only",
            ),
            (
                "['*']",
                ", operations: [CONNECT]",
                "* is sent to admission webhooks on CREATE, UPDATE, DELETE only",
            ),
        ] {
            let found_warnings = warnings(resources, operations);
            assert!(
                found_warnings.contains(found),
                "{resources}: {found_warnings}"
            );
            assert!(found_warnings.contains("t.yaml:"), "{found_warnings}");
        }
        for (resources, operations) in [
            ("[pods/exec, pods]", ", operations: [CREATE, CONNECT]"),
            ("[deployments/scale, pods/ephemeralcontainers]", ""),
            ("['pods/*']", ", operations: [CREATE]"),
        ] {
            let found_warnings = warnings(resources, operations);
            assert!(found_warnings.is_empty(), "{resources}: {found_warnings}");
        }
    }

    #[test]
    fn a_rule_naming_kube_system_is_warned_that_it_is_never_sent_there() {
        let warnings = |matched: &str| {
            let rule = format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  rules:\n    - name: r\n      match: {{resources: [pods]{matched}}}\n      deny: [{{message: m}}]\n"
            );
            compile(&load_str("t.yaml", &rule))
                .expect("warnings only")
                .warnings()
                .to_string()
        };
        for matched in [
            ", namespaces: [kube-system]",
            ", namespaces: [team-a, 'kube-*']",
        ] {
            let found = warnings(matched);
            assert!(
                found.contains("match.namespaces: the rule matches namespace kube-system"),
                "{matched}: {found}"
            );
        }
        for matched in [
            "",
            ", namespaces: [team-a]",
            ", namespaces: ['kube-*'], excludeNamespaces: [kube-system]",
        ] {
            let found = warnings(matched);
            assert!(found.is_empty(), "{matched}: {found}");
        }
    }

    #[test]
    fn selectors_the_api_server_refuses_are_errors() {
        let set = |namespace_selector: &str, object_selector: &str| {
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  \
                 namespaceSelector: {namespace_selector}\n  \
                 rules:\n    - name: r\n      match: {{resources: [pods], objectSelector: {object_selector}}}\n      deny: [{{message: m}}]\n"
            )
        };
        for (namespace_selector, object_selector, found) in [
            (
                "{matchLabels: {'env type': prod}}",
                "{}",
                "spec.namespaceSelector.matchLabels: label key \"env type\" is no qualified name",
            ),
            (
                "{matchExpressions: [{key: '-bad/key', operator: Exists}]}",
                "{}",
                "spec.namespaceSelector.matchExpressions[0].key: label key \"-bad/key\" has a prefix",
            ),
            (
                "{matchExpressions: [{key: tier, operator: In}]}",
                "{}",
                "In needs values",
            ),
            (
                "{}",
                "{matchLabels: {team: '$$$'}}",
                "spec.rules[0].match.objectSelector.matchLabels: \"$$$\", the value of \"team\", is no label value",
            ),
            (
                "{}",
                "{matchExpressions: [{key: a.example/b, operator: NotIn, values: [ok, 'not ok']}]}",
                "\"not ok\" is no label value",
            ),
        ] {
            let error = match compile(&load_str(
                "t.yaml",
                &set(namespace_selector, object_selector),
            )) {
                Ok(_) => panic!("{namespace_selector} {object_selector} compiled"),
                Err(diagnostics) => diagnostics.to_string(),
            };
            assert!(error.contains(found), "{error}");
            assert!(
                error.contains("whole webhook configuration") || found.contains("needs values"),
                "{error}"
            );
        }
        let plan = compile(&load_str(
            "t.yaml",
            &set(
                "{matchLabels: {kubernetes.io/metadata.name: team-a, empty: ''}}",
                "{matchExpressions: [{key: app.kubernetes.io/name, operator: In, values: [web, Web_1.x]}]}",
            ),
        ))
        .expect("valid selectors");
        assert!(plan.warnings().is_empty(), "{}", plan.warnings());
    }

    #[test]
    fn compiles_a_valid_rule_set() {
        let found = diagnostics(
            "    - name: a
      match:
        operations: ['*']
        resources: [pods, deployments.apps, {apiGroups: [''], apiVersions: [v1], resources: ['*/status']}]
        excludeNamespaces: [kube-*]
        objectSelector: {matchExpressions: [{key: app, operator: Exists}]}
      when: [{any: [{path: $.request.dryRun, equals: true}, {not: {path: $.object.x, absent: true}}]}]
      deny:
        - forEach: $.podSpec.containers[*]
          as: c
          deny:
            - forEach: $c.ports[*]
              deny:
                - path: $.hostPort
                  greaterThan: 0
                  message: '{{ $c.name }} uses host port {{ $.hostPort }} in {{ $$.object.metadata.name }}'
      mutate:
        - mergeIfAbsent: {path: '$.podSpec.containers[*].resources.limits', value: {cpu: 500m}}
        - forEach: $.podSpec.containers[*]
          mutate:
            - setIfAbsent: {path: $.resources.limits.memory, valueFrom: {path: $.resources.requests.memory}}
        - injectIfMissing: {path: $.podSpec.tolerations, key: [key, effect], value: {key: k, effect: NoSchedule}}
",
        );
        assert!(found.is_empty(), "{found:#?}");
    }
}
