//! A rule's mutations written as MutatingAdmissionPolicy `jsonPatch`
//! expressions, with kadmit's semantics spelled out (those of
//! `patch::Editor`):
//!
//! - `setIfAbsent` writes where the target is missing or null, creating
//!   the missing maps on the way (never list positions), and leaves any
//!   other value; `set` also replaces a value that differs;
//! - `mergeIfAbsent` adds the keys the target map lacks, at every depth,
//!   and writes the whole map where the target is missing or null;
//! - `injectIfMissing` appends the element unless one with the same key
//!   fields is there, and writes a one-element list where there is none;
//! - nothing is written through a value of another type.
//!
//! Every edit is one expression, evaluated on the object as the edits
//! before it left it, as kadmit applies them. An expression yields the
//! operations for every place its target path selects, each guarded by
//! what is there now, so applying the policy again changes nothing. Paths
//! carry their JSON Pointer with them as `[pointer, value, reached by a
//! key]` triples.
//!
//! Inside a `forEach`, kadmit applies all the entries to one element, then
//! to the next; here each entry is applied to every element in turn. The
//! two agree when an entry reads only its own element (and the request and
//! old object, which no edit changes), so conditions and copied values
//! inside a `forEach` that read anything else are [`Untranslatable`]. The
//! condition of a `forEach` itself is looked at again before each of its
//! entries, so with several entries it may read only the request and the
//! old object. An element a path selects twice is visited once, and a list
//! it selects twice is appended to once, as kadmit's second visit changes
//! nothing.

use serde_json::Value;

use super::expression::{
    MAX_PATH_STEPS, Translator, Untranslatable, by_kind, sized, steps_of, string, typed_same,
    untranslatable,
};
use crate::cel::Variable;
use crate::patch::Token;
use crate::plan::{Edit, GuardedEdit, JsonPath, Predicate, Root, Source, Step};

type Result<T> = std::result::Result<T, Untranslatable>;

/// The `jsonPatch` expressions of `edits`, in the order they apply: one per
/// edit, and one per entry of a `forEach` (iterating its elements).
/// `charge` is given the bytes of each edit's expressions as they are
/// written, and stops the translation with its error (a bound of the
/// policy's size) before the next edit is.
pub fn expressions(
    edits: &[GuardedEdit],
    charge: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<Vec<String>> {
    let mut writer = Writer::default();
    let mut out = Vec::new();
    for edit in edits {
        let before = out.len();
        writer.edit(edit, &mut out)?;
        for expression in &mut out[before..] {
            *expression = sized(std::mem::take(expression))?;
        }
        charge(out[before..].iter().map(String::len).sum())?;
    }
    Ok(out)
}

/// An enclosing `forEach`: the name of its element's triple, the list of
/// its elements' triples, its condition.
struct Scope {
    element: String,
    elements: String,
    guard: Option<String>,
}

#[derive(Default)]
struct Writer {
    translator: Translator,
    scopes: Vec<Scope>,
}

/// What is written at a target, as CEL.
enum Write<'a> {
    /// `setIfAbsent` (`replace: false`) or `set` of `value`.
    Set { value: String, replace: bool },
    /// `mergeIfAbsent` of a literal.
    Merge(&'a Value),
    /// `injectIfMissing` of a literal, matched by `keys`.
    Inject {
        keys: &'a [String],
        value: &'a Value,
    },
}

impl Write<'_> {
    /// What a missing or null target becomes.
    fn whole(&self) -> Result<String> {
        match self {
            Write::Set { value, .. } => Ok(value.clone()),
            Write::Merge(value) => literal(value),
            Write::Inject { value, .. } => Ok(format!("[{}]", literal(value)?)),
        }
    }
}

