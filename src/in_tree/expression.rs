//! Compiled conditions and deny checks written as CEL text, with kadmit's
//! semantics spelled out: a test on a path holds when any value the path
//! selects satisfies it (and is false when it selects nothing), a missing
//! key or a value of another type selects nothing, equality is typed.
//!
//! Every step of a path is guarded (`type(x) == map && 'k' in x`), so the
//! expressions never fail on objects of an unexpected shape, as kadmit's
//! paths never do. Quantity comparisons use Kubernetes' quantity library.
//! What has no such translation (image parts, paths with filters or
//! descendant segments, comparisons with composite literals) is an
//! [`Untranslatable`] with the reason.

use serde_json::Value;

use crate::cel::Variable;
use crate::plan::{
    CelCheck, Comparison, DenyCheck, JsonPath, ListOperand, Operand, PathScope, Predicate,
    QuantityOperand, Root, Step, Test,
};

/// Why a construct has no CEL translation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Untranslatable(pub String);

type Result<T> = std::result::Result<T, Untranslatable>;

pub(super) fn untranslatable<T>(reason: impl Into<String>) -> Result<T> {
    Err(Untranslatable(reason.into()))
}

/// The most steps a path may have to be translated. Each step nests the
/// CEL once more (and a union doubles it), so deeper paths make policies
/// past what the API server compiles long before they are of use.
pub(super) const MAX_PATH_STEPS: usize = 64;

/// The steps of `path`, when it is a plain chain of at most
/// [`MAX_PATH_STEPS`] names, indices, wildcards and unions.
pub(super) fn steps_of(path: &JsonPath) -> Result<&[Step]> {
    let Some(steps) = path.simple_steps() else {
        return untranslatable(format!(
            "path {} needs JSONPath filters, slices or descendants",
            path.text()
        ));
    };
    if steps.len() > MAX_PATH_STEPS {
        return untranslatable(format!(
            "path {} has {} steps, over the {MAX_PATH_STEPS} translated",
            crate::excerpt::cut(path.text(), 80),
            steps.len()
        ));
    }
    Ok(steps)
}

/// `expression`, unless it is longer than a policy's expression may be
/// ([`GENERATED_BOUNDS`](super::GENERATED_BOUNDS)): checked as it grows, so
/// that no translation builds more than that first.
pub(super) fn sized(expression: String) -> Result<String> {
    let limit = super::GENERATED_BOUNDS.source_bytes;
    if expression.len() > limit {
        return untranslatable(format!(
            "its CEL would be {} bytes, over the {limit} written at most",
            expression.len()
        ));
    }
    Ok(expression)
}

/// Whether what [`Translator::predicate`] writes for `predicate` may be of
/// type `dyn` (a `cel:` condition reading `object`, alone or the one
/// member of an `any` or `all`, which is written as itself); every other
/// form is `bool`.
fn may_be_dyn(predicate: &Predicate) -> bool {
    match predicate {
        Predicate::Cel(_) => true,
        Predicate::Any(list) | Predicate::All(list) => match list.as_slice() {
            [one] => may_be_dyn(one),
            _ => false,
        },
        Predicate::Not(_) | Predicate::Test { .. } => false,
    }
}

/// A type of the API server's `request` variable in CEL: an object type
/// (`kubernetes.AdmissionRequest` and the types of its fields), whose
/// fields are selected, never indexed or tested with `in` as a map's keys
/// are (the API server refuses a policy that does), or a value past which
/// the steps are a map's or a list's.
enum RequestType {
    Object(&'static [(&'static str, RequestType)]),
    Value,
}

const GROUP_VERSION_KIND: RequestType = RequestType::Object(&[
    ("group", RequestType::Value),
    ("version", RequestType::Value),
    ("kind", RequestType::Value),
]);
const GROUP_VERSION_RESOURCE: RequestType = RequestType::Object(&[
    ("group", RequestType::Value),
    ("version", RequestType::Value),
    ("resource", RequestType::Value),
]);

/// The fields the API server declares for `request` in admission policies'
/// CEL: not the review's `uid`, `object` or `oldObject`.
const ADMISSION_REQUEST: RequestType = RequestType::Object(&[
    ("kind", GROUP_VERSION_KIND),
    ("resource", GROUP_VERSION_RESOURCE),
    ("subResource", RequestType::Value),
    ("requestKind", GROUP_VERSION_KIND),
    ("requestResource", GROUP_VERSION_RESOURCE),
    ("requestSubResource", RequestType::Value),
    ("name", RequestType::Value),
    ("namespace", RequestType::Value),
    ("operation", RequestType::Value),
    (
        "userInfo",
        RequestType::Object(&[
            ("username", RequestType::Value),
            ("uid", RequestType::Value),
            ("groups", RequestType::Value),
            ("extra", RequestType::Value),
        ]),
    ),
    ("dryRun", RequestType::Value),
    ("options", RequestType::Value),
]);

/// Refuses what a CEL expression selects of `request` (the `steps` after
/// `$.request`) past the fields the API server declares: its policy would
/// not compile there.
fn undeclared_request_field(steps: &[Step]) -> Result<()> {
    let mut here = "request".to_owned();
    let mut current = &ADMISSION_REQUEST;
    for step in steps {
        let (RequestType::Object(members), Step::Key(name)) = (current, step) else {
            break;
        };
        let Some((_, next)) = members.iter().find(|(member, _)| *member == &**name) else {
            return untranslatable(format!(
                "its CEL selects {here}.{name}, a field the API server does not declare for {here}"
            ));
        };
        here = format!("{here}.{name}");
        current = next;
    }
    Ok(())
}

/// What a path from `$.request` selects through the request's object
/// types, as a CEL list of `dyn` values (empty when a field is absent),
/// and the steps after it, which work on maps and lists as every other
/// path's do.
fn request_fields(steps: &[Step]) -> Result<(String, &[Step])> {
    let mut here = "request".to_owned();
    let mut guards = Vec::new();
    let mut taken = 0;
    let mut current = &ADMISSION_REQUEST;
    while let RequestType::Object(members) = current {
        let Some(Step::Key(key)) = steps.get(taken) else {
            return untranslatable(format!(
                "{here} is an object in the API server's CEL, which a path can only name fields of"
            ));
        };
        let Some((name, next)) = members.iter().find(|(name, _)| **name == **key) else {
            return untranslatable(format!(
                "{here} has no field {key:?} in the API server's CEL"
            ));
        };
        here = format!("{here}.{name}");
        guards.push(format!("has({here})"));
        taken += 1;
        current = next;
    }
    let list = format!("({} ? [dyn({here})] : [])", guards.join(" && "));
    Ok((list, &steps[taken..]))
}

/// Where the pod spec is for each kind (as `plan::pod_spec_location`).
const POD_SPEC_LOCATIONS: [(&[&str], &[&str]); 4] = [
    (&["Pod"], &["spec"]),
    (
        &[
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "ReplicationController",
            "Job",
        ],
        &["spec", "template", "spec"],
    ),
    (
        &["CronJob"],
        &["spec", "jobTemplate", "spec", "template", "spec"],
    ),
    (&["PodTemplate"], &["template", "spec"]),
];

/// What `at(location)` gives for the pod spec's location of the request's
/// kind (`[]` for other kinds), as one CEL expression: the pod spec is
/// where the request's kind keeps it.
pub(super) fn by_kind(mut at: impl FnMut(&[&str]) -> Result<String>) -> Result<String> {
    let mut list = "[]".to_owned();
    for (kinds, location) in POD_SPEC_LOCATIONS.iter().rev() {
        let here = at(location)?;
        let kinds: Vec<String> = kinds.iter().map(|k| string(k)).collect();
        list = format!(
            "(request.kind.kind in [{}] ? {here} : {list})",
            kinds.join(", ")
        );
    }
    Ok(list)
}

