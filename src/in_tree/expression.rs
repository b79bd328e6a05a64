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
    CelCheck, Comparison, DenyCheck, JsonPath, ListOperand, Operand, Predicate, QuantityOperand,
    Root, Step, Test,
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
            Root::Request => "request".to_owned(),
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
                let element = format!("kadmit_e{}", self.elements.len());
                self.elements.push(element.clone());
                let body: Result<Vec<String>> = checks.iter().map(|c| self.violation(c)).collect();
                self.elements.pop();
                let body = match body?.as_slice() {
                    [] => "false".to_owned(),
                    parts => format!("({})", parts.join(" || ")),
                };
                let entries = *entries;
                self.any(path, &mut |cx, v| {
                    if entries {
                        let k = cx.fresh();
                        Ok(format!(
                            "(type({v}) == map && {v}.exists({k}, \
                             [{{'key': {k}, 'value': {v}[{k}]}}].exists({element}, {body})))"
                        ))
                    } else {
                        Ok(format!("[{v}].exists({element}, {body})"))
                    }
                })
            }
        }
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
         : ((type({v}) == int || type({v}) == uint || type({v}) == double) \
         ? (isQuantity(string({v})) ? [quantity(string({v}))] : []) : []))"
    )
}

/// Typed equality of two values.
pub(super) fn same(a: &str, b: &str) -> String {
    format!("(type({a}) == type({b}) && {a} == {b})")
}

/// `pattern`, when the API server's regular expressions (RE2) read it as
/// kadmit's do. They differ in `\d`, `\w`, `\s` and `\b` (Unicode in
/// kadmit, ASCII in RE2: `'١٢٣'` is digits only to kadmit) and in classes
/// inside classes and class set operations (`[a-z&&[^b]]`), which RE2
/// reads as plain characters.
pub(super) fn re2_pattern(pattern: &str) -> Result<&str> {
    let differs = |what: &str| {
        untranslatable(format!(
            "pattern {:?} has {what}, which the API server's RE2 reads otherwise",
            crate::excerpt::cut(pattern, 80)
        ))
    };
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(class @ ('d' | 'D' | 'w' | 'W' | 's' | 'S' | 'b' | 'B')) = chars.next()
                {
                    return differs(&format!("\\{class} (Unicode in kadmit, ASCII in RE2)"));
                }
            }
            '[' if in_class => {
                // `[:alpha:]` means the same in both.
                if chars.next_if_eq(&':').is_none() {
                    return differs("a class inside a class");
                }
                while let Some(c) = chars.next() {
                    if c == ':' && chars.next_if_eq(&']').is_some() {
                        break;
                    }
                }
            }
            '[' => {
                in_class = true;
                // A `]` first in a class is a character.
                chars.next_if_eq(&'^');
                chars.next_if_eq(&']');
            }
            ']' => in_class = false,
            '&' | '-' | '~' if in_class && chars.peek() == Some(&c) => {
                return differs("a class set operation");
            }
            _ => {}
        }
    }
    Ok(pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_re2_reads_otherwise_are_not_translated() {
        for same in [
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "^(runtime/default|localhost/.*)$",
            "[[:alpha:]_]+",
            "[]a]",
            "[^]-]",
            "a--b",
            "\\.\\\\d",
            "\\pL+",
        ] {
            assert_eq!(re2_pattern(same), Ok(same), "{same}");
        }
        for differs in [
            "^\\d+$",
            "\\w",
            "a\\sb",
            "\\bword\\b",
            "[\\D]",
            "[a-z&&[^b]]",
            "[a[b]]",
            "[[:alpha:]--b]",
            "[a~~b]",
        ] {
            assert!(re2_pattern(differs).is_err(), "{differs}");
        }
    }
}