impl Writer {
    fn edit(&mut self, guarded: &GuardedEdit, out: &mut Vec<String>) -> Result<()> {
        if !self.scopes.is_empty() {
            for predicate in &guarded.when {
                Reads::WithinElement.check(predicate)?;
            }
        }
        let guard = self.guard(&guarded.when)?;
        if let Edit::ForEach { path, edits } = &guarded.edit {
            // Its condition is looked at again before each entry: it must
            // not read what an earlier entry may have written, anywhere
            // below the object.
            if leaves(edits) > 1 {
                for predicate in &guarded.when {
                    Reads::Unwritten.check(predicate)?;
                }
            }
            self.check_root(path)?;
            // A path may select an element twice (`[0,-1]` of one): kadmit
            // applies the entries to it twice in a row, which changes
            // nothing the second time, so it is visited once.
            let elements = format!("{}.distinct()", self.located(path)?);
            let element = self.translator.fresh();
            self.scopes.push(Scope {
                element: element.clone(),
                elements,
                guard,
            });
            self.translator.enter_element(format!("{element}[1]"));
            let result = edits.iter().try_for_each(|edit| self.edit(edit, out));
            self.translator.leave_element();
            self.scopes.pop();
            return result;
        }
        let mut expression = self.leaf(&guarded.edit)?;
        if let Some(guard) = guard {
            expression = format!("({guard} ? {expression} : [])");
        }
        for scope in self.scopes.iter().rev() {
            let inner = match &scope.guard {
                Some(guard) => format!("({guard} ? {expression} : [])"),
                None => expression,
            };
            expression = format!(
                "{}.map({}, {inner}).flatten()",
                scope.elements, scope.element
            );
        }
        out.push(expression);
        Ok(())
    }

    fn guard(&mut self, when: &[Predicate]) -> Result<Option<String>> {
        if when.is_empty() {
            return Ok(None);
        }
        let parts: Result<Vec<String>> = when
            .iter()
            .map(|p| self.translator.predicate(p).map(|text| format!("({text})")))
            .collect();
        Ok(Some(parts?.join(" && ")))
    }

    /// Inside a `forEach`, paths start at the element.
    fn check_root(&self, path: &JsonPath) -> Result<()> {
        if !self.scopes.is_empty() && path.root() != Root::Element {
            return untranslatable(format!(
                "{} inside a forEach writes outside the element",
                path.text()
            ));
        }
        Ok(())
    }

    /// The operations of one edit that is not a `forEach`.
    fn leaf(&mut self, edit: &Edit) -> Result<String> {
        match edit {
            Edit::SetIfAbsent { target, source } | Edit::Set { target, source } => {
                let replace = matches!(edit, Edit::Set { .. });
                self.check_root(&target.prefix)?;
                match source {
                    Source::Value(value) => {
                        let write = Write::Set {
                            value: literal(value)?,
                            replace,
                        };
                        self.at_targets(&target.prefix, &target.tail, &write)
                    }
                    Source::Path(path) => {
                        if !self.scopes.is_empty() && !Reads::WithinElement.allows_root(path.root())
                        {
                            return untranslatable(format!(
                                "{} inside a forEach copies from outside the element",
                                path.text()
                            ));
                        }
                        // The value is read once, before anything is written;
                        // a null is not copied, as kadmit copies none.
                        let found = self.translator.operand(path)?;
                        let s = self.translator.fresh();
                        let write = Write::Set {
                            value: format!("{s}[0]"),
                            replace,
                        };
                        let writes = self.at_targets(&target.prefix, &target.tail, &write)?;
                        Ok(format!(
                            "[{found}].map({s}, size({s}) > 0 && type({s}[0]) != null_type \
                             ? {writes} : []).flatten()"
                        ))
                    }
                }
            }
            Edit::MergeIfAbsent { target, value } => {
                self.check_root(&target.prefix)?;
                self.at_targets(&target.prefix, &target.tail, &Write::Merge(value))
            }
            Edit::InjectIfMissing {
                target,
                keys,
                value,
            } => {
                self.check_root(&target.prefix)?;
                self.at_targets(&target.prefix, &target.tail, &Write::Inject { keys, value })
            }
            Edit::ForEach { .. } => untranslatable("a forEach where an edit was expected"),
        }
    }