/// Translation state: fresh variable names, and the CEL names of the
/// enclosing `forEach` elements (outermost first).
#[derive(Default)]
pub struct Translator {
    next: usize,
    elements: Vec<String>,
}

impl Translator {
    pub(super) fn fresh(&mut self) -> String {
        self.next += 1;
        format!("kadmit_v{}", self.next)
    }

    /// Binds `$` (and `element`) to the CEL value `element` until
    /// [`Translator::leave_element`], as inside a `forEach`.
    pub(super) fn enter_element(&mut self, element: String) {
        self.elements.push(element);
    }

    /// Undoes the last [`Translator::enter_element`].
    pub(super) fn leave_element(&mut self) {
        self.elements.pop();
    }

    /// A condition: true when it holds.
    pub fn predicate(&mut self, predicate: &Predicate) -> Result<String> {
        match predicate {
            Predicate::Any(list) => self.join(list, " || ", "false"),
            Predicate::All(list) => self.join(list, " && ", "true"),
            Predicate::Not(inner) => Ok(format!("!({})", self.predicate(inner)?)),
            Predicate::Cel(check) => self.cel(check),
            Predicate::Test { path, image, test } => {
                if image.is_some() {
                    return untranslatable(
                        "image reference parts are parsed as a container runtime parses \
                         them, which CEL cannot",
                    );
                }
                self.test(path, test)
            }
        }
    }

    /// `predicate` as an expression of its own, such as a match
    /// condition, whose type the API server requires to be `bool`: a CEL
    /// condition that reads `object` is `dyn` there, and goes through a
    /// one-element `all`, which is `bool`, true when it is and an error
    /// (as in kadmit) when it is not a boolean.
    pub fn condition(&mut self, predicate: &Predicate) -> Result<String> {
        let expression = self.predicate(predicate)?;
        Ok(if may_be_dyn(predicate) {
            let v = self.fresh();
            format!("[{expression}].all({v}, {v})")
        } else {
            expression
        })
    }

    fn join(&mut self, list: &[Predicate], operator: &str, empty: &str) -> Result<String> {
        if list.is_empty() {
            return Ok(empty.to_owned());
        }
        let parts: Result<Vec<String>> = list.iter().map(|p| self.predicate(p)).collect();
        Ok(format!("({})", parts?.join(operator)))
    }

    /// A CEL condition as written, with `element` and the names bound by
    /// `as` bound to the enclosing elements.
    fn cel(&mut self, check: &CelCheck) -> Result<String> {
        // Its patterns run on Go's RE2 there: each must read alike.
        for pattern in check.expression.literal_patterns() {
            re2_pattern(pattern)?;
        }
        // `request` there has the fields the API server declares only.
        for selection in check.expression.selections() {
            if selection.path.starts_with("$.request")
                && let Ok(path) = JsonPath::compile(&selection.path, PathScope::DOCUMENT)
            {
                undeclared_request_field(&path.leading_steps().0)?;
            }
        }
        // On lines of its own: a `//` comment in it ends with its line.
        let mut text = format!("(\n{}\n)", check.expression.source());
        let names: Vec<(String, Variable)> = check
            .expression
            .names()
            .map(|(name, variable)| (name.to_owned(), variable))
            .collect();
        for (name, variable) in names {
            let element = match variable {
                Variable::Element => self.elements.last(),
                Variable::Binding(depth) => self.elements.get(depth),
                _ => continue,
            };
            let Some(element) = element else {
                return untranslatable(format!("`{name}` names no enclosing element"));
            };
            text = format!("[{element}].exists({name}, {text})");
        }
        Ok(text)
    }

    fn root(&self, root: Root) -> Result<String> {
        Ok(match root {
            Root::Object => "object".to_owned(),
            Root::OldObject => "oldObject".to_owned(),
            Root::Request => return untranslatable("`$.request` is read through its fields"),
            Root::Element => match self.elements.last() {
                Some(element) => element.clone(),
                None => return untranslatable("`$` outside forEach"),
            },
            Root::Binding(depth) => match self.elements.get(depth) {
                Some(element) => element.clone(),
                None => return untranslatable("a bound name outside its forEach"),
            },
            Root::PodSpec | Root::OldPodSpec => {
                return untranslatable("the pod spec is reached through its kind");
            }
        })
    }

    /// The values `path` selects up to its first wildcard, as a CEL list,
    /// and the steps after it.
    fn start<'p>(&mut self, path: &'p JsonPath) -> Result<(String, &'p [Step])> {
        let steps = steps_of(path)?;
        let document = match path.root() {
            Root::PodSpec => "object",
            Root::OldPodSpec => "oldObject",
            Root::Request => return request_fields(steps),
            root => return Ok((format!("[{}]", self.root(root)?), steps)),
        };
        let list = by_kind(|location| {
            let mut here = format!("[{document}]");
            for key in location {
                here = self.step(&here, &Step::Key((*key).into()))?;
            }
            Ok(here)
        })?;
        Ok((list, steps))
    }

    /// The list of values one non-wildcard step selects from the list `x`.
    fn step(&mut self, x: &str, step: &Step) -> Result<String> {
        let v = self.fresh();
        sized(match step {
            Step::Key(key) => {
                let key = string(key);
                format!("{x}.filter({v}, type({v}) == map && {key} in {v}).map({v}, {v}[{key}])")
            }
            Step::Index(index) if *index >= 0 => format!(
                "{x}.filter({v}, type({v}) == list && size({v}) > {index}).map({v}, {v}[{index}])"
            ),
            Step::Index(index) => {
                let back = index.unsigned_abs();
                format!(
                    "{x}.filter({v}, type({v}) == list && size({v}) >= {back})\
                     .map({v}, {v}[size({v}) - {back}])"
                )
            }
            Step::Union(alternatives) => {
                let parts: Result<Vec<String>> =
                    alternatives.iter().map(|a| self.step(x, a)).collect();
                format!("({})", parts?.join(" + "))
            }
            Step::Wildcard => return untranslatable("a wildcard inside a union"),
        })
    }

    /// True when some value `path` selects satisfies `leaf`.
    fn any(
        &mut self,
        path: &JsonPath,
        leaf: &mut dyn FnMut(&mut Self, &str) -> Result<String>,
    ) -> Result<String> {
        let (list, steps) = self.start(path)?;
        self.any_from(list, steps, leaf)
    }

    /// True when some value the `steps` select from the values in `list`
    /// satisfies `leaf`; each wildcard iterates once, so `leaf` is written
    /// once.
    fn any_from(
        &mut self,
        mut list: String,
        steps: &[Step],
        leaf: &mut dyn FnMut(&mut Self, &str) -> Result<String>,
    ) -> Result<String> {
        for (i, step) in steps.iter().enumerate() {
            if *step == Step::Wildcard {
                let v = self.fresh();
                let k = self.fresh();
                let elements = format!(
                    "(type({v}) == list ? {v} : (type({v}) == map ? {v}.map({k}, {v}[{k}]) : []))"
                );
                let rest = self.any_from(elements, &steps[i + 1..], leaf)?;
                return Ok(format!("{list}.exists({v}, {rest})"));
            }
            list = self.step(&list, step)?;
        }
        let v = self.fresh();
        let test = leaf(self, &v)?;
        Ok(format!("{list}.exists({v}, {test})"))
    }

    /// The values a singular operand path selects (none or one), as a
    /// CEL list.
    pub(super) fn operand(&mut self, path: &JsonPath) -> Result<String> {
        let (mut list, steps) = self.start(path)?;
        for step in steps {
            if !matches!(step, Step::Key(_) | Step::Index(_)) {
                return untranslatable(format!(
                    "operand path {} is not a plain chain of names and indices",
                    path.text()
                ));
            }
            list = self.step(&list, step)?;
        }
        Ok(list)
    }

    fn test(&mut self, path: &JsonPath, test: &Test) -> Result<String> {
        let yes = |_: &mut Self, _: &str| Ok("true".to_owned());
        match test {
            Test::Exists => self.any(path, &mut { yes }),
            Test::Absent => Ok(format!("!{}", self.any(path, &mut { yes })?)),
            Test::Equals(Operand::Value(literal)) => {
                let literal = literal.clone();
                self.any(path, &mut |_, v| equal(v, &literal))
            }
            Test::NotEquals(Operand::Value(literal)) => {
                let literal = literal.clone();
                self.any(path, &mut |_, v| Ok(format!("!{}", equal(v, &literal)?)))
            }
            Test::Equals(Operand::Path(other)) => {
                let operand = self.operand(other)?;
                let o = self.fresh();
                let found = self.any(path, &mut |_, v| Ok(same(v, &format!("{o}[0]"))))?;
                Ok(format!("[{operand}].exists({o}, size({o}) > 0 && {found})"))
            }
            Test::NotEquals(Operand::Path(other)) => {
                // Any value differs from one that is not there.
                let operand = self.operand(other)?;
                let o = self.fresh();
                let found = self.any(path, &mut |_, v| {
                    Ok(format!(
                        "(size({o}) == 0 || !{})",
                        same(v, &format!("{o}[0]"))
                    ))
                })?;
                Ok(format!("[{operand}].exists({o}, {found})"))
            }
            Test::In(list) => {
                let list = list.values().to_vec();
                self.any(path, &mut |_, v| one_of(v, &list))
            }
            Test::NotIn(list) => {
                let list = list.values().to_vec();
                self.any(path, &mut |_, v| Ok(format!("!{}", one_of(v, &list)?)))
            }
            Test::Matches(regex) => {
                let pattern = string(re2_pattern(regex.as_str())?);
                self.any(path, &mut |_, v| {
                    Ok(format!("(type({v}) == string && {v}.matches({pattern}))"))
                })
            }
            Test::NotMatches(regex) => {
                let pattern = string(re2_pattern(regex.as_str())?);
                self.any(path, &mut |_, v| {
                    Ok(format!("(type({v}) == string && !{v}.matches({pattern}))"))
                })
            }
            Test::StartsWith(prefixes) | Test::NotStartsWith(prefixes) => {
                let negate = if matches!(test, Test::NotStartsWith(_)) {
                    "!"
                } else {
                    ""
                };
                let prefixes = prefixes.clone();
                self.any(path, &mut |_, v| {
                    let any: Vec<String> = prefixes
                        .iter()
                        .map(|p| format!("{v}.startsWith({})", string(p)))
                        .collect();
                    let any = if any.is_empty() {
                        "false".to_owned()
                    } else {
                        any.join(" || ")
                    };
                    Ok(format!("(type({v}) == string && {negate}({any}))"))
                })
            }
            Test::Compare(comparison, operand) => {
                let sign = match comparison {
                    Comparison::Greater => "> 0",
                    Comparison::GreaterOrEqual => ">= 0",
                    Comparison::Less => "< 0",
                    Comparison::LessOrEqual => "<= 0",
                };
                let compare = |cx: &mut Self, v: &str, limit: &str| {
                    let q = cx.fresh();
                    Ok(format!(
                        "{}.exists({q}, {q}.compareTo({limit}) {sign})",
                        quantities(v)
                    ))
                };
                match operand {
                    QuantityOperand::Value(limit) => {
                        let limit = format!("quantity({})", string(&limit.to_string()));
                        self.any(path, &mut |cx, v| compare(cx, v, &limit))
                    }
                    QuantityOperand::Path(other) => {
                        let operand = self.operand(other)?;
                        let (o, l) = (self.fresh(), self.fresh());
                        let found = self.any(path, &mut |cx, v| compare(cx, v, &l))?;
                        Ok(format!(
                            "[{operand}].exists({o}, size({o}) > 0 && {}.exists({l}, {found}))",
                            quantities(&format!("{o}[0]"))
                        ))
                    }
                }
            }
            Test::Contains(Operand::Value(literal)) => {
                let literal = literal.clone();
                self.any(path, &mut |cx, v| {
                    cx.per_element(v, "exists", |x| equal(x, &literal))
                })
            }
            Test::ContainsAny(ListOperand::List(list)) => {
                let list = list.values().to_vec();
                self.any(path, &mut |cx, v| {
                    cx.per_element(v, "exists", |x| one_of(x, &list))
                })
            }
            Test::SubsetOf(ListOperand::List(list)) => {
                let list = list.values().to_vec();
                let within = self.any(path, &mut |cx, v| {
                    cx.per_element(v, "all", |x| one_of(x, &list))
                })?;
                let any = self.any(path, &mut { yes })?;
                Ok(format!("(!{any} || {within})"))
            }
            Test::Contains(_) | Test::ContainsAny(_) | Test::SubsetOf(_) => {
                untranslatable("list tests against another path")
            }
        }
    }

    /// `test` of the elements of `v` when it is a list (any of them with
    /// `exists`, every one with `all`), of `v` itself otherwise.
    fn per_element(
        &mut self,
        v: &str,
        quantifier: &str,
        test: impl Fn(&str) -> Result<String>,
    ) -> Result<String> {
        let e = self.fresh();
        Ok(format!(
            "(type({v}) == list ? {v}.{quantifier}({e}, {}) : {})",
            test(&e)?,
            test(v)?
        ))
    }

    /// True when the deny check finds a violation.
    pub fn violation(&mut self, check: &DenyCheck) -> Result<String> {
        match check {
            DenyCheck::Entry { predicate, .. } => match predicate {
                Some(predicate) => self.predicate(predicate),
                None => Ok("true".to_owned()),
            },
            DenyCheck::ForEach {
                path,
                checks,
                entries,
                ..
            } => {
                let element = self.enter_for_each();
                let body: Result<Vec<String>> = checks.iter().map(|c| self.violation(c)).collect();
                self.elements.pop();
                let body = match body?.as_slice() {
                    [] => "false".to_owned(),
                    parts => format!("({})", parts.join(" || ")),
                };
                self.for_each(path, *entries, &element, &body)
            }
        }
    }

    /// One violation per deny entry of `check`, entries inside a `forEach`
    /// included, in kadmit's order: each true when that entry finds a
    /// violation (at some element of the `forEach`es around it), with the
    /// entry. Their disjunction is [`Translator::violation`]'s, so a
    /// policy with one validation each denies when kadmit does, with the
    /// message of an entry that found a violation.
    pub fn violations<'c>(&mut self, check: &'c DenyCheck) -> Result<Vec<(String, &'c DenyCheck)>> {
        match check {
            DenyCheck::Entry { .. } => Ok(vec![(self.violation(check)?, check)]),
            DenyCheck::ForEach {
                path,
                checks,
                entries,
                ..
            } => {
                let element = self.enter_for_each();
                let mut inner = Vec::new();
                let mut failed = None;
                for check in checks {
                    match self.violations(check) {
                        Ok(found) => inner.extend(found),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                self.elements.pop();
                if let Some(e) = failed {
                    return Err(e);
                }
                inner
                    .into_iter()
                    .map(|(body, entry)| {
                        Ok((self.for_each(path, *entries, &element, &body)?, entry))
                    })
                    .collect()
            }
        }
    }

    /// Binds the next `forEach` element, returning its CEL name.
    fn enter_for_each(&mut self) -> String {
        let element = format!("kadmit_e{}", self.elements.len());
        self.elements.push(element.clone());
        element
    }

    /// True when `body` holds for some element `element` of what `path`
    /// selects (each entry of a selected map, as `{key, value}`, with
    /// `entries`).
    fn for_each(
        &mut self,
        path: &JsonPath,
        entries: bool,
        element: &str,
        body: &str,
    ) -> Result<String> {
        self.any(path, &mut |cx, v| {
            if entries {
                let k = cx.fresh();
                // `dyn`: a map of static type is refused where the element
                // is tested with `type(...) == list` and the like.
                Ok(format!(
                    "(type({v}) == map && {v}.exists({k}, \
                     [dyn({{'key': {k}, 'value': {v}[{k}]}})].exists({element}, {body})))"
                ))
            } else {
                Ok(format!("[{v}].exists({element}, {body})"))
            }
        })
    }
}

/// `text` as a CEL string literal.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// True when the value `v` equals the JSON `literal` as kadmit compares
/// (typed; numbers by value).
pub(super) fn equal(v: &str, literal: &Value) -> Result<String> {
    Ok(match literal {
        Value::Null => format!("(type({v}) == null_type)"),
        Value::Bool(b) => format!("(type({v}) == bool && {v} == {b})"),
        Value::String(s) => format!("(type({v}) == string && {v} == {})", string(s)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) if i >= 0 => format!(
                "((type({v}) == int && {v} == {i}) || (type({v}) == uint && {v} == {i}u) \
                 || (type({v}) == double && {v} == {i}.0))"
            ),
            (Some(i), _) => format!(
                "((type({v}) == int && {v} == {i}) || (type({v}) == double && {v} == {i}.0))"
            ),
            // Beyond `i64`: a `uint` equals by value, a `double` as
            // `json_equal` compares them, through `f64`; no `int` can.
            (None, _) if n.is_u64() => {
                let u = n.as_u64().unwrap_or_default();
                format!(
                    "((type({v}) == uint && {v} == {u}u) || (type({v}) == double && {v} == {:?}))",
                    u as f64
                )
            }
            (None, Some(f)) if f.is_finite() => format!(
                "((type({v}) == double && {v} == {f:?}) || (type({v}) == int && double({v}) == {f:?}) \
                 || (type({v}) == uint && double({v}) == {f:?}))"
            ),
            _ => return untranslatable(format!("the number {n}")),
        },
        Value::Array(_) | Value::Object(_) => {
            return untranslatable("comparisons with lists or maps");
        }
    })
}