    /// The operations of `write` at every match of `prefix`, then `tail`.
    fn at_targets(
        &mut self,
        prefix: &JsonPath,
        tail: &[Token],
        write: &Write<'_>,
    ) -> Result<String> {
        let mut located = self.located(prefix)?;
        if matches!(write, Write::Inject { .. }) {
            // Appending at a place the path selects twice: kadmit's second
            // append finds the first one's element.
            located = format!("{located}.distinct()");
        }
        let t = self.translator.fresh();
        let (node, pointer, by_key) = (format!("{t}[1]"), format!("{t}[0]"), format!("{t}[2]"));
        let body = if tail.is_empty() {
            // The match itself: a list position or a key that is there.
            format!(
                "({node} == null ? [{}] : {})",
                operation("replace", &pointer, &write.whole()?),
                self.present(&node, &pointer, write)?
            )
        } else {
            // A null reached by a key is replaced by what the tail builds;
            // a null list element is never a parent.
            let built = match build(tail, &write.whole()?) {
                Some(built) => format!("[{}]", operation("add", &pointer, &built)),
                None => "[]".to_owned(),
            };
            format!(
                "({node} == null ? ({by_key} ? {built} : []) : {})",
                self.below(&node, &pointer, tail, write)?
            )
        };
        Ok(format!("{located}.map({t}, {body}).flatten()"))
    }

    /// The operations of `write` at `tail` below the non-null `node`, which
    /// is at `pointer`.
    fn below(
        &mut self,
        node: &str,
        pointer: &str,
        tail: &[Token],
        write: &Write<'_>,
    ) -> Result<String> {
        if tail.len() > MAX_PATH_STEPS {
            return untranslatable(format!(
                "it writes {} steps below what its path selects, over the {MAX_PATH_STEPS} translated",
                tail.len()
            ));
        }
        let Some((token, rest)) = tail.split_first() else {
            return self.present(node, pointer, write);
        };
        Ok(match token {
            Token::Key(key) => {
                let child = format!("{node}[{}]", string(key));
                let at = format!("{pointer} + {}", string(&format!("/{}", escape(key))));
                let missing = match build(rest, &write.whole()?) {
                    Some(built) => format!("[{}]", operation("add", &at, &built)),
                    None => "[]".to_owned(),
                };
                let next = if rest.is_empty() {
                    self.present(&child, &at, write)?
                } else {
                    self.below(&child, &at, rest, write)?
                };
                format!(
                    "(type({node}) == map ? ((!({} in {node}) || {child} == null) ? {missing} : {next}) : [])",
                    string(key)
                )
            }
            Token::Index(index) => {
                let child = format!("{node}[{index}]");
                let at = format!("{pointer} + '/{index}'");
                let null = if rest.is_empty() {
                    format!("[{}]", operation("replace", &at, &write.whole()?))
                } else {
                    "[]".to_owned()
                };
                let next = if rest.is_empty() {
                    self.present(&child, &at, write)?
                } else {
                    self.below(&child, &at, rest, write)?
                };
                format!(
                    "((type({node}) == list && size({node}) > {index}) ? ({child} == null ? {null} : {next}) : [])"
                )
            }
        })
    }

    /// The operations of `write` at the non-null value `node`, at `pointer`.
    fn present(&mut self, node: &str, pointer: &str, write: &Write<'_>) -> Result<String> {
        Ok(match write {
            Write::Set { replace: false, .. } => "[]".to_owned(),
            Write::Set {
                value,
                replace: true,
            } => format!(
                "({} ? [] : [{}])",
                typed_same(node, value),
                operation("replace", pointer, value)
            ),
            Write::Merge(Value::Object(_)) => {
                format!(
                    "(type({node}) == map ? {} : [])",
                    merge(node, pointer, write)?
                )
            }
            Write::Merge(_) => "[]".to_owned(),
            Write::Inject { keys, value } => {
                let e = self.translator.fresh();
                let mut matches = Vec::new();
                for key in keys.iter() {
                    match value.get(key) {
                        Some(wanted) => matches.push(format!(
                            "{} in {e} && {}",
                            string(key),
                            typed_same(&format!("{e}[{}]", string(key)), &literal(wanted)?)
                        )),
                        None => matches.push("false".to_owned()),
                    }
                }
                let found = if keys.is_empty() {
                    "true".to_owned()
                } else {
                    format!("type({e}) == map && {}", matches.join(" && "))
                };
                format!(
                    "(type({node}) == list ? ({node}.exists({e}, {found}) ? [] : [{}]) : [])",
                    operation("add", &format!("{pointer} + '/-'"), &literal(value)?)
                )
            }
        })
    }