fn one_of(v: &str, list: &[Value]) -> Result<String> {
    if list.is_empty() {
        return Ok("false".to_owned());
    }
    let parts: Result<Vec<String>> = list.iter().map(|literal| equal(v, literal)).collect();
    Ok(format!("({})", parts?.join(" || ")))
}

/// The quantity the value `v` is, as a CEL list of none or one: a string
/// that parses once trimmed, or a number by its decimal form (kadmit's
/// `Quantity::from_json`), through Kubernetes' quantity library.
fn quantities(v: &str) -> String {
    format!(
        "(type({v}) == string ? (isQuantity({v}.trim()) ? [quantity({v}.trim())] : []) \
         : ({} ? (isQuantity(string({v})) ? [quantity(string({v}))] : []) : []))",
        number(v)
    )
}

/// Equality of two values as kadmit compares them: typed, but numbers by
/// value (`1 == 1.0`, an `int` and a `uint` alike), as CEL compares
/// numbers of different types (cel-go's heterogeneous equality), in
/// lists and maps too.
pub(super) fn same(a: &str, b: &str) -> String {
    format!(
        "((type({a}) == type({b}) || ({} && {})) && {a} == {b})",
        number(a),
        number(b)
    )
}

/// Typed equality, numbers of different types unequal too: as kadmit's
/// edits compare what is there with what they write (JSON values, where
/// `1` is not `1.0`).
pub(super) fn typed_same(a: &str, b: &str) -> String {
    format!("(type({a}) == type({b}) && {a} == {b})")
}

/// True when the value `v` is a number of any CEL type.
fn number(v: &str) -> String {
    format!("(type({v}) == int || type({v}) == uint || type({v}) == double)")
}

/// `pattern`, when the API server's regular expressions (Go's RE2, which
/// CEL's `matches()` uses there) read it as kadmit's do and accept it.
///
/// The pattern is parsed and every construct checked against a list of
/// those known to mean the same in both: literals, `.`, `^`, `$`, `\A`,
/// `\z`, escapes of punctuation, `\a\f\t\n\r\v`, `\x41`, `\x{41}`, classes
/// of characters, ranges, ASCII classes (`[:alpha:]`) and the Unicode
/// classes Go knows (one- and two-letter general categories, scripts,
/// `Any`), groups, `(?P<name>…)`, the flags `i`, `m`, `s` and `U`, and
/// repetitions within RE2's bounds. Anything else is refused, naming it:
/// a pattern the API server's RE2 refuses makes it refuse the policy while
/// the binding is created, and one it reads otherwise enforces something
/// else, silently.
pub fn re2_pattern(pattern: &str) -> Result<&str> {
    let mut parser = Re2Parser {
        chars: pattern.chars().collect(),
        at: 0,
    };
    let facts = parser.alternation(0).and_then(|facts| match parser.peek() {
        None => Ok(facts),
        Some(_) => Err(parser.refused(
            parser.at,
            "an unmatched `)`",
            "remove it or escape it as `\\)`",
        )),
    });
    let problem = match facts {
        Ok(facts) if facts.size > RE2_MAX_SIZE => Re2Problem {
            at: 0,
            what: format!("repetitions that make about {} instructions", facts.size),
            verdict: Re2Verdict::Refuses,
            fix: "the API server compiles at most a few million; repeat less",
        },
        Ok(facts) if facts.runes > RE2_MAX_RUNES => Re2Problem {
            at: 0,
            what: "more Unicode classes than the API server's RE2 holds".to_owned(),
            verdict: Re2Verdict::Refuses,
            fix: "use fewer `\\p{…}` classes",
        },
        Ok(facts) if facts.height > RE2_MAX_HEIGHT => Re2Problem {
            at: 0,
            what: format!("nesting {} levels deep", facts.height),
            verdict: Re2Verdict::Refuses,
            fix: "the API server's RE2 parses at most 1000 levels; nest less",
        },
        Ok(_) => return Ok(pattern),
        Err(problem) => problem,
    };
    untranslatable(format!(
        "pattern {:?} has {} at character {}, which the API server's RE2 {}; {}",
        crate::excerpt::cut(pattern, 80),
        problem.what,
        problem.at,
        match problem.verdict {
            Re2Verdict::Refuses => {
                "refuses (the API server would refuse the policy, and its binding would apply \
                 nothing)"
            }
            Re2Verdict::ReadsOtherwise => "reads otherwise",
            Re2Verdict::Unproven => "is not known to read alike",
        },
        problem.fix
    ))
}

/// The most instructions a pattern may compile to: Go's RE2 refuses over
/// `128 << 20 / 40` (3.3 million); this stays well below that, as the
/// estimate ([`Re2Facts::size`]) follows Go's own.
const RE2_MAX_SIZE: u64 = 1_000_000;

/// The most runes the classes of a pattern may hold (Go refuses over 33
/// million), each Unicode class counted as [`RE2_CLASS_RUNES`].
const RE2_MAX_RUNES: u64 = 4_000_000;

/// An upper bound on the runes of one Unicode class (`\pL` is about 1,300
/// ranges, two runes each).
const RE2_CLASS_RUNES: u64 = 10_000;

/// The deepest parse tree Go's RE2 accepts is 1000 levels; kadmit's
/// regular expressions nest at most 250 groups, each up to four levels.
const RE2_MAX_HEIGHT: u64 = 1000;

/// Go's RE2 refuses a repetition count over 1000, and nested counted
/// repetitions whose counts multiply to more.
const RE2_MAX_REPEAT: u64 = 1000;

/// The Unicode class names Go's RE2 knows (`unicode.Categories` but `C`,
/// `unicode.Scripts` as of Go 1.19, and `Any`), which kadmit's regular
/// expressions read as the same general category or script. `C` is left
/// out: kadmit's includes unassigned code points, Go's does not.
// One name per line would be 200 lines.
#[rustfmt::skip]
const RE2_UNICODE_CLASSES: &[&str] = &[
    "Any", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N",
    "Nd", "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So",
    "Z", "Zl", "Zp", "Zs", "Adlam", "Ahom", "Anatolian_Hieroglyphs", "Arabic", "Armenian",
    "Avestan", "Balinese", "Bamum", "Bassa_Vah", "Batak", "Bengali", "Bhaiksuki", "Bopomofo",
    "Brahmi", "Braille", "Buginese", "Buhid", "Canadian_Aboriginal", "Carian",
    "Caucasian_Albanian", "Chakma", "Cham", "Cherokee", "Chorasmian", "Common", "Coptic",
    "Cuneiform", "Cypriot", "Cyrillic", "Deseret", "Devanagari", "Dives_Akuru", "Dogra",
    "Duployan", "Egyptian_Hieroglyphs", "Elbasan", "Elymaic", "Ethiopic", "Georgian", "Glagolitic",
    "Gothic", "Grantha", "Greek", "Gujarati", "Gunjala_Gondi", "Gurmukhi", "Han", "Hangul",
    "Hanifi_Rohingya", "Hanunoo", "Hatran", "Hebrew", "Hiragana", "Imperial_Aramaic", "Inherited",
    "Inscriptional_Pahlavi", "Inscriptional_Parthian", "Javanese", "Kaithi", "Kannada", "Katakana",
    "Kayah_Li", "Kharoshthi", "Khitan_Small_Script", "Khmer", "Khojki", "Khudawadi", "Lao",
    "Latin", "Lepcha", "Limbu", "Linear_A", "Linear_B", "Lisu", "Lycian", "Lydian", "Mahajani",
    "Makasar", "Malayalam", "Mandaic", "Manichaean", "Marchen", "Masaram_Gondi", "Medefaidrin",
    "Meetei_Mayek", "Mende_Kikakui", "Meroitic_Cursive", "Meroitic_Hieroglyphs", "Miao", "Modi",
    "Mongolian", "Mro", "Multani", "Myanmar", "Nabataean", "Nandinagari", "New_Tai_Lue", "Newa",
    "Nko", "Nushu", "Nyiakeng_Puachue_Hmong", "Ogham", "Ol_Chiki", "Old_Hungarian", "Old_Italic",
    "Old_North_Arabian", "Old_Permic", "Old_Persian", "Old_Sogdian", "Old_South_Arabian",
    "Old_Turkic", "Oriya", "Osage", "Osmanya", "Pahawh_Hmong", "Palmyrene", "Pau_Cin_Hau",
    "Phags_Pa", "Phoenician", "Psalter_Pahlavi", "Rejang", "Runic", "Samaritan", "Saurashtra",
    "Sharada", "Shavian", "Siddham", "SignWriting", "Sinhala", "Sogdian", "Sora_Sompeng",
    "Soyombo", "Sundanese", "Syloti_Nagri", "Syriac", "Tagalog", "Tagbanwa", "Tai_Le", "Tai_Tham",
    "Tai_Viet", "Takri", "Tamil", "Tangut", "Telugu", "Thaana", "Thai", "Tibetan", "Tifinagh",
    "Tirhuta", "Ugaritic", "Vai", "Wancho", "Warang_Citi", "Yezidi", "Yi", "Zanabazar_Square",
];

/// The ASCII class names (`[:alpha:]`), the same in both.
const RE2_ASCII_CLASSES: &[&str] = &[
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

/// Why a pattern has no RE2 translation: the construct, where it starts
/// (in characters), whether RE2 refuses it or reads it otherwise, and
/// what to write instead.
struct Re2Problem {
    at: usize,
    what: String,
    verdict: Re2Verdict,
    fix: &'static str,
}

/// What the API server's RE2 makes of a construct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Re2Verdict {
    /// It refuses it.
    Refuses,
    /// It reads it as something else.
    ReadsOtherwise,
    /// Not shown to read it alike.
    Unproven,
}

/// What the checks of RE2's bounds need of a part of a pattern, estimated
/// as Go's parser does (`regexp/syntax`: `calcSize`, `calcHeight`,
/// `repeatIsValid`), saturating.
#[derive(Debug, Clone, Copy)]
struct Re2Facts {
    /// Instructions.
    size: u64,
    /// Parse tree levels.
    height: u64,
    /// The product of the counted repetitions on the way down (the largest
    /// of them), as `repeatIsValid` walks it.
    repeat: u64,
    /// Runes of classes.
    runes: u64,
}

impl Re2Facts {
    const fn leaf(runes: u64) -> Self {
        Re2Facts {
            size: 1,
            height: 1,
            repeat: 1,
            runes,
        }
    }

    /// Parts one after the other (`joiners`: what Go adds per part beyond
    /// the first, 1 for alternatives).
    fn join(parts: &[Re2Facts], joiners: u64) -> Self {
        let count = parts.len() as u64;
        Re2Facts {
            size: parts
                .iter()
                .fold(0u64, |sum, part| sum.saturating_add(part.size))
                .saturating_add(joiners.saturating_mul(count.saturating_sub(1)))
                .max(1),
            height: parts.iter().map(|part| part.height).max().unwrap_or(0) + u64::from(count > 1),
            repeat: parts.iter().map(|part| part.repeat).max().unwrap_or(1),
            runes: parts
                .iter()
                .fold(0u64, |sum, part| sum.saturating_add(part.runes)),
        }
        .at_least_leaf()
    }

    fn at_least_leaf(mut self) -> Self {
        self.height = self.height.max(1);
        self
    }

    /// Wrapped in one more node of `extra` instructions.
    fn wrapped(self, extra: u64) -> Self {
        Re2Facts {
            size: self.size.saturating_add(extra),
            height: self.height + 1,
            ..self
        }
    }
}

/// A recursive-descent reader of the part of the regular expression syntax
/// kadmit's regular expressions and Go's RE2 share; every construct outside
/// it is a [`Re2Problem`].
struct Re2Parser {
    chars: Vec<char>,
    at: usize,
}