    /// The `[pointer, value, reached by a key]` triple of every value
    /// `path` selects.
    fn located(&mut self, path: &JsonPath) -> Result<String> {
        let steps = steps_of(path)?;
        let mut list = match path.root() {
            Root::Object => format!("[{}]", triple("''", "object", false)),
            Root::Element => match self.scopes.last() {
                Some(scope) => format!("[{}]", scope.element),
                None => return untranslatable("`$` outside forEach"),
            },
            Root::PodSpec => by_kind(|location| {
                let mut here = format!("[{}]", triple("''", "object", false));
                for key in location {
                    here = self.step(&here, &Step::Key((*key).into()))?;
                }
                Ok(here)
            })?,
            _ => {
                return untranslatable(format!(
                    "{} is not under $.object, $.podSpec or the forEach element, where \
                     mutations write",
                    path.text()
                ));
            }
        };
        for step in steps {
            list = self.step(&list, step)?;
        }
        Ok(list)
    }

    /// The triples one step selects from the triples in `list`.
    fn step(&mut self, list: &str, step: &Step) -> Result<String> {
        let p = self.translator.fresh();
        sized(match step {
            Step::Key(key) => {
                let name = string(key);
                let pointer = string(&format!("/{}", escape(key)));
                format!(
                    "{list}.filter({p}, type({p}[1]) == map && {name} in {p}[1]).map({p}, {})",
                    triple(
                        &format!("{p}[0] + {pointer}"),
                        &format!("{p}[1][{name}]"),
                        true
                    )
                )
            }
            Step::Index(index) if *index >= 0 => format!(
                "{list}.filter({p}, type({p}[1]) == list && size({p}[1]) > {index}).map({p}, {})",
                triple(
                    &format!("{p}[0] + '/{index}'"),
                    &format!("{p}[1][{index}]"),
                    false
                )
            ),
            Step::Index(index) => {
                let back = index.unsigned_abs();
                format!(
                    "{list}.filter({p}, type({p}[1]) == list && size({p}[1]) >= {back}).map({p}, {})",
                    triple(
                        &format!("{p}[0] + '/' + string(size({p}[1]) - {back})"),
                        &format!("{p}[1][size({p}[1]) - {back}]"),
                        false
                    )
                )
            }
            Step::Wildcard => {
                let i = self.translator.fresh();
                let element = triple(
                    &format!("{p}[0] + '/' + string({i})"),
                    &format!("{p}[1][{i}]"),
                    false,
                );
                let member = triple(
                    &format!("{p}[0] + '/' + jsonpatch.escapeKey({i})"),
                    &format!("{p}[1][{i}]"),
                    true,
                );
                format!(
                    "{list}.map({p}, type({p}[1]) == list \
                     ? lists.range(size({p}[1])).map({i}, {element}) \
                     : (type({p}[1]) == map ? {p}[1].map({i}, {member}) : [])).flatten()"
                )
            }
            Step::Union(alternatives) => {
                let parts: Result<Vec<String>> =
                    alternatives.iter().map(|a| self.step(list, a)).collect();
                format!("({})", parts?.join(" + "))
            }
        })
    }
}

/// The operations that merge the literal map of `write` into the map
/// `node` at `pointer`: each key it lacks (or holds null), and the same
/// below for maps on both sides.
fn merge(node: &str, pointer: &str, write: &Write<'_>) -> Result<String> {
    let Write::Merge(Value::Object(map)) = write else {
        return Ok("[]".to_owned());
    };
    merge_map(node, pointer, map)
}

fn merge_map(node: &str, pointer: &str, map: &serde_json::Map<String, Value>) -> Result<String> {
    let mut parts = Vec::new();
    for (key, incoming) in map {
        let name = string(key);
        let child = format!("{node}[{name}]");
        let at = format!("{pointer} + {}", string(&format!("/{}", escape(key))));
        let add = format!("[{}]", operation("add", &at, &literal(incoming)?));
        let deeper = match incoming {
            Value::Object(inner) => format!(
                "(type({child}) == map ? {} : [])",
                merge_map(&child, &at, inner)?
            ),
            _ => "[]".to_owned(),
        };
        parts.push(format!(
            "((!({name} in {node}) || {child} == null) ? {add} : {deeper})"
        ));
    }
    Ok(match parts.as_slice() {
        [] => "[]".to_owned(),
        _ => format!("({})", parts.join(" + ")),
    })
}

/// How many edits that are not a `forEach` `edits` holds, at any depth.
fn leaves(edits: &[GuardedEdit]) -> usize {
    edits
        .iter()
        .map(|edit| match &edit.edit {
            Edit::ForEach { edits, .. } => leaves(edits),
            _ => 1,
        })
        .sum()
}

/// `value` under maps keyed by `tail`; `None` when the tail has a list
/// position (those are never created).
fn build(tail: &[Token], value: &str) -> Option<String> {
    let mut built = value.to_owned();
    for token in tail.iter().rev() {
        let Token::Key(key) = token else { return None };
        built = format!("{{{}: {built}}}", string(key));
    }
    Some(built)
}

fn operation(op: &str, pointer: &str, value: &str) -> String {
    format!("JSONPatch{{op: '{op}', path: {pointer}, value: {value}}}")
}

/// The `[pointer, value, reached by a key]` triple, each part `dyn`: the
/// API server refuses a list literal whose elements' types differ (its CEL
/// environment validates aggregate literals as homogeneous).
fn triple(pointer: &str, value: &str, keyed: bool) -> String {
    format!("[dyn({pointer}), dyn({value}), dyn({keyed})]")
}

/// A key as a JSON Pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A JSON value as a CEL literal of the same JSON form.
fn literal(value: &Value) -> Result<String> {
    Ok(match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                format!("{u}u")
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => format!("{f:?}"),
                    _ => return untranslatable(format!("the number {n}")),
                }
            }
        }
        Value::String(s) => string(s),
        // Each element and member value `dyn`: the API server refuses a
        // list or map literal whose values' types differ, as JSON's may.
        Value::Array(list) => {
            let items: Result<Vec<String>> = list
                .iter()
                .map(|item| Ok(format!("dyn({})", literal(item)?)))
                .collect();
            format!("[{}]", items?.join(", "))
        }
        Value::Object(map) => {
            let entries: Result<Vec<String>> = map
                .iter()
                .map(|(k, v)| Ok(format!("{}: dyn({})", string(k), literal(v)?)))
                .collect();
            format!("{{{}}}", entries?.join(", "))
        }
    })
}

/// What a condition or copied value may read where kadmit's order and a
/// policy's order differ (see the module's documentation).
#[derive(Debug, Clone, Copy)]
enum Reads {
    /// Inside a `forEach`: its own element, the request, the old object.
    WithinElement,
    /// Between several entries of a `forEach`: the request and the old
    /// object, which no edit writes.
    Unwritten,
}

impl Reads {
    fn allows_root(self, root: Root) -> bool {
        match root {
            Root::Request | Root::OldObject | Root::OldPodSpec => true,
            Root::Element => matches!(self, Reads::WithinElement),
            Root::Object | Root::PodSpec | Root::Binding(_) => false,
        }
    }

    fn allows_variable(self, variable: Variable) -> bool {
        match variable {
            Variable::Request | Variable::OldObject => true,
            Variable::Element => matches!(self, Reads::WithinElement),
            Variable::Object | Variable::Binding(_) => false,
        }
    }