impl Re2Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        self.at += usize::from(found);
        found
    }

    fn differs(&self, at: usize, what: impl Into<String>, fix: &'static str) -> Re2Problem {
        self.problem(at, what, Re2Verdict::ReadsOtherwise, fix)
    }

    fn refused(&self, at: usize, what: impl Into<String>, fix: &'static str) -> Re2Problem {
        self.problem(at, what, Re2Verdict::Refuses, fix)
    }

    fn unproven(&self, at: usize, what: impl Into<String>, fix: &'static str) -> Re2Problem {
        self.problem(at, what, Re2Verdict::Unproven, fix)
    }

    fn problem(
        &self,
        at: usize,
        what: impl Into<String>,
        verdict: Re2Verdict,
        fix: &'static str,
    ) -> Re2Problem {
        Re2Problem {
            at,
            what: what.into(),
            verdict,
            fix,
        }
    }

    /// The text from `from` to where the parser is.
    fn text(&self, from: usize) -> String {
        self.chars[from..self.at.min(self.chars.len())]
            .iter()
            .collect()
    }

    /// `a|b|…`, up to a `)` or the end.
    fn alternation(&mut self, depth: usize) -> std::result::Result<Re2Facts, Re2Problem> {
        let mut alternatives = vec![self.concatenation(depth)?];
        while self.eat('|') {
            alternatives.push(self.concatenation(depth)?);
        }
        Ok(Re2Facts::join(&alternatives, 1))
    }

    fn concatenation(&mut self, depth: usize) -> std::result::Result<Re2Facts, Re2Problem> {
        let mut parts = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let start = self.at;
            let (atom, repeatable) = self.atom(depth)?;
            parts.push(self.repetition(atom, repeatable, start)?);
        }
        Ok(Re2Facts::join(&parts, 0))
    }

    /// One atom, and whether a repetition may follow it.
    fn atom(&mut self, depth: usize) -> std::result::Result<(Re2Facts, bool), Re2Problem> {
        let start = self.at;
        let Some(c) = self.peek() else {
            return Ok((Re2Facts::leaf(0), false));
        };
        self.at += 1;
        match c {
            '(' => self.group(start, depth),
            '[' => Ok((self.class(start)?, true)),
            '\\' => self.escape(start),
            '^' | '$' => Ok((Re2Facts::leaf(0), false)),
            '*' | '+' | '?' => Err(self.refused(
                start,
                format!("a repetition `{c}` of nothing"),
                "escape it as `\\{c}`",
            )),
            '{' => Err(self.differs(
                start,
                "a `{` that is not a repetition `{n}`, `{n,}` or `{n,m}`",
                "escape it as `\\{`",
            )),
            // Each literal may fold to a few others under `(?i)`.
            _ => Ok((Re2Facts::leaf(4), true)),
        }
    }

    /// The repetition after `atom`, if any, within RE2's bounds.
    fn repetition(
        &mut self,
        atom: Re2Facts,
        repeatable: bool,
        start: usize,
    ) -> std::result::Result<Re2Facts, Re2Problem> {
        let Some(c @ ('*' | '+' | '?' | '{')) = self.peek() else {
            return Ok(atom);
        };
        let operator = self.at;
        if !repeatable {
            return Err(self.unproven(
                operator,
                format!(
                    "a repetition of `{}`, which repeats no text",
                    self.text(start)
                ),
                "remove the repetition",
            ));
        }
        self.at += 1;
        let facts = match c {
            '*' => atom.wrapped(2),
            '+' | '?' => atom.wrapped(1),
            _ => {
                let (min, max) = self.counts(operator)?;
                self.counted(atom, min, max, operator)?
            }
        };
        // Lazy.
        self.eat('?');
        if let Some(next @ ('*' | '+' | '?' | '{')) = self.peek() {
            let inner = self.text(operator);
            // The whole of a second counted repetition.
            if next == '{' {
                while self.peek().is_some_and(|c| c != '}') {
                    self.at += 1;
                }
            }
            self.at = (self.at + 1).min(self.chars.len());
            return Err(self.refused(
                operator,
                format!(
                    "a nested repetition `{inner}{}`",
                    self.text(operator + inner.chars().count())
                ),
                "put the inner repetition in a group, as `(?:a*)*`",
            ));
        }
        Ok(facts)
    }

    /// `{n}`, `{n,}` or `{n,m}` after its `{`, digits only and no leading
    /// zeros, as Go reads a repetition (Go reads `a{01}`, `a{ 1}` and
    /// `a{,1}` as plain text, kadmit as repetitions).
    fn counts(&mut self, operator: usize) -> std::result::Result<(u64, Option<u64>), Re2Problem> {
        let not_a_repetition = |parser: &Self| {
            parser.differs(
                operator,
                "a `{` that is not a repetition `{n}`, `{n,}` or `{n,m}` of decimal numbers \
                 without spaces or leading zeros",
                "write the counts as plain decimal numbers, or escape the `{` as `\\{`",
            )
        };
        let min = self.number().ok_or_else(|| not_a_repetition(self))?;
        let max = if self.eat(',') {
            match self.peek() {
                Some('}') => None,
                _ => Some(self.number().ok_or_else(|| not_a_repetition(self))?),
            }
        } else {
            Some(min)
        };
        if !self.eat('}') {
            return Err(not_a_repetition(self));
        }
        if min > RE2_MAX_REPEAT || max.is_some_and(|max| max > RE2_MAX_REPEAT) {
            return Err(self.refused(
                operator,
                format!("the repetition `{}`", self.text(operator)),
                "RE2 repeats at most 1000 times; use `+` or `*`, or a smaller count",
            ));
        }
        Ok((min, max))
    }

    /// A decimal number without leading zeros, at most 9 digits.
    fn number(&mut self) -> Option<u64> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let digits = self.text(start);
        if digits.is_empty() || digits.len() > 9 || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        digits.parse().ok()
    }

    /// A counted repetition of `atom`, checked as Go's `repeatIsValid`
    /// checks it: the counts on the way down multiply to at most 1000 (a
    /// count of 0 leaves out what is below; an unbounded one counts its
    /// minimum).
    fn counted(
        &self,
        atom: Re2Facts,
        min: u64,
        max: Option<u64>,
        operator: usize,
    ) -> std::result::Result<Re2Facts, Re2Problem> {
        let factor = match max {
            Some(0) => 0,
            Some(max) => max,
            None => min.max(1),
        };
        let repeat = factor.saturating_mul(atom.repeat);
        if (min >= 2 || max.is_some_and(|max| max >= 2)) && repeat > RE2_MAX_REPEAT {
            return Err(self.refused(
                operator,
                format!(
                    "nested repetitions that repeat {repeat} times in all (`{}` around another)",
                    self.text(operator)
                ),
                "RE2 allows at most 1000; use `+` or `*` for one of them",
            ));
        }
        let size = match max {
            None if min == 0 => atom.size.saturating_add(2),
            None => min.saturating_mul(atom.size).saturating_add(1),
            Some(max) => max
                .saturating_mul(atom.size)
                .saturating_add(max - min.min(max)),
        };
        Ok(Re2Facts {
            size: size.max(1),
            height: atom.height + 1,
            repeat,
            runes: atom.runes,
        })
    }

    /// A group after its `(`: capturing, `(?:…)`, `(?P<name>…)`, flags
    /// `(?ims-U)` or `(?i:…)`.
    fn group(
        &mut self,
        start: usize,
        depth: usize,
    ) -> std::result::Result<(Re2Facts, bool), Re2Problem> {
        // kadmit's regular expressions nest at most 250 groups; Go's
        // limit is on the whole tree (`RE2_MAX_HEIGHT`).
        let capturing = if !self.eat('?') {
            true
        } else if self.peek() == Some('P') && self.peek_at(1) == Some('<') {
            self.at += 2;
            let name_start = self.at;
            while self.peek().is_some_and(|c| c != '>') {
                self.at += 1;
            }
            let name = self.text(name_start);
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(self.refused(
                    start,
                    format!("the group name {name:?}"),
                    "RE2 takes names of ASCII letters, digits and `_` only",
                ));
            }
            self.eat('>');
            true
        } else if self.peek() == Some('<') {
            return Err(self.refused(
                start,
                "a named group `(?<name>…)`",
                "write `(?P<name>…)`, which Go's RE2 reads in every version",
            ));
        } else {
            let flags_start = self.at;
            let mut seen = Vec::new();
            let mut negated = false;
            loop {
                let Some(c) = self.peek() else {
                    return Err(self.refused(start, "an unclosed group", "close it with `)`"));
                };
                self.at += 1;
                match c {
                    ':' | ')' => {
                        let flags = self.text(flags_start);
                        let flags = &flags[..flags.len() - 1];
                        if (flags.is_empty() && c == ')') || flags.ends_with('-') {
                            return Err(self.refused(
                                start,
                                format!("the flags `(?{flags}{c}`"),
                                "write at least one flag, after `-` too",
                            ));
                        }
                        if c == ')' {
                            // Flags for the rest of the enclosing group:
                            // nothing to repeat.
                            return Ok((Re2Facts::leaf(0), false));
                        }
                        break;
                    }
                    '-' if !negated => negated = true,
                    'i' | 'm' | 's' | 'U' if !seen.contains(&c) => seen.push(c),
                    'x' | 'u' | 'R' => {
                        return Err(self.refused(
                            self.at - 1,
                            format!("the flag `{c}`"),
                            "Go's RE2 knows only the flags i, m, s and U; remove it",
                        ));
                    }
                    _ => {
                        return Err(self.refused(
                            self.at - 1,
                            format!("`(?{}`", self.text(flags_start)),
                            "write a group as `(…)`, `(?:…)` or `(?P<name>…)`, flags as `(?i)` \
                             or `(?i:…)`",
                        ));
                    }
                }
            }
            false
        };
        if depth >= 250 {
            return Err(self.refused(start, "groups nested over 250 deep", "nest less"));
        }
        let inner = self.alternation(depth + 1)?;
        if !self.eat(')') {
            return Err(self.refused(start, "an unclosed group", "close it with `)`"));
        }
        Ok((if capturing { inner.wrapped(2) } else { inner }, true))
    }

    /// An escape after its `\`, outside a class: what it matches, and
    /// whether a repetition may follow.
    fn escape(&mut self, start: usize) -> std::result::Result<(Re2Facts, bool), Re2Problem> {
        match self.peek() {
            Some('A' | 'z') => {
                self.at += 1;
                Ok((Re2Facts::leaf(0), false))
            }
            Some(c @ ('b' | 'B')) => {
                self.at += 1;
                Err(self.differs(
                    start,
                    format!("`\\{c}` (a Unicode word boundary in kadmit, an ASCII one in RE2)"),
                    "spell the boundary out with ASCII classes, as `(^|[^A-Za-z0-9_])`",
                ))
            }
            Some(c @ ('<' | '>')) => {
                self.at += 1;
                let what = if c == '<' { "start" } else { "end" };
                Err(self.differs(
                    start,
                    format!("`\\{c}` (a word-{what} assertion in kadmit, a plain `{c}` in RE2)"),
                    "spell the boundary out with ASCII classes, as `(^|[^A-Za-z0-9_])`",
                ))
            }
            _ => Ok((self.class_escape(start)?, true)),
        }
    }

    /// An escape that stands for characters (inside a class or out):
    /// `None`-like facts for a class, a literal's otherwise.
    fn class_escape(&mut self, start: usize) -> std::result::Result<Re2Facts, Re2Problem> {
        self.escaped_char(start)
            .map(|c| Re2Facts::leaf(if c.is_some() { 4 } else { RE2_CLASS_RUNES }))
    }

    /// The character an escape after its `\` stands for, or `None` for a
    /// Unicode class (`\pL`).
    fn escaped_char(&mut self, start: usize) -> std::result::Result<Option<char>, Re2Problem> {
        let Some(c) = self.peek() else {
            return Err(self.refused(start, "a `\\` at the end", "escape it as `\\\\`"));
        };
        self.at += 1;
        match c {
            'a' => Ok(Some('\x07')),
            'f' => Ok(Some('\x0c')),
            't' => Ok(Some('\t')),
            'n' => Ok(Some('\n')),
            'r' => Ok(Some('\r')),
            'v' => Ok(Some('\x0b')),
            'x' => self.hex(start).map(Some),
            'p' | 'P' => self.unicode_class(start).map(|()| None),
            'd' | 'D' | 'w' | 'W' | 's' | 'S' => Err(self.differs(
                start,
                format!(
                    "`\\{c}` (Unicode in kadmit, ASCII in RE2: `١٢٣` is digits to kadmit only)"
                ),
                "write the ASCII class: `[0-9]`, `[A-Za-z0-9_]` or `[\\t\\n\\f\\r ]`",
            )),
            'u' | 'U' => Err(self.refused(
                start,
                format!("the escape `\\{c}`"),
                "write the character as `\\x{41}`",
            )),
            // Punctuation stands for itself in both; `<` and `>` are
            // assertions to kadmit (refused above, outside classes).
            c if c.is_ascii_punctuation() && c != '<' && c != '>' => Ok(Some(c)),
            c => Err(self.unproven(
                start,
                format!("the escape `\\{c}`"),
                "escape only punctuation, or write the character as `\\x{41}`",
            )),
        }
    }

    /// `\x41` or `\x{41}` after its `x`.
    fn hex(&mut self, start: usize) -> std::result::Result<char, Re2Problem> {
        let digits_start;
        let digits = if self.eat('{') {
            digits_start = self.at;
            while self.peek().is_some_and(|c| c != '}') {
                self.at += 1;
            }
            let digits = self.text(digits_start);
            self.eat('}');
            digits
        } else {
            digits_start = self.at;
            self.at = (self.at + 2).min(self.chars.len());
            self.text(digits_start)
        };
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_hexdigit()))
            .and_then(char::from_u32)
            .ok_or_else(|| {
                self.refused(
                    start,
                    format!("the escape `{}`", self.text(start)),
                    "write a character as `\\x41` or `\\x{41}`",
                )
            })
    }

    /// `\pL`, `\p{Greek}`, `\PL` after the `p` or `P`: a class Go knows by
    /// that name, and kadmit reads alike.
    fn unicode_class(&mut self, start: usize) -> std::result::Result<(), Re2Problem> {
        let name = if self.eat('{') {
            let name_start = self.at;
            while self.peek().is_some_and(|c| c != '}') {
                self.at += 1;
            }
            let name = self.text(name_start);
            self.eat('}');
            name
        } else {
            let letter = self.at;
            self.at = (self.at + 1).min(self.chars.len());
            self.text(letter)
        };
        if name == "C" {
            return Err(self.differs(
                start,
                format!(
                    "`{}` (unassigned code points are in it for kadmit only)",
                    self.text(start)
                ),
                "list the categories: `[\\p{Cc}\\p{Cf}\\p{Co}\\p{Cs}]`",
            ));
        }
        if !RE2_UNICODE_CLASSES.contains(&name.as_str()) {
            return Err(self.refused(
                start,
                format!("the Unicode class `{}`", self.text(start)),
                "Go's RE2 knows general categories by their one- or two-letter names (`\\pL`, \
                 `\\p{Lu}`), scripts by their names (`\\p{Greek}`), and `\\p{Any}`",
            ));
        }
        Ok(())
    }

    /// A class after its `[`.
    fn class(&mut self, start: usize) -> std::result::Result<Re2Facts, Re2Problem> {
        self.eat('^');
        let mut runes = 0u64;
        let mut first = true;
        loop {
            let item = self.at;
            let Some(c) = self.peek() else {
                return Err(self.refused(start, "an unclosed class", "close it with `]`"));
            };
            match c {
                // A `]` first is a character in both.
                ']' if !first => {
                    self.at += 1;
                    break;
                }
                '[' if self.peek_at(1) == Some(':') => {
                    self.ascii_class(item)?;
                    runes = runes.saturating_add(64);
                }
                '[' => {
                    return Err(self.differs(
                        item,
                        "a class inside a class (a nested class in kadmit, a `[` in RE2)",
                        "escape the `[` as `\\[`, or write the classes side by side in one",
                    ));
                }
                '&' | '-' | '~' if self.peek_at(1) == Some(c) => {
                    return Err(self.differs(
                        item,
                        format!("the class set operation `{c}{c}` (plain characters in RE2)"),
                        "list the characters the class holds instead",
                    ));
                }
                _ => {
                    let low = self.class_char()?;
                    runes = runes.saturating_add(if low.is_some() { 8 } else { RE2_CLASS_RUNES });
                    if low.is_some()
                        && self.peek() == Some('-')
                        && !matches!(self.peek_at(1), Some(']') | None)
                    {
                        self.at += 1;
                        if self.class_char()?.is_none() {
                            return Err(self.refused(
                                item,
                                "a range that ends in a class",
                                "end a range in a character",
                            ));
                        }
                    }
                }
            }
            first = false;
        }
        Ok(Re2Facts::leaf(runes))
    }

    /// One character of a class (`None` for a Unicode class).
    fn class_char(&mut self) -> std::result::Result<Option<char>, Re2Problem> {
        let start = self.at;
        let Some(c) = self.peek() else {
            return Err(self.refused(start, "an unclosed class", "close it with `]`"));
        };
        self.at += 1;
        if c != '\\' {
            return Ok(Some(c));
        }
        if let Some(c @ ('b' | 'B' | 'A' | 'z' | '<' | '>')) = self.peek() {
            self.at += 1;
            return Err(self.refused(
                start,
                format!("the escape `\\{c}` in a class"),
                "write `\\x08` for a backspace; assertions have no place in a class",
            ));
        }
        self.escaped_char(start)
    }

    /// `[:alpha:]` or `[:^alpha:]` inside a class, at its `[`.
    fn ascii_class(&mut self, start: usize) -> std::result::Result<(), Re2Problem> {
        self.at += 2;
        self.eat('^');
        let name_start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_lowercase()) {
            self.at += 1;
        }
        let name = self.text(name_start);
        if RE2_ASCII_CLASSES.contains(&name.as_str()) && self.eat(':') && self.eat(']') {
            return Ok(());
        }
        Err(self.differs(
            start,
            "a class inside a class (a nested class in kadmit, a `[` in RE2)",
            "escape the `[` as `\\[`, or use an ASCII class such as `[:alpha:]`",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_re2_reads_alike_are_translated() {
        for same in [
            "",
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "^(runtime/default|localhost/.*)$",
            "[[:alpha:]_]+",
            "[[:^word:]-]",
            "[]a]",
            "[^]-]",
            "[a-b-c]",
            "a--b",
            "a&&b~~c",
            "\\.\\\\d",
            "\\pL+",
            "\\p{L}\\p{Lu}\\PN\\p{Greek}\\P{Han}\\p{Any}",
            "[\\p{Latin}\\x41-\\x{5A}\\-\\]\\n]",
            "\\x41\\x{1F600}\\a\\f\\t\\n\\r\\v\\_\\%\\/",
            "\\Aa\\z",
            "a{1000}b{0,1000}c{2,}d{0}",
            "(a{2}){500}",
            "(?:a{10}){100}",
            "(a{0}){1}",
            "a*?b+?c??d{2}?e{2,}?",
            "(?i)a(?-i:b)(?ms-U)c(?i:d|e)",
            "(?P<name_1>a)(?:b)",
            "}]",
            "é.ü",
        ] {
            assert_eq!(re2_pattern(same), Ok(same), "{same}");
        }
    }

    /// Each construct kadmit's regular expressions and the API server's
    /// RE2 read otherwise, or RE2 refuses, is named in the reason.
    #[test]
    fn patterns_re2_reads_otherwise_or_refuses_are_not_translated() {
        for (pattern, named, verdict) in [
            ("^\\d+$", "`\\d` (Unicode in kadmit", "reads otherwise"),
            ("\\w", "`\\w`", "reads otherwise"),
            ("a\\sb", "`\\s`", "reads otherwise"),
            ("[\\D]", "`\\D`", "reads otherwise"),
            (
                "\\bword\\b",
                "`\\b` (a Unicode word boundary",
                "reads otherwise",
            ),
            ("x\\B", "`\\B`", "reads otherwise"),
            (
                "\\<admin",
                "`\\<` (a word-start assertion",
                "reads otherwise",
            ),
            ("admin\\>", "`\\>` (a word-end assertion", "reads otherwise"),
            (
                "[a-z&&[^b]]",
                "the class set operation `&&`",
                "reads otherwise",
            ),
            ("[a[b]]", "a class inside a class", "reads otherwise"),
            (
                "[[:alpha:]--b]",
                "the class set operation `--`",
                "reads otherwise",
            ),
            ("[a~~b]", "the class set operation `~~`", "reads otherwise"),
            ("[[:letters:]]", "a class inside a class", "reads otherwise"),
            ("\\pC", "`\\pC` (unassigned code points", "reads otherwise"),
            ("\\p{C}", "`\\p{C}`", "reads otherwise"),
            ("a{01}", "a `{` that is not a repetition", "reads otherwise"),
            (
                "a{ 1 }",
                "a `{` that is not a repetition",
                "reads otherwise",
            ),
            ("a{1001}", "the repetition `{1001}`", "refuses"),
            ("a{2,1001}", "the repetition `{2,1001}`", "refuses"),
            ("(a{2}){501}", "repeat 1002 times in all", "refuses"),
            ("((a{10}){10}){11}", "repeat 1100 times in all", "refuses"),
            ("a**", "a nested repetition `**`", "refuses"),
            ("a++", "a nested repetition `++`", "refuses"),
            ("a*?+", "a nested repetition `*?+`", "refuses"),
            ("a{2}{3}", "a nested repetition `{2}{3}`", "refuses"),
            ("\\u0041", "the escape `\\u`", "refuses"),
            ("\\U00000041", "the escape `\\U`", "refuses"),
            ("\\p{Letter}", "the Unicode class `\\p{Letter}`", "refuses"),
            ("\\p{greek}", "the Unicode class `\\p{greek}`", "refuses"),
            (
                "\\p{sc=Greek}",
                "the Unicode class `\\p{sc=Greek}`",
                "refuses",
            ),
            ("\\p{Kawi}", "the Unicode class `\\p{Kawi}`", "refuses"),
            ("(?x)a b", "the flag `x`", "refuses"),
            ("(?u)a", "the flag `u`", "refuses"),
            ("(?R)a", "the flag `R`", "refuses"),
            ("(?i-x:a)", "the flag `x`", "refuses"),
            ("(?<n>a)", "a named group `(?<name>…)`", "refuses"),
            ("(?P<a.b>a)", "the group name \"a.b\"", "refuses"),
            ("^*", "a repetition of `^`", "is not known to read alike"),
            (
                "(?i)+",
                "a repetition of `(?i)`",
                "is not known to read alike",
            ),
            ("a\\ b", "the escape `\\ `", "is not known to read alike"),
        ] {
            let Err(Untranslatable(reason)) = re2_pattern(pattern) else {
                panic!("{pattern} translated");
            };
            assert!(
                reason.contains(named) && reason.contains(verdict),
                "{pattern}: {reason}"
            );
        }
        // Where, and what to write instead.
        let Err(Untranslatable(reason)) = re2_pattern("ab\\d") else {
            panic!("translated");
        };
        assert!(
            reason.contains("at character 2") && reason.contains("write the ASCII class: `[0-9]`"),
            "{reason}"
        );
        // Bounds of RE2 past what a repetition count shows.
        let wide = format!("({}){{1000}}", "a".repeat(2_000));
        let Err(Untranslatable(reason)) = re2_pattern(&wide) else {
            panic!("translated");
        };
        assert!(reason.contains("instructions"), "{reason}");
    }
}