    /// Why `what` is refused.
    fn refusal<T>(self, what: &str) -> Result<T> {
        untranslatable(match self {
            Reads::WithinElement => format!(
                "{what} inside a forEach reads outside the element, which the entries \
                 applied to other elements may change"
            ),
            Reads::Unwritten => format!(
                "{what} on a forEach with several entries reads the object, which its \
                 entries write: it would be looked at again between them"
            ),
        })
    }

    /// Whether `predicate` reads only what `self` allows.
    fn check(self, predicate: &Predicate) -> Result<()> {
        match predicate {
            Predicate::Any(list) | Predicate::All(list) => {
                list.iter().try_for_each(|p| self.check(p))
            }
            Predicate::Not(inner) => self.check(inner),
            Predicate::Cel(check) => {
                if check
                    .expression
                    .variables()
                    .all(|v| self.allows_variable(v))
                {
                    Ok(())
                } else {
                    self.refusal(&format!("the condition {}", check.expression.source()))
                }
            }
            Predicate::Test { path, test, .. } => {
                for path in std::iter::once(path).chain(test.operand_path()) {
                    if !self.allows_root(path.root()) {
                        return self.refusal(&format!("the condition on {}", path.text()));
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why the one rule `r` with these `mutate` entries does not translate,
    /// or `None` when it does.
    fn reason(match_: &str, mutate: &str) -> Option<String> {
        let plan = crate::plan::test_plan(&format!(
            "    - name: r\n      match: {match_}\n      mutate:\n{mutate}"
        ));
        let policies = super::super::policies(&plan);
        policies.untranslated.first().map(|u| u.reason.clone())
    }

    const PODS: &str = "{resources: [pods], operations: [CREATE]}";

    #[test]
    fn reads_outside_the_element_inside_a_for_each_stay_in_the_webhook() {
        let for_each = |entry: &str| {
            format!("        - forEach: $.podSpec.containers[*]\n          mutate:\n{entry}")
        };
        for (entry, expected) in [
            (
                "            - setIfAbsent: {path: $.image, value: x}\n              when:\n                - {path: $$.object.metadata.labels.a, exists: true}\n",
                "the condition on $$.object.metadata.labels.a inside a forEach reads outside",
            ),
            (
                "            - setIfAbsent: {path: $.image, value: x}\n              when:\n                - cel: has(object.metadata.labels)\n",
                "inside a forEach reads outside the element",
            ),
            (
                "            - setIfAbsent: {path: $.image, valueFrom: {path: $$.podSpec.hostname}}\n",
                "$$.podSpec.hostname inside a forEach copies from outside the element",
            ),
            (
                "            - setIfAbsent: {path: $$.object.metadata.labels.a, value: x}\n",
                "$$.object.metadata.labels.a inside a forEach writes outside the element",
            ),
        ] {
            let found = reason(PODS, &for_each(entry));
            assert!(
                found.as_deref().is_some_and(|r| r.contains(expected)),
                "{entry}: {found:?}"
            );
        }
        // Reading its own element, the request and the old object is fine.
        assert_eq!(
            reason(
                PODS,
                &for_each(
                    "            - setIfAbsent: {path: $.image, valueFrom: {path: $.name}}\n              when:\n                - {path: $.request.namespace, equals: a}\n                - cel: element.name != ''\n"
                )
            ),
            None
        );
    }

    #[test]
    fn a_for_each_condition_reading_the_object_translates_only_before_a_single_entry() {
        let entry = |entries: &str| {
            format!(
                "        - forEach: $.podSpec.containers[*]\n          when:\n            - {{path: $.object.metadata.labels.a, exists: true}}\n          mutate:\n{entries}"
            )
        };
        let one = "            - setIfAbsent: {path: $.image, value: x}\n";
        assert_eq!(reason(PODS, &entry(one)), None);
        let two = format!("{one}            - setIfAbsent: {{path: $.name, value: y}}\n");
        assert!(
            reason(PODS, &entry(&two)).is_some_and(|r| r.contains("which its entries write")),
            "{:?}",
            reason(PODS, &entry(&two))
        );
        // So must a nested one's, reading the element its entries write
        // below.
        let nested = "        - forEach: $.podSpec.containers[*]\n          mutate:\n            - forEach: \"$['resources']\"\n              when:\n                - {path: $.resources.limits, absent: true}\n              mutate:\n                - setIfAbsent: {path: $.limits, value: {}}\n                - setIfAbsent: {path: $.requests, value: {}}\n";
        assert!(
            reason(PODS, nested).is_some_and(|r| r.contains("which its entries write")),
            "{:?}",
            reason(PODS, nested)
        );
        // One reading only the request may stand before several.
        let request = "        - forEach: $.podSpec.containers[*]\n          when:\n            - {path: $.request.namespace, equals: a}\n          mutate:\n";
        assert_eq!(reason(PODS, &format!("{request}{two}")), None);
    }

    #[test]
    fn requests_without_an_object_to_patch_stay_in_the_webhook() {
        let set = "        - setIfAbsent: {path: $.object.metadata.labels.a, value: x}\n";
        assert!(
            reason("{resources: [pods], operations: [DELETE]}", set)
                .is_some_and(|r| r.contains("no CREATE or UPDATE"))
        );
        assert!(
            reason(
                "{resources: [pods/exec], operations: [CREATE, CONNECT]}",
                set
            )
            .is_some_and(|r| r.contains("CONNECT"))
        );
        // DELETE alongside CREATE is left out: there is nothing to patch.
        let plan = crate::plan::test_plan(&format!(
            "    - name: r\n      match: {{resources: [pods], operations: [CREATE, DELETE]}}\n      mutate:\n{set}"
        ));
        let policies = super::super::policies(&plan);
        let mutating = policies.policies[0].mutating.as_ref().expect("a policy");
        let rules = mutating
            .policy
            .spec
            .match_constraints
            .resource_rules
            .as_ref()
            .expect("rules");
        assert_eq!(
            rules[0].operations.as_deref(),
            Some(&["CREATE".to_owned()][..])
        );
    }

    #[test]
    fn a_mutation_whose_expression_would_be_too_large_or_deep_stays_in_the_webhook() {
        // A literal of 300 KiB: over the bytes any expression is written with.
        let big = "x".repeat(300 << 10);
        let found = reason(
            PODS,
            &format!("        - setIfAbsent: {{path: $.object.metadata.labels.a, value: {big}}}\n"),
        );
        assert!(
            found
                .as_deref()
                .is_some_and(|r| r.contains("bytes, over the 100000")),
            "{:?}",
            found.map(|r| r.chars().take(200).collect::<String>())
        );
        // A target 60 keys deep: each key is a conditional in the
        // expression, past the nesting the CEL parser is given. 100 keys:
        // refused before any CEL is written (thousands took cubic time,
        // then overflowed the stack).
        for (depth, expected) in [
            (60, "its JSONPatch expression"),
            (
                100,
                "100 steps below what its path selects, over the 64 translated",
            ),
        ] {
            let path = format!("$.object{}", ".a".repeat(depth));
            let found = reason(
                PODS,
                &format!("        - setIfAbsent: {{path: {path}, value: 1}}\n"),
            );
            assert!(
                found.as_deref().is_some_and(|r| r.contains(expected)),
                "{depth}: {found:?}"
            );
        }
    }

    #[test]
    fn a_literal_keeps_its_json_form() {
        let value = serde_json::json!({"a": [1, -2, 2.5, 18446744073709551615u64, "it's", null, true], "b/c": {}});
        assert_eq!(
            literal(&value).expect("a literal"),
            "{'a': dyn([dyn(1), dyn(-2), dyn(2.5), dyn(18446744073709551615u), dyn('it\\'s'), dyn(null), dyn(true)]), 'b/c': dyn({})}"
        );
        assert_eq!(escape("a/b~c"), "a~1b~0c");
    }
}
